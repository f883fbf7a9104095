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
//
// Delayed feedback at scale (docs/delayed-feedback.md): --pending_events=N adds one model,
// bench/events (dense, d = --dim, empty), and N pending events of it, written as okl_server
// writes a remembering Predict's (EventLog::Remember with server-made ids, 4,096 a write),
// each awaiting its label for 7 days, so none expires during the run. Then:
//  - bytes an event on disk: (S1 - S0) / N, where S0 and S1 are the sums of the store
//    directory's file sizes, each taken with the store closed right after
//    ModelStore::Flush, S0 before the events are written and S1 after. Flushing first
//    puts both figures in RocksDB's table files: unflushed, the last writes would be
//    counted at their write-ahead log's size (uncompressed, and gone at the next flush).
//    Compaction neither adds nor drops events (each event's keys are written once), so
//    whether it ran makes little difference to either figure.
//  - with --spawn_server, the server is started twice on the flushed store, with the
//    same flags: on a copy of it before the events are written (the "okl_server restart"
//    line, as without the flag; a copy, because a server checkpoints every model when it
//    stops, which would leave the second no log to replay) and on the store with the
//    events. The second restart is timed from exec to SERVING against --events_target,
//    and bytes an event in memory are (its resident memory once SERVING - the first's) /
//    N. Then one Label call checks that the events are reachable: a remembered event's
//    label is applied and an id never remembered is unknown (else the bench fails).
//    Both restarts find the store's files in the page cache, as they were just written.
// The store is okl_server's (ModelStore::Open, unchanged): RocksDB's defaults but for
// recovery and error handling, i.e. (Debian 12's RocksDB 7.8) Snappy-compressed 4 KiB
// blocks, a 64 MiB memtable, no Bloom filter, an 8 MiB block cache, and max_open_files =
// -1: every table file is opened at start-up and keeps its index block in memory, outside
// the cache. okl_server does not flush at shutdown, so its restart may also replay up to
// one memtable of log; a restart on the flushed store here replays none.
// docs/delayed-feedback.md's target, 10 million events of d = 16 (minutes; ~2.5 GB of disk):
//   build/bench/okl_store_startup_bench --pending_events=10000000
//     --spawn_server=build/server/okl_server

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/spawned_server.h"
#include "core/norma.h"
#include "core/runtime/model_registry.h"
#include "core/status_macros.h"
#include "proto/label_outcome.h"
#include "server/store/event_log.h"
#include "server/events/model_events.h"
#include "server/store/model_store.h"

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
ABSL_FLAG(int64_t, pending_events, 0,
          "Pending remembered events of one more model, bench/events (see above); 0: none.");
ABSL_FLAG(absl::Duration, events_target, absl::Seconds(30),
          "The restart time to meet with --pending_events pending (--spawn_server).");

namespace {

// The model that holds --pending_events.
constexpr char kEventsTenant[] = "bench";
constexpr char kEventsModel[] = "events";
// Events a Remember writes: a large remembering Predict's.
constexpr int64_t kEventsPerWrite = 4096;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "okl_store_startup_bench: %s\n", status.ToString().c_str());
  return 1;
}

struct ServerRestart {
  absl::Duration to_serving;
  uint64_t rss_bytes = 0;   // once SERVING
  uint64_t peak_bytes = 0;  // the most it held, restore included
};

// Bytes malloc has handed out and not taken back (small blocks and mmapped ones).
double HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

