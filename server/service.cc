// server/service.cc

#include "server/service.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/norma.h"
#include "core/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "proto/convert.h"
#include "server/status.h"

namespace okl {
namespace {

// A request that found an entry which a Restore then replaced gets NotFound from it;
// it looks the model up again, at most this many times in all.
constexpr int kMaxLookups = 3;

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

// The index of ObserveStream among the service's methods, as the generated code numbers
// them (declaration order in okl.proto).
int ObserveStreamMethodIndex() {
  return v1::ObserveRequest::descriptor()
      ->file()
      ->FindServiceByName("OnlineKernelLearning")
      ->FindMethodByName("ObserveStream")
      ->index();
}

}  // namespace

// Counts one okl call in flight for its lifetime and checks, once counted, that the
// service is serving.
class OklService::ActiveCall {
 public:
  explicit ActiveCall(const OklService* service) : service_(service) {
    service_->calls_in_flight_.fetch_add(1);
    status_ = service_->CheckServing();
  }
  ~ActiveCall() { service_->calls_in_flight_.fetch_sub(1); }

  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

  // UNAVAILABLE if the service is starting or draining.
  const absl::Status& status() const { return status_; }

 private:
  const OklService* const service_;
  absl::Status status_;
};

// The state of one Observe call or ObserveStream: the model it is bound to (found with
// the first message), the reusable dense batch, and the response accumulated so far.
// Each Apply() is one batch with Observe's rules. Not thread-safe; one per call.
class OklService::ObserveSession {
 public:
  ObserveSession(const OklService* service, bool stream, v1::ObserveResponse* response)
      : service_(service), stream_(stream), response_(response) {}

  absl::Status Apply(const v1::ObserveRequest& request) {
    ++messages_;
    absl::Status status = ApplyBatch(request);
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
    OKL_RETURN_IF_ERROR(service_->CheckBatchSize(request.examples_size(), "examples"));
    for (int lookup = 1;; ++lookup) {
      if (entry_ == nullptr) {
        OKL_ASSIGN_OR_RETURN(entry_, service_->registry_->Find(ref_.tenant(), ref_.model()));
      }
      OKL_RETURN_IF_ERROR(FromProto(request, entry_->config().dim, &batch_));
      observations_.clear();
      absl::Status status =
          entry_->ObserveBatch(batch_.xs, batch_.ys, &observations_, &stats_after_);
      service_->RecordObserved(observations_);
      if (status.code() == absl::StatusCode::kNotFound && lookup < kMaxLookups) {
        entry_.reset();  // deleted or replaced since it was found: look again
        continue;
      }
      OKL_RETURN_IF_ERROR(status);
      break;
    }
    AppendToProto(observations_, response_);
    response_->set_steps(stats_after_.steps);
    response_->set_expansion_size(stats_after_.expansion_size);
    return absl::OkStatus();
  }

  const OklService* const service_;
  const bool stream_;
  v1::ObserveResponse* const response_;
  size_t messages_ = 0;
  v1::ModelRef ref_;
  std::shared_ptr<ModelEntry> entry_;
  ExampleBatch batch_;
  std::vector<Observation> observations_;
  ModelStats stats_after_;  // the model's, right after this call's latest batch
};

// ObserveStream on the callback API: each message's batch runs in OnReadDone, on the
// thread gRPC delivers it on; the reactor deletes itself when the call is done.
class OklService::ObserveStreamReactor final
    : public grpc::ServerReadReactor<v1::ObserveRequest> {
 public:
  ObserveStreamReactor(const OklService* service, v1::ObserveResponse* response)
      : call_(service), session_(service, /*stream=*/true, response) {
    if (!call_.status().ok()) {
      Finish(ToGrpcStatus(call_.status()));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call was cancelled)
      Finish(ToGrpcStatus(session_.Finish()));
      return;
    }
    if (absl::Status status = session_.Apply(request_); !status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ActiveCall call_;  // until OnDone: the call is in flight until its status is sent
  ObserveSession session_;
  v1::ObserveRequest request_;
};

OklService::OklService(ModelRegistry* registry, Options options)
    : registry_(registry), options_(options) {
  if (options_.observe_stream_api == StreamApi::kCallback) {
    // What the generated WithCallbackMethod_ObserveStream mixin does, chosen at run time.
    MarkMethodCallback(
        ObserveStreamMethodIndex(),
        new grpc::internal::CallbackClientStreamingHandler<v1::ObserveRequest,
                                                           v1::ObserveResponse>(
            [this](grpc::CallbackServerContext* context, v1::ObserveResponse* response) {
              return ObserveStreamCallback(context, response);
            }));
  }
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

absl::Status OklService::CheckLimits(const ModelConfig& config) const {
  if (config.dim > options_.max_dim) {
    return absl::InvalidArgumentError(absl::StrCat("config.dim ", config.dim,
                                                   " is over this server's limit of ",
                                                   options_.max_dim, " (--max_dim)"));
  }
  if (config.budget.max_terms == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.budget.max_terms is 0 (unbounded), but this server needs a budget: set it to "
        "1 to ",
        options_.max_terms, " (--max_terms)"));
  }
  if (config.budget.max_terms > options_.max_terms) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.budget.max_terms ", config.budget.max_terms,
                     " is over this server's limit of ", options_.max_terms, " (--max_terms)"));
  }
  return absl::OkStatus();
}

