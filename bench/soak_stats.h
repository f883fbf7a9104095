// bench/soak_stats.h
//
// okl_soak's tallies: per RPC method the calls, the errors (expected or not) and a latency
// histogram, and the first unexpected errors in words. Each caller keeps its own
// SoakStats, without locks, and the soak merges them at the end; Progress holds the few
// atomic counters that the progress lines read while the callers run.
//
// The histogram is log-linear (exact below 64 us, then 32 buckets per power of two: each
// bucket spans at most 1/32 of its values), so a soak of any length keeps a fixed few KB
// per method and caller; a percentile is reported as its bucket's upper edge, which
// overstates it by at most 3%.
//
// SoakStats is thread-compatible; Progress is thread-safe.
//
// Example:
//   SoakStats stats;
//   stats[Method::kPredict].Record(absl::Microseconds(420));
//   total.Merge(stats);
//   double p99_us = total.AllCalls().Percentile(0.99);
#ifndef OKL_BENCH_SOAK_STATS_H_
#define OKL_BENCH_SOAK_STATS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace okl::soak {

// The RPCs the soak makes, in the order of its table.
enum class Method {
  kPredict,
  kObserve,
  kObserveStream,
  kGetModel,
  kListModels,
  kSnapshot,
  kRestore,
  kDeleteModel,
  kCreateModel,
};
inline constexpr size_t kMethods = 9;
// "Predict", "Observe", ...: the RPC's name in okl.proto.
absl::string_view MethodName(Method method);

class LatencyHistogram {
 public:
  LatencyHistogram();

  void Record(absl::Duration latency);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  // The q-quantile (0 < q <= 1) in microseconds: the upper edge of the bucket holding it;
  // 0 if empty.
  double Percentile(double q) const;
  double max_us() const { return static_cast<double>(max_us_); }

 private:
  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
  int64_t max_us_ = 0;
};

struct MethodStats {
  uint64_t calls = 0;  // completed, whatever their status
  uint64_t expected_errors = 0;
  uint64_t unexpected_errors = 0;
  uint64_t examples = 0;  // Observe, ObserveStream: examples acknowledged
  LatencyHistogram latency;

  void Record(absl::Duration latency_of_call) {
    ++calls;
    latency.Record(latency_of_call);
  }
};

class SoakStats {
 public:
  // How many unexpected errors are kept in words (all are counted).
  static constexpr size_t kMaxLogged = 10;

  MethodStats& operator[](Method method) { return methods_[static_cast<size_t>(method)]; }
  const MethodStats& operator[](Method method) const {
    return methods_[static_cast<size_t>(method)];
  }

  // Counts an expected error, by kind (e.g. "Predict NOT_FOUND"), on `method`.
  void AddExpected(Method method, absl::string_view kind);
  // Counts an unexpected error on `method`, keeping `what` if it is among the first.
  void AddUnexpected(Method method, std::string what);

  void Merge(const SoakStats& other);

  // Every method's calls and latencies together.
  MethodStats AllCalls() const;
  uint64_t unexpected_errors() const;
  const std::map<std::string, uint64_t>& expected_by_kind() const { return expected_by_kind_; }
  const std::vector<std::string>& first_unexpected() const { return first_unexpected_; }

 private:
  std::array<MethodStats, kMethods> methods_;
  std::map<std::string, uint64_t> expected_by_kind_;
  std::vector<std::string> first_unexpected_;
};

// What the progress lines show while the callers run.
struct Progress {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> unexpected_errors{0};
  std::atomic<uint64_t> examples{0};
};

}  // namespace okl::soak

#endif  // OKL_BENCH_SOAK_STATS_H_
