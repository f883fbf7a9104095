// server/metrics/rpc_metrics.cc
//
// Why not prometheus-cpp's own Counter and Histogram for the request path: in 1.0.1
// Histogram::Observe takes a std::mutex per histogram, so every Predict on every thread
// would queue on one lock, and Counter::Increment is a compare-and-swap loop on a double.
// Here a call costs one lock-free table lookup, then three relaxed fetch_adds on integers
// (its code's counter, its duration bucket, the duration sum in nanoseconds).

#include "server/metrics/rpc_metrics.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "prometheus/metric_type.h"
#include "server/metrics/metrics_families.h"

namespace okl::metrics_internal {
namespace {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

constexpr size_t kUnknownCode = 2;

size_t CodeIndex(grpc::StatusCode code) {
  const auto index = static_cast<size_t>(code);
  return index < kCodeNames.size() ? index : kUnknownCode;
}

// Times one call from its arrival to its status. gRPC owns it and deletes it with the
// call. A call that ends without the server sending a status (the server shut down under
// it, say) is counted as CANCELLED when it is destroyed, so every call is counted exactly
// once. gRPC also makes one for each call the completion queues requested that never
// came (the server shut down first): it sees no hook point, and counts nothing.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(MethodTable* methods, grpc::experimental::ServerRpcInfo* info)
      : methods_(methods), info_(info), series_(methods->Find(info->method())) {}

  ~RpcInterceptor() override {
    if (arrived_.load(std::memory_order_relaxed) && !recorded_.load(std::memory_order_relaxed)) {
      // The call's method string may be gone by now: a method not seen before counts
      // under "other".
      MethodSeries* series = series_ != nullptr ? series_ : methods_->other();
      series->Record(grpc::StatusCode::CANCELLED, Clock::now() - start_);
    }
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    arrived_.store(true, std::memory_order_relaxed);
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !recorded_.exchange(true, std::memory_order_relaxed)) {
      const grpc::StatusCode code = methods->GetSendStatus().error_code();
      MethodSeries* series = series_;
      if (series == nullptr) {
        // The first call of this method, or a method the server does not have.
        series = code == grpc::StatusCode::UNIMPLEMENTED ? methods_->other()
                                                         : methods_->FindOrAdd(info_->method());
      }
      series->Record(code, Clock::now() - start_);
    }
    methods->Proceed();
  }

 private:
  MethodTable* const methods_;
  grpc::experimental::ServerRpcInfo* const info_;  // the call's; valid during Intercept
  MethodSeries* const series_;                     // null until the method has series
  const Clock::time_point start_ = Clock::now();
  // Batches of one call may be intercepted on different threads.
  std::atomic<bool> recorded_{false};
  std::atomic<bool> arrived_{false};  // a hook point was seen: a call came
};

class RpcInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(MethodTable* methods) : methods_(methods) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(methods_, info);
  }

 private:
  MethodTable* const methods_;
};

}  // namespace

// --- AtomicHistogram --------------------------------------------------------------------

void AtomicHistogram::Observe(Clock::duration elapsed) {
  const int64_t nanos = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  const double seconds = static_cast<double>(nanos) * 1e-9;
  const size_t bucket = std::lower_bound(bounds_, bounds_ + bound_count_, seconds) - bounds_;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(static_cast<uint64_t>(nanos), std::memory_order_relaxed);
}

ClientMetric::Histogram AtomicHistogram::Collect() const {
  ClientMetric::Histogram histogram;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bound_count_; ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    histogram.bucket.push_back({.cumulative_count = cumulative,
                                .upper_bound = i < bound_count_
                                                   ? bounds_[i]
                                                   : std::numeric_limits<double>::infinity()});
  }
  histogram.sample_count = cumulative;
  histogram.sample_sum = static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  return histogram;
}

// --- MethodSeries and MethodTable -------------------------------------------------------

void MethodSeries::Record(grpc::StatusCode code, Clock::duration elapsed) {
  requests[CodeIndex(code)].fetch_add(1, std::memory_order_relaxed);
  duration.Observe(elapsed);
}

