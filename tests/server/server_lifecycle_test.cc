// tests/server/server_lifecycle_test.cc
//
// okl_server as a process: the port file, a port in use, invalid flags, health from
// start-up to draining, SIGTERM and SIGINT drains (in-flight streams complete, new calls
// are refused, exit 0), calls that outlive the grace period, SIGKILL, and the reflection
// flag. Part of okl_server_e2e_test.

#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using ::testing::HasSubstr;
using Code = ::grpc::StatusCode;

class ServerLifecycleTest : public ::testing::Test {
 protected:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> flags = {}) {
    return ServerProcess::Start({.flags = std::move(flags)});
  }

  static void ExpectExitedZero(const absl::StatusOr<int>& exit, ServerProcess& server) {
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
        << "wait status " << *exit << "; log:\n"
        << server.Log();
  }
};

TEST_F(ServerLifecycleTest, PortFileHoldsTheBoundPortAndANewlineOnceServing) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->port_file_contents(), absl::StrCat((*server)->port(), "\n"));
  for (const char* service : {"", "okl.v1.OnlineKernelLearning"}) {
    absl::StatusOr<ServingStatus> health = CheckHealth((*server)->channel(), service);
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, ServingStatus::kServing) << "\"" << service << "\"";
  }
  ExpectExitedZero((*server)->Stop(), **server);
}

TEST_F(ServerLifecycleTest, APortInUseIsAStartupErrorNotASharedPort) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> first = Start();
  ASSERT_TRUE(first.ok()) << first.status();
  ServerProcessOptions options;
  options.listen = absl::StrCat("127.0.0.1:", (*first)->port());
  options.wait_until_serving = false;
  absl::StatusOr<std::unique_ptr<ServerProcess>> second = ServerProcess::Start(options);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<int> exit = (*second)->WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << "wait status " << *exit;
  EXPECT_FALSE((*second)->WaitUntilServing().ok()) << "it wrote a port file";
  ExpectExitedZero((*first)->Stop(), **first);
}

TEST_F(ServerLifecycleTest, InvalidFlagValuesStopTheServerAtStartup) {
  for (const char* flag :
       {"--max_batch=0", "--max_models=0", "--max_dim=65537", "--max_terms=0",
        "--max_message_bytes=0", "--shutdown_grace=-1s", "--listen=not-an-address",
        "--regret_every_steps=0", "--regret_threads=0", "--regret_refresh=-1s",
        "--metrics_address=not-an-address"}) {
    SCOPED_TRACE(flag);
    ServerProcessOptions options;
    options.flags = {flag};
    options.wait_until_serving = false;
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    absl::StatusOr<int> exit = (*server)->WaitForExit(absl::Seconds(10));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << "wait status " << *exit;
    EXPECT_THAT((*server)->Log(),
                HasSubstr(std::string(flag).substr(0, std::string(flag).find('='))));
  }
}

TEST_F(ServerLifecycleTest, HealthWatchFromStartupSeesNotServingAtMostThenServing) {
  absl::StatusOr<int> port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  ServerProcessOptions options;
  options.listen = absl::StrCat("127.0.0.1:", *port);
  options.wait_until_serving = false;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // Watches opened before the server listens: they connect as soon as it does.
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", *port));
  for (const char* service : {"okl.v1.OnlineKernelLearning", ""}) {
    SCOPED_TRACE(absl::StrCat("service \"", service, "\""));
    HealthWatch watch(channel, service, absl::Seconds(20), /*wait_for_ready=*/true);
    std::vector<ServingStatus> seen;
    while (seen.empty() || seen.back() != ServingStatus::kServing) {
      std::optional<ServingStatus> next = watch.Next();
      if (!next.has_value()) break;
      seen.push_back(*next);
    }
    watch.Cancel();
    ASSERT_FALSE(seen.empty()) << FromGrpcStatus(watch.Finish());
    EXPECT_EQ(seen.back(), ServingStatus::kServing);
    for (size_t i = 0; i + 1 < seen.size(); ++i) {
      EXPECT_EQ(seen[i], ServingStatus::kNotServing) << ServingStatusName(seen[i]);
    }
  }
  ASSERT_TRUE((*server)->WaitUntilServing().ok());
  EXPECT_EQ((*server)->port(), *port);
  ExpectExitedZero((*server)->Stop(), **server);
}

// okl_server serves its calls on --rpc_threads completion queues; draining must work with
// one queue and with several (a stream and the calls refused beside it on others).
class ServerDrainTest : public ServerLifecycleTest,
                        public ::testing::WithParamInterface<std::string> {};

