// client/client.h
//
// okl::Client is the C++ client of okl_server (service okl.v1.OnlineKernelLearning in
// proto/okl/v1/okl.proto): one method per RPC, plain C++ types in and out (core's
// ModelConfig and ModelSummary, absl::Span inputs, std::vector results), and
// absl::Status errors that carry the server's code and message unchanged (INVALID_ARGUMENT,
// NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, UNAVAILABLE,
// DATA_LOSS, ...; see the proto). No method throws.
//
// Every call has a deadline (ClientOptions::deadline, 30 s by default, covering the
// call's retries too; WithDeadline() makes a client with another one). Calls that only
// read are retried when the server answers UNAVAILABLE (it is starting, draining, or
// unreachable), with exponential backoff: GetModel, ListModels, Predict, Snapshot and
// Health, and Label (the first label of an event wins, so a repeated Label changes
// nothing). Calls that change a model are never retried, since a lost answer does not tell
// whether the change happened: Observe, PredictRemembering, CreateModel, DeleteModel,
// Restore and the ObserveWriter's streams (except when the server said it applied nothing:
// see Observe). Their caller decides (see ObserveWriter for resuming a stream).
//
// Routing: every call about a tenant's model carries the metadata `x-okl-tenant: <tenant>`
// (kTenantMetadataKey), and ListModels its tenant filter when it has one, so that a proxy
// in front of several servers (Envoy's ring hash on that header) can send a tenant's
// calls to the server that holds its models. Health carries none.
//
// A Client is a cheap handle: it may be copied (copies share the channel) and is
// thread-safe; any number of threads may call it at once. An ObserveWriter is not
// thread-safe (see below).
//
// Example:
//   // `address` is okl_server's host:port, e.g. "127.0.0.1:50051".
//   OKL_ASSIGN_OR_RETURN(okl::Client client, okl::Client::Connect(address));
//   const okl::ModelId id = {.tenant = "demo", .model = "sine"};
//   OKL_ASSIGN_OR_RETURN(okl::ModelConfig config, okl::ParseModelConfigText(R"pb(
//     dim: 1
//     kernel { gaussian { gamma: 10 } }
//     loss { squared {} }
//     learning_rate { eta0: 0.5 }
//     lambda: 0.001
//     budget { max_terms: 200 }
//   )pb"));
//   OKL_RETURN_IF_ERROR(client.CreateModel(id, config).status());
//
//   const std::vector<double> xs = {0.0, 0.5, 1.0, 1.5, 2.0};  // five inputs of dim 1
//   const std::vector<double> ys = {0.0, 0.479, 0.841, 0.997, 0.909};
//   OKL_ASSIGN_OR_RETURN(okl::ObserveResult observed, client.Observe(id, xs, ys));
//   // observed.predictions[t] is the model's prediction for input t before learning it.
//
//   // High-rate ingestion: examples go out in batches on streams; each stream's examples
//   // are acknowledged together once the server applied them.
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ObserveWriter> writer,
//                        client.OpenObserveWriter(id, {.batch_size = 256}));
//   for (int i = 0; i < 3000; ++i) {
//     const double x = std::fmod(i * 0.618034, 3.0);  // spread over [0, 3)
//     OKL_RETURN_IF_ERROR(writer->Add({x}, std::sin(x)));
//   }
//   OKL_RETURN_IF_ERROR(writer->Close());
//
//   OKL_ASSIGN_OR_RETURN(std::vector<double> predictions,
//                        client.Predict(id, {0.25, 1.25}, /*dim=*/1));
//   OKL_RETURN_IF_ERROR(client.SnapshotToFile(id, "/tmp/sine.okl"));
//
//   // Delayed feedback: predict now and keep the input under an event id; learn from it
//   // when its label arrives (exactly once: a second label of the event is a duplicate).
//   OKL_ASSIGN_OR_RETURN(okl::RememberedPredictions served,
//                        client.PredictRemembering(id, {0.75}, /*dim=*/1, {}));
//   OKL_ASSIGN_OR_RETURN(okl::LabelResult labelled,
//                        client.Label(id, {{served.event_ids[0], 0.682}}));
//   // labelled.outcomes[0] is okl::LabelOutcome::kApplied.
#ifndef OKL_CLIENT_CLIENT_H_
#define OKL_CLIENT_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/model_interface.h"
#include "core/config.h"
#include "core/model.h"
#include "grpcpp/channel.h"
#include "proto/label_outcome.h"

