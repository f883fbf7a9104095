// server/rpc/service_observe.cc
//
// Observe and ObserveStream: each batch checked whole, then applied to its model in
// groups, durable before it is acknowledged.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/norma.h"
#include "core/status_macros.h"
#include "proto/inputs.h"
#include "server/rpc/service.h"
#include "server/rpc/service_internal.h"
#include "server/rpc/status.h"

namespace okl {

using service_internal::CheckNotCancelled;
using service_internal::Describe;
using service_internal::IdOf;
using service_internal::IsEmpty;
using service_internal::Names;
using service_internal::WithPrefix;

namespace {

// Observe applies a large request in groups of about this much kernel work (terms x dim
// per example) and checks for cancellation between them; a typical batch is one group.
constexpr double kObserveChunkWork = 1 << 26;

}  // namespace

// The state of one Observe call or ObserveStream: the model it is bound to (found with
// the first message), the reusable decoded batch, and the response accumulated so far.
// Each message is admitted (Admit, or the unary call's admission and Bind), then applied
// (Apply) with Observe's rules. Not thread-safe; one per call.
class OklService::ObserveSession {
 public:
  ObserveSession(OklService* service, grpc::ServerContextBase* context, bool stream,
                 v1::ObserveResponse* response)
      : service_(service), context_(context), stream_(stream), response_(response) {}

  // Checks a stream's next message before its batch is applied, on the queue's thread
  // that read it: its ref (the first message's binds the stream to its model), the
  // caller's write grant and its tenant's request rate, and the batch's size.
  absl::Status Admit(const ActiveCall& call, const v1::ObserveRequest& request) {
    ++messages_;
    return Prefixed(AdmitMessage(call, request));
  }

  // Binds a unary call to the model its admission found (it admitted its one message).
  void Bind(ModelKey id, std::shared_ptr<HostedModel> model) {
    ++messages_;
    id_ = std::move(id);
    model_ = std::move(model);
  }

  // Applies the admitted message's batch, and accounts it in the response.
  absl::Status Apply(const v1::ObserveRequest& request) {
    absl::Status status = Prefixed(ApplyBatch(request));
    if (status.ok()) ++applied_;
    return status;
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
    AddAppliedTrailer(status);
    return ToGrpcStatus(status);
  }
  void AddAppliedTrailer(const absl::Status& status) const {
    if (status.code() == absl::StatusCode::kUnavailable && !WriteOutcomeUnknown(status)) {
      context_->AddTrailingMetadata(kBatchesAppliedMetadataKey, absl::StrCat(applied_));
    }
  }

 private:
  absl::Status Prefixed(const absl::Status& status) const {
    if (!stream_) return status;
    return WithPrefix(absl::StrCat("ObserveStream message ", messages_, ": "), status);
  }

  absl::Status AdmitMessage(const ActiveCall& call, const v1::ObserveRequest& request) {
    if (!id_.has_value()) {
      OKL_ASSIGN_OR_RETURN(id_, IdOf(request.ref()));
    } else if (!IsEmpty(request.ref()) && !Names(request.ref(), *id_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ref names ", Describe(request.ref()), " but the stream is bound to ",
                       id_->Describe(), "; leave ref empty after the first message"));
    }
    return service_->AdmitObserveBatch(call, *id_, request, "ObserveStream");
  }

  absl::Status ApplyBatch(const v1::ObserveRequest& request) {
    OKL_RETURN_IF_ERROR(CheckNotCancelled(context_, "before applying the batch"));
    if (model_ == nullptr) {
      OKL_ASSIGN_OR_RETURN(model_, service_->host_->Find(*id_));
    }
    // Decoded with the config of the model found, before its lock is taken.
    OKL_RETURN_IF_ERROR(
        decoded_.Decode(request, model_->entry().config(), service_->options_.max_request_bytes));
    OKL_RETURN_IF_ERROR(service_->host_->WithModelForWrite(
        *id_, &model_, [&](HostedModel& model) { return ApplyTo(model.entry(), request); }));
    // A unary Observe is bounded by --max_batch; a stream's response by this.
    const uint64_t cap = stream_ ? service_->options_.max_response_predictions : UINT64_MAX;
    const size_t room = cap - std::min<uint64_t>(response_->predictions_size(), cap);
    const size_t returned = std::min(room, observations_.size());
    AppendToProto(absl::MakeConstSpan(observations_).first(returned), response_);
    // Only a multi-class model has classes, and it has one after any applied example.
    if (!stats_after_.classes.empty()) {
      AppendClassesToProto(absl::MakeConstSpan(observations_).first(returned),
                           stats_after_.classes, response_);
    }
    response_->set_predictions_omitted(response_->predictions_omitted() +
                                       (observations_.size() - returned));
    response_->set_steps(stats_after_.steps);
    response_->set_expansion_size(stats_after_.expansion_size);
    return absl::OkStatus();
  }