// --- Handlers: count the call in, convert in, call core, convert out. ----------------

grpc::Status OklService::CreateModel(grpc::ServerContext* context,
                                     const v1::CreateModelRequest* request,
                                     v1::ModelInfo* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoCreateModel(*request, response));
}

absl::Status OklService::DoCreateModel(const v1::CreateModelRequest& request,
                                       v1::ModelInfo* response) {
  OKL_RETURN_IF_ERROR(ValidateRef(request.ref()));
  OKL_ASSIGN_OR_RETURN(ModelConfig config, FromProto(request.config()));
  OKL_RETURN_IF_ERROR(CheckLimits(config));
  ModelRegistry::JournalFactory make_journal;
  if (store_ != nullptr) {
    // Under the registry's lock: the config is durable before the model exists.
    make_journal = [&](const ModelEntry*) -> absl::StatusOr<std::shared_ptr<ModelJournal>> {
      return store_->CreateModel(request.ref().tenant(), request.ref().model(), config);
    };
  }
  OKL_ASSIGN_OR_RETURN(
      std::shared_ptr<ModelEntry> entry,
      registry_->Create(request.ref().tenant(), request.ref().model(), config, make_journal));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

grpc::Status OklService::GetModel(grpc::ServerContext* context, const v1::ModelRef* request,
                                  v1::ModelInfo* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoGetModel(*request, response));
}

absl::Status OklService::DoGetModel(const v1::ModelRef& request,
                                    v1::ModelInfo* response) const {
  OKL_RETURN_IF_ERROR(ValidateRef(request));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                       registry_->Find(request.tenant(), request.model()));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

grpc::Status OklService::ListModels(grpc::ServerContext* context,
                                    const v1::ListModelsRequest* request,
                                    v1::ListModelsResponse* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoListModels(*request, response));
}

absl::Status OklService::DoListModels(const v1::ListModelsRequest& request,
                                      v1::ListModelsResponse* response) const {
  if (!request.tenant().empty()) OKL_RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
  for (const std::shared_ptr<ModelEntry>& entry : registry_->List(request.tenant())) {
    absl::StatusOr<ModelSummary> summary = entry->Summary();
    if (!summary.ok()) continue;  // deleted since it was listed
    *response->add_models() = ToProto(*summary);
  }
  return absl::OkStatus();
}

grpc::Status OklService::DeleteModel(grpc::ServerContext* context, const v1::ModelRef* request,
                                     v1::DeleteModelResponse* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  absl::Status status = ValidateRef(*request);
  ModelRegistry::DeleteHook before_delete;
  if (store_ != nullptr) {
    before_delete = [this](const ModelEntry& entry) -> absl::Status {
      auto* log = dynamic_cast<ModelLog*>(entry.journal().get());
      return log == nullptr ? absl::OkStatus() : store_->DeleteModel(log);
    };
  }
  if (status.ok()) {
    status = registry_->Delete(request->tenant(), request->model(), before_delete);
  }
  return ToGrpcStatus(status);
}

grpc::Status OklService::Observe(grpc::ServerContext* context,
                                 const v1::ObserveRequest* request,
                                 v1::ObserveResponse* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(ObserveSession(this, /*stream=*/false, response).Apply(*request));
}

grpc::Status OklService::ObserveStream(grpc::ServerContext* context,
                                       grpc::ServerReader<v1::ObserveRequest>* reader,
                                       v1::ObserveResponse* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  ObserveSession session(this, /*stream=*/true, response);
  v1::ObserveRequest request;
  while (reader->Read(&request)) {
    if (absl::Status status = session.Apply(request); !status.ok()) {
      return ToGrpcStatus(status);
    }
  }
  return ToGrpcStatus(session.Finish());
}

grpc::ServerReadReactor<v1::ObserveRequest>* OklService::ObserveStreamCallback(
    grpc::CallbackServerContext* context, v1::ObserveResponse* response) {
  return new ObserveStreamReactor(this, response);
}

grpc::Status OklService::Predict(grpc::ServerContext* context,
                                 const v1::PredictRequest* request,
                                 v1::PredictResponse* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoPredict(*request, response));
}

void OklService::RecordObserved(const std::vector<Observation>& observations) const {
  if (metrics_ == nullptr || observations.empty()) return;
  double loss_sum = 0;
  for (const Observation& o : observations) loss_sum += o.loss;
  metrics_->RecordObserved(observations.size(), loss_sum);
}