TEST_P(ServerDrainTest, SigtermLetsAnInFlightStreamCompleteRefusesNewCallsAndExitsZero) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      Start({"--shutdown_grace=20s", absl::StrCat("--rpc_threads=", GetParam())});
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = **server;
  const v1::ModelRef ref = Ref("drain", "stream");
  const v1::ModelConfig config = ParseConfig(kRegressionConfig);
  ASSERT_TRUE(IsOk(CreateModel(process.stub(), ref, config)));
  const std::vector<v1::Example> stream = MakeStream(config, 50, 12);
  const auto batches = SplitIntoBatches(stream, std::vector<size_t>{10});

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      process.stub().ObserveStream(&context, &response);
  v1::ObserveRequest first;
  *first.mutable_ref() = ref;
  first.mutable_examples()->Add(batches[0].begin(), batches[0].end());
  ASSERT_TRUE(writer->Write(first));
  // The first message is applied: the call is in flight on the server.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  v1::ModelInfo info;
  while (absl::Now() < deadline) {
    ASSERT_TRUE(IsOk(GetModel(process.stub(), ref, &info)));
    if (info.stats().steps() == 10) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(info.stats().steps(), 10u);

  ASSERT_TRUE(process.Signal(SIGTERM).ok());
  // Draining: new calls are refused (UNAVAILABLE) within a bounded time. A call that
  // races gRPC's own shutdown (accepted, then never started) may end CANCELLED instead;
  // that is gRPC's doing and transient, so only UNAVAILABLE ends the wait.
  grpc::Status fresh;
  while (absl::Now() < deadline + absl::Seconds(10)) {
    const std::shared_ptr<grpc::Channel> channel = process.NewChannel();
    std::unique_ptr<Stub> stub = v1::OnlineKernelLearning::NewStub(channel);
    fresh = GetModel(*stub, ref, &info);
    if (fresh.error_code() != Code::OK && fresh.error_code() != Code::CANCELLED) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(HasCode(fresh, Code::UNAVAILABLE)) << "a new call while draining";
  ASSERT_TRUE(process.Running()) << "exited with the stream in flight: " << process.Log();

  // The in-flight stream goes on and completes.
  for (size_t i = 1; i < batches.size(); ++i) {
    v1::ObserveRequest request;
    request.mutable_examples()->Add(batches[i].begin(), batches[i].end());
    ASSERT_TRUE(writer->Write(request)) << "message " << i;
  }
  ASSERT_TRUE(writer->WritesDone());
  ASSERT_TRUE(IsOk(writer->Finish()));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  EXPECT_EQ(Bits(response.predictions()), Bits(PredictionsOf(twin->Observe(stream))));
  EXPECT_EQ(response.steps(), 50u);

  // Then the server exits, well before the grace period ends.
  ExpectExitedZero(process.WaitForExit(absl::Seconds(15)), process);
}

INSTANTIATE_TEST_SUITE_P(RpcThreads, ServerDrainTest, ::testing::Values("1", "3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return absl::StrCat(info.param, "Threads");
                         });

TEST_F(ServerLifecycleTest, HealthWatchReportsNotServingOnceDraining) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start({"--shutdown_grace=5s"});
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = **server;
  HealthWatch watch(process.channel(), "okl.v1.OnlineKernelLearning", absl::Seconds(15));
  std::optional<ServingStatus> status = watch.Next();
  ASSERT_TRUE(status.has_value()) << FromGrpcStatus(watch.Finish());
  ASSERT_EQ(*status, ServingStatus::kServing);

  ASSERT_TRUE(process.Signal(SIGTERM).ok());
  status = watch.Next();
  ASSERT_TRUE(status.has_value())
      << "the watch ended without NOT_SERVING: " << FromGrpcStatus(watch.Finish());
  EXPECT_EQ(*status, ServingStatus::kNotServing) << ServingStatusName(*status);
  watch.Cancel();  // the watch would otherwise keep the server for the grace period
  watch.Finish();
  ExpectExitedZero(process.WaitForExit(absl::Seconds(15)), process);
}

TEST_F(ServerLifecycleTest, SigintDrainsAndExitsZeroLikeSigterm) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(
      IsOk(CreateModel((*server)->stub(), Ref("t", "m"), ParseConfig(kRegressionConfig))));
  ASSERT_TRUE((*server)->Signal(SIGINT).ok());
  // Idle, it need not wait for the grace period (10 s by default).
  ExpectExitedZero((*server)->WaitForExit(absl::Seconds(8)), **server);
}

TEST_F(ServerLifecycleTest, CallsOutlivingTheGracePeriodAreCancelledAndTheServerExits) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start({"--shutdown_grace=1s"});
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = **server;
  const v1::ModelRef ref = Ref("grace", "m");
  const v1::ModelConfig config = ParseConfig(kRegressionConfig);
  ASSERT_TRUE(IsOk(CreateModel(process.stub(), ref, config)));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      process.stub().ObserveStream(&context, &response);
  v1::ObserveRequest first;
  *first.mutable_ref() = ref;
  const std::vector<v1::Example> examples = MakeStream(config, 3, 13);
  first.mutable_examples()->Add(examples.begin(), examples.end());
  ASSERT_TRUE(writer->Write(first));

  const absl::Time signalled = absl::Now();
  ASSERT_TRUE(process.Signal(SIGTERM).ok());
  // The stream stays open past the grace period: the server ends it and exits.
  absl::StatusOr<int> exit = process.WaitForExit(absl::Seconds(15));
  ExpectExitedZero(exit, process);
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10));
  EXPECT_FALSE(writer->Finish().ok());
}

TEST_F(ServerLifecycleTest, SigkillStopsTheServerAtOnce) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> exit = (*server)->Kill();
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFSIGNALED(*exit) && WTERMSIG(*exit) == SIGKILL) << *exit;
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel((*server)->stub(), Ref("t", "m"), &info), Code::UNAVAILABLE));
}

TEST_F(ServerLifecycleTest, ReflectionCanBeTurnedOff) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = Start({"--reflection=false"});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::vector<std::string>> services =
      ListServicesByReflection((*server)->channel());
  EXPECT_EQ(services.status().code(), absl::StatusCode::kUnimplemented) << services.status();
  ExpectExitedZero((*server)->Stop(), **server);
}

}  // namespace
}  // namespace okl::testing