MethodSeries* MethodTable::Find(const char* path) const {
  if (path == nullptr) return nullptr;
  const std::string_view view(path);
  return Probe(view, std::hash<std::string_view>()(view));
}

MethodSeries* MethodTable::FindOrAdd(const char* path) {
  if (path == nullptr) return &other_;
  const std::string_view view(path);
  const size_t hash = std::hash<std::string_view>()(view);
  if (MethodSeries* found = Probe(view, hash)) return found;
  return Insert(view, hash);
}

void MethodTable::ForEach(const std::function<void(const MethodSeries&)>& visit) const {
  {
    ReaderLock lock(&mu_);
    for (const std::unique_ptr<MethodSeries>& series : series_) visit(*series);
  }
  visit(other_);
}

MethodSeries* MethodTable::Probe(std::string_view path, size_t hash) const {
  for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    MethodSeries* series = slots_[i].load(std::memory_order_acquire);
    if (series == nullptr) return nullptr;
    if (series->path == path) return series;
  }
}

MethodSeries* MethodTable::Insert(std::string_view path, size_t hash) {
  // "/package.Service/Method"
  if (path.size() < 4 || path[0] != '/') return &other_;
  const size_t slash = path.find('/', 1);
  if (slash == std::string_view::npos || slash == 1 || slash + 1 == path.size() ||
      path.find('/', slash + 1) != std::string_view::npos) {
    return &other_;
  }
  WriterLock lock(&mu_);
  // Another thread may have inserted it since our probe; writers are serialised here.
  if (MethodSeries* found = Probe(path, hash)) return found;
  if (series_.size() >= kMaxMethods) return &other_;
  auto series =
      std::make_unique<MethodSeries>(std::string(path), std::string(path.substr(1, slash - 1)),
                                     std::string(path.substr(slash + 1)));
  MethodSeries* raw = series.get();
  series_.push_back(std::move(series));
  size_t i = hash & (kSlots - 1);
  while (slots_[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & (kSlots - 1);
  slots_[i].store(raw, std::memory_order_release);
  return raw;
}

// --- The interceptor and the collector --------------------------------------------------

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRpcInterceptorFactory(MethodTable* methods) {
  return std::make_unique<RpcInterceptorFactory>(methods);
}

void CollectRpcMetrics(const MethodTable& methods, std::vector<MetricFamily>* families) {
  MetricFamily requests =
      Family("okl_rpc_requests_total",
             "gRPC calls finished, by service, method and status code.", MetricType::Counter);
  MetricFamily durations =
      Family("okl_rpc_duration_seconds",
             "Time from a call's arrival to its status being sent, in seconds.",
             MetricType::Histogram);
  // (service, method) order, so that the exposition does not depend on which call
  // came first.
  std::vector<const MethodSeries*> seen;
  methods.ForEach([&seen](const MethodSeries& series) { seen.push_back(&series); });
  std::sort(seen.begin(), seen.end(), [](const MethodSeries* a, const MethodSeries* b) {
    return std::tie(a->service, a->method) < std::tie(b->service, b->method);
  });
  for (const MethodSeries* series : seen) {
    bool any = false;
    for (size_t code = 0; code < kCodeNames.size(); ++code) {
      const uint64_t count = series->requests[code].load(std::memory_order_relaxed);
      if (count == 0) continue;
      any = true;
      requests.metric.push_back(Sample(MetricType::Counter, static_cast<double>(count),
                                       {{"service", series->service},
                                        {"method", series->method},
                                        {"code", kCodeNames[code]}}));
    }
    if (!any) continue;
    ClientMetric duration;
    duration.label = {{"service", series->service}, {"method", series->method}};
    duration.histogram = series->duration.Collect();
    durations.metric.push_back(std::move(duration));
  }
  if (!requests.metric.empty()) families->push_back(std::move(requests));
  if (!durations.metric.empty()) families->push_back(std::move(durations));
}

}  // namespace okl::metrics_internal
