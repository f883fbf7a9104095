// client/client.cc
//
// okl::Client over the generated okl.v1 stub (ObserveWriter is in observe_writer.cc). Every
// conversion between the wire and core's types goes through proto/convert.h.

#include "client/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client_internal.h"
#include "core/runtime/file.h"
#include "core/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"

namespace okl {

namespace client_internal {

// The codes are the same numbers on both sides; the message is kept as it is.
absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// gRPC rejects metadata values outside printable ASCII; such a tenant is not a valid
// name anyway, and the server says so.
bool IsPrintableAscii(absl::string_view value) {
  return std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// The deadline, the tenant for routing and the credentials of one call.
void PrepareContext(const ClientOptions& options, absl::string_view tenant, absl::Time deadline,
                    grpc::ClientContext* context) {
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  if (!tenant.empty() && IsPrintableAscii(tenant)) {
    context->AddMetadata(kTenantMetadataKey, std::string(tenant));
  }
  if (!options.bearer_token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.bearer_token));
  }
}

absl::Duration Jittered(absl::Duration backoff) {
  thread_local absl::BitGen bitgen;
  return backoff * absl::Uniform(bitgen, 0.8, 1.2);
}

// How many of a failed call's messages were applied, when that is known: the number
// okl_server's trailers give when it refused the call (kBatchesAppliedMetadataKey), or 0
// for a call that the peer never processed: gRPC fails exactly the streams above the
// last stream id of a GOAWAY with "GOAWAY received", and HTTP/2 (RFC 9113, section 6.8)
// promises that the sender of the GOAWAY did not process those. A proxy's GOAWAY (nginx
// reloading after a tenant move) does that. -1 otherwise (a connection lost, an old
// server): anything may have been applied.
int64_t BatchesApplied(const grpc::ClientContext& context, const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      status.error_message() == "GOAWAY received") {
    return 0;
  }
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(kBatchesAppliedMetadataKey);
  int64_t applied = -1;
  if (it == trailers.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &applied) ||
      applied < 0) {
    return -1;
  }
  return applied;
}

std::vector<double> ToVector(const google::protobuf::RepeatedField<double>& values) {
  return std::vector<double>(values.begin(), values.end());
}

}  // namespace client_internal

using client_internal::BatchesApplied;
using client_internal::FromGrpcStatus;
using client_internal::IsPrintableAscii;
using client_internal::Jittered;
using client_internal::PrepareContext;
using client_internal::ToVector;

namespace {

enum class Retry {
  kNever,
  // Read-only calls: on UNAVAILABLE, up to ClientOptions::max_attempts in all.
  kOnUnavailable,
  // Writes: on an UNAVAILABLE whose trailers say nothing was applied (a tenant being
  // moved, a server starting or draining), until the deadline: a move takes as long as
  // its snapshots.
  kWhenNotApplied,
};

// Runs `attempt(context)` (which returns a grpc::Status) with a fresh context each time,
// all attempts under one deadline; repeats it on UNAVAILABLE if `retry` allows, with
// exponential backoff.
template <typename Attempt>
absl::Status Call(const ClientOptions& options, absl::string_view tenant, Retry retry,
                  Attempt attempt) {
  const absl::Time deadline = absl::Now() + options.deadline;
  const int max_attempts = retry == Retry::kOnUnavailable ? std::max(options.max_attempts, 1)
                           : retry == Retry::kNever      ? 1
                                                         : INT_MAX;
  absl::Duration backoff = options.initial_backoff;
  for (int attempts = 1;; ++attempts) {
    grpc::ClientContext context;
    PrepareContext(options, tenant, deadline, &context);
    const grpc::Status status = attempt(&context);
    if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempts >= max_attempts ||
        (retry == Retry::kWhenNotApplied && BatchesApplied(context, status) != 0)) {
      return FromGrpcStatus(status);
    }
    const absl::Duration sleep = Jittered(std::min(backoff, options.max_backoff));
    if (absl::Now() + sleep >= deadline) return FromGrpcStatus(status);
    absl::SleepFor(sleep);
    backoff = backoff * options.backoff_multiplier;
  }
}

