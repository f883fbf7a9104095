// bench/regret_bench.cc
//
// Benchmarks the windowed regret (core/regret.h): one ComputeRegret -- the W x W Gram
// matrix, then Cholesky for the squared loss or SDCA for hinge and logistic -- by window
// size W, on the window a NormaModel really leaves behind: gaussian kernel (gamma = 1/d),
// d = 16, lambda = 0.01, inputs uniform on [-1, 1]^16, labels a smooth function of them plus
// noise (its sign for the classification losses). The model observes 2W examples and the
// window is the last W of them with their online losses.
//
// It also measures what a background regret computation costs a concurrent Observe on
// another model (the RegretScheduler's situation): Observe alone, then Observe while one
// other thread computes the regret of a W = 4096 squared-loss window in a loop. On a
// machine with a free core for that thread the two should be close; what remains is the
// memory bandwidth the comparator takes.
//
// A benchmark, not a test: every figure is wall time per call, and the process exits 0.
// Counters: gap (the comparator's duality gap), epochs (SDCA's; 0 for Cholesky), and
// avg_regret (regret / W).
//
// Example:
//   build/bench/okl_regret_bench                                   # all of it, ~1-2 minutes
//   build/bench/okl_regret_bench --benchmark_filter='ComputeRegret/W:1024'
//   build/bench/okl_regret_bench --benchmark_filter='Observe'
#include <benchmark/benchmark.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/kernel.h"
#include "core/loss.h"
#include "core/norma.h"
#include "core/regret.h"

namespace okl {
namespace {

constexpr uint32_t kDim = 16;
constexpr double kLambda = 0.01;
constexpr double kEta0 = 0.5;
// The model's own budget: Observe then costs a sweep over at most this many terms, so that
// filling an 8192-example window takes well under a second.
constexpr uint32_t kBudget = 1024;
constexpr uint64_t kStreamSeed = 20240611;
constexpr int64_t kWindows[] = {256, 1024, 4096, 8192};
// The window the background thread solves over and over in the Observe benchmark.
constexpr int64_t kBackgroundWindow = 4096;

enum BenchLoss : int64_t { kSquaredLoss = 0, kHingeLoss = 1, kLogisticLoss = 2 };

LossConfig LossFor(int64_t which) {
  switch (which) {
    case kHingeLoss:
      return {.type = LossType::kHinge, .rho = 1.0};
    case kLogisticLoss:
      return {.type = LossType::kLogistic};
    default:
      return {.type = LossType::kSquared};
  }
}

const char* LabelFor(int64_t which) {
  switch (which) {
    case kHingeLoss:
      return "hinge (SDCA)";
    case kLogisticLoss:
      return "logistic (SDCA)";
    default:
      return "squared (Cholesky)";
  }
}

ModelConfig ConfigFor(int64_t which) {
  ModelConfig config;
  config.dim = kDim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0 / kDim};
  config.loss = LossFor(which);
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = kEta0};
  config.lambda = kLambda;
  config.budget = {.max_terms = kBudget, .policy = BudgetPolicy::kOldest};
  return config;
}

struct Example {
  std::vector<double> x;
  double y = 0.0;
};

Example Draw(std::mt19937_64& rng, bool classification) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.1);
  Example e;
  e.x.resize(kDim);
  double sum = 0.0;
  for (double& v : e.x) {
    v = uniform(rng);
    sum += v;
  }
  const double f = std::sin(sum) + noise(rng);
  e.y = classification ? (f >= 0 ? 1.0 : -1.0) : f;
  return e;
}

struct PreparedWindow {
  ModelConfig config;
  double margin = 0.0;
  RegretWindow window;
};

void Die(const absl::Status& status) {
  std::fprintf(stderr, "okl_regret_bench: %s\n", status.ToString().c_str());
  std::exit(1);
}

