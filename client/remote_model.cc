// client/remote_model.cc

#include "client/remote_model.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {

absl::StatusOr<std::unique_ptr<RemoteModel>> RemoteModel::Open(Client client, ModelId id) {
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, client.GetModel(id));
  return std::unique_ptr<RemoteModel>(
      new RemoteModel(std::move(client), std::move(id), std::move(summary.config)));
}

absl::StatusOr<std::unique_ptr<RemoteModel>> RemoteModel::Create(Client client, ModelId id,
                                                                 const ModelConfig& config) {
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, client.CreateModel(id, config));
  return std::unique_ptr<RemoteModel>(
      new RemoteModel(std::move(client), std::move(id), std::move(summary.config)));
}

RemoteModel::RemoteModel(Client client, ModelId id, ModelConfig config)
    : client_(std::move(client)), id_(std::move(id)), config_(std::move(config)) {}

absl::StatusOr<ObserveResult> RemoteModel::Observe(absl::Span<const double> xs,
                                                   absl::Span<const double> ys) {
  if (xs.size() != ys.size() * config_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Observe: xs has ", xs.size(), " values but ", ys.size(),
                     " examples of dim ", config_.dim, " need ", ys.size() * config_.dim));
  }
  return client_.Observe(id_, xs, ys);
}

absl::StatusOr<std::vector<double>> RemoteModel::Predict(absl::Span<const double> xs) const {
  return client_.Predict(id_, xs, config_.dim);
}

absl::StatusOr<PredictResult> RemoteModel::PredictWithVariance(
    absl::Span<const double> xs) const {
  PredictResult result;
  OKL_ASSIGN_OR_RETURN(result.predictions,
                       client_.Predict(id_, xs, config_.dim, nullptr, &result.variances));
  return result;
}

absl::StatusOr<ModelSummary> RemoteModel::Summary() const { return client_.GetModel(id_); }

}  // namespace okl