// A ModelInfo the server sent. A config this client cannot read is the server's doing
// (a newer server, say), not the caller's: Internal, not InvalidArgument.
absl::StatusOr<ModelSummary> SummaryFromServer(const v1::ModelInfo& info) {
  absl::StatusOr<ModelSummary> summary = FromProto(info);
  if (!summary.ok()) {
    return absl::InternalError(absl::StrCat("the server sent a model the client cannot read: ",
                                            summary.status().message()));
  }
  return summary;
}

ModelEventCounts EventCountsFromServer(const v1::ModelStats& stats) {
  return {.pending = stats.events_pending(),
          .applied = stats.labels_applied(),
          .expired = stats.events_expired(),
          .duplicates = stats.labels_duplicate(),
          .served_loss = stats.served_loss(),
          .served_labels = stats.served_labels()};
}

// Appends `count` dense vectors of `dim` values from `values` to `vectors`.
void AppendDense(absl::Span<const double> values, size_t dim,
                 google::protobuf::RepeatedPtrField<v1::Vector>* vectors) {
  for (size_t offset = 0; offset < values.size(); offset += dim) {
    vectors->Add()->mutable_values()->Add(values.begin() + offset,
                                          values.begin() + offset + dim);
  }
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

}  // namespace

// --- Client ----------------------------------------------------------------------------

absl::StatusOr<Client> Client::Connect(absl::string_view address, ClientOptions options) {
  if (address.empty()) return absl::InvalidArgumentError("Connect: the address is empty");
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.deadline must be positive, got ",
                     absl::FormatDuration(options.deadline)));
  }
  if (!IsPrintableAscii(options.bearer_token) ||
      options.bearer_token.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError(
        "ClientOptions.bearer_token must be printable ASCII without spaces");
  }
  if (options.tls_cert_chain.empty() != options.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.tls_cert_chain and tls_private_key go together: set both or neither");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    ssl.pem_cert_chain = options.tls_cert_chain;
    ssl.pem_private_key = options.tls_private_key;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  if (credentials == nullptr) return absl::InvalidArgumentError("cannot make TLS credentials");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  const int max_reconnect_ms = static_cast<int>(
      std::max<int64_t>(absl::ToInt64Milliseconds(options.max_reconnect_backoff), 1));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_reconnect_ms);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(max_reconnect_ms, 100));
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(std::string(address), credentials, args);
  return Client(std::move(channel), std::move(options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : Client(channel, std::make_shared<const Stub>(channel), std::move(options)) {}

Client::Client(std::shared_ptr<grpc::Channel> channel, std::shared_ptr<const Stub> stub,
               ClientOptions options)
    : channel_(std::move(channel)), stub_(std::move(stub)), options_(std::move(options)) {}

Client Client::WithDeadline(absl::Duration deadline) const {
  ClientOptions options = options_;
  options.deadline = deadline;
  return Client(channel_, stub_, std::move(options));
}

absl::StatusOr<ModelSummary> Client::CreateModel(const ModelId& id,
                                                 const ModelConfig& config) const {
  v1::CreateModelRequest request;
  *request.mutable_ref() = ModelRefToProto(id.tenant, id.model);
  *request.mutable_config() = ToProto(config);
  v1::ModelInfo info;
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kNever, [&](grpc::ClientContext* context) {
        return stub_->okl->CreateModel(context, request, &info);
      }));
  return SummaryFromServer(info);
}

absl::StatusOr<ModelSummary> Client::GetModel(const ModelId& id,
                                              ModelEventCounts* events) const {
  const v1::ModelRef request = ModelRefToProto(id.tenant, id.model);
  v1::ModelInfo info;
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        info.Clear();
        return stub_->okl->GetModel(context, request, &info);
      }));
  if (events != nullptr) *events = EventCountsFromServer(info.stats());
  return SummaryFromServer(info);
}

absl::StatusOr<std::vector<ModelSummary>> Client::ListModels(
    absl::string_view tenant, std::vector<ModelEventCounts>* events) const {
  v1::ListModelsRequest request;
  request.set_tenant(std::string(tenant));
  v1::ListModelsResponse response;
  OKL_RETURN_IF_ERROR(
      Call(options_, tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        response.Clear();
        return stub_->okl->ListModels(context, request, &response);
      }));
  std::vector<ModelSummary> summaries;
  summaries.reserve(response.models_size());
  if (events != nullptr) events->clear();
  for (const v1::ModelInfo& info : response.models()) {
    OKL_ASSIGN_OR_RETURN(ModelSummary summary, SummaryFromServer(info));
    summaries.push_back(std::move(summary));
    if (events != nullptr) events->push_back(EventCountsFromServer(info.stats()));
  }
  return summaries;
}

