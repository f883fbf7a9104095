// server/service.cc

#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "core/model.h"
#include "core/norma.h"
#include "core/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"
#include "server/failpoint.h"
#include "server/status.h"

namespace okl {

namespace {

// A Restore reads at most this many bytes before it must have found the snapshot's
// config (Snapshot's first chunk holds it in its first few hundred bytes).
constexpr size_t kMaxRestorePrefixBytes = 64 << 10;
// Predict checks for cancellation between groups of this many inputs, each under its own
// read of the model; a KRLS tracker's, whose variance costs O(M^2) per input, of at most
// about kPredictChunkWork multiply-adds (one input at M = 1000 with forgetting).
constexpr size_t kPredictChunk = 256;
constexpr double kPredictChunkWork = 1 << 23;
// Observe applies a large request in groups of about this much kernel work (terms x dim
// per example) and checks for cancellation between them; a typical batch is one group.
constexpr double kObserveChunkWork = 1 << 26;

bool IsEmpty(const v1::ModelRef& ref) { return ref.tenant().empty() && ref.model().empty(); }

bool SameRef(const v1::ModelRef& a, const v1::ModelRef& b) {
  return a.tenant() == b.tenant() && a.model() == b.model();
}

std::string Describe(const v1::ModelRef& ref) {
  return absl::StrCat("model \"", ref.model(), "\" of tenant \"", ref.tenant(), "\"");
}

absl::Status ValidateRef(const v1::ModelRef& ref) {
  if (IsEmpty(ref)) {
    return absl::InvalidArgumentError("ref is missing: set ref.tenant and ref.model");
  }
  OKL_RETURN_IF_ERROR(ValidateName("tenant", ref.tenant()));
  return ValidateName("model", ref.model());
}

absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// The full name gRPC routes by: "/okl.v1.OnlineKernelLearning/Predict".
std::string FullMethodName(absl::string_view method) {
  return absl::StrCat("/", OklService::kServiceName, "/", method);
}

// CANCELLED (or DEADLINE_EXCEEDED) once the client gave up on the call.
absl::Status CheckNotCancelled(grpc::ServerContextBase* context, absl::string_view progress) {
  if (context == nullptr) return absl::OkStatus();
  if (context->deadline() < std::chrono::system_clock::now()) {
    return absl::DeadlineExceededError(
        absl::StrCat("the call's deadline passed; stopped ", progress));
  }
  if (context->IsCancelled()) {
    return absl::CancelledError(absl::StrCat("the call was cancelled; stopped ", progress));
  }
  return absl::OkStatus();
}

}  // namespace

// One okl call: counted in flight for its lifetime; checks, once counted, that the
// service is serving and that the call carries a valid token; then authorizes each
// tenant the call touches and takes it from the tenant's request rate.
class OklService::ActiveCall {
 public:
  ActiveCall(const OklService* service, const grpc::ServerContextBase* context)
      : service_(service) {
    service_->calls_in_flight_.fetch_add(1);
    status_ = service_->CheckServing();
    if (status_.ok() && service_->authenticator_ != nullptr) {
      const auto& metadata = context->client_metadata();
      if (auto it = metadata.find("authorization"); it != metadata.end()) {
        authorization_ = absl::string_view(it->second.data(), it->second.size());
      }
      absl::StatusOr<Grant> grant = service_->authenticator_->Authenticate(authorization_);
      if (grant.ok()) {
        grant_ = *std::move(grant);
      } else {
        status_ = grant.status();
      }
    }
  }
  ~ActiveCall() { service_->calls_in_flight_.fetch_sub(1); }

  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

  // UNAVAILABLE if the service is starting or draining, UNAUTHENTICATED without a valid
  // token.
  const absl::Status& status() const { return status_; }

  // PERMISSION_DENIED unless the token grants `needed` on `tenant` (`method` names the
  // call in the message); then RESOURCE_EXHAUSTED if the tenant is over its request rate.
  // Each message of a stream is authorized again: a token revoked (SIGHUP) while the
  // stream is open stops it at its next message.
  absl::Status Authorize(Role needed, absl::string_view tenant, absl::string_view method) const {
    OKL_RETURN_IF_ERROR(CheckGrant(needed, tenant, method));
    return service_->host_->quotas().Admit(tenant);
  }

