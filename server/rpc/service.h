// server/rpc/service.h
//
// OklService implements okl.v1.OnlineKernelLearning over a ModelHost. Each method is
// two thin halves: an admission that checks the call (serving, token, request, grant,
// rate) and finds its model, and a handler that converts the request (proto/convert.h),
// calls the host, converts the result and maps the status (server/rpc/status.h). What the
// service adds is what the wire needs: authentication and authorization of each call,
// the bounds on a request's decoded size, the snapshot byte stream, and the serving
// state (UNAVAILABLE while starting or draining).
//
// Authorization (with an Authenticator): every call carries `authorization: Bearer
// <token>`; a missing or unknown token is UNAUTHENTICATED, a tenant or method the token's
// grant does not cover is PERMISSION_DENIED. read: GetModel, ListModels, Predict,
// Snapshot; write: those and CreateModel, DeleteModel, Observe, ObserveStream, Restore,
// Label, and a Predict with `remember` (it stores its inputs).
// ListModels without a tenant lists only the tenants the token covers.
//
// A call's path: it is authenticated as it arrives, then admitted on the queue's thread
// that received it (its request checked, authorized on its tenant, its model found once);
// then its handler runs on that thread (the small reads) or on a pool of the service's
// own (Options::max_inline_work): what writes to the store, may run long, or would wait
// for a model's writer. The handler converts the request with the model's config before
// it takes the model's lock. ObserveStream's batches, Snapshot's copy and encoding, and
// Restore's decoding and store write run on that pool too; each stream message is
// admitted on the queue's thread as it is read.
//
// Thread-safe: gRPC calls the handlers from many threads at once; the host does the
// locking, and the serving state is atomic.
//
// Example:
//   okl::ModelHost host({});
//   okl::OklService service(&host, nullptr, {.max_batch = 1000});
//   grpc::ServerBuilder builder;
//   okl::CompletionQueueThreads threads({&service}, 2, &builder);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   threads.Start();
//   service.SetServing();  // until now every call is UNAVAILABLE
#ifndef OKL_SERVER_RPC_SERVICE_H_
#define OKL_SERVER_RPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/runtime/model_registry.h"
#include "okl/v1/okl.pb.h"
#include "proto/bearer_token.h"
#include "server/rpc/async_rpc.h"
#include "server/metrics/metrics.h"
#include "server/host/model_host.h"
#include "server/rpc/remember_writer.h"
#include "server/auth/tokens.h"
#include "server/base/work_pool.h"

namespace okl {

class OklService final : public RawAsyncService {
 public:
  // The gRPC service name, for health checks.
  static constexpr char kServiceName[] = "okl.v1.OnlineKernelLearning";
  // The health service's name for "this server accepts writes": NOT_SERVING also while
  // the model store refuses them (a full disk), when reads still work.
  static constexpr char kWritesHealthName[] = "okl.v1.OnlineKernelLearning/writes";

  struct Options {
    // Most examples in one ObserveRequest (per message in ObserveStream) and inputs in
    // one PredictRequest: RESOURCE_EXHAUSTED naming --max_batch beyond it.
    uint32_t max_batch = 10000;
    // Most bytes one request's inputs may take once dense ((dim + 1) doubles each):
    // RESOURCE_EXHAUSTED naming --max_request_bytes beyond it, checked before anything
    // is allocated.
    uint64_t max_request_bytes = 64 << 20;
    // An ObserveStream returns predictions and losses for at most this many examples
    // (the first); the response counts the rest in predictions_omitted.
    uint64_t max_response_predictions = 100000;
    // Most Restores running at once; one more: RESOURCE_EXHAUSTED.
    int max_concurrent_restores = 2;
    // GetModel and Predict run inline on the completion-queue thread that received
    // them, except a Predict whose kernel work (inputs x the model's worst-case
    // multiply-adds per input) is over this, and a read that would wait for a batch being
    // applied to its model; those and every other call run on the offload pool, so that
    // they do not stall the other calls the queue's thread carries. The default, about
    // 0.3 ms of sweeps, keeps a Predict of 16 inputs inline on a budgeted model with up to
    // 64k multiply-adds per input (B = 4096, d = 16).
    uint64_t max_inline_work = 1 << 20;
    // Threads of the offload pool; 0: one per CPU the server may use (UsableCpus).
    int32_t offload_threads = 0;
  };