absl::Status Client::DeleteModel(const ModelId& id) const {
  const v1::ModelRef request = ModelRefToProto(id.tenant, id.model);
  v1::DeleteModelResponse response;
  return Call(options_, id.tenant, Retry::kNever, [&](grpc::ClientContext* context) {
    return stub_->okl->DeleteModel(context, request, &response);
  });
}

absl::StatusOr<std::vector<std::string>> Client::FenceTenant(absl::string_view tenant,
                                                             bool fenced,
                                                             bool delete_models) const {
  v1::FenceTenantRequest request;
  request.set_tenant(std::string(tenant));
  request.set_fenced(fenced);
  request.set_delete_models(delete_models);
  v1::FenceTenantResponse response;
  OKL_RETURN_IF_ERROR(Call(options_, tenant, Retry::kNever, [&](grpc::ClientContext* context) {
    return stub_->okl->FenceTenant(context, request, &response);
  }));
  return std::vector<std::string>(response.models().begin(), response.models().end());
}

absl::StatusOr<ObserveResult> Client::Observe(const ModelId& id, absl::Span<const double> xs,
                                              absl::Span<const double> ys) const {
  if (ys.empty() ? !xs.empty() : xs.size() % ys.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Observe: xs has ", xs.size(),
                                                   " values, not a multiple of the ", ys.size(),
                                                   " labels in ys"));
  }
  v1::ObserveRequest request;
  *request.mutable_ref() = ModelRefToProto(id.tenant, id.model);
  if (!ys.empty()) {
    const size_t dim = xs.size() / ys.size();
    request.mutable_examples()->Reserve(static_cast<int>(ys.size()));
    for (size_t i = 0; i < ys.size(); ++i) {
      v1::Example* example = request.add_examples();
      example->mutable_x()->mutable_values()->Add(xs.begin() + i * dim,
                                                  xs.begin() + (i + 1) * dim);
      example->set_y(ys[i]);
    }
  }
  v1::ObserveResponse response;
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kWhenNotApplied, [&](grpc::ClientContext* context) {
        return stub_->okl->Observe(context, request, &response);
      }));
  if (static_cast<size_t>(response.predictions_size()) != ys.size() ||
      static_cast<size_t>(response.losses_size()) != ys.size()) {
    return absl::InternalError(absl::StrCat(
        "Observe: the server answered ", response.predictions_size(), " predictions and ",
        response.losses_size(), " losses for ", ys.size(), " examples"));
  }
  ObserveResult result;
  result.predictions = ToVector(response.predictions());
  result.losses = ToVector(response.losses());
  result.steps = response.steps();
  result.expansion_size = response.expansion_size();
  return result;
}

namespace {

// Predict's and PredictRemembering's call: the request for xs, with `remember` if not
// null, checked and sent with `retry`; the response holds one prediction per input, and
// as many variances or none.
absl::StatusOr<v1::PredictResponse> CallPredict(const ClientOptions& options,
                                                v1::OnlineKernelLearning::Stub& stub,
                                                absl::string_view method, const ModelId& id,
                                                absl::Span<const double> xs, uint32_t dim,
                                                const v1::Remember* remember, Retry retry) {
  if (dim == 0 || xs.size() % dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, ": xs has ", xs.size(), " values, not a multiple of dim ", dim));
  }
  v1::PredictRequest request;
  *request.mutable_ref() = ModelRefToProto(id.tenant, id.model);
  AppendDense(xs, dim, request.mutable_inputs());
  if (remember != nullptr) *request.mutable_remember() = *remember;
  v1::PredictResponse response;
  OKL_RETURN_IF_ERROR(Call(options, id.tenant, retry, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub.Predict(context, request, &response);
  }));
  if (static_cast<size_t>(response.predictions_size()) != xs.size() / dim) {
    return absl::InternalError(absl::StrCat(method, ": the server answered ",
                                            response.predictions_size(), " predictions for ",
                                            xs.size() / dim, " inputs"));
  }
  if (response.variances_size() != 0 &&
      response.variances_size() != response.predictions_size()) {
    return absl::InternalError(absl::StrCat(method, ": the server answered ",
                                            response.variances_size(), " variances for ",
                                            response.predictions_size(), " predictions"));
  }
  return response;
}

}  // namespace