  // Authorize without taking from the tenant's request rate: for an admin's call, which a
  // tenant at its rate limit must not block.
  absl::Status CheckGrant(Role needed, absl::string_view tenant, absl::string_view method) const {
    if (grant_.has_value() && authorizations_++ > 0) {
      OKL_ASSIGN_OR_RETURN(grant_, service_->authenticator_->Authenticate(authorization_));
    }
    if (grant_.has_value() && !grant_->Allows(needed, tenant)) {
      // The caller's own grant, so that the message says what to fix.
      const absl::Span<const std::string> tenants = grant_->tenants;
      return absl::PermissionDeniedError(absl::StrCat(
          method, " needs ", RoleName(needed), " on tenant \"", tenant, "\"; this token grants ",
          RoleName(grant_->role), " on ",
          grant_->all_tenants ? "every tenant"
                              : absl::StrCat(absl::StrJoin(tenants.first(std::min<size_t>(
                                                               tenants.size(), 10)),
                                                           ","),
                                             tenants.size() > 10 ? ",..." : ""),
          "; use a token that grants it"));
    }
    return absl::OkStatus();
  }

  // True if the call may see `tenant`'s models (ListModels without a tenant).
  bool CanRead(absl::string_view tenant) const {
    return !grant_.has_value() || grant_->Allows(Role::kRead, tenant);
  }

 private:
  const OklService* const service_;
  absl::Status status_;
  // The call's authorization metadata (gRPC keeps it for the call's life).
  absl::string_view authorization_;
  mutable std::optional<Grant> grant_;  // none: authentication is off
  mutable int authorizations_ = 0;
};

// The state of one Observe call or ObserveStream: the model it is bound to (found with
// the first message), the reusable batch, and the response accumulated so far.
// Each Apply() is one batch with Observe's rules. Not thread-safe; one per call.
class OklService::ObserveSession {
 public:
  ObserveSession(const OklService* service, const ActiveCall* call,
                 grpc::ServerContextBase* context, bool stream, v1::ObserveResponse* response)
      : service_(service), call_(call), context_(context), stream_(stream),
        response_(response) {}

  absl::Status Apply(const v1::ObserveRequest& request) {
    ++messages_;
    absl::Status status = ApplyBatch(request);
    if (status.ok()) ++applied_;
    if (!stream_ || status.ok()) return status;
    return WithPrefix(absl::StrCat("ObserveStream message ", messages_, ": "), status);
  }

  // OK once at least one message was applied; then response's steps and
  // expansion_size are those after the last batch.
  absl::Status Finish() const {
    if (messages_ == 0) {
      return absl::InvalidArgumentError(
          "ObserveStream received no messages: the first must carry ref and examples");
    }
    return absl::OkStatus();
  }

  // The call's status to send: with an UNAVAILABLE, the trailer saying how many of its
  // messages were applied (nothing of the failing one was: an UNAVAILABLE the session
  // returns is a refusal before its batch, so the client may resend from there), unless
  // the store cannot tell whether the failing batch will be replayed at the next start.
  grpc::Status Status(const absl::Status& status) const {
    if (status.code() == absl::StatusCode::kUnavailable && !WriteOutcomeUnknown(status)) {
      context_->AddTrailingMetadata(kBatchesAppliedMetadataKey, absl::StrCat(applied_));
    }
    return ToGrpcStatus(status);
  }

 private:
  absl::Status ApplyBatch(const v1::ObserveRequest& request) {
    if (messages_ == 1) {
      OKL_RETURN_IF_ERROR(ValidateRef(request.ref()));
      ref_ = request.ref();
    } else if (!IsEmpty(request.ref()) && !SameRef(request.ref(), ref_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ref names ", Describe(request.ref()), " but the stream is bound to ",
                       Describe(ref_), "; leave ref empty after the first message"));
    }
    OKL_RETURN_IF_ERROR(call_->Authorize(Role::kWrite, ref_.tenant(),
                                         stream_ ? "ObserveStream" : "Observe"));
    OKL_RETURN_IF_ERROR(service_->CheckBatchSize(request.examples_size(), "examples"));
    OKL_RETURN_IF_ERROR(CheckNotCancelled(context_, "before applying the batch"));
    OKL_RETURN_IF_ERROR(service_->host_->WithModelForWrite(
        ref_.tenant(), ref_.model(), &entry_,
        [&](ModelEntry& entry) { return ApplyTo(entry, request); }));
    // A unary Observe is bounded by --max_batch; a stream's response by this.
    const uint64_t cap = stream_ ? service_->options_.max_response_predictions : UINT64_MAX;
    const size_t room = cap - std::min<uint64_t>(response_->predictions_size(), cap);
    const size_t returned = std::min(room, observations_.size());
    AppendToProto(absl::MakeConstSpan(observations_).first(returned), response_);
    response_->set_predictions_omitted(response_->predictions_omitted() +
                                       (observations_.size() - returned));
    response_->set_steps(stats_after_.steps);
    response_->set_expansion_size(stats_after_.expansion_size);
    return absl::OkStatus();
  }

