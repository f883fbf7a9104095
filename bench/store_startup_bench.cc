// bench/store_startup_bench.cc
//
// okl_store_startup_bench: the start-up time of okl_server's model store. Writes
// --models models of --terms terms at dimension --dim into a temporary ModelStore (a
// checkpoint each, then --log_batches logged batches of --batch examples), closes it,
// and times what okl_server does before SERVING: open the store and RestoreModels (decode
// every checkpoint, replay every log). Prints the time and PASS/MISS against --target;
// always exits 0 unless the store fails.
//   cmake --build build --target okl_store_startup_bench
//   build/bench/okl_store_startup_bench

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/model_registry.h"
#include "core/norma.h"
#include "server/model_store.h"

ABSL_FLAG(int, models, 1000, "Models in the store.");
ABSL_FLAG(int, terms, 1000, "Terms per model (its budget too).");
ABSL_FLAG(int, dim, 16, "Input dimension.");
ABSL_FLAG(int, log_batches, 10, "Logged batches per model after its checkpoint.");
ABSL_FLAG(int, batch, 10, "Examples per logged batch.");
ABSL_FLAG(absl::Duration, target, absl::Seconds(10), "The start-up time to meet.");
ABSL_FLAG(std::string, dir, "", "Store directory (default: a fresh one under /tmp).");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "okl_store_startup_bench: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int models = absl::GetFlag(FLAGS_models);
  const int terms = absl::GetFlag(FLAGS_terms);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int log_batches = absl::GetFlag(FLAGS_log_batches);
  const int batch = absl::GetFlag(FLAGS_batch);
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() /
           absl::StrCat("okl_store_startup_bench_", getpid()))
              .string();
  }
  std::filesystem::remove_all(dir);

  okl::ModelConfig config;
  config.dim = dim;
  config.kernel = {.type = okl::KernelType::kGaussian, .gamma = 0.1};
  config.loss = {.type = okl::LossType::kSquared};
  config.learning_rate = {.schedule = okl::Schedule::kConstant, .eta0 = 0.1};
  config.lambda = 0.001;
  config.budget = {.max_terms = static_cast<uint32_t>(terms)};

  // A full model's state: `terms` terms, as NORMA leaves it after `terms` steps.
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal;
  auto full_state = [&] {
    okl::ModelState state;
    state.config = config;
    state.steps = terms;
    for (int i = 0; i < terms; ++i) {
      for (int j = 0; j < dim; ++j) state.support.push_back(normal(rng));
      state.coefficients.push_back(0.1 + std::abs(normal(rng)));
      state.added_at.push_back(i + 1);
    }
    state.scale = 0.5;
    state.cumulative_loss = 123.0;
    return state;
  };

  const absl::Time write_start = absl::Now();
  {
    auto store = okl::ModelStore::Open(dir, {});
    if (!store.ok()) return Fail(store.status());
    std::vector<double> xs(batch * dim), ys(batch);
    for (int m = 0; m < models; ++m) {
      auto log =
          (*store)->ReplaceModel("bench", absl::StrCat("model-", m), full_state(), nullptr);
      if (!log.ok()) return Fail(log.status());
      for (int b = 0; b < log_batches; ++b) {
        for (double& x : xs) x = normal(rng);
        for (double& y : ys) y = normal(rng);
        if (absl::Status s = (*log)->Append(okl::InputBatch::Dense(xs, dim), ys); !s.ok()) {
          return Fail(s);
        }
      }
    }
  }
  std::printf("wrote %d models x %d terms at d=%d (+%d batches of %d logged) in %.2f s\n",
              models, terms, dim, log_batches, batch,
              absl::ToDoubleSeconds(absl::Now() - write_start));

  // What okl_server does before SERVING.
  const absl::Time start = absl::Now();
  auto store = okl::ModelStore::Open(dir, {});
  if (!store.ok()) return Fail(store.status());
  okl::ModelRegistry registry({.max_models = static_cast<size_t>(models)});
  auto stats = okl::RestoreModels(store->get(), &registry, {});
  if (!stats.ok()) return Fail(stats.status());
  const absl::Duration elapsed = absl::Now() - start;
  const absl::Duration target = absl::GetFlag(FLAGS_target);
  std::printf(
      "start-up: restored %zu models (%llu log batches, %llu examples replayed) in %.3f s "
      "(RestoreModels %.3f s): %s (target < %s)\n",
      stats->models, static_cast<unsigned long long>(stats->log_batches),
      static_cast<unsigned long long>(stats->log_examples), absl::ToDoubleSeconds(elapsed),
      absl::ToDoubleSeconds(stats->elapsed), elapsed < target ? "PASS" : "MISS",
      absl::FormatDuration(target).c_str());
  store->reset();
  if (absl::GetFlag(FLAGS_dir).empty()) std::filesystem::remove_all(dir);
  return 0;
}