namespace okl {

// The metadata key that carries a call's tenant, for proxies that route by tenant.
inline constexpr char kTenantMetadataKey[] = "x-okl-tenant";

struct ClientOptions {
  // The deadline of every call, counted from its start; it bounds the call's retries
  // and backoff too. For an ObserveWriter, the deadline of each of its streams.
  absl::Duration deadline = absl::Seconds(30);

  // Retries of the read-only calls (GetModel, ListModels, Predict, Snapshot, Health) and
  // of Label on UNAVAILABLE: at most max_attempts attempts in all (1: no retry; less than
  // 1 means 1), sleeping initial_backoff before the second, then multiplied by
  // backoff_multiplier each time up to max_backoff, each sleep jittered by +-20% so that
  // many clients do not retry in step. A sleep that would end past the deadline is not taken:
  // the call returns the last UNAVAILABLE instead.
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  double backoff_multiplier = 2.0;
  absl::Duration max_backoff = absl::Seconds(1);

  // Non-empty: every call carries the metadata `authorization: Bearer <bearer_token>`.
  // Over a channel without TLS the token travels in clear text; use it so only on
  // loopback or a trusted network.
  std::string bearer_token = "";

  // Connect() only (a Client built over a given channel ignores these).
  // TLS: when use_tls, the channel is encrypted and the server authenticated against
  // tls_root_certs (PEM; empty: gRPC's default roots). tls_cert_chain and
  // tls_private_key (PEM, both or neither) authenticate the client (mutual TLS).
  bool use_tls = false;
  std::string tls_root_certs = "";
  std::string tls_cert_chain = "";
  std::string tls_private_key = "";
  // The largest message the client receives. A stream's ObserveResponse holds 16 bytes
  // per example (WriterOptions), a Snapshot chunk 1 MiB.
  int max_receive_message_bytes = 64 << 20;
  // The longest the channel waits before reconnecting after it lost the server (gRPC's
  // own default grows to 120 s): short, so that a retried call reaches a restarted
  // server soon.
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
};

// One acknowledgement of an ObserveWriter: `count` consecutive examples, starting at the
// writer's example `first` (0-based, in the order they were added), are applied and
// durable. predictions[i] and losses[i] belong to example first + i.
struct AckedBatch {
  uint64_t first = 0;
  uint64_t count = 0;
  // Prequential, as ObserveResult's, for the first count examples, or for the first
  // okl_server --max_response_predictions (100,000) of them if the stream was longer.
  std::vector<double> predictions;
  std::vector<double> losses;
  // A multi-class model's prequential predicted classes, as the predictions ("" for an
  // example that came before any class); empty for the other models.
  std::vector<std::string> predicted_classes;
  uint64_t steps = 0;           // the model's step count after example first + count - 1
  uint32_t expansion_size = 0;  // stored terms then
  // A stream the server refused part-way (its tenant being moved, see ObserveWriter)
  // acknowledges the messages applied before the refusal without their predictions,
  // losses, steps and expansion_size, which a refusal does not carry: those are empty
  // and 0 then.
};

struct WriterOptions {
  // Examples per ObserveStream message: 1 to the server's --max_batch (10000 by default).
  size_t batch_size = 256;
  // Messages per stream: the writer closes a stream (and so has its examples
  // acknowledged) after this many, and on Flush() and Close(). The acknowledgement holds
  // 16 bytes per example, which must fit ClientOptions::max_receive_message_bytes; the
  // server returns them for at most its --max_response_predictions examples a stream.
  size_t batches_per_stream = 64;
  // Called once per acknowledged stream, in order, on the thread that called the
  // writer's Add(), Flush() or Close() (which runs it before returning). May be empty.
  std::function<void(const AckedBatch&)> on_ack = nullptr;
};

// Delayed feedback (docs/delayed-feedback.md): what a Predict remembers, for
// Client::PredictRemembering.
struct RememberOptions {
  // One per input, in order: 1 to 128 bytes of [A-Za-z0-9._:-], new to the model
  // (ALREADY_EXISTS otherwise). Empty: the server makes them (33 to 48 hexadecimal digits).
  std::vector<std::string> event_ids = {};
  // How long a label is awaited. Zero: the server's default (10 minutes); at most its
  // --max_label_wait (7 days unless set).
  absl::Duration wait = absl::ZeroDuration();
  // Learned (as an Observe) for an event whose wait ends without a label; unset: such an
  // event is dropped. The server checks it against the model's loss.
  std::optional<double> default_label = std::nullopt;
};

// The answer of Client::PredictRemembering: per input, in order, the prediction served
// and the event id it is remembered under.
// A multi-class model's answer beside its predictions: per input the predicted class
// ("" before the model knew any), the score of each class in the order of
// ModelStats::classes, and for the softmax loss each class's probability (no rows for the
// other losses).
struct ClassPredictions {
  std::vector<std::string> predicted_classes;
  std::vector<std::vector<double>> class_scores;
  std::vector<std::vector<double>> probabilities;
};

struct RememberedPredictions {
  std::vector<double> predictions;
  std::vector<std::string> event_ids;
  // A multi-class model's classes and scores (Predict's `classes`; empty for the other
  // kinds, and for remembered predictions, which a multi-class model does not make).
  ClassPredictions classes;
  // A KRLS tracker's predictive variances (as Predict's), empty for the other kinds.
  std::vector<double> variances;
};

// A label for a remembered event.
struct EventLabel {
  std::string event_id;
  double y = 0;
};

// "applied", "duplicate" or "unknown".
absl::string_view LabelOutcomeName(LabelOutcome outcome);

// The answer of Client::Label.
struct LabelResult {
  std::vector<LabelOutcome> outcomes;  // one per label, in order
  // Per applied label, in order, as Observe's: the prequential prediction (before the
  // label's update) and its loss.
  std::vector<double> predictions;
  std::vector<double> losses;
  uint64_t steps = 0;  // the model's step count after the labels
};

class ObserveWriter;

// A model's delayed-feedback counts, as GetModel reports them
// (docs/delayed-feedback.md): events remembered and awaiting a label, labels applied,
// waits that ended without one, labels for events labelled before, and the loss of the
// predictions served, summed over the applied labels.
struct ModelEventCounts {
  uint64_t pending = 0;
  uint64_t applied = 0;
  uint64_t expired = 0;
  uint64_t duplicates = 0;
  double served_loss = 0;
  uint64_t served_labels = 0;