  // Validates the whole batch, then applies it in groups, stopping between groups if the
  // call was cancelled. NotFound only while nothing was applied (WithModel retries it).
  absl::Status ApplyTo(ModelEntry& entry, const v1::ObserveRequest& request) {
    const uint32_t dim = entry.config().dim;
    const size_t max_bytes = service_->options_.max_request_bytes;
    // A model with sparse storage takes the examples' non-zeros, never a dense copy.
    const bool sparse = entry.config().sparse_storage();
    if (sparse) {
      OKL_RETURN_IF_ERROR(FromProto(request, dim, &sparse_batch_, max_bytes));
    } else {
      OKL_RETURN_IF_ERROR(FromProto(request, dim, &batch_, max_bytes));
    }
    const InputBatch inputs =
        sparse ? InputBatch::Sparse(sparse_batch_.xs) : InputBatch::Dense(batch_.xs, dim);
    const absl::Span<const double> ys = sparse ? sparse_batch_.ys : batch_.ys;
    OKL_RETURN_IF_ERROR(entry.ValidateBatch(inputs, ys));
    const size_t n = ys.size();
    const double work = WorstCaseWorkPerExample(entry.config());
    const size_t group = std::clamp<size_t>(static_cast<size_t>(kObserveChunkWork / work), 1, n);
    observations_.clear();
    for (size_t begin = 0; begin < n; begin += group) {
      const size_t count = std::min(group, n - begin);
      if (begin > 0) {
        OKL_RETURN_IF_ERROR(CheckNotCancelled(
            context_, absl::StrCat("after ", begin, " of the batch's ", n,
                                   " examples were applied")));
      }
      absl::Status status = entry.ObserveBatch(inputs.Subrange(begin, count),
                                               ys.subspan(begin, count), &observations_,
                                               &stats_after_);
      service_->RecordObserved(absl::MakeConstSpan(observations_).subspan(
          std::min(begin, observations_.size())));
      if (status.ok() || begin == 0) {
        OKL_RETURN_IF_ERROR(status);
        continue;
      }
      // A prefix of whole groups is applied (and durable). A diverging step says so in its
      // own FAILED_PRECONDITION; anything else (the model deleted or replaced, the store
      // failing) is ABORTED, not a code a client would retry blindly.
      if (status.code() == absl::StatusCode::kFailedPrecondition) {
        return WithPrefix(absl::StrCat("after ", begin, " examples: "), status);
      }
      return absl::AbortedError(absl::StrCat("only ", begin, " of the batch's ", n,
                                             " examples were applied (in order), then: ",
                                             status.message()));
    }
    return absl::OkStatus();
  }

  const OklService* const service_;
  const ActiveCall* const call_;
  grpc::ServerContextBase* const context_;
  const bool stream_;
  v1::ObserveResponse* const response_;
  size_t messages_ = 0;
  size_t applied_ = 0;  // messages applied in full
  v1::ModelRef ref_;
  std::shared_ptr<ModelEntry> entry_;
  ExampleBatch batch_;               // for a model with dense storage
  SparseExampleBatch sparse_batch_;  // for a model with sparse storage
  std::vector<Observation> observations_;
  ModelStats stats_after_;  // the model's, right after this call's latest batch
};

// ObserveStream: each message's batch runs on the offload pool once it is read, and the
// next read starts once it is applied, so batches apply in order.
class OklService::ObserveStreamCall final : public AsyncCall {
 public:
  explicit ObserveStreamCall(const OklService* service) : service_(service) {}

 private:
  void OnStart() override {
    call_.emplace(service_, context());
    session_.emplace(service_, &*call_, context(), /*stream=*/true, &response_);
    if (!call_->status().ok()) {
      Finish(session_->Status(call_->status()));
      return;
    }
    StartRead();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call was cancelled)
      Finish(ToGrpcStatus(session_->Finish()), &response_);
      return;
    }
    if (absl::Status status = TakeMessage(&request_); !status.ok()) {
      Finish(session_->Status(status));
      return;
    }
    // The batch writes to the store: off the queue's thread.
    service_->offload_pool_.Schedule([this] {
      if (absl::Status status = session_->Apply(request_); !status.ok()) {
        Finish(session_->Status(status));
        return;
      }
      StartRead();
    });
  }

  const OklService* const service_;
  // From the call's arrival until it is deleted: in flight until its status is sent.
  std::optional<ActiveCall> call_;
  std::optional<ObserveSession> session_;
  v1::ObserveRequest request_;
  v1::ObserveResponse response_;
};

