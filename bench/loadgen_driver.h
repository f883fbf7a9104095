// bench/loadgen_driver.h
//
// The call engines of okl_loadgen: closed-loop callers that each keep exactly one call in
// flight and start the next one as soon as the last one has completed, for a fixed
// window of wall time; and an open loop that sends calls on a fixed schedule (RunOpenLoop). Requests are serialized once, before the run, into
// grpc::ByteBuffers and sent through grpc::GenericStub, so that the client spends its CPU
// on the transport and not on protobuf encoding: on a 2-core machine the client competes
// with the server for the same cores, and every microsecond it spends is one the server
// does not get. Responses are not parsed either; only their status counts.
//
// Three client APIs drive the same closed loop (see ClientApi); okl_loadgen measures them
// against each other with --client_api.
//
// Not thread-safe: one Run*() at a time per process is what okl_loadgen does; each Run*()
// starts and joins its own threads.
//
// Example:
//   loadgen::Window window = loadgen::Window::StartingIn(absl::Seconds(1), absl::Seconds(5));
//   std::vector<loadgen::Caller> callers = ...;  // channel + pre-serialized requests each
//   loadgen::Result result = loadgen::RunUnary(loadgen::ClientApi::kAsync, /*threads=*/1,
//                                              "/okl.v1.OnlineKernelLearning/Predict",
//                                              callers, window);
//   double per_second = result.completed / window.seconds();
#ifndef OKL_BENCH_LOADGEN_DRIVER_H_
#define OKL_BENCH_LOADGEN_DRIVER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace okl::loadgen {

using Clock = std::chrono::steady_clock;

// How the callers issue their calls.
enum class ClientApi {
  // A grpc::CompletionQueue per client thread; every caller is a small state machine
  // driven by the thread that polls its queue. No thread per caller, no hand-off: the
  // thread that reads a completion from the socket starts the next call.
  kAsync,
  // gRPC's callback API (GenericStub::UnaryCall, ClientBidiReactor); the completions
  // run on gRPC's internal callback threads.
  kCallback,
  // One thread per caller, each making blocking calls.
  kSync,
};

absl::StatusOr<ClientApi> ParseClientApi(absl::string_view name);
const char* ClientApiName(ClientApi api);

// The measured part of a run. Callers start at once, so [start, begin) is warm-up (its
// calls are neither counted nor timed); no call starts after `end`.
struct Window {
  Clock::time_point begin;
  Clock::time_point end;

  // A window of `length` that begins after `warmup` from now.
  static Window StartingIn(absl::Duration warmup, absl::Duration length);
  double seconds() const { return std::chrono::duration<double>(end - begin).count(); }
  bool Contains(Clock::time_point t) const { return t >= begin && t < end; }
};

// One closed-loop caller: the channel it calls on and the requests it cycles through
// (for a stream, the messages it writes, one after another, across its streams).
struct Caller {
  std::shared_ptr<grpc::Channel> channel;
  std::vector<grpc::ByteBuffer> requests;
  // Non-empty: the `authorization` metadata of every call ("Bearer <token>"), added to
  // each call's context (cheaper than call credentials, and works on plaintext channels).
  std::string authorization = "";
  // Non-empty: the `x-okl-tenant` metadata of every call, which a router hashes on.
  std::string tenant = "";
};

// What the callers saw inside the window.
struct Result {
  // Unary: calls completed (OK or not). Streams: messages whose write completed.
  uint64_t completed = 0;
  // Streams only: streams that ended inside the window, and the messages of those of
  // them that ended OK (each then acknowledged by the server's one response).
  uint64_t streams = 0;
  uint64_t acknowledged_messages = 0;
  // Calls (streams) that ended with a status other than OK.
  uint64_t errors = 0;
  std::string first_error;
  // Per completed call (unary) or ended stream: start to completion, in nanoseconds.
  std::vector<int64_t> latencies_ns;
  // Open loop only, per call of latencies_ns: how late the client sent it after its
  // scheduled time (part of its latency), in nanoseconds.
  std::vector<int64_t> send_lags_ns;
};

// Runs `callers` against the unary `method` (full name, "/package.Service/Method")
// until window.end, on `threads` completion-queue threads (kAsync only; kSync uses one
// thread per caller, kCallback gRPC's own threads), and returns once every call ended.
Result RunUnary(ClientApi api, int threads, const std::string& method,
                const std::vector<Caller>& callers, const Window& window);

// Like RunUnary for the client-streaming `method`: each caller opens a stream, writes
// its requests in turn (wrapping around), half-closes after `messages_per_stream`
// messages (or at window.end), reads the one response and opens the next stream.
Result RunStreams(ClientApi api, int threads, const std::string& method,
                  const std::vector<Caller>& callers, int messages_per_stream,
                  const Window& window);

// Open loop: calls of the unary `method` leave on a fixed schedule, `rate` per second from
// now until window.end, whatever the responses do, round-robin over the callers (each
// cycling through its requests) and over `threads` completion-queue threads. A call's
// latency counts from its scheduled time, not from when it was sent, so a server (or a
// client) that falls behind shows its queueing in the latencies instead of slowing the
// load. Calls scheduled inside the window are counted and timed; the rest are warm-up.
// At most kMaxOutstandingCalls are in flight: past that the sender waits, and the calls
// it delays are late by their schedule. Returns once every call has ended.
Result RunOpenLoop(int threads, const std::string& method, const std::vector<Caller>& callers,
                   double rate, const Window& window);

inline constexpr int kMaxOutstandingCalls = 20000;

// The serialized grpc.health.v1.HealthCheckRequest of a health Check for `service` (""
// for the whole server: the empty message, the transport alone).
grpc::ByteBuffer HealthCheckRequest(absl::string_view service);

inline constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

}  // namespace okl::loadgen

#endif  // OKL_BENCH_LOADGEN_DRIVER_H_