absl::StatusOr<std::vector<double>> Client::Predict(const ModelId& id,
                                                    absl::Span<const double> xs, uint32_t dim,
                                                    std::vector<bool>* novel,
                                                    std::vector<double>* variances,
                                                    ClassPredictions* classes) const {
  OKL_ASSIGN_OR_RETURN(const v1::PredictResponse response,
                       CallPredict(options_, *stub_->okl, "Predict", id, xs, dim,
                                   /*remember=*/nullptr, Retry::kOnUnavailable));
  if (novel != nullptr) {
    if (response.novel_size() != 0 && response.novel_size() != response.predictions_size()) {
      return absl::InternalError(absl::StrCat("Predict: the server answered ",
                                              response.novel_size(), " novelty flags for ",
                                              response.predictions_size(), " predictions"));
    }
    novel->assign(response.novel().begin(), response.novel().end());
  }
  if (variances != nullptr) *variances = ToVector(response.variances());
  if (classes != nullptr) {
    const int n = response.predictions_size();
    if ((response.predicted_classes_size() != 0 && response.predicted_classes_size() != n) ||
        response.class_scores_size() != response.predicted_classes_size() ||
        (response.probabilities_size() != 0 && response.probabilities_size() != n)) {
      return absl::InternalError(absl::StrCat(
          "Predict: the server answered ", response.predicted_classes_size(), " classes, ",
          response.class_scores_size(), " score rows and ", response.probabilities_size(),
          " probability rows for ", n, " predictions"));
    }
    classes->predicted_classes.assign(response.predicted_classes().begin(),
                                      response.predicted_classes().end());
    classes->class_scores.clear();
    for (const v1::ClassScores& row : response.class_scores()) {
      classes->class_scores.push_back(ToVector(row.values()));
    }
    classes->probabilities.clear();
    for (const v1::ClassScores& row : response.probabilities()) {
      classes->probabilities.push_back(ToVector(row.values()));
    }
  }
  return ToVector(response.predictions());
}

absl::StatusOr<RememberedPredictions> Client::PredictRemembering(
    const ModelId& id, absl::Span<const double> xs, uint32_t dim,
    const RememberOptions& options) const {
  const size_t inputs = dim == 0 ? 0 : xs.size() / dim;
  if (!options.event_ids.empty() && options.event_ids.size() != inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("PredictRemembering: ", options.event_ids.size(), " event ids for ",
                     inputs, " inputs: give one per input, or none (the server makes them)"));
  }
  if (options.wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PredictRemembering: the wait must not be negative, got ",
                     absl::FormatDuration(options.wait)));
  }
  if (options.default_label.has_value() && !std::isfinite(*options.default_label)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PredictRemembering: the default label must be finite, got ", *options.default_label));
  }
  v1::Remember remember;
  remember.mutable_event_ids()->Assign(options.event_ids.begin(), options.event_ids.end());
  remember.set_wait_seconds(absl::ToDoubleSeconds(options.wait));
  if (options.default_label.has_value()) remember.set_default_label(*options.default_label);
  OKL_ASSIGN_OR_RETURN(v1::PredictResponse response,
                       CallPredict(options_, *stub_->okl, "PredictRemembering", id, xs, dim,
                                   &remember, Retry::kWhenNotApplied));
  if (response.event_ids_size() != response.predictions_size()) {
    return absl::InternalError(absl::StrCat("PredictRemembering: the server answered ",
                                            response.event_ids_size(), " event ids for ",
                                            response.predictions_size(), " predictions"));
  }
  RememberedPredictions result;
  result.predictions = ToVector(response.predictions());
  result.variances = ToVector(response.variances());
  result.event_ids.assign(std::make_move_iterator(response.mutable_event_ids()->begin()),
                          std::make_move_iterator(response.mutable_event_ids()->end()));
  return result;
}

