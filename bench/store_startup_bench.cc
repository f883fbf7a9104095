// bench/store_startup_bench.cc
//
// okl_store_startup_bench: okl_server's restart time and memory at scale. Writes
// --models models of --terms terms at dimension --dim into a temporary ModelStore (a
// checkpoint each, then --log_batches logged batches of --batch examples), closes it,
// and times what okl_server does before SERVING: open the store and RestoreModels (decode
// every checkpoint, replay every log), in this process. With --spawn_server it then
// starts that okl_server binary on the store and measures the whole restart, from exec
// to SERVING, and the server's resident memory once SERVING against the models' raw
// bytes (terms x (dim + 1) doubles each: the support vectors and coefficients).
// Prints PASS/MISS against --target and --max_rss_ratio, and as its last line one JSON
// object; exits 0 unless the store or the server fails.
// The defaults are the scale a server is sized for: 10,000 models x 100 terms at d = 16 and
// 1,000,000 logged examples to replay.
//   cmake --build build --target okl_store_startup_bench okl_server
//   build/bench/okl_store_startup_bench --spawn_server=build/server/okl_server

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/spawned_server.h"
#include "core/norma.h"
#include "core/runtime/model_registry.h"
#include "core/status_macros.h"
#include "server/model_store.h"

ABSL_FLAG(int, models, 10000, "Models in the store.");
ABSL_FLAG(int, terms, 100, "Terms per model (its budget too).");
ABSL_FLAG(int, dim, 16, "Input dimension.");
ABSL_FLAG(int, log_batches, 10, "Logged batches per model after its checkpoint.");
ABSL_FLAG(int, batch, 10, "Examples per logged batch.");
ABSL_FLAG(absl::Duration, target, absl::Seconds(10), "The start-up time to meet.");
ABSL_FLAG(double, max_rss_ratio, 1.5,
          "The most the spawned server's resident memory may be over the models' raw bytes.");
ABSL_FLAG(std::string, dir, "", "Store directory (default: a fresh one under /tmp).");
ABSL_FLAG(std::string, spawn_server, "",
          "An okl_server binary: also restart it on the store and measure it (see above).");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "okl_store_startup_bench: %s\n", status.ToString().c_str());
  return 1;
}

struct ServerRestart {
  absl::Duration to_serving;
  uint64_t rss_bytes = 0;   // once SERVING
  uint64_t peak_bytes = 0;  // the most it held, restore included
};

// Starts `binary` on the store in `dir` and measures it until SERVING; then stops it.
// Bytes malloc has handed out and not taken back (small blocks and mmapped ones).
double HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

