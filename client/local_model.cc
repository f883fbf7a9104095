// client/local_model.cc

#include "client/local_model.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace okl {
namespace {

std::shared_ptr<ModelEntry> MakeEntry(const ModelId& id, std::unique_ptr<Model> learner) {
  return std::make_shared<ModelEntry>(id.tenant, id.model, std::move(learner));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalModel>> LocalModel::Create(ModelId id,
                                                               const ModelConfig& config) {
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<Model> learner, CreateModel(config));
  return std::make_unique<LocalModel>(MakeEntry(id, std::move(learner)));
}

absl::StatusOr<std::unique_ptr<LocalModel>> LocalModel::FromSnapshot(
    ModelId id, absl::string_view snapshot) {
  OKL_ASSIGN_OR_RETURN(ModelState state, DecodeSnapshot(snapshot));
  absl::StatusOr<std::unique_ptr<Model>> learner = ModelFromState(state);
  if (!learner.ok()) {  // as okl_server's Restore reports it
    return absl::DataLossError(
        absl::StrCat("snapshot state is inconsistent: ", learner.status().message()));
  }
  return std::make_unique<LocalModel>(MakeEntry(id, *std::move(learner)));
}

LocalModel::LocalModel(std::shared_ptr<ModelEntry> entry)
    : entry_(std::move(entry)), id_{entry_->tenant(), entry_->model()} {}

absl::StatusOr<ObserveResult> LocalModel::Observe(absl::Span<const double> xs,
                                                  absl::Span<const double> ys) {
  if (ys.empty()) {
    return absl::InvalidArgumentError("Observe: the batch has no examples; send at least 1");
  }
  std::vector<Observation> observations;
  observations.reserve(ys.size());
  ModelStats stats;
  OKL_RETURN_IF_ERROR(entry_->ObserveBatch(xs, ys, &observations, &stats));
  ObserveResult result;
  result.predictions.reserve(observations.size());
  result.losses.reserve(observations.size());
  for (const Observation& o : observations) {
    result.predictions.push_back(o.prediction);
    result.losses.push_back(o.loss);
  }
  result.steps = stats.steps;
  result.expansion_size = stats.expansion_size;
  return result;
}

absl::StatusOr<std::vector<double>> LocalModel::Predict(absl::Span<const double> xs) const {
  return Predict(xs, PredictionMode::kConfigured);
}

absl::StatusOr<std::vector<double>> LocalModel::Predict(absl::Span<const double> xs,
                                                        PredictionMode mode) const {
  const uint32_t dim = config().dim;
  if (xs.empty() || xs.size() % dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Predict: xs has ", xs.size(), " values; send 1 or more inputs of dim ", dim));
  }
  std::vector<double> predictions(xs.size() / dim);
  OKL_RETURN_IF_ERROR(entry_->PredictBatch(xs, absl::MakeSpan(predictions), mode));
  return predictions;
}

absl::StatusOr<PredictResult> LocalModel::PredictWithVariance(
    absl::Span<const double> xs) const {
  if (!config().krls_tracker_kind()) {
    OKL_ASSIGN_OR_RETURN(std::vector<double> predictions, Predict(xs));
    PredictResult result;
    result.predictions = std::move(predictions);
    return result;
  }
  const uint32_t dim = config().dim;
  if (xs.empty() || xs.size() % dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Predict: xs has ", xs.size(), " values; send 1 or more inputs of dim ", dim));
  }
  PredictResult result;
  result.predictions.resize(xs.size() / dim);
  result.variances.resize(xs.size() / dim);
  OKL_RETURN_IF_ERROR(entry_->PredictBatchWithVariance(InputBatch::Dense(xs, dim),
                                                       absl::MakeSpan(result.predictions),
                                                       absl::MakeSpan(result.variances)));
  return result;
}

absl::StatusOr<ModelSummary> LocalModel::Summary() const { return entry_->Summary(); }

absl::StatusOr<std::string> LocalModel::Snapshot() const {
  OKL_ASSIGN_OR_RETURN(ModelState state, entry_->ExportState());
  return EncodeSnapshot(state);
}

}  // namespace okl