template <typename Request, typename Response, typename RunInline, typename Work>
void OklService::ServeUnary(absl::string_view method, RunInline run_inline, Work work) {
  using Call = UnaryCall<Request, Response>;
  // The service owns the handler, through the factory that hands it to each call.
  auto handle = std::make_shared<typename Call::Handler>([this, run_inline,
                                                          work](Call* call) {
    grpc::ServerContext* context = call->context();
    if (run_inline(call->request())) {
      const ActiveCall active(this, context);
      call->Reply(active.status().ok()
                      ? work(active, context, call->request(), call->response())
                      : Refusal(context, active.status()));
      return;
    }
    if (metrics_ != nullptr) metrics_->RecordOffloaded();
    // Counted in flight from now, not from when a pool thread takes it, so that a drain
    // waits for it.
    auto active = std::make_unique<ActiveCall>(this, context);
    offload_pool_.Schedule([call, context, active = std::move(active), work]() {
      call->Reply(active->status().ok()
                      ? work(*active, context, call->request(), call->response())
                      : Refusal(context, active->status()));
    });
  });
  AddRawMethod(FullMethodName(method), [handle] { return new Call(handle.get()); });
}

template <typename Call>
void OklService::ServeStream(absl::string_view method) {
  AddRawMethod(FullMethodName(method), [this] { return new Call(this); });
}

OklService::OklService(ModelHost* host, const Authenticator* authenticator, Options options)
    : host_(host),
      authenticator_(authenticator),
      options_(options),
      offload_pool_(options.offload_threads > 0
                        ? options.offload_threads
                        : UsableCpus()) {
  // The small reads run inline, on the queue's thread that received them: handing each to
  // another thread would cost more server CPU than a GetModel's or a small Predict's own
  // work (docs/benchmarks.md, "Load generator"). Anything that writes to the store, may run
  // long, or would wait for a model's writer runs on offload_pool_, since the queues' threads
  // carry every tenant's calls.
  const auto offload = [](const auto& /*request*/) { return false; };
  ServeUnary<v1::CreateModelRequest, v1::ModelInfo>(
      "CreateModel", offload,
      [this](const ActiveCall& call, grpc::ServerContext*, const auto& request,
             auto* response) { return ToGrpcStatus(DoCreateModel(call, request, response)); });
  ServeUnary<v1::ModelRef, v1::ModelInfo>(
      "GetModel",
      [this](const v1::ModelRef& request) {
        return !WouldWait(request.tenant(), request.model());
      },
      [this](const ActiveCall& call, grpc::ServerContext*, const auto& request,
             auto* response) { return ToGrpcStatus(DoGetModel(call, request, response)); });
  // ListModels reads every model of the tenant (or the server).
  ServeUnary<v1::ListModelsRequest, v1::ListModelsResponse>(
      "ListModels", offload,
      [this](const ActiveCall& call, grpc::ServerContext*, const auto& request,
             auto* response) { return ToGrpcStatus(DoListModels(call, request, response)); });
  ServeUnary<v1::ModelRef, v1::DeleteModelResponse>(
      "DeleteModel", offload,
      [this](const ActiveCall& call, grpc::ServerContext*, const auto& request,
             auto*) { return ToGrpcStatus(DoDeleteModel(call, request)); });
  ServeUnary<v1::ObserveRequest, v1::ObserveResponse>(
      "Observe", offload,
      [this](const ActiveCall& call, grpc::ServerContext* context, const auto& request,
             auto* response) {
        ObserveSession session(this, &call, context, /*stream=*/false, response);
        return session.Status(session.Apply(request));
      });
  ServeUnary<v1::PredictRequest, v1::PredictResponse>(
      "Predict",
      [this](const v1::PredictRequest& request) {
        return PredictCost(request) <= static_cast<double>(options_.max_inline_work);
      },
      [this](const ActiveCall& call, grpc::ServerContext* context, const auto& request,
             auto* response) { return ToGrpcStatus(DoPredict(call, context, request, response)); });
  // FenceTenant waits for the tenant's writes in flight.
  ServeUnary<v1::FenceTenantRequest, v1::FenceTenantResponse>(
      "FenceTenant", offload,
      [this](const ActiveCall& call, grpc::ServerContext* context, const auto& request,
             auto* response) {
        return ToGrpcStatus(DoFenceTenant(call, context, request, response));
      });
  ServeStream<ObserveStreamCall>("ObserveStream");
  ServeStream<SnapshotCall>("Snapshot");
  ServeStream<RestoreCall>("Restore");
}

void OklService::SetServing() { state_.store(State::kServing); }

void OklService::StartDraining() { state_.store(State::kDraining); }

int64_t OklService::calls_in_flight() const { return calls_in_flight_.load(); }

absl::Status OklService::CheckServing() const {
  switch (state_.load()) {
    case State::kServing:
      return absl::OkStatus();
    case State::kStarting:
      return absl::UnavailableError("okl_server is starting; retry shortly");
    case State::kDraining:
      break;
  }
  return absl::UnavailableError(
      "okl_server is shutting down; retry on another replica or after its restart");
}