// Runs a NormaModel over 2W examples and keeps the last W with their online losses.
PreparedWindow Prepare(int64_t w, int64_t which) {
  PreparedWindow prepared;
  prepared.config = ConfigFor(which);
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(prepared.config);
  if (!model.ok()) Die(model.status());
  std::mt19937_64 rng(kStreamSeed + static_cast<uint64_t>(w));
  const bool classification = IsClassificationLoss(prepared.config.loss.type);
  RegretWindow& window = prepared.window;
  for (int64_t t = 0; t < 2 * w; ++t) {
    const Example e = Draw(rng, classification);
    absl::StatusOr<Observation> o = (*model)->Observe(e.x, e.y);
    if (!o.ok()) Die(o.status());
    if (t < w) continue;
    window.xs.insert(window.xs.end(), e.x.begin(), e.x.end());
    window.ys.push_back(e.y);
    window.online_losses.push_back(o->loss);
  }
  window.last_step = static_cast<uint64_t>(2 * w);
  prepared.margin = (*model)->stats().margin;
  return prepared;
}

const PreparedWindow& WindowFor(int64_t w, int64_t which) {
  static auto* windows = new std::map<std::pair<int64_t, int64_t>, PreparedWindow>();
  auto it = windows->find({w, which});
  if (it == windows->end()) it = windows->emplace(std::pair(w, which), Prepare(w, which)).first;
  return it->second;
}

void BM_ComputeRegret(benchmark::State& state) {
  const int64_t w = state.range(0);
  const int64_t which = state.range(1);
  const PreparedWindow& prepared = WindowFor(w, which);
  RegretResult last;
  for (auto _ : state) {
    absl::StatusOr<RegretResult> result =
        ComputeRegret(prepared.config, prepared.margin, prepared.window);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      return;
    }
    last = *result;
    benchmark::DoNotOptimize(last);
  }
  // SDCA's epoch count is not part of RegretResult; one more (untimed, deterministic)
  // solve of the same window reports it.
  const Kernel kernel(prepared.config.kernel, prepared.config.dim);
  const Loss loss(prepared.config.loss);
  absl::StatusOr<ComparatorSolution> solution =
      SolveComparator(kernel, loss, prepared.margin, prepared.config.lambda, prepared.window.xs,
                      prepared.window.ys);
  state.counters["epochs"] = solution.ok() ? solution->epochs : -1;
  state.counters["gap"] = last.duality_gap;
  state.counters["avg_regret"] = last.regret / static_cast<double>(w);
  state.SetLabel(LabelFor(which));
}

// Observe on a model in its steady state (full budget), the pool of inputs cycled.
void RunObserve(benchmark::State& state) {
  const ModelConfig config = ConfigFor(kSquaredLoss);
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  if (!model.ok()) Die(model.status());
  std::mt19937_64 rng(kStreamSeed - 1);
  std::vector<Example> pool;
  for (int i = 0; i < 4096; ++i) pool.push_back(Draw(rng, /*classification=*/false));
  for (uint32_t t = 0; t < 2 * kBudget; ++t) {
    const Example& e = pool[t % pool.size()];
    if (!(*model)->Observe(e.x, e.y).ok()) Die(absl::InternalError("prefill failed"));
  }
  size_t i = 0;
  for (auto _ : state) {
    const Example& e = pool[i++ & (pool.size() - 1)];
    benchmark::DoNotOptimize((*model)->Observe(e.x, e.y));
  }
}

void BM_Observe(benchmark::State& state) { RunObserve(state); }

void BM_ObserveDuringRegret(benchmark::State& state) {
  const PreparedWindow& prepared = WindowFor(kBackgroundWindow, kSquaredLoss);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> computations{0};
  std::thread background([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      benchmark::DoNotOptimize(
          ComputeRegret(prepared.config, prepared.margin, prepared.window));
      computations.fetch_add(1, std::memory_order_relaxed);
    }
  });
  RunObserve(state);
  stop.store(true);
  background.join();
  state.counters["regret_runs"] = static_cast<double>(computations.load());
}

void RegisterBenchmarks() {
  for (int64_t which : {kSquaredLoss, kHingeLoss, kLogisticLoss}) {
    for (int64_t w : kWindows) {
      benchmark::RegisterBenchmark("BM_ComputeRegret", BM_ComputeRegret)
          ->Args({w, which})
          ->ArgNames({"W", "loss"})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(w >= 4096 ? 0.01 : 0.5);  // the large windows: one computation
    }
  }
  benchmark::RegisterBenchmark("BM_Observe", BM_Observe)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // Long enough that several background computations overlap the timed Observes.
  benchmark::RegisterBenchmark("BM_ObserveDuringRegret", BM_ObserveDuringRegret)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(5.0);
}

}  // namespace
}  // namespace okl

int main(int argc, char** argv) {
  okl::RegisterBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