  // `host` must outlive the service. `authenticator` (may be null: every call is
  // allowed) must too.
  OklService(ModelHost* host, const Authenticator* authenticator, Options options);

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

 private:
  class ActiveCall;
  class StreamCall;
  class ObserveSession;
  class ObserveStreamCall;
  class SnapshotCall;
  class RestoreSlot;
  class RestoreSession;
  class RestoreCall;

  enum class State { kStarting, kServing, kDraining };

  // What a unary call's admission found, for its handler.
  struct Admission {
    grpc::ServerContext* context = nullptr;
    std::optional<ModelKey> id;         // the model the call names, if it names one
    std::shared_ptr<HostedModel> model;  // that model, if admission found it
    bool run_inline = false;            // else the handler runs on offload_pool_
    // The deferred reply, set by a handler whose answer comes from later work (a
    // remembering Predict's write): once the handler has returned OK, ServeUnary calls
    // it with the call's Reply, which the later work calls to end the call (from any
    // thread; the call counts in flight until then).
    using Reply = absl::AnyInvocable<void(absl::Status) &&>;
    using DeferredReply = absl::AnyInvocable<void(Reply) &&>;
    DeferredReply deferred_reply = nullptr;
  };
  // A unary method's two halves. Admit runs on the queue's thread as the call arrives,
  // once it is authenticated: it checks the request, authorizes it on the tenant it
  // names (taking from its request rate), finds its model if it names one, and says
  // where the handler runs; an error answers the call at once, nothing done. Handle
  // then answers it.
  template <typename Request>
  using AdmitMethod = absl::Status (OklService::*)(const ActiveCall&, const Request&,
                                                   Admission*);
  template <typename Request, typename Response>
  using HandleMethod = absl::Status (OklService::*)(const ActiveCall&, Admission&,
                                                    const Request&, Response*);

  // Serves the unary `method` ("Predict") with `admit`, then `handle`.
  template <typename Request, typename Response>
  void ServeUnary(absl::string_view method, AdmitMethod<Request> admit,
                  HandleMethod<Request, Response> handle);
  // Serves the streaming `method` with calls `make` makes.
  void ServeStream(absl::string_view method, AsyncCall* (OklService::*make)());
  // The streaming calls, each made in the file that defines it.
  AsyncCall* NewObserveStreamCall();
  AsyncCall* NewSnapshotCall();
  AsyncCall* NewRestoreCall();
  // A call refused before anything was done.
  static grpc::Status Refusal(grpc::ServerContextBase* context, const absl::Status& status);
  // UNAVAILABLE unless serving.
  absl::Status CheckServing() const;
  // INVALID_ARGUMENT for an empty batch, RESOURCE_EXHAUSTED over max_batch. `what` is
  // "examples" or "inputs".
  absl::Status CheckBatchSize(size_t size, const char* what) const;
  // Counts the examples a batch applied (and their loss) in the metrics, if any.
  void RecordObserved(absl::Span<const Observation> observations) const;