  friend bool operator==(const ModelEventCounts&, const ModelEventCounts&) = default;
};

class Client {
 public:
  // A client over a new channel to `address` ("host:port", or any gRPC target), with
  // insecure credentials unless options.use_tls. The channel connects lazily: an
  // unreachable server shows as UNAVAILABLE on the first call. InvalidArgument for an
  // empty address, a deadline that is not positive, or a bearer token or TLS key pair
  // that cannot be used.
  static absl::StatusOr<Client> Connect(absl::string_view address, ClientOptions options = {});

  // A client over `channel` (e.g. one with interceptors, or a server's in-process
  // channel). options' Connect-only fields are ignored.
  explicit Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});

  // A copy whose calls have `deadline` instead (it shares the channel).
  Client WithDeadline(absl::Duration deadline) const;

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const ClientOptions& options() const { return options_; }

  // --- One method per RPC ---------------------------------------------------------------

  // Creates a model; its summary (steps 0). ALREADY_EXISTS if `id` names a model;
  // INVALID_ARGUMENT for a bad name or a config the server cannot run (over its
  // --max_dim or --max_terms, or without a budget).
  absl::StatusOr<ModelSummary> CreateModel(const ModelId& id, const ModelConfig& config) const;

  // The model's configuration and live statistics. Retried. The wire carries steps,
  // expansion_size, cumulative_loss, mistakes, truncation_error_bound (absent when 0) and
  // the regret: stats.regret is set once the server computed it (window = the examples
  // it covers, last_step = the step it was computed at; steps - last_step is its lag).
  // Not on the wire, and so 0: stats.offset, stats.margin, stats.terms_removed and
  // memory_bytes.
  // With `events`, also the model's delayed-feedback counts (zeros for a model that
  // never remembered an event).
  absl::StatusOr<ModelSummary> GetModel(const ModelId& id,
                                        ModelEventCounts* events = nullptr) const;

  // The models of `tenant` (every tenant's the caller may see if empty), ordered by
  // (tenant, model); each as GetModel's. Retried. With `events`, also each model's
  // delayed-feedback counts, in the same order.
  absl::StatusOr<std::vector<ModelSummary>> ListModels(
      absl::string_view tenant = "", std::vector<ModelEventCounts>* events = nullptr) const;

  // Deletes the model and its stored state. NOT_FOUND if absent.
  absl::Status DeleteModel(const ModelId& id) const;

  // Applies ys.size() examples in order, one NORMA step each; xs holds them
  // example-major (ys.size() inputs of the model's dim). One request: at most the
  // server's --max_batch examples (use an ObserveWriter for more). The server validates
  // the batch whole (INVALID_ARGUMENT, nothing applied); InvalidArgument here already if
  // xs.size() is not a multiple of ys.size(). Retried, until the deadline, only when the
  // server refused it with UNAVAILABLE and says it applied nothing (okl-batches-applied:
  // 0; a tenant being moved, a server starting or draining; or "GOAWAY received" from a
  // proxy that never passed it on). After any other UNAVAILABLE or
  // DEADLINE_EXCEEDED the examples may or may not have been applied (GetModel's steps
  // tell).
  absl::StatusOr<ObserveResult> Observe(const ModelId& id, absl::Span<const double> xs,
                                        absl::Span<const double> ys) const;

  // Predictions for the inputs of xs, `dim` values each (the model's dimension), in
  // order, with the model's configured hypothesis (averaged if config.averaged: the wire
  // has no per-call mode). Retried. InvalidArgument here if dim is 0 or does not divide
  // xs.size(); the server checks dim against the model. If `novel` is not null, it
  // receives, for a novelty model, the server's decision f(x) < rho per input (with the
  // rho of the model that made the predictions), and is emptied for any other model. If
  // `variances` is not null, it receives, for a KRLS tracker, the predictive variance of
  // each prediction, and is emptied for any other model. If `classes` is not null, it
  // receives a multi-class model's classes and scores (each prediction is then its
  // predicted class's score), and is emptied for any other model.
  absl::StatusOr<std::vector<double>> Predict(const ModelId& id, absl::Span<const double> xs,
                                              uint32_t dim, std::vector<bool>* novel = nullptr,
                                              std::vector<double>* variances = nullptr,
                                              ClassPredictions* classes = nullptr) const;

  // Predict, and the server keeps each input and its prediction under an event id until
  // a Label for it arrives or its wait ends (delayed feedback: docs/delayed-feedback.md).
  // The events are durable when it returns. Needs the write role. One request: at most the
  // server's --max_batch inputs. InvalidArgument here if dim is 0 or does not divide
  // xs.size(), if options.event_ids is neither empty nor one per input, or for a negative
  // wait or a default label that is not finite. The server refuses the whole request
  // (nothing remembered) for an id that is invalid, repeated or known to the model
  // (ALREADY_EXISTS), or past --max_pending_events (RESOURCE_EXHAUSTED). Retried as
  // Observe is: only when the server said it applied nothing; after any other
  // UNAVAILABLE or DEADLINE_EXCEEDED the events may or may not exist (a Label of their ids
  // tells: UNKNOWN or not).
  absl::StatusOr<RememberedPredictions> PredictRemembering(
      const ModelId& id, absl::Span<const double> xs, uint32_t dim,
      const RememberOptions& options) const;

  // Labels remembered events (PredictRemembering): each label applied to an event is
  // exactly Observe(its input, y) now; the applied labels of one call are one Observe
  // batch, in order. The first label of an event wins: a later one, or a repeat within
  // the call, is kDuplicate; an event unknown to the model, or whose wait ended, is
  // kUnknown. The server validates the labels whole (INVALID_ARGUMENT for a y that is not
  // finite or that the loss refuses: nothing applied). At most the server's --max_batch
  // labels a call. Retried on UNAVAILABLE like the reads: a repeated label is a duplicate,
  // so a retry changes nothing twice.
  absl::StatusOr<LabelResult> Label(const ModelId& id,
                                    absl::Span<const EventLabel> labels) const;

  // The model's whole state as snapshot bytes (one serialized okl.v1.ModelSnapshot with
  // its checksum), gathered from the server's chunks. Retried (from the start).
  absl::StatusOr<std::string> Snapshot(const ModelId& id) const;
  // The same, streamed into the file at `path`: written beside it, synced, then renamed
  // over it, so `path` holds either its old contents or the whole snapshot.
  absl::Status SnapshotToFile(const ModelId& id, const std::string& path) const;

  // Installs a model from Snapshot's bytes under `id` (which may differ from the id it
  // was taken from), replacing a model already there; it continues bit-identically. Sent
  // in chunks of 1 MiB. DATA_LOSS for bytes that are not an intact snapshot; on any error
  // nothing changes.
  absl::StatusOr<ModelSummary> Restore(const ModelId& id, absl::string_view snapshot) const;
  // The same, streaming the file at `path`.
  absl::StatusOr<ModelSummary> RestoreFromFile(const ModelId& id,
                                               const std::string& path) const;

  // grpc.health.v1.Health/Check: whether `service` ("" for the server as a whole,
  // "okl.v1.OnlineKernelLearning" for the service) is SERVING. False while the server
  // starts or drains; NOT_FOUND for a service it does not know. Retried.
  absl::StatusOr<bool> Health(absl::string_view service = "") const;

  // Admin (a token with the admin role), for moving a tenant between replicas (okl
  // move): with `fenced`, fences the tenant's writes on this server and waits for those
  // running to finish; with `delete_models` too, then deletes its models here (the fence
  // stays); without `fenced`, lifts the fence. The tenant's models here (deleted, with
  // delete_models), in order. Not retried.
  absl::StatusOr<std::vector<std::string>> FenceTenant(absl::string_view tenant, bool fenced,
                                                       bool delete_models = false) const;

  // A writer that streams examples into the model (see ObserveWriter). Reads the model
  // first (GetModel: its dim, and its steps for AppliedSinceOpen()), so NOT_FOUND if it
  // does not exist. InvalidArgument for a batch_size or batches_per_stream of 0.
  absl::StatusOr<std::unique_ptr<ObserveWriter>> OpenObserveWriter(
      const ModelId& id, WriterOptions options = {}) const;

 private:
  class Stub;  // the generated stub, kept out of this header
  friend class ObserveWriter;

  Client(std::shared_ptr<grpc::Channel> channel, std::shared_ptr<const Stub> stub,
         ClientOptions options);

  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<const Stub> stub_;
  ClientOptions options_;
};

