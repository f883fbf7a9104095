// Regret over the wire: a real okl_server computes each model's windowed regret in the
// background, and GetModel reports exactly what core's ComputeRegret gives for the same
// window (fed to a CoreTwin), through batches, a Snapshot/Restore and a restart.

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/norma.h"
#include "core/regret.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

constexpr char kSquaredConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  learning_rate { eta0: 0.4 }
  lambda: 0.05
  budget { max_terms: 1000 }
  regret_window: 40
)pb";

constexpr char kHingeConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { hinge {} }
  learning_rate { eta0: 0.5 }
  lambda: 0.05
  budget { max_terms: 1000 }
  regret_window: 30
)pb";

// The KRLS tracker: its comparator is the Gaussian-process posterior mean on the window
// (lambda = noise_variance / n; core/config.h's ComparatorLambda).
constexpr char kTrackerConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  krls_tracker { max_basis: 20 noise_variance: 0.01 }
  regret_window: 40
)pb";

// Polls GetModel until the regret covers the model's latest step.
absl::StatusOr<v1::ModelInfo> WaitForFreshRegret(v1::OnlineKernelLearning::Stub& stub,
                                                 const v1::ModelRef& ref) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  v1::ModelInfo info;
  while (absl::Now() < deadline) {
    grpc::Status status = GetModel(stub, ref, &info);
    if (!status.ok()) return absl::InternalError(Describe(status));
    if (info.stats().steps() > 0 && info.stats().regret_at_step() == info.stats().steps()) {
      return info;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      RefName(ref), "'s regret never caught up: ", info.stats().ShortDebugString()));
}

// What core computes for the twin's window.
RegretResult CoreRegret(CoreTwin& twin) {
  const ModelState state = twin.model().ExportState();
  absl::StatusOr<RegretResult> regret =
      ComputeRegret(state.config, state.margin, state.regret_window);
  EXPECT_TRUE(regret.ok()) << regret.status();
  return regret.value_or(RegretResult{});
}

std::unique_ptr<ServerProcess> StartServer(ServerProcessOptions options = {}) {
  // First, so that a test's own --regret_every_steps wins (the last occurrence does).
  options.flags.insert(options.flags.begin(), "--regret_every_steps=1");
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

struct LossCase {
  const char* name;
  const char* config;
};

class RegretByLossE2ETest : public ::testing::TestWithParam<LossCase> {};

TEST_P(RegretByLossE2ETest, GetModelReportsTheCoreRegretOfTheLatestWindow) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelRef ref = Ref("regret", "m");
  const v1::ModelConfig config = ParseConfig(GetParam().config);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 150, 5);
  for (const auto& batch : SplitIntoBatches(stream, std::vector<size_t>{7, 25, 1})) {
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, batch, &response)));
    twin->Observe(batch);
  }
  absl::StatusOr<v1::ModelInfo> info = WaitForFreshRegret(server->stub(), ref);
  ASSERT_TRUE(info.ok()) << info.status();
  const RegretResult expected = CoreRegret(*twin);
  EXPECT_EQ(info->stats().regret_examples(), config.regret_window());
  EXPECT_EQ(info->stats().regret_at_step(), 150u);
  // Same code, same window, same machine: the same bits.
  EXPECT_EQ(info->stats().regret(), expected.regret);
  EXPECT_NE(expected.regret, 0.0);
  EXPECT_EQ(info->stats().regret_duality_gap(), expected.duality_gap);
}

INSTANTIATE_TEST_SUITE_P(Losses, RegretByLossE2ETest,
                         ::testing::Values(LossCase{"squared", kSquaredConfig},
                                           LossCase{"hinge", kHingeConfig},
                                           LossCase{"krls_tracker", kTrackerConfig}),
                         [](const ::testing::TestParamInfo<LossCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(RegretE2ETest, ModelsWithoutAWindowReportNoRegret) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  v1::ModelConfig config = ParseConfig(kSquaredConfig);
  config.set_regret_window(0);
  const v1::ModelRef ref = Ref("regret", "none");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(server->stub(), ref, MakeStream(config, 20, 3), &response)));
  absl::SleepFor(absl::Milliseconds(200));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  EXPECT_EQ(info.stats().regret(), 0.0);
  EXPECT_EQ(info.stats().regret_examples(), 0u);
  EXPECT_EQ(info.stats().regret_at_step(), 0u);
}

TEST(RegretE2ETest, ARegretWindowNeedsLambda) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  v1::ModelConfig config = ParseConfig(kSquaredConfig);
  config.set_lambda(0);
  grpc::Status status = CreateModel(server->stub(), Ref("regret", "nolambda"), config);
  EXPECT_TRUE(HasCode(status, grpc::StatusCode::INVALID_ARGUMENT)) << Describe(status);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("regret_window needs lambda"));
}