// Starts `binary` on the store in `dir` and measures it until SERVING; then runs
// `while_serving` (if any) with its port, and stops it.
absl::StatusOr<ServerRestart> RestartServer(
    const std::string& binary, const std::string& dir, int models,
    const std::function<absl::Status(int port)>& while_serving = nullptr) {
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
  OKL_ASSIGN_OR_RETURN(const int port, server->WaitForPort(absl::Now() + absl::Minutes(10)));
  ServerRestart restart{.to_serving = absl::Now() - start};
  OKL_ASSIGN_OR_RETURN(restart.rss_bytes, okl::testing::ProcStatusBytes(server->pid(), "VmRSS"));
  OKL_ASSIGN_OR_RETURN(restart.peak_bytes, okl::testing::ProcStatusBytes(server->pid(), "VmHWM"));
  // After the memory is read, so that the calls' own allocations are not counted.
  if (while_serving != nullptr) OKL_RETURN_IF_ERROR(while_serving(port));
  OKL_ASSIGN_OR_RETURN(const int wait_status, server->Stop(absl::Minutes(5)));
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return absl::InternalError(absl::StrCat(
        "okl_server ended with ", okl::testing::DescribeWaitStatus(wait_status)));
  }
  return restart;
}

// The sum of the sizes of the files under `dir`: what the store takes on disk.
absl::StatusOr<uint64_t> DirectoryBytes(const std::string& dir) {
  std::error_code error;
  uint64_t bytes = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error)) bytes += it->file_size(error);
    if (error) break;
  }
  if (error) {
    return absl::InternalError(absl::StrCat("cannot size \"", dir, "\": ", error.message()));
  }
  return bytes;
}

// Opens the store in `dir`, flushes its memtables to table files and closes it, so that
// its size on disk counts no write-ahead log.
absl::Status FlushStore(const std::string& dir) {
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ModelStore> store, okl::ModelStore::Open(dir, {}));
  return store->Flush();
}

// Writes `count` pending events of dimension `dim` for the model bench/events of the
// store in `dir` (which holds it, with none), as okl_server remembers a Predict's inputs
// with ids it makes (EventBook::Remember's one write per request), flushes and closes the
// store. Returns one of the events' ids.
absl::StatusOr<std::string> WritePendingEvents(const std::string& dir, int64_t count, int dim,
                                               std::mt19937_64& rng) {
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ModelStore> store, okl::ModelStore::Open(dir, {}));
  std::shared_ptr<okl::ModelLog> log;
  OKL_RETURN_IF_ERROR(store->LoadModels(
      [&](okl::StoredModel model) {
        if (model.tenant == kEventsTenant && model.model == kEventsModel) {
          log = store->OpenLog(model);
        }
        return absl::OkStatus();
      },
      [](absl::string_view tenant, absl::string_view model, absl::string_view what) {
        return absl::DataLossError(
            absl::StrCat("model ", tenant, "/", model, " is damaged: ", what));
      }));
  if (log == nullptr) {
    return absl::NotFoundError(absl::StrCat("the store at \"", dir, "\" holds no model ",
                                            kEventsTenant, "/", kEventsModel));
  }
  okl::EventLog event_log(log);
  // Ids as the server makes them (EventBook::MakeId): the expiry, 16 hex digits drawn
  // once, then a counter; so no id can be known, as the server's kNoneCanBe says.
  const uint64_t id_prefix = rng();
  std::normal_distribution<double> normal;
  std::string probe_id;
  okl::EventCounts counts;
  std::vector<okl::RememberedEvent> events;
  for (int64_t written = 0; written < count;) {
    const int64_t n = std::min(kEventsPerWrite, count - written);
    const absl::Time now = absl::Now();
    events.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      okl::RememberedEvent& event = events[i];
      event.expires = now + absl::Hours(24 * 7);  // --max_label_wait's default
      event.id = okl::ServerEventId(event.expires, id_prefix, written + i);
      event.prediction = normal(rng);
      event.remembered = now;
      event.values.resize(dim);
      for (double& x : event.values) x = normal(rng);
      counts.stored_bytes += okl::StoredEventBytes(okl::EventState::kPending, event);
    }
    // One from the middle, not the first or last key of the model's events.
    if (written <= count / 2 && count / 2 < written + n) {
      probe_id = events[count / 2 - written].id;
    }
    counts.pending += n;
    OKL_RETURN_IF_ERROR(
        event_log.Remember(events, counts, okl::EventStorage::KnownIds::kNoneCanBe));
    written += n;
  }
  OKL_RETURN_IF_ERROR(store->Flush());
  return probe_id;
}

