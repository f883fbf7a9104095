// bench/soak.cc
//
// okl_soak: a long run of mixed traffic against one okl_server, ending in a check that
// nothing acknowledged was lost. 1,000 models over 50 tenants (three small configs, d = 8),
// 32 closed-loop callers over 4 channels mixing Predict, Observe, ObserveStream, GetModel,
// ListModels, Snapshot, Restore, and DeleteModel followed by CreateModel
// (bench/soak_caller.h: who writes what, and how an ambiguous failure is resolved).
// Afterwards every model must hold exactly the examples the server acknowledged into it,
// in order: its Snapshot must decode to the very ModelState, and its Predict give the very
// bits, of a core NormaModel fed those examples (bench/soak_history.h). Meanwhile the
// spawned server's resident memory is sampled (VmRSS, every --rss_interval) and must stay
// flat after the warm-up.
//
// Output: progress lines on stderr every --rss_interval; at the end a table on stdout
// and, as the last line, one JSON object (unexpected_errors, lost_examples,
// requests_per_second, p99_us, rss_growth_ratio, ...). Exit status 1 if any error was
// unexpected, any example lost or any model not exact -- a soak that loses data fails
// -- 2 if it could not set up, else 0 whatever the performance numbers.
//
// Example:
//   build/release/bench/okl_soak --spawn_server=build/release/server/okl_server --duration=10m
//   build/release/bench/okl_soak --target=127.0.0.1:50051 --server_pid=$(pidof okl_server)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen_server_process.h"
#include "bench/soak_caller.h"
#include "bench/soak_history.h"
#include "bench/soak_report.h"
#include "bench/soak_stats.h"
#include "client/client.h"
#include "client/spawned_server.h"  // ProcStatusBytes
#include "core/runtime/file.h"

ABSL_FLAG(std::string, spawn_server, "",
          "Path of an okl_server binary to start on 127.0.0.1:0 with a fresh data dir for the "
          "run, and stop with SIGTERM at the end (it must exit cleanly).");
ABSL_FLAG(std::string, server_args, "",
          "Extra flags for the spawned server, space-separated.");
ABSL_FLAG(std::string, target, "",
          "host:port of a running okl_server instead (the soak's tenants are named after "
          "this process's pid, and their models deleted at the end).");
ABSL_FLAG(int32_t, server_pid, 0,
          "With --target: the server's pid, to sample its RSS (local servers only); "
          "without it the RSS is not measured.");
ABSL_FLAG(absl::Duration, duration, absl::Minutes(10), "How long the callers run.");
ABSL_FLAG(absl::Duration, warmup, absl::ZeroDuration(),
          "The RSS is compared with its value after this long (0: a fifth of --duration, "
          "2 minutes of a 10-minute soak).");
ABSL_FLAG(absl::Duration, rss_interval, absl::Seconds(10),
          "How often the server's RSS is sampled and a progress line printed.");
ABSL_FLAG(int32_t, models, 1000, "Models.");
ABSL_FLAG(int32_t, tenants, 50, "Tenants the models are spread over (model i: tenant i % N).");
ABSL_FLAG(int32_t, callers, 32,
          "Closed-loop callers; caller c is the only writer of the models i with i % callers "
          "== c.");
ABSL_FLAG(int32_t, channels, 4, "gRPC channels the callers share (caller c: channel c % N).");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(30), "The deadline of every call.");
ABSL_FLAG(uint64_t, seed, 20240615, "Seed of the callers' choices (the examples are fixed).");
ABSL_FLAG(int32_t, check_threads, 0,
          "Threads checking the models against their twins at the end (0: one per core).");

