// client/remote_model.h
//
// RemoteModel is a ModelInterface (client/model_interface.h) for a model on okl_server:
// an okl::Client and the model's id, with the model's config read once (Open, Create) for
// its dim. Code written against ModelInterface runs unchanged against a LocalModel.
// Errors are the server's (see client/client.h): Observe is never retried, Predict and
// Summary are on UNAVAILABLE.
//
// Thread-safe, as Client is.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::Client client, okl::Client::Connect(address));
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::RemoteModel> model,
//                        okl::RemoteModel::Open(client, {"demo", "sine"}));
//   OKL_ASSIGN_OR_RETURN(std::vector<double> predictions, model->Predict(probes));
#ifndef OKL_CLIENT_REMOTE_MODEL_H_
#define OKL_CLIENT_REMOTE_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "client/model_interface.h"
#include "core/config.h"
#include "core/model.h"

namespace okl {

class RemoteModel final : public ModelInterface {
 public:
  // The existing model `id` (GetModel): NOT_FOUND if absent.
  static absl::StatusOr<std::unique_ptr<RemoteModel>> Open(Client client, ModelId id);
  // Creates the model (CreateModel): ALREADY_EXISTS if present.
  static absl::StatusOr<std::unique_ptr<RemoteModel>> Create(Client client, ModelId id,
                                                             const ModelConfig& config);

  const ModelId& id() const override { return id_; }
  // The config read when the model was opened or created. A Restore under the same id may
  // install another; open the model again then.
  const ModelConfig& config() const override { return config_; }

  // Client::Observe, after checking xs against the config's dim.
  absl::StatusOr<ObserveResult> Observe(absl::Span<const double> xs,
                                        absl::Span<const double> ys) override;
  // Client::Predict with the config's dim.
  absl::StatusOr<std::vector<double>> Predict(absl::Span<const double> xs) const override;
  absl::StatusOr<PredictResult> PredictWithVariance(absl::Span<const double> xs) const override;
  // Client::GetModel: the statistics the wire carries (see there).
  absl::StatusOr<ModelSummary> Summary() const override;

  const Client& client() const { return client_; }

 private:
  RemoteModel(Client client, ModelId id, ModelConfig config);

  const Client client_;
  const ModelId id_;
  const ModelConfig config_;
};

}  // namespace okl

#endif  // OKL_CLIENT_REMOTE_MODEL_H_