absl::Status OklService::DoPredict(const v1::PredictRequest& request,
                                   v1::PredictResponse* response) const {
  OKL_RETURN_IF_ERROR(CheckBatchSize(request.inputs_size(), "inputs"));
  OKL_RETURN_IF_ERROR(ValidateRef(request.ref()));
  std::vector<double> xs;
  auto* predictions = response->mutable_predictions();
  predictions->Resize(request.inputs_size(), 0.0);
  absl::Status status;
  for (int lookup = 1; lookup <= kMaxLookups; ++lookup) {
    OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                         registry_->Find(request.ref().tenant(), request.ref().model()));
    OKL_RETURN_IF_ERROR(FromProto(request, entry->config().dim, &xs));
    status = entry->PredictBatch(
        xs, absl::MakeSpan(predictions->mutable_data(), predictions->size()));
    if (status.code() != absl::StatusCode::kNotFound) break;
  }
  if (status.ok() && metrics_ != nullptr) metrics_->RecordPredicted(request.inputs_size());
  return status;
}

grpc::Status OklService::Snapshot(grpc::ServerContext* context, const v1::ModelRef* request,
                                  grpc::ServerWriter<v1::SnapshotChunk>* writer) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoSnapshot(context, *request, writer));
}

absl::Status OklService::DoSnapshot(grpc::ServerContext* context, const v1::ModelRef& request,
                                    grpc::ServerWriter<v1::SnapshotChunk>* writer) const {
  OKL_RETURN_IF_ERROR(ValidateRef(request));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry,
                       registry_->Find(request.tenant(), request.model()));
  OKL_ASSIGN_OR_RETURN(ModelState state, entry->ExportState());
  OKL_ASSIGN_OR_RETURN(const std::string bytes, EncodeSnapshot(state));
  state = ModelState();  // the bytes hold it all now
  v1::SnapshotChunk chunk;
  for (size_t offset = 0; offset < bytes.size(); offset += kSnapshotChunkBytes) {
    chunk.set_data(bytes.substr(offset, kSnapshotChunkBytes));
    if (!writer->Write(chunk)) {
      return absl::CancelledError("the client stopped reading the snapshot");
    }
  }
  return absl::OkStatus();
}

grpc::Status OklService::Restore(grpc::ServerContext* context,
                                 grpc::ServerReader<v1::RestoreChunk>* reader,
                                 v1::ModelInfo* response) {
  const ActiveCall call(this);
  if (!call.status().ok()) return ToGrpcStatus(call.status());
  return ToGrpcStatus(DoRestore(context, reader, response));
}

absl::Status OklService::DoRestore(grpc::ServerContext* context,
                                   grpc::ServerReader<v1::RestoreChunk>* reader,
                                   v1::ModelInfo* response) {
  v1::ModelRef ref;
  std::string bytes;
  v1::RestoreChunk chunk;
  size_t chunks = 0;
  while (reader->Read(&chunk)) {
    ++chunks;
    if (chunks == 1) {
      OKL_RETURN_IF_ERROR(WithPrefix("the first RestoreChunk: ", ValidateRef(chunk.ref())));
      ref = chunk.ref();
    } else if (!IsEmpty(chunk.ref()) && !SameRef(chunk.ref(), ref)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RestoreChunk ", chunks, " names ", Describe(chunk.ref()), " but the first named ",
          Describe(ref), "; leave ref empty after the first chunk"));
    }
    if (chunk.data().size() > kMaxSnapshotBytes - bytes.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the snapshot exceeds ", kMaxSnapshotBytes,
                       " bytes, the most a Restore takes (protobuf's message limit)"));
    }
    bytes.append(chunk.data());
  }
  if (context->IsCancelled()) return absl::CancelledError("Restore cancelled by the client");
  if (chunks == 0) {
    return absl::InvalidArgumentError(
        "Restore received no chunks: the first must carry ref, and all of them the data of "
        "one Snapshot");
  }
  OKL_ASSIGN_OR_RETURN(ModelState state, DecodeSnapshot(bytes));
  bytes = std::string();
  OKL_RETURN_IF_ERROR(WithPrefix("snapshot: ", CheckLimits(state.config)));
  absl::StatusOr<std::unique_ptr<NormaModel>> norma = NormaModel::FromState(state);
  if (!norma.ok()) {
    return absl::DataLossError(
        absl::StrCat("snapshot state is inconsistent: ", norma.status().message()));
  }
  ModelRegistry::JournalFactory make_journal;
  if (store_ != nullptr) {
    // Under the registry's lock: the new checkpoint replaces the old model's config,
    // checkpoint and log in one atomic write before the new entry is visible.
    make_journal =
        [&](const ModelEntry* replaced) -> absl::StatusOr<std::shared_ptr<ModelJournal>> {
      ModelLog* old =
          replaced == nullptr ? nullptr : dynamic_cast<ModelLog*>(replaced->journal().get());
      return store_->ReplaceModel(ref.tenant(), ref.model(), state, old);
    };
  }
  OKL_ASSIGN_OR_RETURN(
      std::shared_ptr<ModelEntry> entry,
      registry_->Put(ref.tenant(), ref.model(), *std::move(norma), make_journal));
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, entry->Summary());
  *response = ToProto(summary);
  return absl::OkStatus();
}

}  // namespace okl