absl::Status OklService::CheckBatchSize(size_t size, const char* what) const {
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the request has no ", what, "; send 1 to ",
                                                   options_.max_batch, " (--max_batch)"));
  }
  if (size > options_.max_batch) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request has ", size, " ", what, ", over this server's limit of ",
                     options_.max_batch, " (--max_batch); split it"));
  }
  return absl::OkStatus();
}

void OklService::RecordObserved(absl::Span<const Observation> observations) const {
  if (metrics_ == nullptr || observations.empty()) return;
  double loss_sum = 0;
  for (const Observation& o : observations) loss_sum += o.loss;
  metrics_->RecordObserved(observations.size(), loss_sum);
}

// --- Handlers: check the call, convert in, call the host, convert out. --------------

absl::Status OklService::DoCreateModel(const ActiveCall& call,
                                       const v1::CreateModelRequest& request,
                                       v1::ModelInfo* response) {
  OKL_RETURN_IF_ERROR(ValidateRef(request.ref()));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kWrite, request.ref().tenant(), "CreateModel"));
  OKL_ASSIGN_OR_RETURN(ModelConfig config, FromProto(request.config()));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                       host_->Create(request.ref().tenant(), request.ref().model(), config));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

absl::Status OklService::DoGetModel(const ActiveCall& call, const v1::ModelRef& request,
                                    v1::ModelInfo* response) const {
  OKL_RETURN_IF_ERROR(ValidateRef(request));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kRead, request.tenant(), "GetModel"));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                       host_->Find(request.tenant(), request.model()));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

absl::Status OklService::DoListModels(const ActiveCall& call,
                                      const v1::ListModelsRequest& request,
                                      v1::ListModelsResponse* response) const {
  if (!request.tenant().empty()) {
    OKL_RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
    OKL_RETURN_IF_ERROR(call.Authorize(Role::kRead, request.tenant(), "ListModels"));
    OKL_RETURN_IF_ERROR(host_->CheckNotMoved(request.tenant()));
  }
  for (const std::shared_ptr<ModelEntry>& entry : host_->List(request.tenant())) {
    if (!call.CanRead(entry->tenant())) continue;  // another tenant's
    absl::StatusOr<ModelSummary> summary = entry->Summary();
    if (!summary.ok()) continue;  // deleted since it was listed
    *response->add_models() = ToProto(*summary);
  }
  return absl::OkStatus();
}

absl::Status OklService::DoDeleteModel(const ActiveCall& call, const v1::ModelRef& request) {
  OKL_RETURN_IF_ERROR(ValidateRef(request));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kWrite, request.tenant(), "DeleteModel"));
  return host_->Delete(request.tenant(), request.model());
}

absl::Status OklService::DoFenceTenant(const ActiveCall& call, grpc::ServerContextBase* context,
                                       const v1::FenceTenantRequest& request,
                                       v1::FenceTenantResponse* response) {
  OKL_RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
  OKL_RETURN_IF_ERROR(call.CheckGrant(Role::kAdmin, request.tenant(), "FenceTenant"));
  if (!request.fenced()) {
    if (request.delete_models()) {
      return absl::InvalidArgumentError(
          "delete_models needs fenced: a tenant's models are deleted only behind its fence");
    }
    host_->LiftFence(request.tenant());
    return absl::OkStatus();
  }
  const absl::Time deadline = absl::FromChrono(context->deadline());
  if (request.delete_models()) {
    OKL_ASSIGN_OR_RETURN(std::vector<std::string> deleted,
                         host_->DropTenant(request.tenant(), deadline));
    for (std::string& model : deleted) response->add_models(std::move(model));
    return absl::OkStatus();
  }
  OKL_RETURN_IF_ERROR(host_->FenceWrites(request.tenant(), deadline));
  for (const std::shared_ptr<ModelEntry>& entry : host_->List(request.tenant())) {
    response->add_models(entry->model());
  }
  return absl::OkStatus();
}

grpc::Status OklService::Refusal(grpc::ServerContextBase* context, const absl::Status& status) {
  // Nothing of the call was applied; for an Observe the trailer says so (okl.proto,
  // "Retrying writes"), as ObserveSession::Status does for a stream's later refusals.
  if (status.code() == absl::StatusCode::kUnavailable) {
    context->AddTrailingMetadata(kBatchesAppliedMetadataKey, "0");
  }
  return ToGrpcStatus(status);
}

bool OklService::WouldWait(absl::string_view tenant, absl::string_view model) const {
  absl::StatusOr<std::shared_ptr<ModelEntry>> entry = host_->Find(tenant, model);
  return entry.ok() && (*entry)->writing();
}