// A model that goes idle between two every-K computations is caught up by the periodic
// refresh; without it, its regret stays at the first batch.
TEST(RegretE2ETest, AnIdleModelIsRefreshedAfterRegretRefresh) {
  for (const bool refresh : {true, false}) {
    SCOPED_TRACE(refresh ? "--regret_refresh=100ms" : "--regret_refresh=0");
    std::unique_ptr<ServerProcess> server =
        StartServer({.flags = {"--regret_every_steps=1000000",
                               refresh ? "--regret_refresh=100ms" : "--regret_refresh=0"}});
    ASSERT_NE(server, nullptr);
    const v1::ModelConfig config = ParseConfig(kSquaredConfig);
    const v1::ModelRef ref = Ref("regret", "idle");
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
    const std::vector<v1::Example> stream = MakeStream(config, 60, 8);
    const std::vector<std::vector<v1::Example>> batches =
        SplitIntoBatches(stream, std::vector<size_t>{20});
    v1::ObserveResponse response;
    // The first batch is computed at once (the worker copies the window when it runs, so
    // wait for it before the next batches).
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, batches[0], &response)));
    ASSERT_TRUE(WaitForFreshRegret(server->stub(), ref).ok());
    for (size_t i = 1; i < batches.size(); ++i) {
      ASSERT_TRUE(IsOk(Observe(server->stub(), ref, batches[i], &response)));
    }
    if (refresh) {
      absl::StatusOr<v1::ModelInfo> info = WaitForFreshRegret(server->stub(), ref);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->stats().regret_at_step(), 60u);
    } else {
      absl::SleepFor(absl::Milliseconds(500));
      v1::ModelInfo info;
      ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
      EXPECT_EQ(info.stats().regret_at_step(), 20u);  // 40 more examples are not 1000000
    }
  }
}

// The window travels in the snapshot: the restored model reports the same regret without
// another batch, and both continue alike.
TEST(RegretE2ETest, SnapshotAndRestoreCarryTheWindow) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kHingeConfig);
  const v1::ModelRef original = Ref("regret", "original");
  const v1::ModelRef copy = Ref("regret", "copy");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), original, config)));
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(server->stub(), original, MakeStream(config, 80, 9), &response)));
  absl::StatusOr<v1::ModelInfo> before = WaitForFreshRegret(server->stub(), original);
  ASSERT_TRUE(before.ok()) << before.status();
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(server->stub(), original, &bytes)));
  ASSERT_TRUE(IsOk(Restore(server->stub(), copy, bytes)));
  absl::StatusOr<v1::ModelInfo> restored = WaitForFreshRegret(server->stub(), copy);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->stats().regret(), before->stats().regret());
  EXPECT_EQ(restored->stats().regret_at_step(), 80u);

  const std::vector<v1::Example> more = MakeStream(config, 20, 10);
  for (const v1::ModelRef& ref : {original, copy}) {
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, more, &response)));
  }
  absl::StatusOr<v1::ModelInfo> a = WaitForFreshRegret(server->stub(), original);
  absl::StatusOr<v1::ModelInfo> b = WaitForFreshRegret(server->stub(), copy);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->stats().regret(), b->stats().regret());
}

// The window is part of the durable state: after a restart (graceful or not) the model
// reports the regret of the same window, before any new batch.
TEST(RegretE2ETest, TheWindowSurvivesARestart) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "/okl-regret-restart-", getpid());
  const v1::ModelConfig config = ParseConfig(kSquaredConfig);
  const v1::ModelRef ref = Ref("regret", "durable");
  double regret_before = 0;
  {
    std::unique_ptr<ServerProcess> server = StartServer({.data_dir = data_dir});
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, MakeStream(config, 90, 4), &response)));
    absl::StatusOr<v1::ModelInfo> info = WaitForFreshRegret(server->stub(), ref);
    ASSERT_TRUE(info.ok()) << info.status();
    regret_before = info->stats().regret();
    ASSERT_TRUE(server->Kill().ok());  // the examples are in the log, not a checkpoint
  }
  {
    std::unique_ptr<ServerProcess> server = StartServer({.data_dir = data_dir});
    ASSERT_NE(server, nullptr);
    absl::StatusOr<v1::ModelInfo> info = WaitForFreshRegret(server->stub(), ref);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->stats().regret(), regret_before);
    EXPECT_EQ(info->stats().regret_at_step(), 90u);
    ASSERT_TRUE(server->Stop().ok());  // graceful: a final checkpoint holds the window
  }
  {
    std::unique_ptr<ServerProcess> server = StartServer({.data_dir = data_dir});
    ASSERT_NE(server, nullptr);
    absl::StatusOr<v1::ModelInfo> info = WaitForFreshRegret(server->stub(), ref);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->stats().regret(), regret_before);
  }
  std::error_code ignored;
  std::filesystem::remove_all(data_dir, ignored);
}

}  // namespace
}  // namespace okl::testing