absl::string_view LabelOutcomeName(LabelOutcome outcome) {
  switch (outcome) {
    case LabelOutcome::kApplied:
      return "applied";
    case LabelOutcome::kDuplicate:
      return "duplicate";
    case LabelOutcome::kUnknown:
      return "unknown";
  }
  return "unknown";
}

absl::StatusOr<LabelResult> Client::Label(const ModelId& id,
                                          absl::Span<const EventLabel> labels) const {
  v1::LabelRequest request;
  *request.mutable_ref() = ModelRefToProto(id.tenant, id.model);
  request.mutable_labels()->Reserve(static_cast<int>(labels.size()));
  for (const EventLabel& label : labels) {
    v1::EventLabel* wire = request.add_labels();
    wire->set_event_id(label.event_id);
    wire->set_y(label.y);
  }
  v1::LabelResponse response;
  // A repeated label is a duplicate, so a retry applies nothing twice.
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        response.Clear();
        return stub_->okl->Label(context, request, &response);
      }));
  if (static_cast<size_t>(response.outcomes_size()) != labels.size()) {
    return absl::InternalError(absl::StrCat("Label: the server answered ",
                                            response.outcomes_size(), " outcomes for ",
                                            labels.size(), " labels"));
  }
  LabelResult result;
  result.outcomes.reserve(labels.size());
  for (const int outcome : response.outcomes()) {
    switch (outcome) {
      case v1::LABEL_APPLIED:
        result.outcomes.push_back(LabelOutcome::kApplied);
        break;
      case v1::LABEL_DUPLICATE:
        result.outcomes.push_back(LabelOutcome::kDuplicate);
        break;
      case v1::LABEL_UNKNOWN:
        result.outcomes.push_back(LabelOutcome::kUnknown);
        break;
      default:
        return absl::InternalError(
            absl::StrCat("Label: the server answered an unknown outcome ", outcome));
    }
  }
  const auto applied = static_cast<int>(
      std::count(result.outcomes.begin(), result.outcomes.end(), LabelOutcome::kApplied));
  if (response.predictions_size() != applied || response.losses_size() != applied) {
    return absl::InternalError(absl::StrCat(
        "Label: the server answered ", response.predictions_size(), " predictions and ",
        response.losses_size(), " losses for ", applied, " applied labels"));
  }
  result.predictions = ToVector(response.predictions());
  result.losses = ToVector(response.losses());
  result.steps = response.steps();
  return result;
}

namespace {

// Reads Snapshot's chunks into `sink`; `restart` is called before every attempt.
template <typename Restart, typename Sink>
absl::Status ReadSnapshot(const ClientOptions& options, v1::OnlineKernelLearning::Stub& stub,
                          const ModelId& id, Restart restart, Sink sink) {
  const v1::ModelRef request = ModelRefToProto(id.tenant, id.model);
  absl::Status sink_status;
  absl::Status status =
      Call(options, id.tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        sink_status = restart();
        if (!sink_status.ok()) return grpc::Status(grpc::StatusCode::CANCELLED, "");
        std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader =
            stub.Snapshot(context, request);
        v1::SnapshotChunk chunk;
        while (reader->Read(&chunk)) {
          sink_status = sink(chunk.data());
          if (!sink_status.ok()) {
            context->TryCancel();
            break;
          }
        }
        return reader->Finish();
      });
  // A local failure wins over the cancellation it caused.
  return sink_status.ok() ? status : sink_status;
}

}  // namespace

absl::StatusOr<std::string> Client::Snapshot(const ModelId& id) const {
  std::string bytes;
  OKL_RETURN_IF_ERROR(ReadSnapshot(
      options_, *stub_->okl, id,
      [&] {
        bytes.clear();
        return absl::OkStatus();
      },
      [&](absl::string_view data) {
        bytes.append(data.data(), data.size());
        return absl::OkStatus();
      }));
  return bytes;
}

absl::Status Client::SnapshotToFile(const ModelId& id, const std::string& path) const {
  AtomicFile file(path);
  OKL_RETURN_IF_ERROR(file.Open());
  OKL_RETURN_IF_ERROR(ReadSnapshot(
      options_, *stub_->okl, id, [&] { return file.Truncate(); },
      [&](absl::string_view data) { return file.Append(data); }));
  return file.Commit();
}