double OklService::PredictCost(const v1::PredictRequest& request) const {
  // A call that will fail finds out fast wherever it runs.
  if (request.inputs_size() == 0) return 0;
  absl::StatusOr<std::shared_ptr<ModelEntry>> entry =
      host_->Find(request.ref().tenant(), request.ref().model());
  if (!entry.ok()) return 0;
  if ((*entry)->writing()) return std::numeric_limits<double>::infinity();
  double per_input = WorstCaseWorkPerExample((*entry)->config());
  if (std::isinf(per_input)) {  // no budget: the expansion as it is now
    absl::StatusOr<ModelSummary> summary = (*entry)->Summary();
    if (!summary.ok()) return 0;
    per_input = static_cast<double>((*entry)->config().dim) *
                static_cast<double>(summary->stats.expansion_size + 1);
  }
  return per_input * request.inputs_size();
}

absl::Status OklService::DoPredict(const ActiveCall& call, grpc::ServerContextBase* context,
                                   const v1::PredictRequest& request,
                                   v1::PredictResponse* response) const {
  OKL_RETURN_IF_ERROR(CheckBatchSize(request.inputs_size(), "inputs"));
  OKL_RETURN_IF_ERROR(ValidateRef(request.ref()));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kRead, request.ref().tenant(), "Predict"));
  std::vector<double> xs;
  SparseRows sparse_xs;  // for a model with sparse storage
  auto* predictions = response->mutable_predictions();
  predictions->Resize(request.inputs_size(), 0.0);
  const absl::Span<double> out(predictions->mutable_data(), predictions->size());
  std::shared_ptr<ModelEntry> entry;
  OKL_RETURN_IF_ERROR(host_->WithModel(
      request.ref().tenant(), request.ref().model(), &entry,
      [&](ModelEntry& model) -> absl::Status {
        const uint32_t dim = model.config().dim;
        const bool novelty = model.config().loss.type == LossType::kNovelty;
        // A tracker's variances, or a selection's while its champion is a tracker.
        bool variance = model.has_predictive_variance();
        const bool sparse = model.config().sparse_storage();
        if (sparse) {
          OKL_RETURN_IF_ERROR(FromProto(request, dim, &sparse_xs, options_.max_request_bytes));
        } else {
          OKL_RETURN_IF_ERROR(FromProto(request, dim, &xs, options_.max_request_bytes));
        }
        const InputBatch inputs =
            sparse ? InputBatch::Sparse(sparse_xs) : InputBatch::Dense(xs, dim);
        // WithModel may run this again on a model that replaced the one found: every flag
        // is written again, as every prediction is.
        response->clear_novel();
        if (novelty) response->mutable_novel()->Resize(request.inputs_size(), false);
        response->clear_variances();
        if (variance) response->mutable_variances()->Resize(request.inputs_size(), 0.0);
        const size_t chunk =
            variance ? static_cast<size_t>(std::clamp(
                           kPredictChunkWork / WorstCaseWorkPerExample(model.config()), 1.0,
                           static_cast<double>(kPredictChunk)))
                     : kPredictChunk;
        for (size_t begin = 0; begin < out.size(); begin += chunk) {
          const size_t count = std::min(chunk, out.size() - begin);
          if (begin > 0) {
            OKL_RETURN_IF_ERROR(CheckNotCancelled(
                context, absl::StrCat("after ", begin, " of ", out.size(), " inputs")));
          }
          const absl::Span<double> chunk_out = out.subspan(begin, count);
          // Each chunk is predicted under its own read of the model, with that model's rho.
          double rho = 0;
          if (variance) {
            const absl::Span<double> chunk_variances =
                absl::MakeSpan(response->mutable_variances()->mutable_data() + begin, count);
            const absl::Status status = model.PredictBatchWithVariance(
                inputs.Subrange(begin, count), chunk_out, chunk_variances);
            if (status.ok()) continue;
            // A selection's new champion has none: the response carries variances for
            // every input or for none, so they are dropped.
            if (!absl::IsFailedPrecondition(status) || !model.config().select_kind()) {
              return status;
            }
            variance = false;
            response->clear_variances();
          }
          OKL_RETURN_IF_ERROR(model.PredictBatch(inputs.Subrange(begin, count), chunk_out,
                                                 PredictionMode::kConfigured,
                                                 novelty ? &rho : nullptr));
          if (!novelty) continue;
          for (size_t i = 0; i < count; ++i) {
            response->set_novel(static_cast<int>(begin + i), chunk_out[i] < rho);
          }
        }
        return absl::OkStatus();
      }));
  if (metrics_ != nullptr) metrics_->RecordPredicted(request.inputs_size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> OklService::EncodeModelSnapshot(const ActiveCall& call,
                                                             const v1::ModelRef& request) const {
  OKL_RETURN_IF_ERROR(ValidateRef(request));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kRead, request.tenant(), "Snapshot"));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                       host_->Find(request.tenant(), request.model()));
  OKL_ASSIGN_OR_RETURN(const ModelState state, entry->ExportState());
  return EncodeSnapshot(state);
}

