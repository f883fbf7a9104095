// server/rpc/service.cc
//
// The service's admission and its unary calls. Observe and ObserveStream are in
// service_observe.cc, Snapshot and Restore in service_snapshot.cc.

#include "server/rpc/service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "core/create_model.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/norma.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "server/rpc/service_internal.h"
#include "server/rpc/status.h"

namespace okl {

using service_internal::CheckNotCancelled;
using service_internal::IdOf;

namespace {

// The full name gRPC routes by: "/okl.v1.OnlineKernelLearning/Predict".
std::string FullMethodName(absl::string_view method) {
  return absl::StrCat("/", OklService::kServiceName, "/", method);
}

// The kernel work (multiply-adds) of predicting `inputs` inputs with `entry` at most, or
// infinity while a batch is being applied to it (a read would wait for it).
double PredictWork(const ModelEntry& entry, size_t inputs) {
  if (entry.writing()) return std::numeric_limits<double>::infinity();
  double per_input = WorstCaseWorkPerExample(entry.config());
  if (std::isinf(per_input)) {  // no budget: the expansion as it is now
    absl::StatusOr<ModelSummary> summary = entry.Summary();
    if (!summary.ok()) return 0;  // deleted: the call fails fast wherever it runs
    per_input = static_cast<double>(entry.config().dim) *
                static_cast<double>(summary->stats.expansion_size + 1);
  }
  return per_input * static_cast<double>(inputs);
}

}  // namespace

namespace service_internal {

bool IsEmpty(const v1::ModelRef& ref) { return ref.tenant().empty() && ref.model().empty(); }

bool Names(const v1::ModelRef& ref, const ModelKey& id) {
  return ref.tenant() == id.tenant() && ref.model() == id.model();
}

std::string Describe(const v1::ModelRef& ref) {
  return absl::StrCat("model \"", ref.model(), "\" of tenant \"", ref.tenant(), "\"");
}

absl::StatusOr<ModelKey> IdOf(const v1::ModelRef& ref) {
  if (IsEmpty(ref)) {
    return absl::InvalidArgumentError("ref is missing: set ref.tenant and ref.model");
  }
  return ModelKey::Make(ref.tenant(), ref.model());
}

absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

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

}  // namespace service_internal

// --- Admission ------------------------------------------------------------------------

OklService::ActiveCall::ActiveCall(const OklService* service,
                                   const grpc::ServerContextBase* context)
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

OklService::ActiveCall::ActiveCall(ActiveCall&& other) noexcept
    : service_(std::exchange(other.service_, nullptr)),
      status_(std::move(other.status_)),
      authorization_(other.authorization_),
      grant_(std::move(other.grant_)),
      authorizations_(other.authorizations_) {}

OklService::ActiveCall::~ActiveCall() {
  if (service_ != nullptr) service_->calls_in_flight_.fetch_sub(1);
}

absl::Status OklService::ActiveCall::Authorize(Role needed, absl::string_view tenant,
                                               absl::string_view method) const {
  OKL_RETURN_IF_ERROR(CheckGrant(needed, tenant, method));
  return service_->host_->quotas().Admit(tenant);
}

absl::Status OklService::ActiveCall::CheckGrant(Role needed, absl::string_view tenant,
                                                absl::string_view method) const {
  if (grant_.has_value() && authorizations_++ > 0) {
    OKL_ASSIGN_OR_RETURN(grant_, service_->authenticator_->Authenticate(authorization_));
  }
  if (grant_.has_value() && !grant_->Allows(needed, tenant)) {
    // The caller's own grant, so that the message says what to fix.
    const absl::Span<const std::string> tenants = grant_->tenants;
    return absl::PermissionDeniedError(absl::StrCat(
        method, " needs ", RoleName(needed), " on tenant \"", tenant, "\"; this token grants ",
        RoleName(grant_->role), " on ",
        grant_->all_tenants
            ? "every tenant"
            : absl::StrCat(
                  absl::StrJoin(tenants.first(std::min<size_t>(tenants.size(), 10)), ","),
                  tenants.size() > 10 ? ",..." : ""),
        "; use a token that grants it"));
  }
  return absl::OkStatus();
}

void OklService::StreamCall::OnStart() {
  call_.emplace(service_, context());
  if (!call_->status().ok()) {
    Finish(Refusal(context(), call_->status()));
    return;
  }
  StartRead();
}

grpc::Status OklService::Refusal(grpc::ServerContextBase* context, const absl::Status& status) {
  // Nothing of the call was applied; for an Observe the trailer says so (okl.proto,
  // "Retrying writes"), as ObserveSession::Status does for a stream's later refusals.
  if (status.code() == absl::StatusCode::kUnavailable) {
    context->AddTrailingMetadata(kBatchesAppliedMetadataKey, "0");
  }
  return ToGrpcStatus(status);
}

template <typename Request, typename Response>
void OklService::ServeUnary(absl::string_view method, AdmitMethod<Request> admit,
                            HandleMethod<Request, Response> handle) {
  using Call = UnaryCall<Request, Response>;
  // The service owns the handler, through the factory that hands it to each call.
  auto handler = std::make_shared<typename Call::Handler>([this, admit, handle](Call* call) {
    ActiveCall active(this, call->context());
    Admission admission;
    admission.context = call->context();
    absl::Status admitted = active.status();
    if (admitted.ok()) admitted = (this->*admit)(active, call->request(), &admission);
    if (!admitted.ok()) {
      call->Reply(Refusal(call->context(), admitted));
      return;
    }
    // Runs the handler and answers the call, now or (deferred_reply) once its later work
    // is done.
    auto handle_and_answer = [this, call, handle](ActiveCall active, Admission admission) {
      const absl::Status status =
          (this->*handle)(active, admission, call->request(), call->response());
      if (status.ok() && admission.deferred_reply != nullptr) {
        // Unavailable from later work means nothing of the call was applied, as at
        // admission (Refusal's trailer).
        std::move(admission.deferred_reply)(
            [call, active = std::move(active)](absl::Status status) mutable {
              call->Reply(Refusal(call->context(), status));
            });
        return;
      }
      call->Reply(ToGrpcStatus(status));
    };
    if (admission.run_inline) {
      handle_and_answer(std::move(active), std::move(admission));
      return;
    }
    if (metrics_ != nullptr) metrics_->RecordOffloaded();
    // The call stays counted in flight while it waits, so that a drain waits for it.
    offload_pool_.Schedule([handle_and_answer, active = std::move(active),
                            admission = std::move(admission)]() mutable {
      handle_and_answer(std::move(active), std::move(admission));
    });
  });
  AddRawMethod(FullMethodName(method), [handler] { return new Call(handler.get()); });
}

void OklService::ServeStream(absl::string_view method, AsyncCall* (OklService::*make)()) {
  AddRawMethod(FullMethodName(method), [this, make] { return (this->*make)(); });
}

OklService::OklService(ModelHost* host, const Authenticator* authenticator, Options options)
    : host_(host),
      authenticator_(authenticator),
      options_(options),
      offload_pool_(options.offload_threads > 0 ? options.offload_threads : UsableCpus(),
                    "okl-offload"),
      remember_writer_(host,
                       options.offload_threads > 0 ? options.offload_threads : UsableCpus()) {
  // The small reads run inline, on the queue's thread that received them: handing each to
  // another thread would cost more server CPU than a GetModel's or a small Predict's own
  // work (docs/benchmarks.md, "Load generator"). Anything that writes to the store, may run
  // long, or would wait for a model's writer runs on offload_pool_, since the queues'
  // threads carry every tenant's calls. Each Admit* method says which.
  ServeUnary("CreateModel", &OklService::AdmitCreateModel, &OklService::CreateModel);
  ServeUnary("GetModel", &OklService::AdmitGetModel, &OklService::GetModel);
  ServeUnary("ListModels", &OklService::AdmitListModels, &OklService::ListModels);
  ServeUnary("DeleteModel", &OklService::AdmitDeleteModel, &OklService::DeleteModel);
  ServeUnary("Observe", &OklService::AdmitObserve, &OklService::Observe);
  ServeUnary("Predict", &OklService::AdmitPredict, &OklService::Predict);
  ServeUnary("FenceTenant", &OklService::AdmitFenceTenant, &OklService::FenceTenant);
  ServeUnary("Label", &OklService::AdmitLabel, &OklService::Label);
  ServeStream("ObserveStream", &OklService::NewObserveStreamCall);
  ServeStream("Snapshot", &OklService::NewSnapshotCall);
  ServeStream("Restore", &OklService::NewRestoreCall);
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

absl::StatusOr<ModelKey> OklService::AdmitModelCall(const ActiveCall& call,
                                                    const v1::ModelRef& ref, Role needed,
                                                    absl::string_view method) {
  OKL_ASSIGN_OR_RETURN(ModelKey id, IdOf(ref));
  OKL_RETURN_IF_ERROR(call.Authorize(needed, id.tenant(), method));
  return id;
}

absl::Status OklService::AdmitCreateModel(const ActiveCall& call,
                                          const v1::CreateModelRequest& request,
                                          Admission* admission) {
  OKL_ASSIGN_OR_RETURN(admission->id,
                       AdmitModelCall(call, request.ref(), Role::kWrite, "CreateModel"));
  return absl::OkStatus();
}

absl::Status OklService::AdmitDeleteModel(const ActiveCall& call, const v1::ModelRef& request,
                                          Admission* admission) {
  OKL_ASSIGN_OR_RETURN(admission->id,
                       AdmitModelCall(call, request, Role::kWrite, "DeleteModel"));
  return absl::OkStatus();
}

absl::Status OklService::AdmitListModels(const ActiveCall& call,
                                         const v1::ListModelsRequest& request,
                                         Admission* admission) {
  // Every model of the tenant (or the server) is read: offloaded.
  if (request.tenant().empty()) return absl::OkStatus();
  OKL_RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kRead, request.tenant(), "ListModels"));
  return host_->CheckNotMoved(request.tenant());
}