namespace {

// Restore's call: `next(&data)` fills the next chunk's data and returns whether it is the
// last one. Every chunk it fills is sent, so even empty bytes reach the server (and get its
// DATA_LOSS). The first chunk declares `total_bytes`, so the server checks the size before
// it reads the rest.
template <typename Next>
absl::StatusOr<ModelSummary> WriteRestore(const ClientOptions& options,
                                          v1::OnlineKernelLearning::Stub& stub,
                                          const ModelId& id, uint64_t total_bytes, Next next) {
  v1::ModelInfo info;
  absl::Status source_status;
  absl::Status status =
      Call(options, id.tenant, Retry::kNever, [&](grpc::ClientContext* context) {
        std::unique_ptr<grpc::ClientWriter<v1::RestoreChunk>> writer =
            stub.Restore(context, &info);
        v1::RestoreChunk chunk;
        *chunk.mutable_ref() = ModelRefToProto(id.tenant, id.model);
        chunk.set_snapshot_bytes(total_bytes);
        for (;;) {
          absl::StatusOr<bool> last = next(chunk.mutable_data());
          if (!last.ok()) {
            source_status = last.status();
            context->TryCancel();  // nothing may be installed from part of the bytes
            break;
          }
          if (!writer->Write(chunk)) break;  // the server ended the call: Finish says why
          if (*last) break;
          chunk.clear_ref();
          chunk.clear_snapshot_bytes();
        }
        if (source_status.ok()) writer->WritesDone();
        return writer->Finish();
      });
  if (!source_status.ok()) return source_status;
  OKL_RETURN_IF_ERROR(status);
  return SummaryFromServer(info);
}

}  // namespace

absl::StatusOr<ModelSummary> Client::Restore(const ModelId& id,
                                             absl::string_view snapshot) const {
  size_t offset = 0;
  return WriteRestore(
      options_, *stub_->okl, id, snapshot.size(), [&](std::string* data) -> absl::StatusOr<bool> {
        const size_t size = std::min(kSnapshotChunkBytes, snapshot.size() - offset);
        data->assign(snapshot.data() + offset, size);
        offset += size;
        return offset == snapshot.size();
      });
}

absl::StatusOr<ModelSummary> Client::RestoreFromFile(const ModelId& id,
                                                     const std::string& path) const {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat file_stat;
  // A size the file no longer has when read makes the server refuse the stream.
  const uint64_t size = ::fstat(fd, &file_stat) == 0 && S_ISREG(file_stat.st_mode)
                            ? static_cast<uint64_t>(file_stat.st_size)
                            : 0;
  absl::StatusOr<ModelSummary> summary = WriteRestore(
      options_, *stub_->okl, id, size, [&](std::string* data) -> absl::StatusOr<bool> {
        data->resize(kSnapshotChunkBytes);
        size_t filled = 0;
        while (filled < data->size()) {
          const ssize_t n = ::read(fd, data->data() + filled, data->size() - filled);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return ErrnoError("cannot read", path);
          if (n == 0) break;
          filled += static_cast<size_t>(n);
        }
        data->resize(filled);
        return filled < kSnapshotChunkBytes;  // a short read is the end of the file
      });
  ::close(fd);
  return summary;
}

absl::StatusOr<bool> Client::Health(absl::string_view service) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::health::v1::HealthCheckResponse response;
  OKL_RETURN_IF_ERROR(
      Call(options_, /*tenant=*/"", Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        return stub_->health->Check(context, request, &response);
      }));
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<std::unique_ptr<ObserveWriter>> Client::OpenObserveWriter(
    const ModelId& id, WriterOptions options) const {
  if (options.batch_size == 0 || options.batches_per_stream == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriterOptions: batch_size (", options.batch_size, ") and batches_per_stream (",
        options.batches_per_stream, ") must be at least 1"));
  }
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, GetModel(id));
  return std::unique_ptr<ObserveWriter>(new ObserveWriter(
      *this, id, std::move(options), summary.config.dim, summary.stats.steps));
}

}  // namespace okl
