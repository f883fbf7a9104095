// bench/soak_report.h
//
// okl_soak's results and how they are shown: the server's resident memory over the run
// (RssSummary), the final check of every model (CheckSummary), and the report built from
// them with the callers' tallies -- a table for people and one JSON object on one line
// for scripts (CI reads the last line of okl_soak's output).
//
// Targets (for a 10-minute run on the 2-core reference machine): no unexpected errors, no
// lost examples and every model exact (these also decide okl_soak's exit status), and the
// resident memory flat after the warm-up: its trend over the samples from the warm-up on
// rises by at most 5%. A trend, fitted by least squares, and not two single samples:
// under the soak the server's RSS saws up and down by some 15% around its level within
// tens of seconds (the store's 64 MB memtables filling and being flushed, as far as we
// can tell), so two samples would compare the phases of that saw rather than the level.
//
// Thread-compatible.
//
// Example:
//   SoakReport report = {...};
//   std::fputs(RenderTable(report).c_str(), stdout);
//   std::printf("%s\n", RenderJson(report).c_str());
//   return DataIntact(report) ? 0 : 1;
#ifndef OKL_BENCH_SOAK_REPORT_H_
#define OKL_BENCH_SOAK_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/soak_stats.h"

namespace okl::soak {

// The most the RSS trend may rise after the warm-up, as a ratio.
inline constexpr double kRssFlatRatio = 1.05;

// The server's VmRSS at one moment, counted from the start of the load.
struct RssSample {
  absl::Duration at;
  int64_t kb = 0;
};

struct RssSummary {
  bool measured = false;
  std::string note;  // why not, when not measured
  absl::Duration warmup;
  std::vector<RssSample> samples;
  int64_t warmup_kb = 0;     // the first sample at or after the warm-up
  int64_t end_kb = 0;        // the last sample, at the end of the load
  int64_t max_after_kb = 0;  // the largest sample from the warm-up on
  // The least-squares line through the samples from the warm-up on, at its two ends
  // (the samples themselves if there are fewer than 2), and their ratio: the growth.
  double trend_start_kb = 0;
  double trend_end_kb = 0;
  double growth_ratio = 0;  // trend_end_kb / trend_start_kb
  double max_ratio = 0;     // max_after_kb / warmup_kb
};

// Summarises `samples` (in time order, the last at the end of the load) around `warmup`.
RssSummary SummarizeRss(std::vector<RssSample> samples, absl::Duration warmup);

struct CheckSummary {
  int models = 0;        // models the soak expected at the end
  int exact = 0;         // bit-identical to their twins
  int in_doubt = 0;      // left in doubt by errors (unchecked; not exact)
  int unexpected_models = 0;  // listed in the soak's tenants but none of its models
  uint64_t lost_examples = 0;
  uint64_t extra_examples = 0;
  uint64_t examples_held = 0;  // the ledgers' examples: what the models hold at the end
  std::vector<std::string> first_failures;  // what differed, for the first few models
  absl::Duration took;

  int not_exact() const { return models - exact; }
};

struct SoakReport {
  std::string header;  // the run's setting, in a line or two
  absl::Duration load;  // how long the callers ran
  SoakStats stats;
  CheckSummary check;
  RssSummary rss;
  // Problems found outside the calls (e.g. the server not exiting cleanly), counted among
  // the unexpected errors.
  std::vector<std::string> other_errors;

  uint64_t unexpected_errors() const { return stats.unexpected_errors() + other_errors.size(); }
};

// No unexpected error, no lost example, every model exact and nothing unexpected listed:
// what okl_soak's exit status reports.
bool DataIntact(const SoakReport& report);

// The table: per method calls, rate, examples, latency percentiles and errors; the
// errors; the check; the RSS samples; PASS/MISS per target. Ends with a newline.
std::string RenderTable(const SoakReport& report);
// One JSON object on one line (no newline): unexpected_errors, lost_examples,
// requests_per_second, p99_us, rss_growth_ratio (the trend's; null if not measured) and
// the rest.
std::string RenderJson(const SoakReport& report);

}  // namespace okl::soak

#endif  // OKL_BENCH_SOAK_REPORT_H_
