// server/rpc/async_rpc.h
//
// How okl_server serves its calls: gRPC's completion-queue (async) API, with one
// completion queue and one thread polling it per CPU, each call's events handled on the
// thread that polled them.
//
// Why not gRPC's callback API: in gRPC 1.51 the callback API hands every event between two
// "nexting" threads of its own, whatever the number of CPUs: about 3 context switches per
// unary call at a partial load, where a Predict's own work is under a microsecond
// (docs/benchmarks.md, "Load generator": how okl serves calls, and why). And no callback
// (or sync) method may remain beside these queues: a callback method brings those threads
// back, and they poll the same sockets.
//
// The pieces:
// - RawAsyncService: a grpc::Service whose methods are all declared bidirectional
//   streams of raw bytes, whatever their proto says (the wire is the same), so that one
//   call type serves unary and streaming methods alike. It still registers the service's
//   name, so server reflection lists it.
// - AsyncCall: one call of one method, a small reactor: StartRead, StartWrite and Finish
//   start operations, whose completions arrive as OnReadDone/OnWriteDone on a queue
//   thread. A subclass per method does the work.
// - CompletionQueueThreads: the queues and their threads; it keeps a few calls of every
//   method requested on every queue, and runs each call's completions.
//
// Example:
//   MyService service;  // a RawAsyncService
//   grpc::ServerBuilder builder;
//   CompletionQueueThreads threads({&service}, /*threads=*/2, &builder);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   threads.Start();      // after BuildAndStart
//   ...
//   server->Shutdown();   // cancels what is left; the threads must still run
//   threads.Stop();       // after Shutdown: drains the queues and joins the threads
#ifndef OKL_SERVER_RPC_ASYNC_RPC_H_
#define OKL_SERVER_RPC_ASYNC_RPC_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "server/rpc/status.h"

namespace okl {

class AsyncCall;
class CompletionQueueThreads;

// A service whose methods are served by AsyncCall subclasses on CompletionQueueThreads.
// Subclasses add their methods in their constructor. Not thread-safe while methods are
// added; then fixed.
class RawAsyncService : public grpc::Service {
 public:
  // Makes a new, not yet requested call of one method.
  using CallFactory = std::function<AsyncCall*()>;

  // The service's methods, in the order added.
  int method_count() const { return static_cast<int>(factories_.size()); }

 protected:
  // Adds `full_name` ("/package.Service/Method"), whose calls `factory` makes.
  void AddRawMethod(absl::string_view full_name, CallFactory factory);

 private:
  friend class CompletionQueueThreads;

  // Requests the next call of method `index` into `call`, on `queue`.
  void RequestCall(int index, AsyncCall* call, grpc::ServerCompletionQueue* queue);

  std::deque<std::string> names_;  // gRPC keeps the pointers: a deque does not move them
  std::vector<CallFactory> factories_;
};

// One call. Created requested; once a call of its method arrives, OnStart runs on the
// queue's thread. Then the subclass reads, writes and finishes; each operation's
// completion runs on the queue's thread (OnReadDone, OnWriteDone). Ends with exactly
// one Finish (or WriteAndFinish); the object deletes itself once the finish is sent and
// gRPC reported the call done.
//
// At most one read and one write may be outstanding at a time, and Finish only when
// neither is. Any thread may start an operation (a work pool's, say).
class AsyncCall {
 public:
  AsyncCall();
  virtual ~AsyncCall();

  AsyncCall(const AsyncCall&) = delete;
  AsyncCall& operator=(const AsyncCall&) = delete;

  // The call's context: its metadata, deadline and cancellation. IsCancelled() is true
  // once gRPC has reported the call cancelled on the queue's thread.
  grpc::ServerContext* context() { return &context_; }

 protected:
  virtual void OnStart() = 0;
  // ok is false when no message will come: the client half-closed, or the call ended.
  virtual void OnReadDone(bool ok) {}
  // ok is false when the message could not be sent (the call ended).
  virtual void OnWriteDone(bool ok) {}
  // The call ended: finished, or cancelled by the client, its deadline or the server's
  // shutdown (then context()->IsCancelled()). Any read or write still outstanding
  // completes too, with ok false.
  virtual void OnDone() {}

  // Reads the next message; OnReadDone tells when it is in (see TakeMessage).
  void StartRead();
  // The message read: parsed into `message`. InvalidArgument if it does not parse.
  absl::Status TakeMessage(google::protobuf::MessageLite* message);
  // For a method of one request (unary or server streaming), in OnReadDone: the request
  // parsed into `request`, or InvalidArgument if none came (!ok) or it does not parse.
  absl::Status TakeRequest(bool ok, google::protobuf::MessageLite* request);
  // Sends `message` (serialized at once).
  void StartWrite(const google::protobuf::MessageLite& message);
  // Sends `status`, and first `response` unless it is null or the status is not OK.
  void Finish(const grpc::Status& status, const google::protobuf::MessageLite* response = nullptr);