absl::Status OklService::AdmitFenceTenant(const ActiveCall& call,
                                          const v1::FenceTenantRequest& request,
                                          Admission* admission) {
  // It waits for the tenant's writes in flight: offloaded.
  OKL_RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
  return call.CheckGrant(Role::kAdmin, request.tenant(), "FenceTenant");
}

absl::Status OklService::AdmitGetModel(const ActiveCall& call, const v1::ModelRef& request,
                                       Admission* admission) {
  OKL_ASSIGN_OR_RETURN(admission->id, AdmitModelCall(call, request, Role::kRead, "GetModel"));
  OKL_ASSIGN_OR_RETURN(admission->model, host_->Find(*admission->id));
  admission->run_inline = !admission->model->entry().writing();
  return absl::OkStatus();
}

absl::Status OklService::AdmitPredict(const ActiveCall& call, const v1::PredictRequest& request,
                                      Admission* admission) {
  OKL_RETURN_IF_ERROR(CheckBatchSize(request.inputs_size(), "inputs"));
  // With remember it stores the inputs, a write; a small one is still predicted inline,
  // and its events written later, batched, when the queue's thread is idle
  // (server/rpc/remember_writer.h).
  const bool remember = request.has_remember();
  OKL_ASSIGN_OR_RETURN(
      admission->id,
      AdmitModelCall(call, request.ref(), remember ? Role::kWrite : Role::kRead, "Predict"));
  OKL_ASSIGN_OR_RETURN(admission->model, host_->Find(*admission->id));
  admission->run_inline = PredictWork(admission->model->entry(), request.inputs_size()) <=
                          static_cast<double>(options_.max_inline_work);
  return absl::OkStatus();
}