// ObserveWriter streams labelled examples into one model at a high rate. Add() buffers
// examples; every batch_size of them go out as one ObserveStream message, which the
// server applies on arrival; after batches_per_stream messages (and on Flush() and
// Close()) the writer closes the stream, and the server's answer acknowledges every
// example on it: they are applied and durable, and on_ack receives their predictions.
// Acknowledgements come in order; acknowledged() counts the examples acknowledged.
//
// Each stream is one call, under ClientOptions::deadline: a stream that has been open for
// half of it is closed (and acknowledged) before the next batch goes out on a new one. A
// producer that pauses for longer than the deadline should Flush() before it pauses, or
// its open stream expires (DEADLINE_EXCEEDED, a failure as below).
//
// Refusals: when the server refuses a stream's message with UNAVAILABLE and says that
// it applied nothing of it or after it (okl-batches-applied: a tenant being moved to
// another replica, a server starting or shutting down), or when the stream fails with
// "GOAWAY received" (a proxy closing the connection, e.g. nginx reloading its routes,
// never processed it: HTTP/2 promises that), the writer acknowledges the messages before
// the refused one and sends that message and the later ones again on a new stream,
// as it does with the messages after those the server answered for when a stream's
// answer covers fewer than were written (the stream was cut short on its way),
// with ClientOptions' backoff, for up to ClientOptions::deadline; the model then holds
// each example once and in order, and the caller sees no error. The writer keeps the open
// stream's messages (at most batches_per_stream) until they are acknowledged.
//
// Failure: the writer checks locally only what it must (an input of the wrong size is
// InvalidArgument and changes nothing); the server validates the rest. When a stream
// fails — the server rejected a message, or went away (UNAVAILABLE), or the stream's
// deadline passed — the writer fails for good: Add(), Flush() and Close() return that
// status (the server's code and message, followed by which examples were on the failed
// stream). The examples of the failed stream are unacknowledged, but some of them may have
// been applied: messages are applied as they arrive, and a broken stream cannot say how
// far it got. To resume exactly, if this writer was the model's only writer:
//   1. AppliedSinceOpen() reads the model's steps and subtracts its steps when the writer
//      opened: the number n of this writer's examples that were applied (they are always
//      a prefix, n >= acknowledged());
//   2. open a new writer and Add the examples from n on.
// The model then holds every example exactly once. (With other writers on the same model
// the count mixes theirs in; such callers need their own bookkeeping.) The count is final
// once the server is done with the failed stream: at once if the server ended it (a
// rejected message, a server that died); after a deadline or a connection lost on the
// client's side, the server may still be applying the message it had begun, so count
// after a moment, e.g. until two reads agree.
//
// Not thread-safe: one thread calls Add, Flush and Close (on_ack runs on it);
// acknowledged() and the other accessors are for that thread too.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ObserveWriter> writer,
//                        client.OpenObserveWriter(id));
//   for (size_t i = 0; i < ys.size(); ++i) {
//     if (!writer->Add(xs.subspan(i * dim, dim), ys[i]).ok()) break;  // Close() says why
//   }
//   uint64_t resume_at = ys.size();
//   if (absl::Status closed = writer->Close(); !closed.ok()) {
//     OKL_ASSIGN_OR_RETURN(resume_at, writer->AppliedSinceOpen());
//   }
//   // If resume_at < ys.size(): open a new writer and Add the examples from resume_at on.
class ObserveWriter {
 public:
  ObserveWriter(const ObserveWriter&) = delete;
  ObserveWriter& operator=(const ObserveWriter&) = delete;
  // Close()s the writer if that was not done, dropping its status: call Close() to know.
  ~ObserveWriter();