 private:
  friend class CompletionQueueThreads;
  friend class RawAsyncService;

  enum class Event { kStarted, kRead, kWritten, kFinished, kDone };
  // One per event: the tag gRPC hands back.
  struct Tag {
    AsyncCall* call;
    Event event;
  };

  // Runs one completion on the queue's thread.
  void Proceed(Event event, bool ok);
  // Drops one reference; the last deletes the call.
  void Unref();
  // `message` into write_buffer_, for StartWrite and Finish.
  void SerializeToWriteBuffer(const google::protobuf::MessageLite& message);

  grpc::ServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_{&context_};
  grpc::ByteBuffer read_buffer_;
  grpc::ByteBuffer write_buffer_;
  Tag started_{this, Event::kStarted};
  Tag read_{this, Event::kRead};
  Tag written_{this, Event::kWritten};
  Tag finished_{this, Event::kFinished};
  Tag done_{this, Event::kDone};
  // Set when requested: where a replacement is requested once this call arrives.
  RawAsyncService* service_ = nullptr;
  int method_ = -1;
  grpc::ServerCompletionQueue* queue_ = nullptr;
  CompletionQueueThreads* threads_ = nullptr;
  bool arrived_ = false;  // a call came (counted in threads_->live_calls_)
  // References: one for gRPC's done report, one until Finish's completion, one per read
  // or write outstanding. Held from the call's arrival.
  std::atomic<int> refs_{0};
};

// A unary call: reads its one request, then runs `handle` (on the queue's thread), which
// ends the call with Reply, now or later from another thread.
template <typename Request, typename Response>
class UnaryCall final : public AsyncCall {
 public:
  using Handler = std::function<void(UnaryCall*)>;

  // `handle` must outlive the call (the service owns it).
  explicit UnaryCall(const Handler* handle) : handle_(handle) {}

  const Request& request() const { return request_; }
  Response* response() { return &response_; }
  // Sends the response if `status` is OK, and `status`.
  void Reply(const grpc::Status& status) { Finish(status, &response_); }

 private:
  void OnStart() override { StartRead(); }
  void OnReadDone(bool ok) override {
    if (absl::Status status = TakeRequest(ok, &request_); !status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    (*handle_)(this);
  }

  const Handler* const handle_;
  Request request_;
  Response response_;
};

// The completion queues and their threads. Start once, from one thread; Stop from any
// thread, any number of times.
class CompletionQueueThreads {
 public:
  // Registers `services` with `builder` and adds `threads` queues (at least 1). The
  // services must outlive this object.
  CompletionQueueThreads(std::vector<RawAsyncService*> services, int threads,
                         grpc::ServerBuilder* builder);
  // Stops if still running.
  ~CompletionQueueThreads();

  CompletionQueueThreads(const CompletionQueueThreads&) = delete;
  CompletionQueueThreads& operator=(const CompletionQueueThreads&) = delete;

  // After the server was built: requests kRequestedPerMethod calls of every method on
  // every queue, and starts the threads. Not after Stop().
  void Start();
  // After the server's Shutdown (or if the build failed): waits for every call that came
  // to end, shuts the queues down, runs what is left on them and joins the threads.
  // Idempotent.
  void Stop();

  int threads() const { return static_cast<int>(queues_.size()); }

  // On one of the queues' threads (in a call's handler run there): queues `work` to run
  // on this same thread once its queue has no completion ready, or after
  // kEventsBeforeIdleWork more at the latest, and returns true. Work that many calls
  // hand over meanwhile (a group commit's writer, say) so runs once for all of them
  // before the thread would sleep, and wakes no other thread. On any other thread,
  // returns false and leaves `work` as it was.
  static bool RunWhenIdle(absl::AnyInvocable<void() &&>& work);

 private:
  friend class AsyncCall;

  // Calls of each method kept requested on each queue: a call that finds none waits in
  // gRPC until one is requested again.
  static constexpr int kRequestedPerMethod = 4;
  // Completions a queue's thread handles while RunWhenIdle's work waits, at most.
  static constexpr int kEventsBeforeIdleWork = 64;

  void Request(RawAsyncService* service, int method, grpc::ServerCompletionQueue* queue);
  void Run(grpc::ServerCompletionQueue* queue);

  const std::vector<RawAsyncService*> services_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  // Calls that came and are not deleted yet.
  std::atomic<int64_t> live_calls_{0};
  std::once_flag stopped_;
};

}  // namespace okl

#endif  // OKL_SERVER_RPC_ASYNC_RPC_H_
