// client/observe_writer.cc
//
// okl::ObserveWriter: examples batched into ObserveStream messages, the streams reopened
// and the refused messages sent again under the client library's retry rules.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/client_internal.h"
#include "core/status_macros.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"

namespace okl {

using client_internal::BatchesApplied;
using client_internal::FromGrpcStatus;
using client_internal::Jittered;
using client_internal::PrepareContext;
using client_internal::ToVector;

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
  return AddExample(x, y, "");
}

absl::Status ObserveWriter::AddClass(absl::Span<const double> x,
                                     absl::string_view class_label) {
  return AddExample(x, 0.0, class_label);
}

absl::Status ObserveWriter::AddExample(absl::Span<const double> x, double y,
                                       absl::string_view class_label) {
  if (x.size() != dim_) {
    return absl::InvalidArgumentError(absl::StrCat("ObserveWriter::Add: x has ", x.size(),
                                                   " values but the model's dim is ", dim_));
  }
  if (!status_.ok()) return status_;
  if (closed_) return absl::FailedPreconditionError("ObserveWriter::Add after Close");
  return Append(x, y, class_label);
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

absl::Status ObserveWriter::Append(absl::Span<const double> x, double y,
                                   absl::string_view class_label) {
  // Cleared messages stay allocated in the repeated field and are reused here.
  v1::Example* example = state_->batch.add_examples();
  // The writer checked x's size against the model's dim, which the dense form would
  // have let the server check: the smaller form is safe here.
  ToCompactVector(x, example->mutable_x());
  example->set_y(y);
  example->set_class_label(std::string(class_label));
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
    const absl::Duration sleep =
        Jittered(std::min(state.backoff, client_.options_.max_backoff));
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
  if (count != answered ||
      static_cast<uint64_t>(response.losses_size()) + omitted != answered) {
    return Fail(absl::InternalError(
        absl::StrCat("ObserveWriter: the server acknowledged ", response.predictions_size(),
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
    ack.predicted_classes.assign(response.predicted_classes().begin(),
                                 response.predicted_classes().end());
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
