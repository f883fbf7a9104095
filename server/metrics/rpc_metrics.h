// server/metrics/rpc_metrics.h
//
// ServerMetrics's per-RPC series (okl_rpc_requests_total by service, method and code;
// okl_rpc_duration_seconds by service and method): the lock-free latency histogram, the
// table of methods with series, the gRPC server interceptor that fills it, and the
// collector that turns it into families. Internal to ServerMetrics.
// Thread-safe: recording is lock-free; collecting takes the table's lock only to list it.
//
// Example:
//   MethodTable methods;  // outlives every server built with the factory
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(MakeRpcInterceptorFactory(&methods));
//   builder.experimental().SetInterceptorCreators(std::move(f));
//   ...
//   CollectRpcMetrics(methods, &families);  // at scrape time
#ifndef OKL_SERVER_METRICS_RPC_METRICS_H_
#define OKL_SERVER_METRICS_RPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/runtime/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"

namespace okl::metrics_internal {

using Clock = std::chrono::steady_clock;

// Upper bounds in seconds: okl's calls take tens of microseconds (a Predict on a small
// model) to seconds (a large Snapshot or Restore); streams may take longer and land in
// +Inf.
inline constexpr std::array<double, 18> kRpcDurationBounds = {
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 0.1,    0.25,   0.5,    1.0,  2.5,    5.0,  10.0};

// Upper bounds in seconds of okl_label_delay_seconds: a label comes a second (the next
// tick) to a week (a chargeback: --max_label_wait) after its prediction.
inline constexpr std::array<double, 12> kLabelDelayBounds = {
    0.1, 1.0, 10.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0, 259200.0, 604800.0};

// grpc::StatusCode's names as gRPC spells them; OK (0) to UNAUTHENTICATED (16).
inline constexpr std::array<const char*, 17> kCodeNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

// A histogram of durations that is only ever added to: per-bucket (not cumulative)
// counts and the sum in nanoseconds, each an independent relaxed atomic. A scrape may see
// an observation's bucket before its sum; the count it reports is the sum of the buckets
// it read, so count and buckets always agree.
class AtomicHistogram {
 public:
  static constexpr size_t kMaxBounds = 24;
  // `bounds`: increasing upper bounds in seconds, at most kMaxBounds, in static storage.
  explicit AtomicHistogram(const double* bounds = kRpcDurationBounds.data(),
                           size_t count = kRpcDurationBounds.size())
      : bounds_(bounds), bound_count_(count < kMaxBounds ? count : kMaxBounds) {}

  // Counts `elapsed` (negative as 0) in the first bucket whose bound is >= it, in seconds.
  void Observe(Clock::duration elapsed);

  // Cumulative buckets with the bounds as upper bounds, then +Inf.
  prometheus::ClientMetric::Histogram Collect() const;

 private:
  const double* const bounds_;
  const size_t bound_count_;
  std::array<std::atomic<uint64_t>, kMaxBounds + 1> counts_{};  // then +Inf
  std::atomic<uint64_t> sum_nanos_{0};
};

// The series of one gRPC method: a request counter per status code and the duration.
struct MethodSeries {
  MethodSeries(std::string path, std::string service, std::string method)
      : path(std::move(path)), service(std::move(service)), method(std::move(method)) {}

  // Codes outside kCodeNames count as UNKNOWN.
  void Record(grpc::StatusCode code, Clock::duration elapsed);

  const std::string path;  // as gRPC gives it: "/okl.v1.OnlineKernelLearning/Predict"
  const std::string service;
  const std::string method;
  std::array<std::atomic<uint64_t>, kCodeNames.size()> requests{};
  AtomicHistogram duration;
};

// Maps a method path to its MethodSeries. Lookups are lock-free: an open-addressing table
// of atomic pointers, filled under `mu_` and never emptied, so a reader that finds a
// pointer finds a fully built series (release/acquire), and one that misses takes the lock
// and looks again. Clients choose the paths they call, and gRPC runs interceptors for
// methods the server does not have (answering UNIMPLEMENTED), so a path gets series of its
// own only once it answers with another code, and only up to kMaxMethods paths; all other
// calls count under {service="other", method="other"}.
class MethodTable {
 public:
  static constexpr size_t kMaxMethods = 64;

  MethodTable() : other_("", "other", "other") {}

  // The series of `path` if it has one; null otherwise. Lock-free.
  MethodSeries* Find(const char* path) const;

  // The series of `path`, made now if needed; other() once the table is full or for a
  // path that is not "/package.Service/Method".
  MethodSeries* FindOrAdd(const char* path) ABSL_LOCKS_EXCLUDED(mu_);

  MethodSeries* other() { return &other_; }

  // Calls `visit` for every method with series, and for other().
  void ForEach(const std::function<void(const MethodSeries&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kSlots = 2 * kMaxMethods;  // at most half full: short probes
  static_assert((kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");

  MethodSeries* Probe(std::string_view path, size_t hash) const;
  MethodSeries* Insert(std::string_view path, size_t hash) ABSL_LOCKS_EXCLUDED(mu_);

  std::array<std::atomic<MethodSeries*>, kSlots> slots_{};
  mutable Mutex mu_;
  std::vector<std::unique_ptr<MethodSeries>> series_ ABSL_GUARDED_BY(mu_);
  MethodSeries other_;
};

// The factory of the interceptor that times every call from its arrival to its status and
// records it in `methods`, which must outlive every server built with it (and their calls).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRpcInterceptorFactory(MethodTable* methods);

// Appends okl_rpc_requests_total and okl_rpc_duration_seconds (when any call has finished),
// in (service, method) order.
void CollectRpcMetrics(const MethodTable& methods,
                       std::vector<prometheus::MetricFamily>* families);

}  // namespace okl::metrics_internal

#endif  // OKL_SERVER_METRICS_RPC_METRICS_H_
