// tests/server/rpc_metrics_test.cc
//
// The per-RPC series' pieces without a server: AtomicHistogram's buckets (a duration on a
// bound counts in that bound's bucket, as Prometheus's "le" means), MethodTable's
// validation of paths and its cap, and CollectRpcMetrics' order. The interceptor itself
// is tested through a real server in metrics_test.cc.

#include "server/metrics/rpc_metrics.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"

namespace okl::metrics_internal {
namespace {

using ::std::chrono::microseconds;
using ::std::chrono::milliseconds;
using ::std::chrono::nanoseconds;
using ::std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::Pair;

// The cumulative counts of `histogram`'s buckets, in order.
std::vector<uint64_t> CumulativeCounts(const prometheus::ClientMetric::Histogram& histogram) {
  std::vector<uint64_t> counts;
  for (const prometheus::ClientMetric::Bucket& bucket : histogram.bucket) {
    counts.push_back(bucket.cumulative_count);
  }
  return counts;
}

TEST(AtomicHistogramTest, ADurationOnABoundCountsInThatBoundsBucket) {
  AtomicHistogram histogram;
  histogram.Observe(microseconds(25));                   // = the first bound
  histogram.Observe(microseconds(25) + nanoseconds(1));  // just above it
  histogram.Observe(milliseconds(1));                    // = the sixth bound
  const std::vector<uint64_t> counts = CumulativeCounts(histogram.Collect());
  ASSERT_EQ(counts.size(), kRpcDurationBounds.size() + 1);
  EXPECT_EQ(counts[0], 1u);  // le 25e-6
  EXPECT_EQ(counts[1], 2u);  // le 50e-6
  EXPECT_EQ(counts[4], 2u);  // le 500e-6
  EXPECT_EQ(counts[5], 3u);  // le 1e-3
}

TEST(AtomicHistogramTest, BucketsAreCumulativeEndInInfAndAgreeWithCountAndSum) {
  AtomicHistogram histogram;
  histogram.Observe(microseconds(1));
  histogram.Observe(-milliseconds(5));  // a clock step backwards counts as 0
  histogram.Observe(milliseconds(3));
  histogram.Observe(seconds(20));  // beyond the last bound
  const prometheus::ClientMetric::Histogram collected = histogram.Collect();

  ASSERT_EQ(collected.bucket.size(), kRpcDurationBounds.size() + 1);
  for (size_t i = 0; i < kRpcDurationBounds.size(); ++i) {
    EXPECT_EQ(collected.bucket[i].upper_bound, kRpcDurationBounds[i]) << i;
  }
  EXPECT_EQ(collected.bucket.back().upper_bound, std::numeric_limits<double>::infinity());
  EXPECT_THAT(CumulativeCounts(collected),
              ElementsAre(2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4));
  EXPECT_EQ(collected.sample_count, 4u);
  // Kept in whole nanoseconds (1e3 + 0 + 3e6 + 20e9), converted to seconds when collected.
  EXPECT_DOUBLE_EQ(collected.sample_sum, 20.003001);
}

TEST(MethodSeriesTest, CountsByCodeAndCodesBeyondGrpcsAsUnknown) {
  MethodSeries series("/a.B/C", "a.B", "C");
  series.Record(grpc::StatusCode::NOT_FOUND, microseconds(1));
  // 31: beyond gRPC's codes but within the enum's range of values (99 would not be a
  // value of grpc::StatusCode at all, which UBSan reports).
  series.Record(static_cast<grpc::StatusCode>(31), microseconds(1));
  EXPECT_EQ(series.requests[grpc::StatusCode::NOT_FOUND].load(), 1u);
  EXPECT_EQ(series.requests[grpc::StatusCode::UNKNOWN].load(), 1u);
  EXPECT_EQ(series.duration.Collect().sample_count, 2u);
}

TEST(MethodTableTest, FindSeesOnlyWhatFindOrAddMade) {
  MethodTable methods;
  EXPECT_EQ(methods.Find("/okl.v1.Service/Predict"), nullptr);
  EXPECT_EQ(methods.Find(nullptr), nullptr);

  MethodSeries* predict = methods.FindOrAdd("/okl.v1.Service/Predict");
  ASSERT_NE(predict, methods.other());
  EXPECT_EQ(predict->path, "/okl.v1.Service/Predict");
  EXPECT_EQ(predict->service, "okl.v1.Service");
  EXPECT_EQ(predict->method, "Predict");
  EXPECT_EQ(methods.Find("/okl.v1.Service/Predict"), predict);
  EXPECT_EQ(methods.FindOrAdd("/okl.v1.Service/Predict"), predict);
  EXPECT_EQ(methods.Find("/okl.v1.Service/Observe"), nullptr);
}

TEST(MethodTableTest, PathsThatAreNotSlashServiceSlashMethodCountUnderOther) {
  MethodTable methods;
  for (const char* path :
       {"", "/", "/a", "/abc", "//C", "//CC", "/a.B/", "a.B/C", "/a/B/C", "/a.B/C/"}) {
    EXPECT_EQ(methods.FindOrAdd(path), methods.other()) << '"' << path << '"';
    EXPECT_EQ(methods.Find(path), nullptr) << '"' << path << '"';
  }
  EXPECT_EQ(methods.FindOrAdd(nullptr), methods.other());
  EXPECT_EQ(methods.other()->service, "other");
  EXPECT_EQ(methods.other()->method, "other");
}

TEST(MethodTableTest, AtMostMaxMethodsGetSeriesAndForEachVisitsOtherLast) {
  MethodTable methods;
  std::set<const MethodSeries*> made;
  for (size_t i = 0; i < MethodTable::kMaxMethods; ++i) {
    MethodSeries* series = methods.FindOrAdd(absl::StrCat("/s.S/M", i).c_str());
    EXPECT_NE(series, methods.other()) << i;
    made.insert(series);
  }
  EXPECT_EQ(made.size(), MethodTable::kMaxMethods);
  EXPECT_EQ(methods.FindOrAdd("/s.S/OneTooMany"), methods.other());
  EXPECT_EQ(methods.Find("/s.S/OneTooMany"), nullptr);
  // Every series made is still found once the table is full.
  EXPECT_EQ(methods.Find("/s.S/M0"), methods.FindOrAdd("/s.S/M0"));

  std::vector<const MethodSeries*> visited;
  methods.ForEach([&visited](const MethodSeries& series) { visited.push_back(&series); });
  ASSERT_EQ(visited.size(), MethodTable::kMaxMethods + 1);
  EXPECT_EQ(visited.back(), methods.other());
  EXPECT_EQ(std::set<const MethodSeries*>(visited.begin(), visited.end() - 1), made);
}

// The labels of `family`'s samples, as ("service/method", code) pairs.
std::vector<std::pair<std::string, std::string>> Labels(
    const prometheus::MetricFamily& family) {
  std::vector<std::pair<std::string, std::string>> labels;
  for (const prometheus::ClientMetric& metric : family.metric) {
    std::string service;
    std::string method;
    std::string code;
    for (const prometheus::ClientMetric::Label& label : metric.label) {
      if (label.name == "service") service = label.value;
      if (label.name == "method") method = label.value;
      if (label.name == "code") code = label.value;
    }
    labels.emplace_back(absl::StrCat(service, "/", method), code);
  }
  return labels;
}

TEST(CollectRpcMetricsTest, OrdersByServiceAndMethodAndLeavesOutMethodsWithoutCalls) {
  MethodTable methods;
  std::vector<prometheus::MetricFamily> families;
  CollectRpcMetrics(methods, &families);
  EXPECT_TRUE(families.empty());  // no call yet: no empty families either

  methods.FindOrAdd("/z.S/A")->Record(grpc::StatusCode::OK, microseconds(10));
  methods.FindOrAdd("/a.S/C");  // series, but no call finished
  methods.FindOrAdd("/a.S/B")->Record(grpc::StatusCode::INVALID_ARGUMENT, microseconds(10));
  methods.FindOrAdd("/a.S/B")->Record(grpc::StatusCode::OK, microseconds(10));
  methods.other()->Record(grpc::StatusCode::UNIMPLEMENTED, microseconds(10));

  CollectRpcMetrics(methods, &families);
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "okl_rpc_requests_total");
  EXPECT_THAT(Labels(families[0]),
              ElementsAre(Pair("a.S/B", "OK"), Pair("a.S/B", "INVALID_ARGUMENT"),
                          Pair("other/other", "UNIMPLEMENTED"), Pair("z.S/A", "OK")));
  EXPECT_EQ(families[1].name, "okl_rpc_duration_seconds");
  EXPECT_THAT(Labels(families[1]),
              ElementsAre(Pair("a.S/B", ""), Pair("other/other", ""), Pair("z.S/A", "")));
  EXPECT_EQ(families[1].metric[0].histogram.sample_count, 2u);
}

}  // namespace
}  // namespace okl::metrics_internal
