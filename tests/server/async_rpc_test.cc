// The async serving layer (server/rpc/async_rpc.h) on its own: a small test service on
// CompletionQueueThreads and a real gRPC server on a loopback port, called through the
// generated okl.v1 stub (the layer serves methods by name, so the test service answers
// three of okl's methods with behaviour of its own). Covered: a unary call answered on
// the queue's thread and one answered later from another thread; calls answered by work
// run when their queue is idle, on their queue's thread; an error status with no
// response; a request that does not parse; a client stream read to its end; a server
// stream; more calls at once than are kept requested; a call cancelled by its deadline
// that ends (OnDone, cancelled) and is deleted; and Stop after Shutdown leaving no call
// behind.

#include "server/rpc/async_rpc.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

constexpr char kGetModel[] = "/okl.v1.OnlineKernelLearning/GetModel";
constexpr char kObserveStream[] = "/okl.v1.OnlineKernelLearning/ObserveStream";
constexpr char kSnapshot[] = "/okl.v1.OnlineKernelLearning/Snapshot";

// Calls alive (constructed and not deleted) and calls that saw OnDone cancelled.
std::atomic<int> live_calls{0};
std::atomic<int> cancelled_calls{0};

// Counts itself, so a test can see every call deleted.
class CountedCall : public AsyncCall {
 public:
  CountedCall() { ++live_calls; }
  ~CountedCall() override { --live_calls; }

 protected:
  void OnDone() override {
    if (context()->IsCancelled()) ++cancelled_calls;
  }
};

// ObserveStream: sums the labels of every example of every message until the client
// half-closes, then answers with the sum as its one prediction.
class SumStream final : public CountedCall {
  void OnStart() override { StartRead(); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      response_.add_predictions(sum_);
      response_.set_steps(messages_);
      Finish(grpc::Status::OK, &response_);
      return;
    }
    v1::ObserveRequest request;
    if (absl::Status status = TakeMessage(&request); !status.ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(status.message())));
      return;
    }
    for (const v1::Example& example : request.examples()) sum_ += example.y();
    ++messages_;
    StartRead();
  }

  double sum_ = 0;
  uint64_t messages_ = 0;
  v1::ObserveResponse response_;
};

// Snapshot: one chunk per character of the model's name ("abc": "a", "b", "c"), each
// written after the last one's completion, then OK.
class LetterStream final : public CountedCall {
  void OnStart() override { StartRead(); }
  void OnReadDone(bool ok) override {
    if (absl::Status status = TakeRequest(ok, &request_); !status.ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(status.message())));
      return;
    }
    WriteNext();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    WriteNext();
  }
  void WriteNext() {
    if (next_ == request_.model().size()) {
      Finish(grpc::Status::OK);
      return;
    }
    v1::SnapshotChunk chunk;
    chunk.set_data(request_.model().substr(next_++, 1));
    StartWrite(chunk);
  }

  v1::ModelRef request_;
  size_t next_ = 0;
};

// GetModel, by the model's name: "inline" answers on the queue's thread with the ref
// echoed; "later" from another thread after 20 ms; "idle" from RunWhenIdle's work, with
// the thread it ran on in the ref's model; "missing" NOT_FOUND; "hold" only once
// the call is cancelled; "gather" once kGathered gather calls are all waiting.
class GetModelCall final : public CountedCall {
 public:
  explicit GetModelCall(std::atomic<int>* gathering) : gathering_(gathering) {}

 private:
  static constexpr int kGathered = 12;

  void OnStart() override { StartRead(); }
  void OnReadDone(bool ok) override {
    if (absl::Status status = TakeRequest(ok, &request_); !status.ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(status.message())));
      return;
    }
    *response_.mutable_ref() = request_;
    const std::string& name = request_.model();
    if (name == "inline") {
      Finish(grpc::Status::OK, &response_);
    } else if (name == "later") {
      std::thread([this] {
        absl::SleepFor(absl::Milliseconds(20));
        Finish(grpc::Status::OK, &response_);
      }).detach();
    } else if (name == "idle") {
      // By work run when the queue has nothing ready: on this thread, after this handler.
      const std::thread::id handler_thread = std::this_thread::get_id();
      absl::AnyInvocable<void()&&> answer = [this, handler_thread] {
        response_.mutable_ref()->set_model(std::this_thread::get_id() == handler_thread
                                               ? "idle: on the handler's thread"
                                               : "idle: on another thread");
        Finish(grpc::Status::OK, &response_);
      };
      if (!CompletionQueueThreads::RunWhenIdle(answer)) {
        Finish(
            grpc::Status(grpc::StatusCode::INTERNAL, "RunWhenIdle refused a queue's thread"));
      }
    } else if (name == "missing") {
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no model \"missing\""), &response_);
    } else if (name == "hold") {
      std::thread([this] {
        while (!context()->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      }).detach();
    } else if (name == "gather") {
      // Each waits on its own thread until all have arrived: they are all outstanding at
      // once, more than the calls kept requested per queue.
      gathering_->fetch_add(1);
      std::thread([this] {
        const absl::Time give_up = absl::Now() + absl::Seconds(20);
        while (gathering_->load() < kGathered && absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        Finish(grpc::Status::OK, &response_);
      }).detach();
    } else {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown test model"));
    }
  }

  std::atomic<int>* const gathering_;
  v1::ModelRef request_;
  v1::ModelInfo response_;
};

class TestService final : public RawAsyncService {
 public:
  TestService() {
    AddRawMethod(kGetModel, [this] { return new GetModelCall(&gathering_); });
    AddRawMethod(kObserveStream, [] { return new SumStream; });
    AddRawMethod(kSnapshot, [] { return new LetterStream; });
  }

 private:
  std::atomic<int> gathering_{0};
};

class AsyncRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    live_calls = 0;
    cancelled_calls = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    threads_ =
        std::make_unique<CompletionQueueThreads>(std::vector<RawAsyncService*>{&service_},
                                                 /*threads=*/2, &builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    threads_->Start();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::OnlineKernelLearning::NewStub(channel_);
  }

  void TearDown() override { StopServer(); }

  void StopServer() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    threads_->Stop();
    server_.reset();
  }

  grpc::Status GetModel(const std::string& model, v1::ModelInfo* info,
                        absl::Duration timeout = absl::Seconds(20)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::ModelRef ref;
    ref.set_tenant("t");
    ref.set_model(model);
    return stub_->GetModel(&context, ref, info);
  }

  TestService service_;
  int port_ = 0;
  std::unique_ptr<CompletionQueueThreads> threads_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::OnlineKernelLearning::Stub> stub_;
};

TEST_F(AsyncRpcTest, AUnaryCallIsAnsweredInlineOrLaterFromAnotherThread) {
  EXPECT_EQ(threads_->threads(), 2);
  for (const char* model : {"inline", "later"}) {
    v1::ModelInfo info;
    const grpc::Status status = GetModel(model, &info);
    ASSERT_TRUE(status.ok()) << model << ": " << status.error_message();
    EXPECT_EQ(info.ref().tenant(), "t");
    EXPECT_EQ(info.ref().model(), model);
  }
}

TEST_F(AsyncRpcTest, WorkRunWhenIdleRunsOnTheQueuesThreadForEveryCallThatHandedSomeOver) {
  // Many at once, so that work of several calls waits together.
  constexpr int kCallers = 24;
  std::vector<std::string> answers(kCallers);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([this, i, &answers] {
      v1::ModelInfo info;
      const grpc::Status status = GetModel("idle", &info);
      answers[i] = status.ok() ? info.ref().model() : status.error_message();
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (const std::string& answer : answers) EXPECT_EQ(answer, "idle: on the handler's thread");

  // Any other thread is refused, and its work left to it.
  bool ran = false;
  absl::AnyInvocable<void()&&> work = [&ran] { ran = true; };
  EXPECT_FALSE(CompletionQueueThreads::RunWhenIdle(work));
  ASSERT_NE(work, nullptr);
  std::move(work)();
  EXPECT_TRUE(ran);
}

TEST_F(AsyncRpcTest, AnErrorStatusCarriesItsMessageAndNoResponse) {
  v1::ModelInfo info;
  const grpc::Status status = GetModel("missing", &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no model \"missing\"");
  EXPECT_FALSE(info.has_ref());
}

TEST_F(AsyncRpcTest, ARequestThatDoesNotParseIsInvalidArgument) {
  grpc::ClientContext context;
  grpc::ByteBuffer garbage;
  const std::string bytes = "\xff\xff\xff\xff";  // a field with an invalid tag
  grpc::Slice slice(bytes);
  garbage = grpc::ByteBuffer(&slice, 1);
  grpc::ByteBuffer response;
  const grpc::Status status =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel_.get(),
          grpc::internal::RpcMethod(kGetModel, grpc::internal::RpcMethod::NORMAL_RPC), &context,
          garbage, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("does not parse as okl.v1.ModelRef"));
}

TEST_F(AsyncRpcTest, AClientStreamIsReadToItsEnd) {
  grpc::ClientContext context;
  v1::ObserveResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      stub_->ObserveStream(&context, &response);
  double expected = 0;
  for (int m = 0; m < 50; ++m) {
    v1::ObserveRequest request;
    for (int e = 0; e < 3; ++e) {
      request.add_examples()->set_y(m + 0.25 * e);
      expected += m + 0.25 * e;
    }
    ASSERT_TRUE(writer->Write(request));
  }
  ASSERT_TRUE(writer->WritesDone());
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.predictions_size(), 1);
  EXPECT_EQ(response.predictions(0), expected);
  EXPECT_EQ(response.steps(), 50u);
}

TEST_F(AsyncRpcTest, AServerStreamSendsEveryMessageInOrder) {
  grpc::ClientContext context;
  v1::ModelRef ref;
  ref.set_model("streamed");
  std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader =
      stub_->Snapshot(&context, ref);
  std::string got;
  v1::SnapshotChunk chunk;
  while (reader->Read(&chunk)) got += chunk.data();
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got, "streamed");
}

TEST_F(AsyncRpcTest, MoreCallsAtOnceThanAreKeptRequestedAreAllServed) {
  std::vector<std::thread> callers;
  std::atomic<int> served{0};
  for (int i = 0; i < 12; ++i) {
    callers.emplace_back([&] {
      v1::ModelInfo info;
      if (GetModel("gather", &info).ok() && info.ref().model() == "gather") ++served;
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(served.load(), 12);
}

TEST_F(AsyncRpcTest, ACallCancelledByItsDeadlineEndsAndIsDeleted) {
  const int requested = live_calls.load();  // the calls kept requested, none arrived
  v1::ModelInfo info;
  const grpc::Status status = GetModel("hold", &info, absl::Milliseconds(100));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's side sees the cancellation, finishes, and the call deletes itself; the
  // one requested in its place when it arrived keeps the count.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (cancelled_calls.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(cancelled_calls.load(), 1);
  while (live_calls.load() > requested && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(live_calls.load(), requested);
}

TEST_F(AsyncRpcTest, StopAfterShutdownLeavesNoCallBehind) {
  v1::ModelInfo info;
  ASSERT_TRUE(GetModel("later", &info).ok());
  EXPECT_GT(live_calls.load(), 0);  // the calls kept requested
  StopServer();
  EXPECT_EQ(live_calls.load(), 0);
}

}  // namespace
}  // namespace okl