// --- Handlers --------------------------------------------------------------------------

absl::Status OklService::CreateModel(const ActiveCall&, Admission& admission,
                                     const v1::CreateModelRequest& request,
                                     v1::ModelInfo* response) {
  OKL_ASSIGN_OR_RETURN(ModelConfig config, FromProto(request.config()));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<HostedModel> model, host_->Create(*admission.id, config));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, model->entry().Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

absl::Status OklService::GetModel(const ActiveCall&, Admission& admission, const v1::ModelRef&,
                                  v1::ModelInfo* response) {
  // WithModel: the model found may have been replaced (Restore) since.
  absl::StatusOr<ModelSummary> summary;
  OKL_RETURN_IF_ERROR(host_->WithModel(*admission.id, &admission.model, [&](HostedModel& model) {
    summary = model.entry().Summary();
    return summary.status();
  }));
  *response = ToProto(*summary);
  AddEventCounts(admission.model->event_counts(), response->mutable_stats());
  return absl::OkStatus();
}

absl::Status OklService::ListModels(const ActiveCall& call, Admission&,
                                    const v1::ListModelsRequest& request,
                                    v1::ListModelsResponse* response) {
  for (const std::shared_ptr<HostedModel>& model : host_->List(request.tenant())) {
    if (!call.CanRead(model->entry().tenant())) continue;  // another tenant's
    absl::StatusOr<ModelSummary> summary = model->entry().Summary();
    if (!summary.ok()) continue;  // deleted since it was listed
    v1::ModelInfo* info = response->add_models();
    *info = ToProto(*summary);
    AddEventCounts(model->event_counts(), info->mutable_stats());
  }
  return absl::OkStatus();
}

