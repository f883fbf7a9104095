// The regret window a NormaModel keeps, its round trip through ModelState, and the
// background computation: RegretScheduler + ModelEntry publish exactly what ComputeRegret
// gives for the model's window, when the schedule says, and stay safe under concurrent
// batches, deletions and restores (this binary also runs under ThreadSanitizer).

#include "core/runtime/regret_scheduler.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/norma.h"
#include "core/regret.h"
#include "core/runtime/model_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/test_model_key.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

ModelConfig WindowConfig(uint32_t window) {
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  config.lambda = 0.05;
  config.budget = {.max_terms = 64};
  config.regret_window = window;
  return config;
}

// Example t of a smooth 2-d stream.
std::vector<double> X(int t) { return {std::sin(0.7 * t), std::cos(1.3 * t)}; }
double Y(int t) { return std::sin(0.7 * t) * std::cos(1.3 * t) + 0.1 * std::sin(5.0 * t); }

TEST(RegretWindowTest, KeepsTheLastWindowExamplesOldestFirstWithTheirOnlineLosses) {
  std::unique_ptr<NormaModel> model = *NormaModel::Create(WindowConfig(4));
  std::vector<double> losses;
  for (int t = 1; t <= 7; ++t) {
    absl::StatusOr<Observation> o = model->Observe(X(t), Y(t));
    ASSERT_TRUE(o.ok());
    losses.push_back(o->loss);
  }
  const RegretWindow window = model->RegretWindowCopy();
  ASSERT_EQ(window.size(), 4u);
  EXPECT_EQ(window.last_step, 7u);
  for (int k = 0; k < 4; ++k) {
    const int t = 4 + k;  // steps 4..7
    EXPECT_EQ(window.xs[2 * k], X(t)[0]);
    EXPECT_EQ(window.xs[2 * k + 1], X(t)[1]);
    EXPECT_EQ(window.ys[k], Y(t));
    EXPECT_EQ(window.online_losses[k], losses[t - 1]);
  }
}

TEST(RegretWindowTest, IsEmptyWithoutRegretTracking) {
  std::unique_ptr<NormaModel> model = *NormaModel::Create(WindowConfig(0));
  ASSERT_TRUE(model->Observe(X(1), Y(1)).ok());
  EXPECT_EQ(model->RegretWindowCopy().size(), 0u);
  EXPECT_EQ(model->ExportState().regret_window.size(), 0u);
}

TEST(RegretWindowTest, RoundTripsThroughStateAfterWrappingAndContinuesIdentically) {
  std::unique_ptr<NormaModel> model = *NormaModel::Create(WindowConfig(5));
  for (int t = 1; t <= 13; ++t) ASSERT_TRUE(model->Observe(X(t), Y(t)).ok());
  absl::StatusOr<std::unique_ptr<NormaModel>> restored =
      NormaModel::FromState(model->ExportState());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->RegretWindowCopy(), model->RegretWindowCopy());
  for (int t = 14; t <= 20; ++t) {
    ASSERT_TRUE(model->Observe(X(t), Y(t)).ok());
    ASSERT_TRUE((*restored)->Observe(X(t), Y(t)).ok());
  }
  EXPECT_EQ((*restored)->ExportState(), model->ExportState());
}

TEST(RegretWindowTest, FromStateRejectsAnInconsistentWindow) {
  std::unique_ptr<NormaModel> model = *NormaModel::Create(WindowConfig(3));
  for (int t = 1; t <= 5; ++t) ASSERT_TRUE(model->Observe(X(t), Y(t)).ok());
  const ModelState good = model->ExportState();
  struct Case {
    std::string name;
    void (*edit)(ModelState&);
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"longer than regret_window",
       [](ModelState& s) {
         s.regret_window.xs.insert(s.regret_window.xs.end(), {0.0, 0.0});
         s.regret_window.ys.push_back(0.0);
         s.regret_window.online_losses.push_back(0.0);
       },
       "more than regret_window"},
      {"inputs of the wrong size", [](ModelState& s) { s.regret_window.xs.pop_back(); },
       "input values"},
      {"ends before steps", [](ModelState& s) { s.regret_window.last_step = 4; }, "ends at"},
      {"a NaN loss",
       [](ModelState& s) {
         s.regret_window.online_losses[0] = std::numeric_limits<double>::quiet_NaN();
       },
       "regret window loss"},
      {"a negative loss", [](ModelState& s) { s.regret_window.online_losses[1] = -1; },
       "negative"},
  };
  for (const Case& c : cases) {
    ModelState bad = good;
    c.edit(bad);
    absl::StatusOr<std::unique_ptr<NormaModel>> restored = NormaModel::FromState(bad);
    ASSERT_FALSE(restored.ok()) << c.name;
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(restored.status().message(), HasSubstr(c.needle)) << c.name;
  }
}

