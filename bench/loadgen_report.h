// bench/loadgen_report.h
//
// okl_loadgen's settings, what each scenario measured, and the report: the targets each
// run is checked against, the JSON on stdout and the table on stderr.
#ifndef OKL_BENCH_LOADGEN_REPORT_H_
#define OKL_BENCH_LOADGEN_REPORT_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/loadgen_driver.h"

namespace okl::loadgen {

struct Settings {
  std::string address;
  // TLS when tls_root_certs is set; the PEM contents of the files.
  std::string tls_root_certs;
  std::string tls_cert_chain;
  std::string tls_private_key;
  // "Bearer <token>", or empty.
  std::string authorization;
  int callers = 0;
  int models = 0;
  int channels = 0;
  int dim = 0;
  int budget = 0;
  int regret_window = 0;
  int predict_batch = 0;
  int stream_batch = 0;
  int stream_messages = 0;
  int stream_callers = 0;
  int label_batch = 0;   // labels per Label request (the label scenario)
  int label_events = 0;  // events remembered per model before the label scenario
  ClientApi api = ClientApi::kAsync;
  int client_threads = 1;
  int repetitions = 1;
  absl::Duration duration;
  absl::Duration warmup;
  double rate = 0;                          // > 0: every unary scenario in open loop
  std::vector<double> open_loop_fractions;  // open-loop runs after the closed-loop ones
  std::string tenant;
  uint64_t seed = 0;
  std::vector<std::string> scenarios;
  // With --pin_cpus, who runs where as the kernel has it: "server on CPUs 1, client on
  // CPUs 0" (/proc's Cpus_allowed_list of each). Empty without.
  std::string pinning;
};

// What one scenario measured.
struct Measurement {
  std::string name;
  double offered_rate = 0;  // open loop: calls sent per second; 0: closed loop
  bool has_examples = false;
  bool stream = false;
  double seconds = 0;
  Result result;
  double requests_per_s = 0;
  double examples_per_s = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0;
  double send_lag_p99_us = 0;  // open loop: the client's lag behind schedule, p99
  double client_cpu = 0;       // cores: CPU seconds per wall second
  double server_cpu = -1;      // cores, when the server was spawned; else -1
  double machine_cpu = -1;     // cores busy machine-wide (every process), from /proc/stat
  // With --repetitions > 1: the rate of every run, in order (examples/s for stream,
  // requests/s otherwise), and the CPU other processes used during it; this
  // measurement is the fastest run.
  std::vector<double> run_rates;
  std::vector<double> run_other_cpu;
  // Open loop with --repetitions > 1: every run's p99, in order; this measurement is the
  // run with the median p99 (the upper median of an even count).
  std::vector<double> run_p99_us;

  double rate() const { return stream ? examples_per_s : requests_per_s; }
  // Cores used by every process but the client and the spawned server (all but the
  // client's if the server was not spawned); -1 if unknown.
  double other_cpu() const {
    if (machine_cpu < 0) return -1;
    return std::max(0.0, machine_cpu - client_cpu - std::max(0.0, server_cpu));
  }
};

struct Target {
  std::string name;         // the JSON's key
  std::string description;  // the table's
  std::string measured;
  std::string goal;
  std::optional<bool> pass;  // unset: not measured in this run
  double value = 0;
  std::string note;  // why the run's settings differ from the target's
};

// The targets, each checked against `all` if this run measured it under the conditions
// it is stated for.
std::vector<Target> EvaluateTargets(const Settings& s, const std::vector<Measurement>& all);
// The whole report as one JSON object on stdout.
void PrintJson(const Settings& s, bool spawned, const std::vector<Measurement>& all,
               const std::vector<Target>& targets, const std::string& load_before,
               const std::string& load_after);
// The same as a table on stderr.
void PrintTable(const Settings& s, bool spawned, const std::vector<Measurement>& all,
                const std::vector<Target>& targets, const std::string& load_before,
                const std::string& load_after);
// /proc/loadavg's three averages.
std::string LoadAverage();
// 12,345.
std::string Thousands(double value);

}  // namespace okl::loadgen

#endif  // OKL_BENCH_LOADGEN_REPORT_H_