absl::Status OklService::DeleteModel(const ActiveCall&, Admission& admission,
                                     const v1::ModelRef&, v1::DeleteModelResponse*) {
  return host_->Delete(*admission.id);
}

absl::Status OklService::FenceTenant(const ActiveCall&, Admission& admission,
                                     const v1::FenceTenantRequest& request,
                                     v1::FenceTenantResponse* response) {
  if (!request.fenced()) {
    if (request.delete_models()) {
      return absl::InvalidArgumentError(
          "delete_models needs fenced: a tenant's models are deleted only behind its fence");
    }
    host_->LiftFence(request.tenant());
    return absl::OkStatus();
  }
  const absl::Time deadline = absl::FromChrono(admission.context->deadline());
  if (request.delete_models()) {
    OKL_ASSIGN_OR_RETURN(std::vector<std::string> deleted,
                         host_->DropTenant(request.tenant(), deadline));
    for (std::string& model : deleted) response->add_models(std::move(model));
    return absl::OkStatus();
  }
  OKL_RETURN_IF_ERROR(host_->FenceWrites(request.tenant(), deadline));
  for (const std::shared_ptr<HostedModel>& model : host_->List(request.tenant())) {
    response->add_models(model->entry().model());
  }
  return absl::OkStatus();
}

namespace {

// A multi-class model's answer: each input's predicted class by name, its scores and, for
// softmax, their probabilities.
void AddClassPredictions(const BatchPrediction& answer, bool softmax,
                         v1::PredictResponse* response) {
  const size_t n = answer.predicted_classes.size();
  response->mutable_predicted_classes()->Reserve(static_cast<int>(n));
  std::vector<double> probabilities;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t c = answer.predicted_classes[i];
    response->add_predicted_classes(c == kNoClass ? "" : answer.classes[c]);
    const absl::Span<const double> scores = answer.ClassScoresOf(i);
    response->add_class_scores()->mutable_values()->Assign(scores.begin(), scores.end());
    if (!softmax) continue;
    v1::ClassScores* row = response->add_probabilities();
    if (scores.empty()) continue;
    probabilities.resize(scores.size());
    Softmax(scores, absl::MakeSpan(probabilities));
    row->mutable_values()->Assign(probabilities.begin(), probabilities.end());
  }
}

}  // namespace

absl::Status OklService::Predict(const ActiveCall&, Admission& admission,
                                 const v1::PredictRequest& request,
                                 v1::PredictResponse* response) {
  grpc::ServerContextBase* const context = admission.context;
  // Decoded with the config of the model found, before its lock is taken.
  DecodedRequest decoded;
  OKL_RETURN_IF_ERROR(
      decoded.Decode(request, admission.model->entry().config(), options_.max_request_bytes));
  BatchPrediction answer;
  OKL_RETURN_IF_ERROR(host_->WithModel(
      *admission.id, &admission.model, [&](HostedModel& hosted) -> absl::Status {
        const ModelEntry& model = hosted.entry();
        // Run again on a model that replaced the one found: decoded again if its layout
        // differs.
        if (!decoded.Fits(model.config())) {
          OKL_RETURN_IF_ERROR(
              decoded.Decode(request, model.config(), options_.max_request_bytes));
        }
        OKL_ASSIGN_OR_RETURN(answer, model.PredictAll(decoded.inputs(), [&](size_t predicted) {
          return CheckNotCancelled(context, absl::StrCat("after ", predicted, " of ",
                                                         request.inputs_size(), " inputs"));
        }));
        return absl::OkStatus();
      }));
  response->mutable_predictions()->Assign(answer.predictions.begin(), answer.predictions.end());
  response->mutable_variances()->Assign(answer.variances.begin(), answer.variances.end());
  response->mutable_novel()->Assign(answer.novel.begin(), answer.novel.end());
  if (const ModelConfig& config = admission.model->entry().config(); config.multiclass()) {
    AddClassPredictions(answer, config.loss.type == LossType::kSoftmax, response);
  }
  if (request.has_remember()) {
    OKL_RETURN_IF_ERROR(RememberPredicted(admission, request, decoded.inputs(), response));
  }
  if (metrics_ != nullptr) metrics_->RecordPredicted(request.inputs_size());
  return absl::OkStatus();
}

}  // namespace okl