  // Adds one example: x holds the model's dim values.
  absl::Status Add(absl::Span<const double> x, double y);
  // Adds ys.size() examples: xs holds them example-major (ys.size() * dim values).
  absl::Status Add(absl::Span<const double> xs, absl::Span<const double> ys);
  // Adds one example of a multi-class model: x of class `class_label` (y 0). The server
  // checks the label (1 to 128 bytes of UTF-8); a bad one fails the writer as a bad x
  // does.
  absl::Status AddClass(absl::Span<const double> x, absl::string_view class_label);

  // Sends the examples buffered and closes the stream, so that every example added so
  // far is acknowledged (or the writer failed).
  absl::Status Flush();
  // Flush(), then no more Add(). Returns the writer's final status; calling it again
  // returns the same.
  absl::Status Close();

  const ModelId& id() const { return id_; }
  uint32_t dim() const { return dim_; }
  // Examples added, acknowledged (applied and durable, reported to on_ack).
  uint64_t added() const { return added_; }
  uint64_t acknowledged() const { return acknowledged_; }
  // Streams the server refused with nothing applied, whose rest the writer sent again.
  uint64_t streams_refused() const { return streams_refused_; }
  // The model's step count when the writer opened.
  uint64_t steps_at_open() const { return steps_at_open_; }
  // OK, or the failure the writer stopped at.
  const absl::Status& status() const { return status_; }