// Snapshot: the model is copied and encoded on the offload pool (the copy waits for a
// batch being applied to it); the chunks are written one at a time.
class OklService::SnapshotCall final : public AsyncCall {
 public:
  explicit SnapshotCall(const OklService* service) : service_(service) {}

 private:
  void OnStart() override {
    call_.emplace(service_, context());
    if (!call_->status().ok()) {
      Finish(Refusal(context(), call_->status()));
      return;
    }
    StartRead();
  }

  void OnReadDone(bool ok) override {
    if (absl::Status status = TakeRequest(ok, &request_); !status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    service_->offload_pool_.Schedule([this] {
      absl::StatusOr<std::string> bytes = service_->EncodeModelSnapshot(*call_, request_);
      if (!bytes.ok()) {
        Finish(ToGrpcStatus(bytes.status()));
        return;
      }
      bytes_ = *std::move(bytes);
      WriteNext();
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("the client stopped reading the snapshot")));
      return;
    }
    WriteNext();
  }

  void WriteNext() {
    if (offset_ >= bytes_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.set_data(bytes_.substr(offset_, kSnapshotChunkBytes));
    offset_ += chunk_.data().size();
    StartWrite(chunk_);
  }

  const OklService* const service_;
  std::optional<ActiveCall> call_;  // from the call's arrival: in flight until deleted
  v1::ModelRef request_;
  std::string bytes_;  // the whole snapshot
  size_t offset_ = 0;  // of the next chunk in bytes_
  v1::SnapshotChunk chunk_;
};

// Holds one of the --max_concurrent_restores slots for its scope, if it got one.
class OklService::RestoreSlot {
 public:
  explicit RestoreSlot(const OklService* service) : service_(service) {
    held_ = service_->restores_running_.fetch_add(1) < service_->options_.max_concurrent_restores;
    if (!held_) service_->restores_running_.fetch_sub(1);
  }
  ~RestoreSlot() {
    if (held_) service_->restores_running_.fetch_sub(1);
  }
  RestoreSlot(const RestoreSlot&) = delete;
  RestoreSlot& operator=(const RestoreSlot&) = delete;

  absl::Status status() const {
    if (held_) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server runs at most ", service_->options_.max_concurrent_restores,
        " Restores at once (--max_concurrent_restores); retry when one has finished"));
  }

 private:
  const OklService* const service_;
  bool held_ = false;
};

// The state of one Restore: the chunks are added as they arrive, each checked against
// the limits known so far, and Finish() decodes the snapshot and replaces the model.
// Not thread-safe; one per call.
class OklService::RestoreSession {
 public:
  RestoreSession(const OklService* service, const ActiveCall* call)
      : service_(service), call_(call) {}

