// client/client.cc
//
// okl::Client and okl::ObserveWriter over the generated okl.v1 stub. Every conversion
// between the wire and core's types goes through proto/convert.h.

#include "client/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

class Client::Stub {
 public:
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : okl(v1::OnlineKernelLearning::NewStub(channel)),
        health(grpc::health::v1::Health::NewStub(channel)) {}

  // Generated stubs are thread-safe; their methods are merely not const.
  const std::unique_ptr<v1::OnlineKernelLearning::Stub> okl;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

namespace {

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

// Appends `count` dense vectors of `dim` values from `values` to `vectors`.
void AppendDense(absl::Span<const double> values, size_t dim,
                 google::protobuf::RepeatedPtrField<v1::Vector>* vectors) {
  for (size_t offset = 0; offset < values.size(); offset += dim) {
    vectors->Add()->mutable_values()->Add(values.begin() + offset,
                                          values.begin() + offset + dim);
  }
}

std::vector<double> ToVector(const google::protobuf::RepeatedField<double>& values) {
  return std::vector<double>(values.begin(), values.end());
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

absl::StatusOr<ModelSummary> Client::GetModel(const ModelId& id) const {
  const v1::ModelRef request = ModelRefToProto(id.tenant, id.model);
  v1::ModelInfo info;
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        info.Clear();
        return stub_->okl->GetModel(context, request, &info);
      }));
  return SummaryFromServer(info);
}