// The events are reachable after a restart: over gRPC, as a client labels them, a
// remembered event's label is applied and an id never remembered is unknown.
absl::Status CheckLabels(int port, const std::string& remembered_id) {
  OKL_ASSIGN_OR_RETURN(okl::Client client,
                       okl::Client::Connect(absl::StrCat("127.0.0.1:", port)));
  const std::string never_remembered = "bench-never-remembered";
  OKL_ASSIGN_OR_RETURN(okl::LabelResult result,
                       client.Label({.tenant = kEventsTenant, .model = kEventsModel},
                                    {{.event_id = remembered_id, .y = 0.5},
                                     {.event_id = never_remembered, .y = 0.5}}));
  if (result.outcomes.size() != 2 || result.outcomes[0] != okl::LabelOutcome::kApplied ||
      result.outcomes[1] != okl::LabelOutcome::kUnknown) {
    std::string outcomes;
    for (okl::LabelOutcome outcome : result.outcomes) {
      absl::StrAppend(&outcomes, outcomes.empty() ? "" : ", ", okl::LabelOutcomeName(outcome));
    }
    return absl::DataLossError(absl::StrCat(
        "after the restart, labels of remembered event \"", remembered_id, "\" and of \"",
        never_remembered, "\" were [", outcomes, "], not [applied, unknown]"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int models = absl::GetFlag(FLAGS_models);
  const int terms = absl::GetFlag(FLAGS_terms);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int log_batches = absl::GetFlag(FLAGS_log_batches);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int64_t pending_events = absl::GetFlag(FLAGS_pending_events);
  const std::string binary = absl::GetFlag(FLAGS_spawn_server);
  // The models in the store: bench/events too, with --pending_events.
  const int stored_models = models + (pending_events > 0 ? 1 : 0);
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
        auto examples = okl::ValidatedBatch::Make(okl::BatchRules::Of(config),
                                                  okl::InputBatch::Dense(xs, dim), ys);
        if (!examples.ok()) return Fail(examples.status());
        if (absl::Status s = (*log)->Append(*examples, nullptr); !s.ok()) return Fail(s);
      }
    }
    if (pending_events > 0) {
      if (auto log = (*store)->CreateModel(kEventsTenant, kEventsModel, config); !log.ok()) {
        return Fail(log.status());
      }
    }
  }
  std::printf("wrote %d models x %d terms at d=%d (+%d batches of %d logged) in %.2f s\n",
              models, terms, dim, log_batches, batch,
              absl::ToDoubleSeconds(absl::Now() - write_start));

  // With --pending_events: the store and the server without them, then the events.
  std::optional<ServerRestart> without_events;
  uint64_t store_bytes_without = 0, store_bytes_with = 0;
  double disk_bytes_per_event = 0;
  std::string probe_id;
  if (pending_events > 0) {
    if (absl::Status s = FlushStore(dir); !s.ok()) return Fail(s);
    absl::StatusOr<uint64_t> bytes = DirectoryBytes(dir);
    if (!bytes.ok()) return Fail(bytes.status());
    store_bytes_without = *bytes;
    if (!binary.empty()) {
      // On a copy: okl_server checkpoints every model with a log when it stops, and the
      // restart with the events must find the same models (and logs to replay).
      std::filesystem::path store_path = std::filesystem::path(dir).lexically_normal();
      if (!store_path.has_filename()) store_path = store_path.parent_path();  // "dir/"
      const std::string copy = store_path.string() + ".without_events";
      std::error_code error;
      std::filesystem::remove_all(copy, error);
      std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive, error);
      if (error) {
        return Fail(absl::InternalError(
            absl::StrCat("cannot copy the store to \"", copy, "\": ", error.message())));
      }
      absl::StatusOr<ServerRestart> restart = RestartServer(binary, copy, stored_models);
      std::filesystem::remove_all(copy, error);
      if (!restart.ok()) return Fail(restart.status());
      without_events = *restart;
    }
    const absl::Time events_start = absl::Now();
    absl::StatusOr<std::string> probe = WritePendingEvents(dir, pending_events, dim, rng);
    if (!probe.ok()) return Fail(probe.status());
    probe_id = *probe;
    const absl::Duration events_elapsed = absl::Now() - events_start;
    bytes = DirectoryBytes(dir);
    if (!bytes.ok()) return Fail(bytes.status());
    store_bytes_with = *bytes;
    disk_bytes_per_event =
        (static_cast<double>(store_bytes_with) - static_cast<double>(store_bytes_without)) /
        pending_events;
    std::printf(
        "wrote %lld pending events of d=%d in %.2f s; the store grew from %.1f MiB to %.1f "
        "MiB: %.1f bytes an event on disk (its input alone is %zu)\n",
        static_cast<long long>(pending_events), dim, absl::ToDoubleSeconds(events_elapsed),
        store_bytes_without / 1048576.0, store_bytes_with / 1048576.0, disk_bytes_per_event,
        dim * sizeof(double));
  }

  // What okl_server does before SERVING.
  const double heap_before = HeapBytes();
  const absl::Time start = absl::Now();
  auto store = okl::ModelStore::Open(dir, {});
  if (!store.ok()) return Fail(store.status());
  okl::ModelRegistry registry({.max_models = static_cast<size_t>(stored_models)});
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
  if (pending_events > 0) {
    absl::StrAppendFormat(&json,
                          ", \"pending_events\": %lld, \"store_bytes_without_events\": %llu, "
                          "\"store_bytes_with_events\": %llu, \"disk_bytes_per_event\": %.1f",
                          static_cast<long long>(pending_events),
                          static_cast<unsigned long long>(store_bytes_without),
                          static_cast<unsigned long long>(store_bytes_with),
                          disk_bytes_per_event);
  }
  if (!binary.empty()) {
    // Without --pending_events the store as written; with it, the store before the events.
    absl::StatusOr<ServerRestart> restart = without_events.has_value()
                                                ? *without_events
                                                : RestartServer(binary, dir, stored_models);
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
  if (!binary.empty() && pending_events > 0) {
    absl::StatusOr<ServerRestart> restart =
        RestartServer(binary, dir, stored_models,
                      [&probe_id](int port) { return CheckLabels(port, probe_id); });
    if (!restart.ok()) return Fail(restart.status());
    const absl::Duration events_target = absl::GetFlag(FLAGS_events_target);
    const double more_bytes = static_cast<double>(restart->rss_bytes) -
                              static_cast<double>(without_events->rss_bytes);
    const double memory_per_event = more_bytes / pending_events;
    std::printf(
        "okl_server restart with %lld events pending: SERVING after %.3f s (%+.3f s): %s "
        "(target < %s); resident %.1f MiB (peak %.1f MiB), %.1f MiB over the store without "
        "them: %.1f bytes an event in memory\n",
        static_cast<long long>(pending_events), absl::ToDoubleSeconds(restart->to_serving),
        absl::ToDoubleSeconds(restart->to_serving - without_events->to_serving),
        restart->to_serving < events_target ? "PASS" : "MISS",
        absl::FormatDuration(events_target).c_str(), restart->rss_bytes / 1048576.0,
        restart->peak_bytes / 1048576.0, more_bytes / 1048576.0, memory_per_event);
    std::printf(
        "after it, Label: remembered event %s applied, an id never remembered unknown: PASS\n",
        probe_id.c_str());
    absl::StrAppendFormat(&json,
                          ", \"events_restart_seconds\": %.3f, \"events_rss_bytes\": %llu, "
                          "\"events_peak_rss_bytes\": %llu, \"memory_bytes_per_event\": %.1f, "
                          "\"labels_reachable\": true",
                          absl::ToDoubleSeconds(restart->to_serving),
                          static_cast<unsigned long long>(restart->rss_bytes),
                          static_cast<unsigned long long>(restart->peak_bytes),
                          memory_per_event);
  }
  std::printf("%s}\n", json.c_str());
  if (absl::GetFlag(FLAGS_dir).empty()) std::filesystem::remove_all(dir);
  return 0;
}