absl::StatusOr<ServerRestart> RestartServer(const std::string& binary, const std::string& dir,
                                            int models) {
  const absl::Time start = absl::Now();
  OKL_ASSIGN_OR_RETURN(
      std::unique_ptr<okl::testing::SpawnedServer> server,
      okl::testing::SpawnedServer::Start(
          {.binary = binary,
           .flags = {absl::StrCat("--max_models=", std::max(models, 1)),
                     "--metrics_address="},
           .data_dir = dir,
           .capture_output = false}));
  // The port file is written once the server is SERVING, every model restored.
  OKL_RETURN_IF_ERROR(server->WaitForPort(absl::Now() + absl::Minutes(10)).status());
  ServerRestart restart{.to_serving = absl::Now() - start};
  OKL_ASSIGN_OR_RETURN(restart.rss_bytes, okl::testing::ProcStatusBytes(server->pid(), "VmRSS"));
  OKL_ASSIGN_OR_RETURN(restart.peak_bytes, okl::testing::ProcStatusBytes(server->pid(), "VmHWM"));
  OKL_ASSIGN_OR_RETURN(const int wait_status, server->Stop(absl::Minutes(5)));
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return absl::InternalError(absl::StrCat(
        "okl_server ended with ", okl::testing::DescribeWaitStatus(wait_status)));
  }
  return restart;
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
        if (absl::Status s = (*log)->Append(okl::InputBatch::Dense(xs, dim), ys, nullptr);
            !s.ok()) {
          return Fail(s);
        }
      }
    }
  }
  std::printf("wrote %d models x %d terms at d=%d (+%d batches of %d logged) in %.2f s\n",
              models, terms, dim, log_batches, batch,
              absl::ToDoubleSeconds(absl::Now() - write_start));

  // What okl_server does before SERVING.
  const double heap_before = HeapBytes();
  const absl::Time start = absl::Now();
  auto store = okl::ModelStore::Open(dir, {});
  if (!store.ok()) return Fail(store.status());
  okl::ModelRegistry registry({.max_models = static_cast<size_t>(models)});
  auto stats = okl::RestoreModels(store->get(), &registry, {});
  if (!stats.ok()) return Fail(stats.status());
  const absl::Duration elapsed = absl::Now() - start;
  // The heap the restored models hold in this process (registry, entries, logs, models),
  // the store closed: what okl's own objects cost, apart from the server's libraries.
  store->reset();
  const double heap_bytes = HeapBytes() - heap_before;
  const absl::Duration target = absl::GetFlag(FLAGS_target);
  std::printf(
      "start-up: restored %zu models (%llu log batches, %llu examples replayed) in %.3f s "
      "(RestoreModels %.3f s): %s (target < %s)\n",
      stats->models, static_cast<unsigned long long>(stats->log_batches),
      static_cast<unsigned long long>(stats->log_examples), absl::ToDoubleSeconds(elapsed),
      absl::ToDoubleSeconds(stats->elapsed), elapsed < target ? "PASS" : "MISS",
      absl::FormatDuration(target).c_str());

  const double raw_bytes = static_cast<double>(models) * terms * (dim + 1) * sizeof(double);
  std::printf("in process: the restored models hold %.1f MiB of heap for %.1f MiB of model "
              "terms: %.2fx (%.0f bytes a model over its terms)\n",
              heap_bytes / 1048576.0, raw_bytes / 1048576.0, heap_bytes / raw_bytes,
              (heap_bytes - raw_bytes) / models);
  std::string json = absl::StrFormat(
      "{\"models\": %d, \"terms\": %d, \"dim\": %d, \"logged_examples\": %llu, "
      "\"raw_bytes\": %.0f, \"restore_seconds\": %.3f, \"heap_bytes\": %.0f",
      models, terms, dim, static_cast<unsigned long long>(stats->log_examples), raw_bytes,
      absl::ToDoubleSeconds(elapsed), heap_bytes);
  if (const std::string binary = absl::GetFlag(FLAGS_spawn_server); !binary.empty()) {
    absl::StatusOr<ServerRestart> restart = RestartServer(binary, dir, models);
    if (!restart.ok()) return Fail(restart.status());
    const double ratio = static_cast<double>(restart->rss_bytes) / raw_bytes;
    const double max_ratio = absl::GetFlag(FLAGS_max_rss_ratio);
    std::printf(
        "okl_server restart: SERVING after %.3f s: %s (target < %s); resident %.1f MiB "
        "(peak %.1f MiB) for %.1f MiB of model terms: %.2fx: %s (target <= %.2fx)\n",
        absl::ToDoubleSeconds(restart->to_serving), restart->to_serving < target ? "PASS" : "MISS",
        absl::FormatDuration(target).c_str(), restart->rss_bytes / 1048576.0,
        restart->peak_bytes / 1048576.0, raw_bytes / 1048576.0, ratio,
        ratio <= max_ratio ? "PASS" : "MISS", max_ratio);
    absl::StrAppendFormat(&json,
                          ", \"server_restart_seconds\": %.3f, \"server_rss_bytes\": %llu, "
                          "\"server_peak_rss_bytes\": %llu, \"rss_over_raw\": %.3f",
                          absl::ToDoubleSeconds(restart->to_serving),
                          static_cast<unsigned long long>(restart->rss_bytes),
                          static_cast<unsigned long long>(restart->peak_bytes), ratio);
  }
  std::printf("%s}\n", json.c_str());
  if (absl::GetFlag(FLAGS_dir).empty()) std::filesystem::remove_all(dir);
  return 0;
}
