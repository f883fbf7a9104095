// bench/loadgen_driver.cc

#include "bench/loadgen_driver.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "grpc/health/v1/health.pb.h"

namespace okl::loadgen {
namespace {

// How long after the window's end a call may still take before its deadline cancels
// it: long enough never to cut a slow but healthy call, short enough that a wedged
// server cannot hang the benchmark.
constexpr auto kDrainAllowance = std::chrono::seconds(30);

std::string Describe(const grpc::Status& status) {
  return absl::StrCat("code ", static_cast<int>(status.error_code()), ": ",
                      status.error_message());
}

// The deadline of every call of a run, as ClientContext wants it (system clock).
std::chrono::system_clock::time_point CallDeadline(const Window& window) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             window.end - Clock::now() + kDrainAllowance);
}

// One caller's tallies. Only its own caller writes them (one call, or one stream, in
// flight at a time), so they need no lock; Merge() runs after every caller ended.
struct Tally {
  uint64_t completed = 0;
  uint64_t streams = 0;
  uint64_t acknowledged_messages = 0;
  uint64_t errors = 0;
  std::string first_error;
  std::vector<int64_t> latencies_ns;
  std::vector<int64_t> send_lags_ns;

  void NoteError(const grpc::Status& status, bool in_window) {
    if (status.ok()) return;
    if (in_window) ++errors;
    if (first_error.empty()) first_error = Describe(status);
  }

  void RecordCall(const Window& window, Clock::time_point start, Clock::time_point done,
                  const grpc::Status& status) {
    const bool in_window = window.Contains(done);
    NoteError(status, in_window);
    if (!in_window) return;
    ++completed;
    latencies_ns.push_back(std::chrono::nanoseconds(done - start).count());
  }

  void RecordStream(const Window& window, Clock::time_point start, Clock::time_point done,
                    const grpc::Status& status, uint64_t written) {
    const bool in_window = window.Contains(done);
    NoteError(status, in_window);
    if (!in_window) return;
    ++streams;
    if (status.ok()) acknowledged_messages += written;
    latencies_ns.push_back(std::chrono::nanoseconds(done - start).count());
  }
};

Result Merge(std::vector<Tally>& tallies) {
  Result result;
  size_t samples = 0;
  for (const Tally& t : tallies) samples += t.latencies_ns.size();
  result.latencies_ns.reserve(samples);
  for (Tally& t : tallies) {
    result.completed += t.completed;
    result.streams += t.streams;
    result.acknowledged_messages += t.acknowledged_messages;
    result.errors += t.errors;
    if (result.first_error.empty()) result.first_error = std::move(t.first_error);
    result.latencies_ns.insert(result.latencies_ns.end(), t.latencies_ns.begin(),
                               t.latencies_ns.end());
    result.send_lags_ns.insert(result.send_lags_ns.end(), t.send_lags_ns.begin(),
                               t.send_lags_ns.end());
  }
  return result;
}

// A call's deadline and, if the caller has one, its authorization.
void PrepareContext(grpc::ClientContext* context, const Caller& caller,
                    std::chrono::system_clock::time_point deadline) {
  context->set_deadline(deadline);
  if (!caller.authorization.empty())
    context->AddMetadata("authorization", caller.authorization);
  if (!caller.tenant.empty()) context->AddMetadata("x-okl-tenant", caller.tenant);
}

// Everything a caller needs besides its own state; shared, read-only during a run.
struct RunContext {
  const std::string& method;
  const Window& window;
  std::chrono::system_clock::time_point deadline;
  int messages_per_stream = 0;
};

// ---- kAsync: completion queues ------------------------------------------------------

// A caller on a completion queue. OnEvent() handles one completion of its tag and
// returns false once the caller has finished its last call.
class AsyncCaller {
 public:
  virtual ~AsyncCaller() = default;
  virtual void Start() = 0;
  virtual bool OnEvent(bool ok) = 0;
};

class AsyncUnaryCaller final : public AsyncCaller {
 public:
  AsyncUnaryCaller(const Caller& caller, const RunContext& run, grpc::CompletionQueue* cq,
                   Tally* tally)
      : caller_(caller), run_(run), stub_(caller.channel), cq_(cq), tally_(tally) {}