  // --- Admissions (see AdmitMethod) ---------------------------------------------------
  // The model `ref` names, once the call is authorized for `needed` on its tenant.
  absl::StatusOr<ModelKey> AdmitModelCall(const ActiveCall& call, const v1::ModelRef& ref,
                                          Role needed, absl::string_view method);
  // Offloaded: writes, and calls that may run long.
  absl::Status AdmitCreateModel(const ActiveCall& call, const v1::CreateModelRequest& request,
                                Admission* admission);
  absl::Status AdmitDeleteModel(const ActiveCall& call, const v1::ModelRef& request,
                                Admission* admission);
  absl::Status AdmitListModels(const ActiveCall& call, const v1::ListModelsRequest& request,
                               Admission* admission);
  absl::Status AdmitFenceTenant(const ActiveCall& call, const v1::FenceTenantRequest& request,
                                Admission* admission);
  absl::Status AdmitObserve(const ActiveCall& call, const v1::ObserveRequest& request,
                            Admission* admission);
  // What Observe and each ObserveStream message check of their batch for model `id`.
  absl::Status AdmitObserveBatch(const ActiveCall& call, const ModelKey& id,
                                 const v1::ObserveRequest& request, absl::string_view method);
  // Inline unless a batch is being applied to the model (the read would wait for it).
  absl::Status AdmitGetModel(const ActiveCall& call, const v1::ModelRef& request,
                             Admission* admission);
  // Inline unless the read would wait, or its kernel work is over max_inline_work.
  absl::Status AdmitPredict(const ActiveCall& call, const v1::PredictRequest& request,
                            Admission* admission);
  // Offloaded: it writes to the store.
  absl::Status AdmitLabel(const ActiveCall& call, const v1::LabelRequest& request,
                          Admission* admission);

  // --- Handlers (see HandleMethod): convert in, call the host, convert out ------------
  absl::Status CreateModel(const ActiveCall& call, Admission& admission,
                           const v1::CreateModelRequest& request, v1::ModelInfo* response);
  absl::Status GetModel(const ActiveCall& call, Admission& admission,
                        const v1::ModelRef& request, v1::ModelInfo* response);
  absl::Status ListModels(const ActiveCall& call, Admission& admission,
                          const v1::ListModelsRequest& request,
                          v1::ListModelsResponse* response);
  absl::Status DeleteModel(const ActiveCall& call, Admission& admission,
                           const v1::ModelRef& request, v1::DeleteModelResponse* response);
  absl::Status FenceTenant(const ActiveCall& call, Admission& admission,
                           const v1::FenceTenantRequest& request,
                           v1::FenceTenantResponse* response);
  absl::Status Observe(const ActiveCall& call, Admission& admission,
                       const v1::ObserveRequest& request, v1::ObserveResponse* response);
  absl::Status Predict(const ActiveCall& call, Admission& admission,
                       const v1::PredictRequest& request, v1::PredictResponse* response);
  absl::Status Label(const ActiveCall& call, Admission& admission,
                     const v1::LabelRequest& request, v1::LabelResponse* response);
  // A Predict's `remember`: its inputs and the predictions answered for them, checked
  // now, and written by remember_writer_ under event ids (added to `response`) as the
  // call's deferred reply.
  absl::Status RememberPredicted(Admission& admission, const v1::PredictRequest& request,
                                 const InputBatch& inputs, v1::PredictResponse* response);
  // Snapshot's bytes: the model's section (its state copied under its reader lock and
  // encoded) and, for a model with remembered events, the events captured at the same
  // moment, to be paged after it.
  struct ModelSnapshotParts {
    std::string model;
    std::optional<EventBook::Captured> events;
  };
  absl::StatusOr<ModelSnapshotParts> EncodeModelSnapshot(const ModelKey& id,
                                                         std::shared_ptr<HostedModel>* model);

  ModelHost* const host_;
  const Authenticator* const authenticator_;
  const Options options_;
  // Set before the gRPC server starts (which orders it before every handler); then fixed.
  ServerMetrics* metrics_ = nullptr;
  // Restores running now (at most options_.max_concurrent_restores).
  mutable std::atomic<int> restores_running_{0};
  // Both sequentially consistent: a call counts itself in, then reads the state; the
  // drain sets the state, then reads the count. So a drain that reads 0 is never
  // followed by a call that saw kServing.
  std::atomic<State> state_{State::kStarting};
  mutable std::atomic<int64_t> calls_in_flight_{0};
  // Declared last: destroyed first, running what is queued while the rest still lives.
  mutable WorkPool offload_pool_;
  // Remembering Predicts' writes (server/rpc/remember_writer.h); only the queues' threads
  // and the offload pool hand it work, and a drain has waited for their calls.
  RememberWriter remember_writer_;
};

}  // namespace okl

#endif  // OKL_SERVER_RPC_SERVICE_H_
