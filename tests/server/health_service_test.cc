// tests/server/health_service_test.cc
//
// HealthService and the completion-queue engine under it (server/rpc/async_rpc.h), on a real
// gRPC server on a loopback port: Check and Watch as grpc.health.v1 specifies them, what
// Shutdown() does to open watches, and that the engine stops cleanly with calls of every
// kind in flight, on one queue and on several.

#include "server/rpc/health_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/rpc/async_rpc.h"
#include "tests/server/server_process.h"

namespace okl {
namespace {

using ::okl::testing::CheckHealth;
using ::okl::testing::HealthWatch;
using ::okl::testing::ServingStatus;

// HealthService alone on a server of `threads` queues.
class HealthServer {
 public:
  explicit HealthServer(int threads) {
    grpc::EnableDefaultHealthCheckService(false);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    queues_.emplace(std::vector<RawAsyncService*>{&health_}, threads, &builder);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    queues_->Start();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
  }
  ~HealthServer() { Shutdown(absl::Milliseconds(200)); }

  void Shutdown(absl::Duration grace) {
    if (server_ == nullptr) return;
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
    queues_->Stop();
    server_.reset();
  }

  HealthService& health() { return health_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  HealthService health_;
  int port_ = 0;
  std::optional<CompletionQueueThreads> queues_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

class HealthServiceTest : public ::testing::TestWithParam<int> {};

TEST_P(HealthServiceTest, CheckAnswersTheStatusSetAndNotFoundForAnUnknownService) {
  HealthServer server(GetParam());
  server.health().SetServing("", true);
  server.health().SetServing("a.B", false);
  absl::StatusOr<ServingStatus> whole = CheckHealth(server.channel(), "");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, ServingStatus::kServing);
  absl::StatusOr<ServingStatus> service = CheckHealth(server.channel(), "a.B");
  ASSERT_TRUE(service.ok()) << service.status();
  EXPECT_EQ(*service, ServingStatus::kNotServing);
  absl::StatusOr<ServingStatus> unknown = CheckHealth(server.channel(), "no.Such");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_NE(unknown.status().message().find("no.Such"), absl::string_view::npos);
}

TEST_P(HealthServiceTest, WatchSendsTheStatusThenEachChangeOnly) {
  HealthServer server(GetParam());
  server.health().SetServing("s", true);
  HealthWatch watch(server.channel(), "s", absl::Seconds(10));
  ASSERT_EQ(watch.Next(), ServingStatus::kServing);
  server.health().SetServing("s", true);  // no change: nothing is sent
  server.health().SetServing("other", false);
  server.health().SetServing("s", false);
  EXPECT_EQ(watch.Next(), ServingStatus::kNotServing);
  server.health().SetServing("s", true);
  EXPECT_EQ(watch.Next(), ServingStatus::kServing);
  watch.Cancel();
  EXPECT_EQ(watch.Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_P(HealthServiceTest, WatchOfAnUnknownServiceSendsServiceUnknownThenItsStatus) {
  HealthServer server(GetParam());
  HealthWatch watch(server.channel(), "later", absl::Seconds(10));
  ASSERT_EQ(watch.Next(), ServingStatus::kServiceUnknown);
  server.health().SetServing("later", true);
  EXPECT_EQ(watch.Next(), ServingStatus::kServing);
}

TEST_P(HealthServiceTest, ShutdownSendsNotServingThenEndsEveryWatchAndRefusesNewOnes) {
  HealthServer server(GetParam());
  server.health().SetServing("", true);
  std::vector<std::unique_ptr<HealthWatch>> watches;
  for (int i = 0; i < 5; ++i) {
    watches.push_back(std::make_unique<HealthWatch>(server.channel(), "", absl::Seconds(10)));
    ASSERT_EQ(watches.back()->Next(), ServingStatus::kServing);
  }
  server.health().Shutdown();
  for (const std::unique_ptr<HealthWatch>& watch : watches) {
    EXPECT_EQ(watch->Next(), ServingStatus::kNotServing);
    EXPECT_EQ(watch->Next(), std::nullopt);
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  HealthWatch late(server.channel(), "", absl::Seconds(10));
  EXPECT_EQ(late.Next(), std::nullopt);
  EXPECT_EQ(late.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  absl::StatusOr<ServingStatus> check = CheckHealth(server.channel(), "");
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(*check, ServingStatus::kNotServing);
}

// The engine's shutdown: gRPC's Shutdown returns once the connections are closed, and
// Stop() must still see every call to its end (an event after a queue's shutdown is fatal
// in gRPC). Checks and watches race the shutdown, on every queue.
TEST_P(HealthServiceTest, StopsCleanlyWithCallsInFlight) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    HealthServer server(GetParam());
    server.health().SetServing("", true);
    std::vector<std::unique_ptr<HealthWatch>> watches;
    for (int i = 0; i < 8; ++i) {
      watches.push_back(std::make_unique<HealthWatch>(server.channel(), "", absl::Seconds(10)));
      ASSERT_EQ(watches.back()->Next(), ServingStatus::kServing);
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> checkers;
    for (int t = 0; t < 4; ++t) {
      checkers.emplace_back([&] {
        // Each call's outcome may be SERVING, or an error once the server is going.
        while (!stop.load()) (void)CheckHealth(server.channel(), "", absl::Seconds(2));
      });
    }
    absl::SleepFor(absl::Milliseconds(50));
    server.Shutdown(absl::ZeroDuration());
    stop.store(true);
    for (std::thread& checker : checkers) checker.join();
    // Each open watch was cancelled by the shutdown.
    for (const std::unique_ptr<HealthWatch>& watch : watches) {
      EXPECT_NE(watch->Finish().error_code(), grpc::StatusCode::OK);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Queues, HealthServiceTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "Queues");
                         });

}  // namespace
}  // namespace okl