TEST(RegretWindowTest, ConfigNeedsLambdaForRegret) {
  ModelConfig config = WindowConfig(10);
  config.lambda = 0;
  absl::Status status = ValidateConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("regret_window needs lambda > 0"));
}

// Observes examples [from, to] into `entry`.
void ObserveRange(ModelEntry& entry, int from, int to) {
  std::vector<double> xs, ys;
  for (int t = from; t <= to; ++t) {
    const std::vector<double> x = X(t);
    xs.insert(xs.end(), x.begin(), x.end());
    ys.push_back(Y(t));
  }
  std::vector<Observation> out;
  ASSERT_TRUE(entry.ObserveBatch(xs, ys, &out).ok());
}

// The regret ComputeRegret gives for the entry's current window, computed here.
RegretResult ExpectedRegret(const ModelEntry& entry) {
  absl::StatusOr<ModelState> state = entry.ExportState();
  EXPECT_TRUE(state.ok());
  absl::StatusOr<RegretResult> regret =
      ComputeRegret(state->config, state->margin, state->regret_window);
  EXPECT_TRUE(regret.ok()) << regret.status();
  return *regret;
}

std::optional<RegretResult> PublishedRegret(const ModelEntry& entry) {
  absl::StatusOr<ModelSummary> summary = entry.Summary();
  EXPECT_TRUE(summary.ok());
  return summary->stats.regret;
}

TEST(RegretSchedulerTest, ComputesAfterTheFirstBatchAndThenEveryKSteps) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 10});
  ModelRegistry registry({.max_models = 4, .regret_scheduler = &scheduler});
  std::shared_ptr<ModelEntry> entry = *registry.Create(TestKey("t", "m"), WindowConfig(8));
  EXPECT_FALSE(PublishedRegret(*entry).has_value());

  ObserveRange(*entry, 1, 5);  // first batch: due
  scheduler.WaitIdle();
  std::optional<RegretResult> published = PublishedRegret(*entry);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->last_step, 5u);
  EXPECT_EQ(published->window, 5u);
  const RegretResult expected = ExpectedRegret(*entry);
  EXPECT_EQ(published->regret, expected.regret);
  EXPECT_EQ(published->online_loss, expected.online_loss);

  ObserveRange(*entry, 6, 14);  // 14 < 5 + 10: not due
  scheduler.WaitIdle();
  EXPECT_EQ(PublishedRegret(*entry)->last_step, 5u);

  ObserveRange(*entry, 15, 15);  // 15 = 5 + 10: due
  scheduler.WaitIdle();
  published = PublishedRegret(*entry);
  EXPECT_EQ(published->last_step, 15u);
  EXPECT_EQ(published->window, 8u);
  EXPECT_EQ(published->regret, ExpectedRegret(*entry).regret);
  EXPECT_EQ(scheduler.stats().computations, 2u);
  EXPECT_EQ(scheduler.stats().failures, 0u);
  EXPECT_EQ(scheduler.stats().queued, 0u);
}

TEST(RegretSchedulerTest, ModelsWithoutAWindowAreNeverScheduled) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 1});
  ModelRegistry registry({.max_models = 4, .regret_scheduler = &scheduler});
  std::shared_ptr<ModelEntry> entry = *registry.Create(TestKey("t", "m"), WindowConfig(0));
  ObserveRange(*entry, 1, 5);
  scheduler.WaitIdle();
  EXPECT_EQ(scheduler.stats().computations, 0u);
  EXPECT_FALSE(PublishedRegret(*entry).has_value());
  absl::Status status = entry->ComputeRegret();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("regret_window = 0"));
}

TEST(RegretSchedulerTest, ARestoredModelIsComputedWithoutWaitingForABatch) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 1000});
  ModelRegistry registry({.max_models = 4, .regret_scheduler = &scheduler});
  std::unique_ptr<NormaModel> model = *NormaModel::Create(WindowConfig(6));
  for (int t = 1; t <= 9; ++t) ASSERT_TRUE(model->Observe(X(t), Y(t)).ok());
  std::shared_ptr<ModelEntry> entry = *registry.Put(TestKey("t", "m"), std::move(model));
  scheduler.WaitIdle();
  std::optional<RegretResult> published = PublishedRegret(*entry);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->last_step, 9u);
  EXPECT_EQ(published->regret, ExpectedRegret(*entry).regret);
}