  void Start() override {
    const grpc::ByteBuffer& request = caller_.requests[next_++ % caller_.requests.size()];
    context_.emplace();
    PrepareContext(&*context_, caller_, run_.deadline);
    start_ = Clock::now();
    reader_ = stub_.PrepareUnaryCall(&*context_, run_.method, request, cq_);
    reader_->StartCall();
    reader_->Finish(&response_, &status_, this);
  }

  bool OnEvent(bool ok) override {
    const Clock::time_point done = Clock::now();
    tally_->RecordCall(run_.window, start_, done, status_);
    reader_.reset();
    context_.reset();
    response_.Clear();
    if (done >= run_.window.end) return false;
    Start();
    return true;
  }

 private:
  const Caller& caller_;
  const RunContext& run_;
  grpc::GenericStub stub_;
  grpc::CompletionQueue* const cq_;
  Tally* const tally_;
  size_t next_ = 0;
  std::optional<grpc::ClientContext> context_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader_;
  grpc::ByteBuffer response_;
  grpc::Status status_;
  Clock::time_point start_;
};

// A client stream on the generic (bidi-shaped) async API: gRPC's wire format does not
// tell a client stream from a bidi stream whose client reads one response at the end.
class AsyncStreamCaller final : public AsyncCaller {
 public:
  AsyncStreamCaller(const Caller& caller, const RunContext& run, grpc::CompletionQueue* cq,
                    Tally* tally)
      : caller_(caller), run_(run), stub_(caller.channel), cq_(cq), tally_(tally) {}

  void Start() override {
    context_.emplace();
    PrepareContext(&*context_, caller_, run_.deadline);
    start_ = Clock::now();
    written_ = 0;
    stream_ = stub_.PrepareCall(&*context_, run_.method, cq_);
    step_ = Step::kStarting;
    stream_->StartCall(this);
  }

  bool OnEvent(bool ok) override {
    switch (step_) {
      case Step::kStarting:
        if (!ok) return Finish();
        Write();
        return true;
      case Step::kWriting: {
        if (!ok) return Finish();  // the stream broke; Finish() says why
        ++written_;
        const Clock::time_point now = Clock::now();
        if (run_.window.Contains(now)) ++tally_->completed;
        if (written_ < static_cast<uint64_t>(run_.messages_per_stream) &&
            now < run_.window.end) {
          Write();
          return true;
        }
        step_ = Step::kHalfClosing;
        stream_->WritesDone(this);
        return true;
      }
      case Step::kHalfClosing:
        if (!ok) return Finish();
        step_ = Step::kReading;
        stream_->Read(&response_, this);
        return true;
      case Step::kReading:
        return Finish();
      case Step::kFinishing: {
        const Clock::time_point done = Clock::now();
        tally_->RecordStream(run_.window, start_, done, status_, written_);
        stream_.reset();
        context_.reset();
        response_.Clear();
        if (done >= run_.window.end) return false;
        Start();
        return true;
      }
    }
    return false;
  }

 private:
  enum class Step { kStarting, kWriting, kHalfClosing, kReading, kFinishing };

  void Write() {
    step_ = Step::kWriting;
    stream_->Write(caller_.requests[next_++ % caller_.requests.size()], this);
  }

  bool Finish() {
    step_ = Step::kFinishing;
    stream_->Finish(&status_, this);
    return true;
  }

  const Caller& caller_;
  const RunContext& run_;
  grpc::GenericStub stub_;
  grpc::CompletionQueue* const cq_;
  Tally* const tally_;
  size_t next_ = 0;
  Step step_ = Step::kStarting;
  uint64_t written_ = 0;
  std::optional<grpc::ClientContext> context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream_;
  grpc::ByteBuffer response_;
  grpc::Status status_;
  Clock::time_point start_;
};

