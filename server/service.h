// server/service.h
//
// OklService implements okl.v1.OnlineKernelLearning over core's ModelRegistry. Each
// handler is thin: convert the request (proto/convert.h), call core, convert the result
// and map the status (server/status.h). What the service adds to core is what the wire
// needs: the server's limits (Options), the densification of sparse inputs, the
// snapshot byte format, and the serving state (UNAVAILABLE while starting or draining).
//
// Thread-safe: gRPC calls the handlers from many threads at once; the registry does the
// locking, and the serving state is atomic.
//
// Example:
//   okl::ModelRegistry registry({.max_models = 100});
//   okl::OklService service(&registry, {.max_dim = 1024});
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   service.SetServing();  // until now every call is UNAVAILABLE
#ifndef OKL_SERVER_SERVICE_H_
#define OKL_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/config.h"
#include "core/model_registry.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "server/metrics.h"
#include "server/model_store.h"

namespace okl {

// Which gRPC API serves ObserveStream. Both give the same results; they differ in
// threading: sync runs each stream on a server thread of its own, callback runs each
// message's batch on gRPC's callback threads. Measured on the 2-core dev machine (client
// and server together, d = 16, B = 256), sync streams batches of 256 as fast or faster
// (16 streams into 4 models: ~0.8-1.0 M examples/s vs ~0.68 M), so it is the default;
// callback is kept for comparison (okl_server --observe_stream_api=callback).
enum class StreamApi { kSync, kCallback };

class OklService final : public v1::OnlineKernelLearning::Service {
 public:
  // The gRPC service name, for health checks.
  static constexpr char kServiceName[] = "okl.v1.OnlineKernelLearning";

  struct Options {
    // Largest ModelConfig.dim accepted by CreateModel and Restore (INVALID_ARGUMENT
    // naming --max_dim beyond it). At most kMaxDimension.
    uint32_t max_dim = kMaxDimension;
    // Largest budget.max_terms accepted by CreateModel and Restore; a budget of 0
    // (unbounded) is refused too, so every model's memory is bounded. At most kMaxTerms.
    uint32_t max_terms = 1000000;
    // Most examples in one ObserveRequest (per message in ObserveStream) and inputs in
    // one PredictRequest: RESOURCE_EXHAUSTED naming --max_batch beyond it.
    uint32_t max_batch = 10000;
    StreamApi observe_stream_api = StreamApi::kSync;
  };

  // `registry` must outlive the service.
  OklService(ModelRegistry* registry, Options options);

  // Makes CreateModel, DeleteModel and Restore durable in `store` (which must outlive the
  // service; null: in memory only). Call before the server starts.
  void set_store(ModelStore* store) { store_ = store; }
  // Counts observed examples and predictions in `metrics` (which must outlive the
  // service; null: not counted). Call before the server starts.
  void set_metrics(ServerMetrics* metrics) { metrics_ = metrics; }

  // Until SetServing() every call fails with UNAVAILABLE ("starting"); after
  // StartDraining() new calls fail with UNAVAILABLE ("draining") while calls already
  // running, streams included, go on to their end.
  void SetServing();
  void StartDraining();

  // The okl calls running now (streams until they end). Once StartDraining() was called
  // and this reached 0, it stays 0.
  int64_t calls_in_flight() const;

  grpc::Status CreateModel(grpc::ServerContext* context, const v1::CreateModelRequest* request,
                           v1::ModelInfo* response) override;
  grpc::Status GetModel(grpc::ServerContext* context, const v1::ModelRef* request,
                        v1::ModelInfo* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status DeleteModel(grpc::ServerContext* context, const v1::ModelRef* request,
                           v1::DeleteModelResponse* response) override;
  grpc::Status Observe(grpc::ServerContext* context, const v1::ObserveRequest* request,
                       v1::ObserveResponse* response) override;
  grpc::Status ObserveStream(grpc::ServerContext* context,
                             grpc::ServerReader<v1::ObserveRequest>* reader,
                             v1::ObserveResponse* response) override;
  grpc::Status Predict(grpc::ServerContext* context, const v1::PredictRequest* request,
                       v1::PredictResponse* response) override;
  grpc::Status Snapshot(grpc::ServerContext* context, const v1::ModelRef* request,
                        grpc::ServerWriter<v1::SnapshotChunk>* writer) override;
  grpc::Status Restore(grpc::ServerContext* context,
                       grpc::ServerReader<v1::RestoreChunk>* reader,
                       v1::ModelInfo* response) override;

  // The callback-API ObserveStream, registered instead of the sync one when
  // options.observe_stream_api is kCallback.
  grpc::ServerReadReactor<v1::ObserveRequest>* ObserveStreamCallback(
      grpc::CallbackServerContext* context, v1::ObserveResponse* response);

 private:
  class ActiveCall;
  class ObserveSession;
  class ObserveStreamReactor;

  enum class State { kStarting, kServing, kDraining };

  // UNAVAILABLE unless serving.
  absl::Status CheckServing() const;
  // INVALID_ARGUMENT for an empty batch, RESOURCE_EXHAUSTED over max_batch. `what` is
  // "examples" or "inputs".
  absl::Status CheckBatchSize(size_t size, const char* what) const;
  // INVALID_ARGUMENT if `config` is over max_dim or max_terms.
  absl::Status CheckLimits(const ModelConfig& config) const;
  // Counts the examples a batch applied (and their loss) in the metrics, if any.
  void RecordObserved(const std::vector<Observation>& observations) const;

  absl::Status DoCreateModel(const v1::CreateModelRequest& request, v1::ModelInfo* response);
  absl::Status DoGetModel(const v1::ModelRef& request, v1::ModelInfo* response) const;
  absl::Status DoListModels(const v1::ListModelsRequest& request,
                            v1::ListModelsResponse* response) const;
  absl::Status DoPredict(const v1::PredictRequest& request,
                         v1::PredictResponse* response) const;
  absl::Status DoSnapshot(grpc::ServerContext* context, const v1::ModelRef& request,
                          grpc::ServerWriter<v1::SnapshotChunk>* writer) const;
  absl::Status DoRestore(grpc::ServerContext* context,
                         grpc::ServerReader<v1::RestoreChunk>* reader, v1::ModelInfo* response);

  ModelRegistry* const registry_;
  const Options options_;
  // Set before the gRPC server starts (which orders them before every handler); then fixed.
  ModelStore* store_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  // Both sequentially consistent: a call counts itself in, then reads the state; the
  // drain sets the state, then reads the count. So a drain that reads 0 is never
  // followed by a call that saw kServing.
  std::atomic<State> state_{State::kStarting};
  mutable std::atomic<int64_t> calls_in_flight_{0};
};

}  // namespace okl

#endif  // OKL_SERVER_SERVICE_H_