  // Checks and buffers one chunk; an error ends the call.
  absl::Status Add(const v1::RestoreChunk& chunk) {
    ++chunks_;
    if (chunks_ == 1) {
      OKL_RETURN_IF_ERROR(WithPrefix("the first RestoreChunk: ", ValidateRef(chunk.ref())));
      ref_ = chunk.ref();
      OKL_RETURN_IF_ERROR(call_->Authorize(Role::kWrite, ref_.tenant(), "Restore"));
      // Each Restore buffers one snapshot: bound how many do so at once, counting only
      // authorized ones.
      slot_.emplace(service_);
      OKL_RETURN_IF_ERROR(slot_->status());
      declared_ = chunk.snapshot_bytes();
      if (declared_ > kMaxSnapshotBytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the snapshot declares ", declared_, " bytes, over the limit of ", kMaxSnapshotBytes));
      }
    } else if (!IsEmpty(chunk.ref()) && !SameRef(chunk.ref(), ref_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RestoreChunk ", chunks_, " names ", Describe(chunk.ref()), " but the first named ",
          Describe(ref_), "; leave ref empty after the first chunk"));
    }
    if (!config_.has_value()) {
      // Only the prefix up to the config is buffered before the limits are checked.
      bytes_.append(chunk.data().substr(0, kMaxRestorePrefixBytes));
      OKL_ASSIGN_OR_RETURN(config_, PeekSnapshotConfig(bytes_));
      if (!config_.has_value()) {
        if (bytes_.size() >= kMaxRestorePrefixBytes) {
          return absl::DataLossError(absl::StrCat("the snapshot's first ", bytes_.size(),
                                                  " bytes hold no config (not a snapshot?)"));
        }
        if (chunk.data().size() > kMaxRestorePrefixBytes) {
          return absl::DataLossError("the snapshot's first chunk holds no config");
        }
        return absl::OkStatus();
      }
      OKL_RETURN_IF_ERROR(WithPrefix("snapshot: ", service_->host_->CheckConfig(*config_)));
      OKL_ASSIGN_OR_RETURN(reservation_,
                           service_->host_->Reserve(ref_.tenant(), ref_.model(), *config_));
      max_bytes_ = MaxSnapshotBytes(*config_);
      if (declared_ > 0) {
        if (declared_ > max_bytes_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the snapshot declares ", declared_, " bytes, more than a model of its config "
              "can have (", max_bytes_, "); it is not a snapshot of that config"));
        }
        max_bytes_ = declared_;
      }
      // The rest of this chunk (its prefix is in already).
      bytes_.resize(bytes_.size() - std::min(chunk.data().size(), kMaxRestorePrefixBytes));
      bytes_.reserve(std::min<size_t>(max_bytes_, size_t{64} << 20));
    }
    if (chunk.data().size() > max_bytes_ - std::min(bytes_.size(), max_bytes_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the snapshot runs past ", max_bytes_, " bytes, ",
          declared_ > 0 ? "the size its first chunk declared"
                        : "the most a model of its config can have",
          "; it is truncated or not one snapshot"));
    }
    bytes_.append(chunk.data());
    return absl::OkStatus();
  }

  // Once the client half-closed: decodes the snapshot and replaces the model with it.
  absl::Status Finish(grpc::ServerContextBase* context, v1::ModelInfo* response) {
    if (context->IsCancelled()) return absl::CancelledError("Restore cancelled by the client");
    if (chunks_ == 0) {
      return absl::InvalidArgumentError(
          "Restore received no chunks: the first must carry ref, and all of them the data of "
          "one Snapshot");
    }
    if (!config_.has_value()) {
      return absl::DataLossError(absl::StrCat(
          "the snapshot is ", bytes_.size(), " bytes, too short to hold its config (truncated?)"));
    }
    if (declared_ > 0 && bytes_.size() != declared_) {
      return absl::DataLossError(absl::StrCat("the snapshot declared ", declared_,
                                              " bytes but the stream carried ", bytes_.size(),
                                              " (truncated?)"));
    }
    Failpoint("restore.received");
    OKL_ASSIGN_OR_RETURN(ModelState state, DecodeSnapshot(bytes_));
    bytes_ = std::string();
    // Protobuf merges a repeated config field; the limits and quotas were checked against
    // the first one, so a snapshot must hold no other.
    if (CanonicalConfigBytes(state.config) != CanonicalConfigBytes(*config_)) {
      return absl::DataLossError(
          "the snapshot's config differs from the one at its start (a repeated config field)");
    }
    OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                         service_->host_->Replace(ref_.tenant(), ref_.model(), state,
                                                  std::move(reservation_)));
    Failpoint("restore.installed");
    OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
    *response = ToProto(summary);
    return absl::OkStatus();
  }

 private:
  const OklService* const service_;
  const ActiveCall* const call_;
  size_t chunks_ = 0;
  v1::ModelRef ref_;
  std::string bytes_;
  // Known once the first bytes are in: the config, its quota reservation, and the most
  // bytes this snapshot may have.
  std::optional<ModelConfig> config_;
  QuotaReservation reservation_;
  uint64_t declared_ = 0;
  size_t max_bytes_ = kMaxRestorePrefixBytes;
  std::optional<RestoreSlot> slot_;
};

// Restore: each chunk is checked and buffered on the queue's thread as it is read (a
// copy, bounded by the limits checked so far); the decode and the store's write run on
// the offload pool.
class OklService::RestoreCall final : public AsyncCall {
 public:
  explicit RestoreCall(const OklService* service) : service_(service) {}

 private:
  void OnStart() override {
    call_.emplace(service_, context());
    session_.emplace(service_, &*call_);
    if (!call_->status().ok()) {
      Finish(Refusal(context(), call_->status()));
      return;
    }
    StartRead();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call was cancelled)
      service_->offload_pool_.Schedule(
          [this] { FinishWith(session_->Finish(context(), &response_)); });
      return;
    }
    absl::Status status = TakeMessage(&chunk_);
    if (status.ok()) status = session_->Add(chunk_);
    if (!status.ok()) {
      FinishWith(status);
      return;
    }
    StartRead();
  }

  // Ends the session before the status is sent, so that its buffer, quota reservation and
  // --max_concurrent_restores slot are free by the time the client sees the answer.
  void FinishWith(const absl::Status& status) {
    session_.reset();
    Finish(ToGrpcStatus(status), &response_);
  }

  const OklService* const service_;
  std::optional<ActiveCall> call_;  // from the call's arrival: in flight until deleted
  std::optional<RestoreSession> session_;
  v1::RestoreChunk chunk_;
  v1::ModelInfo response_;
};

}  // namespace okl