absl::StatusOr<std::vector<ModelSummary>> Client::ListModels(absl::string_view tenant) const {
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
  for (const v1::ModelInfo& info : response.models()) {
    OKL_ASSIGN_OR_RETURN(ModelSummary summary, SummaryFromServer(info));
    summaries.push_back(std::move(summary));
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

absl::StatusOr<std::vector<double>> Client::Predict(const ModelId& id,
                                                    absl::Span<const double> xs, uint32_t dim,
                                                    std::vector<bool>* novel,
                                                    std::vector<double>* variances) const {
  if (dim == 0 || xs.size() % dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Predict: xs has ", xs.size(), " values, not a multiple of dim ", dim));
  }
  v1::PredictRequest request;
  *request.mutable_ref() = ModelRefToProto(id.tenant, id.model);
  AppendDense(xs, dim, request.mutable_inputs());
  v1::PredictResponse response;
  OKL_RETURN_IF_ERROR(
      Call(options_, id.tenant, Retry::kOnUnavailable, [&](grpc::ClientContext* context) {
        response.Clear();
        return stub_->okl->Predict(context, request, &response);
      }));
  if (static_cast<size_t>(response.predictions_size()) != xs.size() / dim) {
    return absl::InternalError(absl::StrCat("Predict: the server answered ",
                                            response.predictions_size(), " predictions for ",
                                            xs.size() / dim, " inputs"));
  }
  if (novel != nullptr) {
    if (response.novel_size() != 0 && response.novel_size() != response.predictions_size()) {
      return absl::InternalError(absl::StrCat("Predict: the server answered ",
                                              response.novel_size(), " novelty flags for ",
                                              response.predictions_size(), " predictions"));
    }
    novel->assign(response.novel().begin(), response.novel().end());
  }
  if (variances != nullptr) {
    if (response.variances_size() != 0 &&
        response.variances_size() != response.predictions_size()) {
      return absl::InternalError(absl::StrCat("Predict: the server answered ",
                                              response.variances_size(), " variances for ",
                                              response.predictions_size(), " predictions"));
    }
    *variances = ToVector(response.variances());
  }
  return ToVector(response.predictions());
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

// --- ObserveWriter ---------------------------------------------------------------------

struct ObserveWriter::State {
  v1::ObserveRequest batch;  // the pending examples: the next message
  // The open stream (writer null when none).
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer;
  v1::ObserveResponse response;
  absl::Time opened;
  uint64_t first = 0;  // the writer's index of the stream's first example
  uint64_t count = 0;  // examples written to the stream
  // The messages written to the stream, kept until acknowledged so that those a server
  // refused can be sent again; then cleared and kept as spares (their allocations are
  // reused by later batches).
  std::vector<v1::ObserveRequest> unacknowledged;
  std::vector<v1::ObserveRequest> spares;
  // Since when streams have been refused in a row (InfinitePast: none is), and the next
  // backoff.
  absl::Time refused_since = absl::InfinitePast();
  absl::Duration backoff;
};

ObserveWriter::ObserveWriter(Client client, ModelId id, WriterOptions options, uint32_t dim,
                             uint64_t steps_at_open)
    : client_(std::move(client)),
      id_(std::move(id)),
      options_(std::move(options)),
      dim_(dim),
      steps_at_open_(steps_at_open),
      state_(std::make_unique<State>()) {}

ObserveWriter::~ObserveWriter() {
  if (!closed_) (void)Close();
}

absl::Status ObserveWriter::Add(absl::Span<const double> x, double y) {
  if (x.size() != dim_) {
    return absl::InvalidArgumentError(absl::StrCat("ObserveWriter::Add: x has ", x.size(),
                                                   " values but the model's dim is ", dim_));
  }
  if (!status_.ok()) return status_;
  if (closed_) return absl::FailedPreconditionError("ObserveWriter::Add after Close");
  return Append(x, y);
}

absl::Status ObserveWriter::Add(absl::Span<const double> xs, absl::Span<const double> ys) {
  if (xs.size() != ys.size() * dim_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ObserveWriter::Add: xs has ", xs.size(), " values but ", ys.size(),
                     " examples of the model's dim ", dim_, " need ", ys.size() * dim_));
  }
  if (!status_.ok()) return status_;
  if (closed_) return absl::FailedPreconditionError("ObserveWriter::Add after Close");
  for (size_t i = 0; i < ys.size(); ++i) {
    OKL_RETURN_IF_ERROR(Append(xs.subspan(i * dim_, dim_), ys[i]));
  }
  return absl::OkStatus();
}

absl::Status ObserveWriter::Append(absl::Span<const double> x, double y) {
  // Cleared messages stay allocated in the repeated field and are reused here.
  v1::Example* example = state_->batch.add_examples();
  // The writer checked x's size against the model's dim, which the dense form would
  // have let the server check: the smaller form is safe here.
  ToCompactVector(x, example->mutable_x());
  example->set_y(y);
  ++added_;
  if (static_cast<size_t>(state_->batch.examples_size()) < options_.batch_size) {
    return absl::OkStatus();
  }
  return SendBatch();
}

absl::Status ObserveWriter::SendBatch() {
  State& state = *state_;
  const size_t size = state.batch.examples_size();
  if (size == 0) return absl::OkStatus();
  // A stream lives at most the client's deadline: one that has used half of it is closed
  // (and acknowledged) now, so that it does not expire while a slow producer fills it.
  if (state.writer != nullptr && absl::Now() - state.opened > client_.options_.deadline / 2) {
    OKL_RETURN_IF_ERROR(FinishStream());
  }
  if (state.writer == nullptr) {
    OpenStream();
    state.first = sent_;
  }
  state.unacknowledged.push_back(std::move(state.batch));
  state.batch = v1::ObserveRequest();
  if (!state.spares.empty()) {
    state.batch = std::move(state.spares.back());
    state.spares.pop_back();
  }
  const bool written = WriteMessage(state.unacknowledged.size() - 1);
  sent_ += size;
  state.count += size;
  // A failed Write means the stream is over; Finish (in FinishStream) says why.
  if (!written || state.unacknowledged.size() >= options_.batches_per_stream) {
    return FinishStream();
  }
  return absl::OkStatus();
}

void ObserveWriter::OpenStream() {
  State& state = *state_;
  state.context = std::make_unique<grpc::ClientContext>();
  state.opened = absl::Now();
  PrepareContext(client_.options_, id_.tenant, state.opened + client_.options_.deadline,
                 state.context.get());
  state.response.Clear();
  state.writer = client_.stub_->okl->ObserveStream(state.context.get(), &state.response);
}

bool ObserveWriter::WriteMessage(size_t index) {
  State& state = *state_;
  v1::ObserveRequest& message = state.unacknowledged[index];
  // The stream's first message names the model.
  if (index == 0) *message.mutable_ref() = ModelRefToProto(id_.tenant, id_.model);
  const bool written = state.writer->Write(message);
  message.clear_ref();
  return written;
}

absl::Status ObserveWriter::FinishStream() {
  State& state = *state_;
  while (state.writer != nullptr) {
    state.writer->WritesDone();
    const grpc::Status finished = state.writer->Finish();
    const int64_t refused_at = finished.ok() ? -1 : BatchesApplied(*state.context, finished);
    state.writer.reset();
    state.context.reset();
    absl::Status status = FromGrpcStatus(finished);
    if (finished.ok()) {
      // The server answers for the messages it applied. Fewer than were written means
      // the stream was cut short on its way (a proxy, a retry below gRPC's API): the
      // rest were not applied, and go again like a refused stream's.
      OKL_RETURN_IF_ERROR(AcknowledgeAnswered());
      if (state.unacknowledged.empty()) {
        state.refused_since = absl::InfinitePast();
        return absl::OkStatus();
      }
      status = absl::UnavailableError("the server answered for part of the stream only");
    } else if (status.code() != absl::StatusCode::kUnavailable || refused_at < 0 ||
               static_cast<size_t>(refused_at) > state.unacknowledged.size()) {
      return Fail(absl::Status(
          status.code(),
          absl::StrCat(status.message(), " [ObserveWriter: the failed stream carried examples ",
                       state.first, " to ", state.first + state.count - 1,
                       ", of which any prefix may be applied; ", acknowledged_,
                       " are acknowledged; AppliedSinceOpen() tells]")));
    } else {
      // The server refused the stream's message `refused_at` (a tenant being moved, a
      // server starting or draining) and applied none after it, or a proxy never passed
      // the stream on: acknowledge the ones before, and send the rest again on a new
      // stream, which the router sends where the tenant is now.
      AcknowledgeRefusedPrefix(static_cast<size_t>(refused_at));
      if (state.unacknowledged.empty()) return absl::OkStatus();
    }
    ++streams_refused_;
    const absl::Time now = absl::Now();
    if (state.refused_since == absl::InfinitePast()) {
      state.refused_since = now;
      state.backoff = client_.options_.initial_backoff;
    }
    const absl::Duration sleep = Jittered(std::min(state.backoff, client_.options_.max_backoff));
    if (now + sleep > state.refused_since + client_.options_.deadline) {
      return Fail(absl::Status(
          status.code(),
          absl::StrCat(status.message(), " [ObserveWriter: examples ", state.first, " to ",
                       state.first + state.count - 1,
                       " were refused, and not applied, for longer than the deadline; ",
                       acknowledged_, " are acknowledged]")));
    }
    absl::SleepFor(sleep);
    state.backoff = state.backoff * client_.options_.backoff_multiplier;
    OpenStream();
    for (size_t i = 0; i < state.unacknowledged.size(); ++i) {
      if (!WriteMessage(i)) break;  // over already: Finish says why
    }
  }
  return absl::OkStatus();
}

absl::Status ObserveWriter::AcknowledgeAnswered() {
  State& state = *state_;
  const v1::ObserveResponse& response = state.response;
  const uint64_t omitted = response.predictions_omitted();
  const uint64_t answered = static_cast<uint64_t>(response.predictions_size()) + omitted;
  // The messages the answer covers: a prefix of those written.
  size_t messages = 0;
  uint64_t count = 0;
  while (messages < state.unacknowledged.size() && count < answered) {
    count += state.unacknowledged[messages++].examples_size();
  }
  if (count != answered || static_cast<uint64_t>(response.losses_size()) + omitted != answered) {
    return Fail(absl::InternalError(absl::StrCat(
        "ObserveWriter: the server acknowledged ", response.predictions_size(),
        " predictions and ", response.losses_size(), " losses (", omitted,
        " omitted) for a stream of ", state.count, " examples in ",
        state.unacknowledged.size(), " messages")));
  }
  const uint64_t first = state.first;
  RecycleUnacknowledged(messages);
  acknowledged_ += count;
  state.first += count;
  state.count -= count;
  if (options_.on_ack && count > 0) {
    AckedBatch ack;
    ack.first = first;
    ack.count = count;
    ack.predictions = ToVector(response.predictions());
    ack.losses = ToVector(response.losses());
    ack.steps = response.steps();
    ack.expansion_size = response.expansion_size();
    options_.on_ack(ack);
  }
  return absl::OkStatus();
}

void ObserveWriter::AcknowledgeRefusedPrefix(size_t messages) {
  State& state = *state_;
  uint64_t count = 0;
  for (size_t i = 0; i < messages; ++i) count += state.unacknowledged[i].examples_size();
  RecycleUnacknowledged(messages);
  if (count == 0) return;
  AckedBatch ack;  // a refused stream carries no predictions for them
  ack.first = state.first;
  ack.count = count;
  acknowledged_ += count;
  state.first += count;
  state.count -= count;
  if (options_.on_ack) options_.on_ack(ack);
}

void ObserveWriter::RecycleUnacknowledged(size_t messages) {
  State& state = *state_;
  for (size_t i = 0; i < messages; ++i) {
    state.unacknowledged[i].Clear();
    state.spares.push_back(std::move(state.unacknowledged[i]));
  }
  state.unacknowledged.erase(state.unacknowledged.begin(),
                             state.unacknowledged.begin() + static_cast<ptrdiff_t>(messages));
}

absl::Status ObserveWriter::Fail(absl::Status status) {
  status_ = status;
  State& state = *state_;
  if (state.writer != nullptr) {  // a stream is still open: end it, applying no more
    state.context->TryCancel();
    (void)state.writer->Finish();
    state.writer.reset();
    state.context.reset();
  }
  state.batch.Clear();
  return status;
}

absl::Status ObserveWriter::Flush() {
  if (!status_.ok()) return status_;
  if (closed_) return absl::FailedPreconditionError("ObserveWriter::Flush after Close");
  OKL_RETURN_IF_ERROR(SendBatch());
  return FinishStream();
}

absl::Status ObserveWriter::Close() {
  if (!closed_) {
    if (status_.ok()) (void)Flush();  // a failure lands in status_
    closed_ = true;
  }
  return status_;
}

absl::StatusOr<uint64_t> ObserveWriter::AppliedSinceOpen() const {
  OKL_ASSIGN_OR_RETURN(ModelSummary summary, client_.GetModel(id_));
  if (summary.stats.steps < steps_at_open_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model has ", summary.stats.steps, " steps, fewer than the ",
                     steps_at_open_, " it had when the writer opened: it was replaced"));
  }
  return summary.stats.steps - steps_at_open_;
}

}  // namespace okl