  // Validates the whole batch, then applies it in groups, stopping between groups if the
  // call was cancelled. NotFound only while nothing was applied (WithModel retries it).
  absl::Status ApplyTo(ModelEntry& entry, const v1::ObserveRequest& request) {
    if (!decoded_.Fits(entry.config())) {  // a model of another layout replaced it
      OKL_RETURN_IF_ERROR(
          decoded_.Decode(request, entry.config(), service_->options_.max_request_bytes));
    }
    // Validated once, against this model; its groups apply unchecked.
    OKL_ASSIGN_OR_RETURN(const ValidatedBatch batch,
                         entry.Validate(decoded_.inputs(), decoded_.ys(),
                                        decoded_.class_labels()));
    const size_t n = batch.size();
    const double work = WorstCaseWorkPerExample(entry.config());
    const size_t group =
        std::clamp<size_t>(static_cast<size_t>(kObserveChunkWork / work), 1, n);
    observations_.clear();
    for (size_t begin = 0; begin < n; begin += group) {
      const size_t count = std::min(group, n - begin);
      if (begin > 0) {
        OKL_RETURN_IF_ERROR(CheckNotCancelled(
            context_,
            absl::StrCat("after ", begin, " of the batch's ", n, " examples were applied")));
      }
      absl::Status status =
          entry.ObserveBatch(batch.Subrange(begin, count), &observations_, &stats_after_);
      service_->RecordObserved(
          absl::MakeConstSpan(observations_).subspan(std::min(begin, observations_.size())));
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
      return absl::AbortedError(
          absl::StrCat("only ", begin, " of the batch's ", n,
                       " examples were applied (in order), then: ", status.message()));
    }
    return absl::OkStatus();
  }

  OklService* const service_;
  grpc::ServerContextBase* const context_;
  const bool stream_;
  v1::ObserveResponse* const response_;
  size_t messages_ = 0;
  size_t applied_ = 0;                 // messages applied in full
  std::optional<ModelKey> id_;         // the model the call is bound to
  std::shared_ptr<HostedModel> model_;  // and that model, once found
  DecodedRequest decoded_;
  std::vector<Observation> observations_;
  ModelStats stats_after_;  // the model's, right after this call's latest batch
};

absl::Status OklService::AdmitObserveBatch(const ActiveCall& call, const ModelKey& id,
                                           const v1::ObserveRequest& request,
                                           absl::string_view method) {
  OKL_RETURN_IF_ERROR(call.Authorize(Role::kWrite, id.tenant(), method));
  return CheckBatchSize(request.examples_size(), "examples");
}

absl::Status OklService::AdmitObserve(const ActiveCall& call, const v1::ObserveRequest& request,
                                      Admission* admission) {
  // It writes to the store: offloaded.
  OKL_ASSIGN_OR_RETURN(admission->id, IdOf(request.ref()));
  OKL_RETURN_IF_ERROR(AdmitObserveBatch(call, *admission->id, request, "Observe"));
  OKL_ASSIGN_OR_RETURN(admission->model, host_->Find(*admission->id));
  return absl::OkStatus();
}

absl::Status OklService::Observe(const ActiveCall&, Admission& admission,
                                 const v1::ObserveRequest& request,
                                 v1::ObserveResponse* response) {
  ObserveSession session(this, admission.context, /*stream=*/false, response);
  session.Bind(*std::move(admission.id), std::move(admission.model));
  // A refusal at admission got Refusal's trailer; this is the one after it.
  absl::Status status = session.Apply(request);
  session.AddAppliedTrailer(status);
  return status;
}

// ObserveStream: each message is admitted on the queue's thread as it is read, its batch
// applied on the offload pool, and the next read starts once it is applied, so batches
// apply in order.
class OklService::ObserveStreamCall final : public StreamCall {
 public:
  explicit ObserveStreamCall(OklService* service)
      : StreamCall(service), session_(service, context(), /*stream=*/true, &response_) {}

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call was cancelled)
      Finish(ToGrpcStatus(session_.Finish()), &response_);
      return;
    }
    absl::Status status = TakeMessage(&request_);
    if (status.ok()) status = session_.Admit(call(), request_);
    if (!status.ok()) {
      Finish(session_.Status(status));
      return;
    }
    // The batch writes to the store: off the queue's thread.
    service_->offload_pool_.Schedule([this] {
      if (absl::Status status = session_.Apply(request_); !status.ok()) {
        Finish(session_.Status(status));
        return;
      }
      StartRead();
    });
  }

  ObserveSession session_;
  v1::ObserveRequest request_;
  v1::ObserveResponse response_;
};

AsyncCall* OklService::NewObserveStreamCall() { return new ObserveStreamCall(this); }

}  // namespace okl
