// bench/soak_stats.cc

#include "bench/soak_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace okl::soak {
namespace {

// Values below kExact microseconds have a bucket each; above, each power of two has
// kSubBuckets buckets.
constexpr int64_t kExact = 64;
constexpr int kSubBits = 5;
constexpr int kSubBuckets = 1 << kSubBits;
constexpr int kExactBits = 6;  // log2(kExact)
// Up to 2^62 us: every duration a call can take.
constexpr int kBuckets = kExact + (62 - kExactBits) * kSubBuckets;

int BucketOf(int64_t us) {
  if (us < kExact) return static_cast<int>(std::max<int64_t>(us, 0));
  const int exponent = std::bit_width(static_cast<uint64_t>(us)) - 1;  // >= kExactBits
  const int sub = static_cast<int>((us >> (exponent - kSubBits)) & (kSubBuckets - 1));
  return std::min(kBuckets - 1,
                  static_cast<int>(kExact) + (exponent - kExactBits) * kSubBuckets + sub);
}

// The largest value of bucket b.
int64_t UpperEdge(int b) {
  if (b < kExact) return b;
  const int exponent = (b - static_cast<int>(kExact)) / kSubBuckets + kExactBits;
  const int64_t sub = (b - kExact) % kSubBuckets;
  return ((kSubBuckets + sub + 1) << (exponent - kSubBits)) - 1;
}

}  // namespace

absl::string_view MethodName(Method method) {
  static constexpr absl::string_view kNames[kMethods] = {
      "Predict",    "Observe",  "ObserveStream", "GetModel",    "ListModels",
      "Snapshot",   "Restore",  "DeleteModel",   "CreateModel"};
  return kNames[static_cast<size_t>(method)];
}

LatencyHistogram::LatencyHistogram() : buckets_(kBuckets, 0) {}

void LatencyHistogram::Record(absl::Duration latency) {
  const int64_t us = absl::ToInt64Microseconds(latency);
  ++buckets_[BucketOf(us)];
  ++count_;
  max_us_ = std::max(max_us_, us);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int b = 0; b < kBuckets; ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  max_us_ = std::max(max_us_, other.max_us_);
}

double LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  // The rank of the q-quantile among count_ sorted values, 1-based.
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) return static_cast<double>(std::min(UpperEdge(b), max_us_));
  }
  return static_cast<double>(max_us_);
}

void SoakStats::AddExpected(Method method, absl::string_view kind) {
  ++(*this)[method].expected_errors;
  ++expected_by_kind_[std::string(kind)];
}

void SoakStats::AddUnexpected(Method method, std::string what) {
  ++(*this)[method].unexpected_errors;
  if (first_unexpected_.size() < kMaxLogged) first_unexpected_.push_back(std::move(what));
}

void SoakStats::Merge(const SoakStats& other) {
  for (size_t m = 0; m < kMethods; ++m) {
    MethodStats& mine = methods_[m];
    const MethodStats& theirs = other.methods_[m];
    mine.calls += theirs.calls;
    mine.expected_errors += theirs.expected_errors;
    mine.unexpected_errors += theirs.unexpected_errors;
    mine.examples += theirs.examples;
    mine.latency.Merge(theirs.latency);
  }
  for (const auto& [kind, count] : other.expected_by_kind_) expected_by_kind_[kind] += count;
  for (const std::string& what : other.first_unexpected_) {
    if (first_unexpected_.size() < kMaxLogged) first_unexpected_.push_back(what);
  }
}

MethodStats SoakStats::AllCalls() const {
  MethodStats all;
  for (const MethodStats& m : methods_) {
    all.calls += m.calls;
    all.expected_errors += m.expected_errors;
    all.unexpected_errors += m.unexpected_errors;
    all.examples += m.examples;
    all.latency.Merge(m.latency);
  }
  return all;
}

uint64_t SoakStats::unexpected_errors() const {
  uint64_t total = 0;
  for (const MethodStats& m : methods_) total += m.unexpected_errors;
  return total;
}

}  // namespace okl::soak