template <typename CallerType>
Result RunAsync(int threads, const std::vector<Caller>& callers, const RunContext& run) {
  threads = std::clamp(threads, 1, static_cast<int>(callers.size()));
  std::vector<Tally> tallies(callers.size());
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  for (int t = 0; t < threads; ++t) queues.push_back(std::make_unique<grpc::CompletionQueue>());
  std::vector<std::unique_ptr<CallerType>> states;
  for (size_t i = 0; i < callers.size(); ++i) {
    states.push_back(
        std::make_unique<CallerType>(callers[i], run, queues[i % threads].get(), &tallies[i]));
  }
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      grpc::CompletionQueue& cq = *queues[t];
      int active = 0;
      for (size_t i = t; i < states.size(); i += threads) {
        states[i]->Start();
        ++active;
      }
      void* tag = nullptr;
      bool ok = false;
      while (active > 0 && cq.Next(&tag, &ok)) {
        if (!static_cast<AsyncCaller*>(tag)->OnEvent(ok)) --active;
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  return Merge(tallies);
}

// ---- kCallback ----------------------------------------------------------------------

class CallbackUnaryCaller {
 public:
  CallbackUnaryCaller(const Caller& caller, const RunContext& run, Tally* tally,
                      absl::BlockingCounter* finished)
      : caller_(caller), run_(run), stub_(caller.channel), tally_(tally), finished_(finished) {}

  void Start() {
    // Two slots, used in turn: the next call starts inside the previous call's
    // completion callback, and that call's context must outlive its callback.
    Slot& slot = slots_[next_ % 2];
    const grpc::ByteBuffer& request = caller_.requests[next_ % caller_.requests.size()];
    ++next_;
    slot.context.emplace();
    PrepareContext(&*slot.context, caller_, run_.deadline);
    slot.response.Clear();
    start_ = Clock::now();
    stub_.UnaryCall(&*slot.context, run_.method, grpc::StubOptions(), &request, &slot.response,
                    [this](grpc::Status status) { OnDone(status); });
  }

 private:
  struct Slot {
    std::optional<grpc::ClientContext> context;
    grpc::ByteBuffer response;
  };

  void OnDone(const grpc::Status& status) {
    const Clock::time_point done = Clock::now();
    tally_->RecordCall(run_.window, start_, done, status);
    if (done < run_.window.end) {
      Start();
    } else {
      finished_->DecrementCount();
    }
  }

  const Caller& caller_;
  const RunContext& run_;
  grpc::GenericStub stub_;
  Tally* const tally_;
  absl::BlockingCounter* const finished_;
  size_t next_ = 0;
  Slot slots_[2];
  Clock::time_point start_;
};

class CallbackStreamCaller;

// One stream; deletes itself when it is done, after its caller has started the next.
class CallbackStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  CallbackStream(CallbackStreamCaller* owner, grpc::GenericStub& stub, const RunContext& run);
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override {}
  void OnDone(const grpc::Status& status) override;

 private:
  void WriteNext();

  CallbackStreamCaller* const owner_;
  const RunContext& run_;
  grpc::ClientContext context_;
  grpc::ByteBuffer response_;
  Clock::time_point start_;
  uint64_t written_ = 0;
};

class CallbackStreamCaller {
 public:
  CallbackStreamCaller(const Caller& caller, const RunContext& run, Tally* tally,
                       absl::BlockingCounter* finished)
      : caller_(caller), run_(run), stub_(caller.channel), tally_(tally), finished_(finished) {}

  void Start() { new CallbackStream(this, stub_, run_); }

  const Caller& caller() const { return caller_; }
  const grpc::ByteBuffer& NextRequest() {
    return caller_.requests[next_++ % caller_.requests.size()];
  }
  Tally& tally() { return *tally_; }

  void StreamDone(Clock::time_point start, const grpc::Status& status, uint64_t written) {
    const Clock::time_point done = Clock::now();
    tally_->RecordStream(run_.window, start, done, status, written);
    if (done < run_.window.end) {
      Start();
    } else {
      finished_->DecrementCount();
    }
  }

 private:
  const Caller& caller_;
  const RunContext& run_;
  grpc::GenericStub stub_;
  Tally* const tally_;
  absl::BlockingCounter* const finished_;
  size_t next_ = 0;
};

CallbackStream::CallbackStream(CallbackStreamCaller* owner, grpc::GenericStub& stub,
                               const RunContext& run)
    : owner_(owner), run_(run) {
  PrepareContext(&context_, owner->caller(), run.deadline);
  stub.PrepareBidiStreamingCall(&context_, run.method, grpc::StubOptions(), this);
  start_ = Clock::now();
  StartRead(&response_);
  WriteNext();
  StartCall();
}

void CallbackStream::WriteNext() { StartWrite(&owner_->NextRequest()); }