namespace okl::soak {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kStopGrace = absl::Seconds(15);
// Probe inputs every model predicts in the final check.
constexpr uint64_t kProbes = 16;
constexpr uint64_t kProbeStream = ~uint64_t{0};

void Log(const std::string& line) {
  std::fprintf(stderr, "okl_soak: %s\n", line.c_str());
  std::fflush(stderr);
}

// Runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void ParallelFor(int n, int threads, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min(threads, n); ++t) {
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

// Runs the callers for `duration`, meanwhile sampling the RSS of `pid` (if positive) and
// printing a progress line every `interval`. The RSS samples, at the start, every
// interval and at the end; *load is how long the callers ran, *rss_note why a sample
// failed.
std::vector<RssSample> RunLoad(const std::vector<std::unique_ptr<Caller>>& callers,
                               absl::Duration duration, absl::Duration interval, int pid,
                               const Progress& progress, absl::Duration* load,
                               std::string* rss_note) {
  std::vector<RssSample> rss;
  const auto sample_rss = [&](absl::Duration at) {
    if (pid <= 0) return;
    absl::StatusOr<uint64_t> bytes = testing::ProcStatusBytes(pid, "VmRSS");
    if (bytes.ok()) {
      rss.push_back({.at = at, .kb = static_cast<int64_t>(*bytes / 1024)});
    } else {
      *rss_note = bytes.status().ToString();
    }
  };
  const absl::Time begin = absl::Now();
  const absl::Time until = begin + duration;
  sample_rss(absl::ZeroDuration());
  std::vector<std::thread> threads;
  for (const auto& caller : callers) {
    threads.emplace_back([&caller, until] { caller->Run(until); });
  }
  for (absl::Time next = begin + interval; next < until; next += interval) {
    absl::SleepFor(next - absl::Now());
    sample_rss(next - begin);
    const double seconds = absl::ToDoubleSeconds(next - begin);
    Log(absl::StrFormat("%4.0fs: %d calls (%.0f/s), %d examples acknowledged, %d unexpected "
                        "errors%s",
                        seconds, progress.calls.load(), progress.calls.load() / seconds,
                        progress.examples.load(), progress.unexpected_errors.load(),
                        rss.empty() ? "" : absl::StrCat(", server RSS ", rss.back().kb, " kB")));
  }
  for (std::thread& thread : threads) thread.join();
  *load = absl::Now() - begin;
  sample_rss(*load);
  return rss;
}

// Every model against its twin, and the soak's tenants for models that are none of its.
CheckSummary CheckAll(const Layout& layout, const std::vector<std::unique_ptr<Caller>>& callers,
                      const Client& client, int threads) {
  const absl::Time start = absl::Now();
  std::vector<double> probes, unused;
  GenerateExamples(kProbeStream, 0, kProbes, &probes, &unused);
  std::vector<const OwnedModel*> models;
  for (const auto& caller : callers) {
    for (const OwnedModel& model : caller->models()) models.push_back(&model);
  }
  CheckSummary summary;
  summary.models = static_cast<int>(models.size());
  absl::Mutex mu;
  ParallelFor(static_cast<int>(models.size()), threads, [&](int i) {
    const OwnedModel& model = *models[i];
    ModelCheck check;
    if (model.in_doubt) {
      check.detail = absl::StrCat(model.id.tenant, "/", model.id.model,
                                  ": in doubt after an unexpected error; not checked");
    } else {
      check = CheckModel(client, model.id, model.history, probes);
    }
    absl::MutexLock lock(&mu);
    summary.exact += check.exact() ? 1 : 0;
    summary.in_doubt += model.in_doubt ? 1 : 0;
    summary.lost_examples += check.lost_examples;
    summary.extra_examples += check.extra_examples;
    summary.examples_held += model.history.size();
    if (!check.exact() && summary.first_failures.size() < SoakStats::kMaxLogged) {
      summary.first_failures.push_back(check.detail);
    }
  });
  for (int tenant = 0; tenant < layout.tenants; ++tenant) {
    absl::StatusOr<std::vector<ModelSummary>> listed = client.ListModels(layout.Tenant(tenant));
    if (!listed.ok()) {
      ++summary.unexpected_models;
      summary.first_failures.push_back(absl::StrCat("ListModels ", layout.Tenant(tenant), ": ",
                                                    listed.status().ToString()));
      continue;
    }
    for (const ModelSummary& m : *listed) {
      if (layout.IndexOf(tenant, m.model) < 0) {
        ++summary.unexpected_models;
        summary.first_failures.push_back(
            absl::StrCat(m.tenant, "/", m.model, ": listed, but none of the soak's models"));
      }
    }
  }
  summary.took = absl::Now() - start;
  return summary;
}

int Main() {
  const std::string binary = absl::GetFlag(FLAGS_spawn_server);
  std::string address = absl::GetFlag(FLAGS_target);
  Layout layout = {.prefix = "soak",
                   .models = absl::GetFlag(FLAGS_models),
                   .tenants = absl::GetFlag(FLAGS_tenants),
                   .callers = absl::GetFlag(FLAGS_callers)};
  const int channels = absl::GetFlag(FLAGS_channels);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration interval = absl::GetFlag(FLAGS_rss_interval);
  absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  if (warmup == absl::ZeroDuration()) warmup = duration / 5;
  int check_threads = absl::GetFlag(FLAGS_check_threads);
  if (check_threads <= 0) check_threads = std::max(1u, std::thread::hardware_concurrency());
  if (binary.empty() == address.empty()) {
    Log("give exactly one of --spawn_server=PATH and --target=HOST:PORT");
    return 2;
  }
  if (layout.models < 1 || layout.tenants < 1 || layout.callers < 1 || channels < 1 ||
      layout.callers > layout.models || duration <= absl::ZeroDuration() ||
      interval <= absl::ZeroDuration() || warmup < absl::ZeroDuration()) {
    Log("--models, --tenants, --callers (at most --models) and --channels must be positive, "
        "and so must --duration and --rss_interval");
    return 2;
  }

  std::unique_ptr<loadgen::ServerProcess> server;
  int pid = absl::GetFlag(FLAGS_server_pid);
  if (!binary.empty()) {
    const std::vector<std::string> args =
        absl::StrSplit(absl::GetFlag(FLAGS_server_args), ' ', absl::SkipWhitespace());
    absl::StatusOr<std::unique_ptr<loadgen::ServerProcess>> started =
        loadgen::ServerProcess::Start(binary, args, kStartTimeout);
    if (!started.ok()) {
      Log(started.status().ToString());
      return 2;
    }
    server = *std::move(started);
    address = server->address();
    pid = server->pid();
  } else {
    // Tenants of their own on a shared server.
    layout.prefix = absl::StrCat("soak-", getpid());
  }

  ClientOptions options;
  options.deadline = absl::GetFlag(FLAGS_deadline);
  std::vector<Client> clients;
  for (int c = 0; c < channels; ++c) {
    absl::StatusOr<Client> client = Client::Connect(address, options);
    if (!client.ok()) {
      Log(client.status().ToString());
      return 2;
    }
    clients.push_back(*std::move(client));
  }
  if (absl::StatusOr<bool> serving = clients[0].Health(); !serving.ok() || !*serving) {
    Log(absl::StrCat(address, " is not serving: ",
                     serving.ok() ? "NOT_SERVING" : serving.status().ToString()));
    return 2;
  }

  Progress progress;
  std::vector<std::unique_ptr<Caller>> callers;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  for (int c = 0; c < layout.callers; ++c) {
    callers.push_back(
        std::make_unique<Caller>(c, layout, clients[c % channels], seed, &progress));
  }
  Log(absl::StrCat("creating ", layout.models, " models on ", address, " ..."));
  std::vector<absl::Status> created(callers.size());
  ParallelFor(static_cast<int>(callers.size()), static_cast<int>(callers.size()),
              [&](int c) { created[c] = callers[c]->CreateModels(); });
  // On a server that outlives the soak, its models are deleted at the end (or now).
  const auto delete_models = [&] {
    if (server != nullptr) return;
    for (int i = 0; i < layout.models; ++i) (void)clients[0].DeleteModel(layout.Id(i));
  };
  for (const absl::Status& status : created) {
    if (!status.ok()) {
      Log(absl::StrCat("setup: ", status.ToString()));
      delete_models();
      return 2;
    }
  }

  Log(absl::StrCat("running ", layout.callers, " callers for ", absl::FormatDuration(duration),
                   " ..."));
  absl::Duration load;
  std::string rss_note;
  std::vector<RssSample> rss = RunLoad(callers, duration, interval, pid, progress, &load,
                                       &rss_note);

  Log("settling the models left in doubt, then checking every model against its twin ...");
  ParallelFor(static_cast<int>(callers.size()), static_cast<int>(callers.size()),
              [&](int c) { (void)callers[c]->SettleDoubts(); });
  SoakReport report;
  report.load = load;
  for (const auto& caller : callers) report.stats.Merge(caller->stats());
  report.check = CheckAll(layout, callers, clients[0], check_threads);
  report.rss = SummarizeRss(std::move(rss), warmup);
  if (!report.rss.measured) {
    report.rss.note = pid <= 0 ? "give --server_pid with --target" : rss_note;
  }

  if (server != nullptr) {
    if (absl::Status stopped = server->Stop(kStopGrace); !stopped.ok()) {
      report.other_errors.push_back(absl::StrCat("okl_server: ", stopped.message()));
    }
  }
  delete_models();
  report.header = absl::StrFormat(
      "okl_soak: %s%s; %d models (d=%d, %d configs) over %d tenants; %d callers over %d "
      "channels; load %s",
      address, server != nullptr ? " (spawned okl_server)" : "", layout.models, kDim,
      kConfigKinds, layout.tenants, layout.callers, channels,
      absl::FormatDuration(absl::Trunc(load, absl::Milliseconds(1))));
  std::fputs(RenderTable(report).c_str(), stdout);
  std::printf("%s\n", RenderJson(report).c_str());
  std::fflush(stdout);
  return DataIntact(report) ? 0 : 1;
}

}  // namespace
}  // namespace okl::soak

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Soaks an okl_server with mixed traffic over 1,000 models and checks that every model "
      "holds exactly its acknowledged examples.\n"
      "Usage: okl_soak --spawn_server=PATH | --target=HOST:PORT [--duration=10m] [--flags...]");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil keeps absl::Mutex's deadlock detection on, a global graph updated on
  // every lock of gRPC's too; the soak's client shares the machine's cores with the server.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return okl::soak::Main();
}