  // The model's steps now (GetModel) minus steps_at_open(): if this writer is the model's
  // only writer, how many of its examples were applied — after a failure, the index to
  // resume from. FailedPrecondition if the model has fewer steps than at open (it was
  // replaced or recreated).
  absl::StatusOr<uint64_t> AppliedSinceOpen() const;

 private:
  friend class Client;
  struct State;

  ObserveWriter(Client client, ModelId id, WriterOptions options, uint32_t dim,
                uint64_t steps_at_open);

  // Appends one example to the pending batch, sending it once full.
  absl::Status Append(absl::Span<const double> x, double y,
                      absl::string_view class_label = "");
  // Add and AddClass: checks x and the writer's state, then Appends.
  absl::Status AddExample(absl::Span<const double> x, double y, absl::string_view class_label);
  // Sends the pending batch on the open stream (opening one if needed).
  absl::Status SendBatch();
  // Opens a stream (state_->writer).
  void OpenStream();
  // Writes the unacknowledged message `index` to the open stream (the first names the
  // model); false if the stream is over.
  bool WriteMessage(size_t index);
  // Closes the open stream and acknowledges its examples; if the server refused part of
  // it with nothing applied (a tenant move), sends that part again until the deadline.
  absl::Status FinishStream();
  // Acknowledges the examples the server's answer covers: the first unacknowledged
  // messages (all of them, unless the stream was cut short on its way).
  absl::Status AcknowledgeAnswered();
  // Acknowledges the first `messages` unacknowledged messages, which a refusal said were
  // applied.
  void AcknowledgeRefusedPrefix(size_t messages);
  // Drops the first `messages` unacknowledged messages, keeping them as spares.
  void RecycleUnacknowledged(size_t messages);
  // Records `status` as the writer's failure; returns it.
  absl::Status Fail(absl::Status status);

  const Client client_;
  const ModelId id_;
  const WriterOptions options_;
  const uint32_t dim_;
  const uint64_t steps_at_open_;
  std::unique_ptr<State> state_;  // the pending batch and the open stream, if any
  uint64_t added_ = 0;
  uint64_t sent_ = 0;  // examples written to streams (acknowledged or in flight)
  uint64_t acknowledged_ = 0;
  uint64_t streams_refused_ = 0;
  bool closed_ = false;
  absl::Status status_;
};

}  // namespace okl

#endif  // OKL_CLIENT_CLIENT_H_