void CallbackStream::OnWriteDone(bool ok) {
  if (!ok) return;  // the stream broke; OnDone() has the status
  ++written_;
  const Clock::time_point now = Clock::now();
  if (run_.window.Contains(now)) ++owner_->tally().completed;
  if (written_ < static_cast<uint64_t>(run_.messages_per_stream) && now < run_.window.end) {
    WriteNext();
  } else {
    StartWritesDone();
  }
}

void CallbackStream::OnDone(const grpc::Status& status) {
  owner_->StreamDone(start_, status, written_);
  delete this;
}

template <typename CallerType>
Result RunCallback(const std::vector<Caller>& callers, const RunContext& run) {
  std::vector<Tally> tallies(callers.size());
  absl::BlockingCounter finished(static_cast<int>(callers.size()));
  std::vector<std::unique_ptr<CallerType>> states;
  for (size_t i = 0; i < callers.size(); ++i) {
    states.push_back(std::make_unique<CallerType>(callers[i], run, &tallies[i], &finished));
  }
  for (auto& state : states) state->Start();
  finished.Wait();
  return Merge(tallies);
}

// ---- kSync --------------------------------------------------------------------------

void SyncUnaryLoop(const Caller& caller, const RunContext& run, Tally* tally) {
  const grpc::internal::RpcMethod method(run.method.c_str(),
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  for (size_t next = 0;; ++next) {
    grpc::ClientContext context;
    PrepareContext(&context, caller, run.deadline);
    grpc::ByteBuffer response;
    const Clock::time_point start = Clock::now();
    const grpc::Status status =
        grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
            caller.channel.get(), method, &context,
            caller.requests[next % caller.requests.size()], &response);
    const Clock::time_point done = Clock::now();
    tally->RecordCall(run.window, start, done, status);
    if (done >= run.window.end) return;
  }
}

void SyncStreamLoop(const Caller& caller, const RunContext& run, Tally* tally) {
  const grpc::internal::RpcMethod method(run.method.c_str(),
                                         grpc::internal::RpcMethod::CLIENT_STREAMING);
  size_t next = 0;
  for (;;) {
    grpc::ClientContext context;
    PrepareContext(&context, caller, run.deadline);
    grpc::ByteBuffer response;
    const Clock::time_point start = Clock::now();
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            caller.channel.get(), method, &context, &response));
    uint64_t written = 0;
    for (;;) {
      if (!writer->Write(caller.requests[next++ % caller.requests.size()])) break;
      ++written;
      const Clock::time_point now = Clock::now();
      if (run.window.Contains(now)) ++tally->completed;
      if (written >= static_cast<uint64_t>(run.messages_per_stream) || now >= run.window.end) {
        break;
      }
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    const Clock::time_point done = Clock::now();
    tally->RecordStream(run.window, start, done, status, written);
    if (done >= run.window.end) return;
  }
}

Result RunSync(void (*loop)(const Caller&, const RunContext&, Tally*),
               const std::vector<Caller>& callers, const RunContext& run) {
  std::vector<Tally> tallies(callers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < callers.size(); ++i) {
    threads.emplace_back(loop, std::cref(callers[i]), std::cref(run), &tallies[i]);
  }
  for (std::thread& thread : threads) thread.join();
  return Merge(tallies);
}

}  // namespace

absl::StatusOr<ClientApi> ParseClientApi(absl::string_view name) {
  if (name == "async") return ClientApi::kAsync;
  if (name == "callback") return ClientApi::kCallback;
  if (name == "sync") return ClientApi::kSync;
  return absl::InvalidArgumentError(
      absl::StrCat("--client_api must be async, callback or sync, got \"", name, "\""));
}

const char* ClientApiName(ClientApi api) {
  switch (api) {
    case ClientApi::kAsync:
      return "async";
    case ClientApi::kCallback:
      return "callback";
    case ClientApi::kSync:
      return "sync";
  }
  return "?";
}

Window Window::StartingIn(absl::Duration warmup, absl::Duration length) {
  Window window;
  window.begin = Clock::now() + absl::ToChronoNanoseconds(warmup);
  window.end = window.begin + absl::ToChronoNanoseconds(length);
  return window;
}

