// client/local_model.h
//
// LocalModel is a ModelInterface (client/model_interface.h) that runs NORMA in this
// process: core's ModelEntry, the same object okl_server keeps per model, with no journal
// (nothing is durable) and no background regret. Code written against ModelInterface runs
// unchanged against a RemoteModel and gets the same predictions to the last bit. Snapshot
// bytes move a model between the two: Client::Snapshot() feeds LocalModel::FromSnapshot(),
// LocalModel::Snapshot() feeds Client::Restore().
//
// Thread-safe (ModelEntry locks): Observes apply one at a time, Predicts run concurrently.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::LocalModel> model,
//                        okl::LocalModel::Create({"demo", "sine"}, config));
//   OKL_ASSIGN_OR_RETURN(okl::ObserveResult observed, model->Observe(xs, ys));
//   OKL_ASSIGN_OR_RETURN(std::vector<double> predictions, model->Predict(probes));
//   OKL_ASSIGN_OR_RETURN(std::string snapshot, model->Snapshot());
//   OKL_RETURN_IF_ERROR(client.Restore({"demo", "sine"}, snapshot).status());
#ifndef OKL_CLIENT_LOCAL_MODEL_H_
#define OKL_CLIENT_LOCAL_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/model_interface.h"
#include "core/config.h"
#include "core/norma.h"
#include "core/runtime/model_registry.h"

namespace okl {

class LocalModel final : public ModelInterface {
 public:
  // A new model (steps 0). InvalidArgument if ValidateConfig rejects the config. Names
  // are not checked: a local model needs none.
  static absl::StatusOr<std::unique_ptr<LocalModel>> Create(ModelId id,
                                                            const ModelConfig& config);
  // The model whose snapshot bytes (Client::Snapshot(), Snapshot()) are given; it
  // continues bit-identically. DataLoss for bytes that are not an intact, consistent
  // snapshot.
  static absl::StatusOr<std::unique_ptr<LocalModel>> FromSnapshot(ModelId id,
                                                                  absl::string_view snapshot);
  // Wraps an existing entry, e.g. one of a ModelRegistry; `entry` must not be null.
  explicit LocalModel(std::shared_ptr<ModelEntry> entry);

  const ModelId& id() const override { return id_; }
  const ModelConfig& config() const override { return entry_->config(); }

  // Empty ys: InvalidArgument, as okl_server answers.
  absl::StatusOr<ObserveResult> Observe(absl::Span<const double> xs,
                                        absl::Span<const double> ys) override;
  absl::StatusOr<std::vector<double>> Predict(absl::Span<const double> xs) const override;
  absl::StatusOr<PredictResult> PredictWithVariance(absl::Span<const double> xs) const override;
  // With a chosen hypothesis: kCurrent is f_{T+1}; kAveraged needs config().averaged.
  // (The wire has no such choice: a RemoteModel always predicts kConfigured.)
  absl::StatusOr<std::vector<double>> Predict(absl::Span<const double> xs,
                                              PredictionMode mode) const;
  // All of core's statistics, offset, margin, terms_removed and memory_bytes included.
  absl::StatusOr<ModelSummary> Summary() const override;

  // The model's snapshot bytes, the format Client::Snapshot() returns.
  absl::StatusOr<std::string> Snapshot() const;

  const std::shared_ptr<ModelEntry>& entry() const { return entry_; }

 private:
  const std::shared_ptr<ModelEntry> entry_;
  const ModelId id_;
};

}  // namespace okl

#endif  // OKL_CLIENT_LOCAL_MODEL_H_