TEST(RegretSchedulerTest, ADeletedModelFailsQuietly) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 1});
  ModelRegistry registry({.max_models = 4, .regret_scheduler = &scheduler});
  std::shared_ptr<ModelEntry> entry = *registry.Create(TestKey("t", "m"), WindowConfig(6));
  ObserveRange(*entry, 1, 3);
  scheduler.WaitIdle();
  ASSERT_TRUE(registry.Delete(TestKey("t", "m")).ok());
  EXPECT_EQ(entry->ComputeRegret().code(), absl::StatusCode::kNotFound);
  scheduler.Schedule(entry);
  scheduler.WaitIdle();
  EXPECT_EQ(scheduler.stats().computations, 2u);
  EXPECT_EQ(scheduler.stats().failures, 1u);
}

// Destruction joins the worker after its current computation and drops the queue: with
// eight windows of 2,048 (a Cholesky solve of tens of milliseconds each) queued within
// a few milliseconds, it returns with most of them never computed. A destructor that
// drained the queue would compute all eight; one that did not join would leak or hang.
TEST(RegretSchedulerTest, StopsWithWorkQueued) {
  auto scheduler = std::make_unique<RegretScheduler>(
      RegretScheduler::Options{.threads = 1, .every_steps = 1});
  ModelRegistry registry({.max_models = 64, .regret_scheduler = scheduler.get()});
  std::vector<std::shared_ptr<ModelEntry>> entries;
  constexpr int kModels = 8;
  for (int i = 0; i < kModels; ++i) {
    entries.push_back(*registry.Create(TestKey("t", absl::StrCat("m", i)), WindowConfig(2048)));
    ObserveRange(*entries.back(), 1, 2048);
  }
  ASSERT_GT(scheduler->stats().queued, 0u);
  scheduler.reset();
  int computed = 0;
  for (const std::shared_ptr<ModelEntry>& entry : entries) {
    absl::StatusOr<ModelSummary> summary = entry->Summary();
    ASSERT_TRUE(summary.ok()) << summary.status();
    computed += summary->stats.regret.has_value();
  }
  EXPECT_LT(computed, kModels);
}

// Writers, readers, deletions and restores against two workers; every published regret
// must be one ComputeRegret gives for some window of the model (checked loosely: finite,
// over at most the window, at a step the model reached).
TEST(RegretSchedulerTest, ConcurrentBatchesPredictsDeletesAndRestores) {
  RegretScheduler scheduler({.threads = 2, .every_steps = 3});
  ModelRegistry registry({.max_models = 8, .regret_scheduler = &scheduler});
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(registry.Create(TestKey("t", name), WindowConfig(16)).ok());
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 60 && !stop; ++round) {
        absl::StatusOr<std::shared_ptr<ModelEntry>> entry =
            registry.Find(TestKey("t", (round + w) % 2 ? "a" : "b"));
        if (!entry.ok()) continue;
        std::vector<double> xs, ys;
        for (int k = 0; k < 4; ++k) {
          const std::vector<double> x = X(round * 4 + k);
          xs.insert(xs.end(), x.begin(), x.end());
          ys.push_back(Y(round * 4 + k));
        }
        std::vector<Observation> out;
        (void)(*entry)->ObserveBatch(xs, ys, &out);
        absl::StatusOr<ModelSummary> summary = (*entry)->Summary();
        if (summary.ok() && summary->stats.regret.has_value()) {
          const RegretResult& r = *summary->stats.regret;
          EXPECT_TRUE(std::isfinite(r.regret));
          EXPECT_LE(r.window, 16u);
          EXPECT_LE(r.last_step, summary->stats.steps);
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int round = 0; round < 20; ++round) {
      absl::StatusOr<std::shared_ptr<ModelEntry>> entry = registry.Find(TestKey("t", "a"));
      if (entry.ok()) {
        absl::StatusOr<ModelState> state = (*entry)->ExportState();
        if (state.ok()) (void)registry.Put(TestKey("t", "a"), *NormaModel::FromState(*state));
      }
      (void)registry.Delete(TestKey("t", "b"));
      (void)registry.Create(TestKey("t", "b"), WindowConfig(16));
    }
  });
  for (std::thread& thread : threads) thread.join();
  scheduler.WaitIdle();
  EXPECT_GT(scheduler.stats().computations, 0u);
}

}  // namespace
}  // namespace okl