Result RunUnary(ClientApi api, int threads, const std::string& method,
                const std::vector<Caller>& callers, const Window& window) {
  const RunContext run{.method = method, .window = window, .deadline = CallDeadline(window)};
  if (callers.empty()) return Result();
  switch (api) {
    case ClientApi::kAsync:
      return RunAsync<AsyncUnaryCaller>(threads, callers, run);
    case ClientApi::kCallback:
      return RunCallback<CallbackUnaryCaller>(callers, run);
    case ClientApi::kSync:
      return RunSync(&SyncUnaryLoop, callers, run);
  }
  return Result();
}

Result RunStreams(ClientApi api, int threads, const std::string& method,
                  const std::vector<Caller>& callers, int messages_per_stream,
                  const Window& window) {
  const RunContext run{.method = method,
                       .window = window,
                       .deadline = CallDeadline(window),
                       .messages_per_stream = std::max(messages_per_stream, 1)};
  if (callers.empty()) return Result();
  switch (api) {
    case ClientApi::kAsync:
      return RunAsync<AsyncStreamCaller>(threads, callers, run);
    case ClientApi::kCallback:
      return RunCallback<CallbackStreamCaller>(callers, run);
    case ClientApi::kSync:
      return RunSync(&SyncStreamLoop, callers, run);
  }
  return Result();
}

namespace {

// One call of the open loop, alive from its send to its completion; its own tag.
struct OpenLoopCall {
  Clock::time_point scheduled;
  Clock::time_point sent;
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::ByteBuffer response;
  grpc::Status status;
};

}  // namespace

Result RunOpenLoop(int threads, const std::string& method, const std::vector<Caller>& callers,
                   double rate, const Window& window) {
  if (callers.empty() || !(rate > 0)) return Result();
  threads = std::max(threads, 1);
  const auto deadline = CallDeadline(window);
  std::vector<Tally> tallies(threads);
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  for (int t = 0; t < threads; ++t) queues.push_back(std::make_unique<grpc::CompletionQueue>());
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (const Caller& caller : callers) {
    stubs.push_back(std::make_unique<grpc::GenericStub>(caller.channel));
  }
  std::atomic<int> outstanding{0};

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      void* tag = nullptr;
      bool ok = false;
      while (queues[t]->Next(&tag, &ok)) {
        const Clock::time_point done = Clock::now();
        std::unique_ptr<OpenLoopCall> call(static_cast<OpenLoopCall*>(tag));
        Tally& tally = tallies[t];
        const bool in_window = window.Contains(call->scheduled);
        tally.NoteError(call->status, in_window);
        if (in_window) {
          ++tally.completed;
          tally.latencies_ns.push_back(
              std::chrono::nanoseconds(done - call->scheduled).count());
          tally.send_lags_ns.push_back(
              std::chrono::nanoseconds(call->sent - call->scheduled).count());
        }
        outstanding.fetch_sub(1, std::memory_order_relaxed);
      }
    });
  }

  // The sender: call k is due at start + k / rate. It sleeps until the next call is due
  // and then sends every call that is due by now.
  const Clock::time_point start = Clock::now();
  const auto interval = std::chrono::duration<double>(1.0 / rate);
  for (uint64_t k = 0;; ++k) {
    const Clock::time_point due =
        start + std::chrono::duration_cast<Clock::duration>(interval * static_cast<double>(k));
    if (due >= window.end) break;
    if (Clock::now() < due) std::this_thread::sleep_until(due);
    while (outstanding.load(std::memory_order_relaxed) >= kMaxOutstandingCalls) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const size_t c = k % callers.size();
    const Caller& caller = callers[c];
    const grpc::ByteBuffer& request =
        caller.requests[(k / callers.size()) % caller.requests.size()];
    auto call = std::make_unique<OpenLoopCall>();
    call->scheduled = due;
    PrepareContext(&call->context, caller, deadline);
    grpc::CompletionQueue* cq = queues[k % threads].get();
    call->reader = stubs[c]->PrepareUnaryCall(&call->context, method, request, cq);
    call->sent = Clock::now();
    call->reader->StartCall();
    outstanding.fetch_add(1, std::memory_order_relaxed);
    OpenLoopCall* tag = call.release();
    tag->reader->Finish(&tag->response, &tag->status, tag);
  }
  // Every call sent has its completion queued before Next() reports the shutdown.
  for (auto& queue : queues) queue->Shutdown();
  for (std::thread& worker : workers) worker.join();
  return Merge(tallies);
}

grpc::ByteBuffer HealthCheckRequest(absl::string_view service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::Slice slice(request.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace okl::loadgen
