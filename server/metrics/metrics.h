// server/metrics/metrics.h
//
// ServerMetrics is okl_server's Prometheus instrumentation (prometheus-cpp), served as
// text on http://<--metrics_address>/metrics. Three kinds of series:
//   - per model (labels tenant, model: names or hashes of them, see ModelLabels), read
//     from the models (a ModelSource) at scrape time, so that Observe and Predict pay
//     nothing for them and a deleted model's series vanish with it; at most Options::max_models models get them (the first in (tenant, model)
//     order), the rest count only in the aggregates;
//   - per RPC (labels service, method, code): counted by a gRPC server interceptor, one
//     counter increment and one histogram observation per call, lock-free; calls to
//     methods the server does not have (UNIMPLEMENTED) share service="other",
//     method="other", so that clients cannot mint series by calling made-up names;
//   - process level: models, expansion terms and bytes, examples observed and predicted,
//     the regret scheduler's work, quotas (limit, use, rejections), checkpoint failures,
//     build info, and the standard process_* series.
// The full list of names is in docs/metrics.md.
//
// Thread-safe. Must outlive every grpc::Server built with its InterceptorCreators() (the
// interceptors write into it until the server's last call is destroyed).
//
// Example:
//   okl::ServerMetrics metrics(okl::ModelsOf(&host), &scheduler, {.max_models = 1000});
//   OKL_RETURN_IF_ERROR(metrics.StartExposer("0.0.0.0:9464"));
//   builder.experimental().SetInterceptorCreators(metrics.InterceptorCreators());
#ifndef OKL_SERVER_METRICS_METRICS_H_
#define OKL_SERVER_METRICS_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/regret_scheduler.h"

namespace okl {

class EventBook;
class ModelHost;

// A model as the per-model series read it: its entry, and its event book (null if it
// has none).
struct MetricsModel {
  std::shared_ptr<const ModelEntry> entry;
  std::shared_ptr<const EventBook> book;
};
// The models to report at scrape time, sorted by (tenant, model).
using ModelSource = std::function<std::vector<MetricsModel>()>;
// The models of `host` (its HostedModels, with their books), or of a bare `registry`
// (no books: an embedding without delayed feedback, or a test). Each must outlive the
// ServerMetrics that reads it.
ModelSource ModelsOf(const ModelHost* host);
ModelSource ModelsOf(const ModelRegistry* registry);

// How per-model series identify their model (--metrics_model_labels): by the tenant and
// model names; by the first 16 hex digits of each name's SHA-256, so that /metrics
// discloses no tenant's names; or not at all (no per-model series, aggregates only).
enum class ModelLabels { kNames, kHashed, kNone };
// "names", "hashed", "none"; InvalidArgument naming --metrics_model_labels otherwise.
absl::StatusOr<ModelLabels> ParseModelLabels(absl::string_view text);
// The name ParseModelLabels reads back: "names", "hashed" or "none".
absl::string_view ModelLabelsName(ModelLabels labels);

class ServerMetrics {
 public:
  struct Options {
    // Per-model series for at most this many models (--metrics_max_models).
    size_t max_models = 1000;
    ModelLabels model_labels = ModelLabels::kNames;
    // Quota use and checkpoint failures are read from it at scrape time; may be null.
    const ModelHost* host = nullptr;
  };

  // `regret_scheduler` may be null.
  ServerMetrics(ModelSource models, const RegretScheduler* regret_scheduler, Options options);
  ~ServerMetrics();

  // Serves /metrics on `address` ("host:port" with a numeric host, e.g. "0.0.0.0:9464";
  // port 0 picks a free one). Unavailable naming the address and --metrics_address if it
  // cannot be bound (the object stays usable); FailedPrecondition once it has started.
  absl::Status StartExposer(const std::string& address);
  // The exposer's bound port; 0 before StartExposer.
  int exposer_port() const;

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators(): counts every call
  // (okl's, health's and reflection's) by method and status code, and times it.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorCreators();

  // Called by the service once a batch is applied (`loss_sum`: the sum of its examples'
  // prequential losses) / predicted. A few relaxed atomic adds.
  void RecordObserved(size_t examples, double loss_sum);
  void RecordPredicted(size_t inputs);
  // Called for each call the service runs on its offload threads rather than inline
  // (OklService::Options::max_inline_work).
  void RecordOffloaded();
  // Called for each label applied to a remembered event (delayed feedback): the time
  // since its Predict.
  void RecordLabelDelay(absl::Duration delay);

  // The text exposition of every series: what /metrics serves, less the exposer_* families
  // prometheus-cpp adds there about its own HTTP server.
  std::string Scrape() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace okl

#endif  // OKL_SERVER_METRICS_METRICS_H_
