// client/model_interface.h
//
// ModelInterface is what application code needs from one okl model: learn from labelled
// examples, predict, read the configuration and statistics. It has two implementations,
// so that the same code runs in process or against okl_server (cartographer's stub
// pattern):
//   - LocalModel (client/local_model.h): NORMA in this process (core's ModelEntry);
//   - RemoteModel (client/remote_model.h): a model on okl_server, through okl::Client.
// The server runs the same core, so both give the same predictions, to the last bit, for
// the same examples in the same order (however they are batched).
//
// Inputs are dense and example-major: `xs` holds n inputs of config().dim values each,
// input i at xs[i*dim, (i+1)*dim).
//
// Every implementation is thread-safe. Observes are applied one at a time, in the order
// they arrive (SGD is sequential); Predicts may run concurrently with each other.
//
// Example:
//   // Learns from (xs, ys), then predicts `probes`: the same code for either model.
//   absl::StatusOr<std::vector<double>> LearnAndPredict(okl::ModelInterface& model,
//                                                       absl::Span<const double> xs,
//                                                       absl::Span<const double> ys,
//                                                       absl::Span<const double> probes) {
//     OKL_RETURN_IF_ERROR(model.Observe(xs, ys).status());
//     return model.Predict(probes);
//   }
//
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::LocalModel> local,
//                        okl::LocalModel::Create({"demo", "local"}, config));
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::RemoteModel> remote,
//                        okl::RemoteModel::Create(client, {"demo", "remote"}, config));
//   OKL_ASSIGN_OR_RETURN(std::vector<double> here, LearnAndPredict(*local, xs, ys, probes));
//   OKL_ASSIGN_OR_RETURN(std::vector<double> there, LearnAndPredict(*remote, xs, ys, probes));
//   // here == there, bit for bit.
#ifndef OKL_CLIENT_MODEL_INTERFACE_H_
#define OKL_CLIENT_MODEL_INTERFACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model.h"

namespace okl {

// Names one model: the tenant that owns it and its name within the tenant. okl_server
// accepts 1-64 characters of [A-Za-z0-9._-] for each.
struct ModelId {
  std::string tenant;
  std::string model;

  friend bool operator==(const ModelId&, const ModelId&) = default;
};

// Predictions with, for a model that has one (a KRLS tracker), the predictive variance of
// each: empty for the other kinds.
struct PredictResult {
  std::vector<double> predictions;
  std::vector<double> variances;
};

// What one Observe reports: per example, in order, the prequential prediction p_t =
// f_t(x_t) (made before the example's update) and its loss; then the model's state after
// the last example.
struct ObserveResult {
  std::vector<double> predictions;
  std::vector<double> losses;
  uint64_t steps = 0;           // the model's step count after the last example
  uint32_t expansion_size = 0;  // stored terms after the last example
};

class ModelInterface {
 public:
  virtual ~ModelInterface() = default;

  virtual const ModelId& id() const = 0;
  // The configuration the model was created (or opened) with.
  virtual const ModelConfig& config() const = 0;

  // Applies ys.size() examples in order, one NORMA step each; xs holds ys.size() * dim
  // values. The batch is validated whole first: InvalidArgument for an empty batch, a
  // wrong size, a non-finite value or a label the loss does not accept, and nothing
  // changes. FailedPrecondition if an example would make the model diverge: the ones
  // before it stay applied.
  virtual absl::StatusOr<ObserveResult> Observe(absl::Span<const double> xs,
                                                absl::Span<const double> ys) = 0;

  // One prediction per input of xs (a multiple of dim values, at least one input), with
  // the model's configured hypothesis (the averaged one if config().averaged).
  virtual absl::StatusOr<std::vector<double>> Predict(absl::Span<const double> xs) const = 0;
  // The same with the predictive variances of a KRLS tracker (PredictResult::variances,
  // empty for the other kinds), of the same model version as the predictions.
  virtual absl::StatusOr<PredictResult> PredictWithVariance(
      absl::Span<const double> xs) const = 0;

  // The model's configuration and statistics now.
  virtual absl::StatusOr<ModelSummary> Summary() const = 0;
};

}  // namespace okl

#endif  // OKL_CLIENT_MODEL_INTERFACE_H_
