// server/metrics.cc
//
// Everything is produced at scrape time by one prometheus::Collectable, from the model
// registry (per-model series and aggregates), the regret scheduler's stats, /proc/self,
// and atomics that the request path bumps. Why not prometheus-cpp's own Counter and
// Histogram for the request path: in 1.0.1 Histogram::Observe takes a std::mutex per
// histogram, so every Predict on every thread would queue on one lock, and
// Counter::Increment is a compare-and-swap loop on a double. Here a call costs one lock-free
// table lookup, then three relaxed fetch_adds on integers (its code's counter, its
// duration bucket, the duration sum in nanoseconds).

#include "server/metrics.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/config.h"
#include "core/mutex.h"
#include "server/model_host.h"
#include "server/tokens.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"

namespace okl {
namespace {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;
using Clock = std::chrono::steady_clock;

#ifdef OKL_VERSION
constexpr char kVersion[] = OKL_VERSION;
#else
constexpr char kVersion[] = "0.1.0";
#endif

#ifdef OKL_BUILD_TYPE
constexpr char kBuildType[] = OKL_BUILD_TYPE;
#elif defined(NDEBUG)
constexpr char kBuildType[] = "optimized";  // Release, RelWithDebInfo or MinSizeRel
#else
constexpr char kBuildType[] = "debug";
#endif

std::string CompilerName() {
#if defined(__clang__)
  return absl::StrCat("clang ", __clang_major__, ".", __clang_minor__, ".",
                      __clang_patchlevel__);
#elif defined(__GNUC__)
  return absl::StrCat("gcc ", __GNUC__, ".", __GNUC_MINOR__, ".", __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

// Upper bounds in seconds: okl's calls take tens of microseconds (a Predict on a small
// model) to seconds (a large Snapshot or Restore); streams may take longer and land in
// +Inf.
constexpr std::array<double, 18> kRpcDurationBounds = {
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 0.1,    0.25,   0.5,    1.0,  2.5,    5.0,  10.0};

// grpc::StatusCode's names as gRPC spells them; OK (0) to UNAUTHENTICATED (16).
constexpr std::array<const char*, 17> kCodeNames = {
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
constexpr size_t kUnknownCode = 2;

size_t CodeIndex(grpc::StatusCode code) {
  const auto index = static_cast<size_t>(code);
  return index < kCodeNames.size() ? index : kUnknownCode;
}

// A latency histogram that is only ever added to: per-bucket (not cumulative) counts and
// the sum in nanoseconds, each an independent relaxed atomic. A scrape may see an
// observation's bucket before its sum; the count it reports is the sum of the buckets it
// read, so count and buckets always agree.
class AtomicHistogram {
 public:
  void Observe(Clock::duration elapsed) {
    const int64_t nanos = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
    const double seconds = static_cast<double>(nanos) * 1e-9;
    const size_t bucket =
        std::lower_bound(kRpcDurationBounds.begin(), kRpcDurationBounds.end(), seconds) -
        kRpcDurationBounds.begin();
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_nanos_.fetch_add(static_cast<uint64_t>(nanos), std::memory_order_relaxed);
  }

  ClientMetric::Histogram Collect() const {
    ClientMetric::Histogram histogram;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      cumulative += counts_[i].load(std::memory_order_relaxed);
      histogram.bucket.push_back(
          {.cumulative_count = cumulative,
           .upper_bound = i < kRpcDurationBounds.size()
                              ? kRpcDurationBounds[i]
                              : std::numeric_limits<double>::infinity()});
    }
    histogram.sample_count = cumulative;
    histogram.sample_sum =
        static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
    return histogram;
  }

 private:
  std::array<std::atomic<uint64_t>, kRpcDurationBounds.size() + 1> counts_{};  // last: +Inf
  std::atomic<uint64_t> sum_nanos_{0};
};

// The series of one gRPC method: a request counter per status code and the duration.
struct MethodSeries {
  MethodSeries(std::string path, std::string service, std::string method)
      : path(std::move(path)), service(std::move(service)), method(std::move(method)) {}

  void Record(grpc::StatusCode code, Clock::duration elapsed) {
    requests[CodeIndex(code)].fetch_add(1, std::memory_order_relaxed);
    duration.Observe(elapsed);
  }

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
  MethodSeries* Find(const char* path) const {
    if (path == nullptr) return nullptr;
    const std::string_view view(path);
    return Probe(view, std::hash<std::string_view>()(view));
  }

  // The series of `path`, made now if needed; other() once the table is full or for a
  // path that is not "/package.Service/Method".
  MethodSeries* FindOrAdd(const char* path) ABSL_LOCKS_EXCLUDED(mu_) {
    if (path == nullptr) return &other_;
    const std::string_view view(path);
    const size_t hash = std::hash<std::string_view>()(view);
    if (MethodSeries* found = Probe(view, hash)) return found;
    return Insert(view, hash);
  }

  MethodSeries* other() { return &other_; }

  // Calls `visit` for every method with series, and for other().
  void ForEach(const std::function<void(const MethodSeries&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    {
      ReaderLock lock(&mu_);
      for (const std::unique_ptr<MethodSeries>& series : series_) visit(*series);
    }
    visit(other_);
  }

 private:
  static constexpr size_t kSlots = 2 * kMaxMethods;  // at most half full: short probes
  static_assert((kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");

  MethodSeries* Probe(std::string_view path, size_t hash) const {
    for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      MethodSeries* series = slots_[i].load(std::memory_order_acquire);
      if (series == nullptr) return nullptr;
      if (series->path == path) return series;
    }
  }

  MethodSeries* Insert(std::string_view path, size_t hash) ABSL_LOCKS_EXCLUDED(mu_) {
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
    auto series = std::make_unique<MethodSeries>(std::string(path),
                                                 std::string(path.substr(1, slash - 1)),
                                                 std::string(path.substr(slash + 1)));
    MethodSeries* raw = series.get();
    series_.push_back(std::move(series));
    size_t i = hash & (kSlots - 1);
    while (slots_[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & (kSlots - 1);
    slots_[i].store(raw, std::memory_order_release);
    return raw;
  }

  std::array<std::atomic<MethodSeries*>, kSlots> slots_{};
  mutable Mutex mu_;
  std::vector<std::unique_ptr<MethodSeries>> series_ ABSL_GUARDED_BY(mu_);
  MethodSeries other_;
};

// Times one call from its arrival to its status. gRPC owns it and deletes it with the
// call. A call that ends without the server sending a status (the server shut down under
// it, say) is counted as CANCELLED when it is destroyed, so every call is counted exactly
// once.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(MethodTable* methods, grpc::experimental::ServerRpcInfo* info)
      : methods_(methods), info_(info), series_(methods->Find(info->method())) {}

  ~RpcInterceptor() override {
    if (!recorded_.load(std::memory_order_relaxed)) {
      // The call's method string may be gone by now: a method not seen before counts
      // under "other".
      MethodSeries* series = series_ != nullptr ? series_ : methods_->other();
      series->Record(grpc::StatusCode::CANCELLED, Clock::now() - start_);
    }
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
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

// --- Building the exposition ------------------------------------------------------------

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

ClientMetric Sample(MetricType type, double value,
                    std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  switch (type) {
    case MetricType::Counter:
      metric.counter.value = value;
      break;
    case MetricType::Gauge:
      metric.gauge.value = value;
      break;
    default:
      metric.untyped.value = value;
      break;
  }
  return metric;
}

// A family with one unlabelled sample.
MetricFamily Single(std::string name, std::string help, MetricType type, double value) {
  MetricFamily family = Family(std::move(name), std::move(help), type);
  family.metric.push_back(Sample(type, value));
  return family;
}

// --- /proc/self -------------------------------------------------------------------------

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return contents.str();
}

// The fields of /proc/self/stat after the command name (which may hold spaces and
// parentheses, hence the last ')'): fields[0] is field 3 of proc(5), "state".
std::optional<std::vector<std::string>> ReadProcSelfStat() {
  std::optional<std::string> stat = ReadFile("/proc/self/stat");
  if (!stat) return std::nullopt;
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipWhitespace());
  if (fields.size() < 22) return std::nullopt;
  return fields;
}

// proc(5) field numbers, as indices into ReadProcSelfStat()'s fields.
constexpr size_t StatField(size_t number) { return number - 3; }
constexpr size_t kUtime = StatField(14);      // clock ticks
constexpr size_t kStime = StatField(15);      // clock ticks
constexpr size_t kStartTime = StatField(22);  // clock ticks after boot
constexpr size_t kVsize = StatField(23);      // bytes
constexpr size_t kRss = StatField(24);        // pages

double ParseNumber(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

// Seconds since the epoch; nullopt if /proc cannot tell.
std::optional<double> ProcessStartTime() {
  std::optional<std::vector<std::string>> fields = ReadProcSelfStat();
  std::optional<std::string> stat = ReadFile("/proc/stat");
  if (!fields || !stat) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      const double boot = std::strtod(std::string(line).c_str(), nullptr);
      return boot + ParseNumber((*fields)[kStartTime]) / sysconf(_SC_CLK_TCK);
    }
  }
  return std::nullopt;
}

std::optional<size_t> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  size_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the directory's own descriptor
}

// --- Stopping the exposer quickly -------------------------------------------------------

// Where a client reaches a listener bound to `address` (civetweb's "host:port" syntax):
// the loopback address for a wildcard host.
std::string LoopbackFor(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? "" : address.substr(0, colon);
  absl::ConsumePrefix(&host, "+");
  if (absl::ConsumePrefix(&host, "[") && absl::ConsumeSuffix(&host, "]")) {
    return host == "::" ? "::1" : std::string(host);
  }
  return host.empty() || host == "0.0.0.0" ? "127.0.0.1" : std::string(host);
}

// Connects to `target` and hangs up at once; best effort. Non-blocking, so that an
// unreachable address cannot hold up the stop (a local listener completes the handshake
// within connect()).
void Poke(const addrinfo& target) {
  const int fd = socket(target.ai_family, target.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        target.ai_protocol);
  if (fd < 0) return;
  connect(fd, target.ai_addr, target.ai_addrlen);
  close(fd);
}

// Destroys `exposer`. civetweb's listener thread sees the stop only when its poll() returns,
// which without traffic is after up to 2 s (its SOCKET_TIMEOUT_QUANTUM); connections
// to the listener while mg_stop() waits wake it at once. A connection accepted just
// before the stop is hung up on, which a worker drops at once. If the listener cannot be
// reached, the stop simply takes the 2 s.
void StopExposer(std::unique_ptr<prometheus::Exposer> exposer, const std::string& host,
                 int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* targets = nullptr;
  if (port <= 0 ||
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &targets) != 0) {
    exposer.reset();
    return;
  }
  std::atomic<bool> stopped{false};
  std::thread waker([&stopped, targets] {
    while (!stopped.load(std::memory_order_acquire)) {
      Poke(*targets);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  exposer.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
  freeaddrinfo(targets);
}

}  // namespace

// --- ServerMetrics::Impl ----------------------------------------------------------------

class ServerMetrics::Impl {
 public:
  Impl(const ModelRegistry* registry, const RegretScheduler* regret_scheduler, Options options)
      : registry_(registry),
        regret_scheduler_(regret_scheduler),
        options_(options),
        compiler_(CompilerName()),
        start_time_(ProcessStartTime()),
        collector_(std::make_shared<Collector>(this)) {}

  ~Impl() {
    // Stop serving scrapes before anything they read goes away.
    std::unique_ptr<prometheus::Exposer> exposer;
    std::string host;
    int port;
    {
      WriterLock lock(&mu_);
      exposer = std::move(exposer_);
      host = exposer_host_;
      port = exposer_port_;
    }
    if (exposer != nullptr) StopExposer(std::move(exposer), host, port);
  }

  absl::Status StartExposer(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_) {
    WriterLock lock(&mu_);
    if (exposer_ != nullptr) {
      return absl::FailedPreconditionError("the metrics exposer was started before");
    }
    std::string error;
    try {
      auto exposer = std::make_unique<prometheus::Exposer>(address);
      exposer->RegisterCollectable(collector_);
      std::vector<int> ports = exposer->GetListeningPorts();
      if (ports.empty()) {
        error = "it listens on no port";
      } else {
        exposer_port_ = ports.front();
        exposer_host_ = LoopbackFor(address);
        exposer_ = std::move(exposer);
        return absl::OkStatus();
      }
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown error";
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on \"", address,
        "\" (--metrics_address): the port is in use, or the address is not host:port (", error,
        ")"));
  }

  int exposer_port() const ABSL_LOCKS_EXCLUDED(mu_) {
    ReaderLock lock(&mu_);
    return exposer_port_;
  }

  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorCreators() {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        creators;
    creators.push_back(std::make_unique<RpcInterceptorFactory>(&methods_));
    return creators;
  }

  void RecordObserved(size_t examples, double loss_sum) {
    examples_observed_.fetch_add(examples, std::memory_order_relaxed);
    // A counter never decreases, and one NaN would poison it for good; losses are finite
    // and non-negative, so this only guards against a caller's mistake.
    if (std::isfinite(loss_sum) && loss_sum > 0) {
      examples_loss_.fetch_add(loss_sum, std::memory_order_relaxed);
    }
  }

  void RecordPredicted(size_t inputs) {
    predictions_.fetch_add(inputs, std::memory_order_relaxed);
  }

  std::string Scrape() const { return prometheus::TextSerializer().Serialize(Collect()); }

  std::vector<MetricFamily> Collect() const {
    std::vector<MetricFamily> families;
    CollectProcess(&families);
    CollectRequestPath(&families);
    CollectRegretScheduler(&families);
    CollectRpcs(&families);
    CollectModels(&families);
    CollectHost(&families);
    return families;
  }

 private:
  class Collector final : public prometheus::Collectable {
   public:
    explicit Collector(const Impl* impl) : impl_(impl) {}
    std::vector<MetricFamily> Collect() const override { return impl_->Collect(); }

   private:
    const Impl* const impl_;
  };

  void CollectProcess(std::vector<MetricFamily>* families) const {
    MetricFamily build =
        Family("okl_build_info", "okl_server's version, compiler and build type; always 1.",
               MetricType::Gauge);
    build.metric.push_back(
        Sample(MetricType::Gauge, 1.0,
               {{"version", kVersion}, {"compiler", compiler_}, {"build_type", kBuildType}}));
    families->push_back(std::move(build));

    if (start_time_) {
      families->push_back(Single("process_start_time_seconds",
                                 "Start time of the process since the Unix epoch, in seconds.",
                                 MetricType::Gauge, *start_time_));
    }
    if (std::optional<std::vector<std::string>> stat = ReadProcSelfStat()) {
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      families->push_back(
          Single("process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
                 MetricType::Counter,
                 (ParseNumber((*stat)[kUtime]) + ParseNumber((*stat)[kStime])) / ticks));
      families->push_back(Single(
          "process_resident_memory_bytes", "Resident memory size, in bytes.", MetricType::Gauge,
          ParseNumber((*stat)[kRss]) * static_cast<double>(sysconf(_SC_PAGESIZE))));
      families->push_back(Single("process_virtual_memory_bytes",
                                 "Virtual memory size, in bytes.", MetricType::Gauge,
                                 ParseNumber((*stat)[kVsize])));
    }
    if (std::optional<size_t> fds = CountOpenFds()) {
      families->push_back(Single("process_open_fds", "Number of open file descriptors.",
                                 MetricType::Gauge, static_cast<double>(*fds)));
    }
    // getrlimit reads the same limit /proc/self/limits prints, without parsing text.
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      families->push_back(Single("process_max_fds",
                                 "Maximum number of open file descriptors (soft limit).",
                                 MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
    }
  }

  void CollectRequestPath(std::vector<MetricFamily>* families) const {
    families->push_back(
        Single("okl_examples_observed_total",
               "Labelled examples applied to models by Observe calls.", MetricType::Counter,
               static_cast<double>(examples_observed_.load(std::memory_order_relaxed))));
    families->push_back(Single("okl_examples_loss_total",
                               "Sum of the prequential losses loss(y_t, p_t) of the examples "
                               "observed, in the models' loss units.",
                               MetricType::Counter,
                               examples_loss_.load(std::memory_order_relaxed)));
    families->push_back(Single(
        "okl_predictions_total", "Inputs predicted by Predict calls.", MetricType::Counter,
        static_cast<double>(predictions_.load(std::memory_order_relaxed))));
  }

  void CollectRegretScheduler(std::vector<MetricFamily>* families) const {
    if (regret_scheduler_ == nullptr) return;
    const RegretScheduler::Stats stats = regret_scheduler_->stats();
    families->push_back(Single("okl_regret_computations_total",
                               "Windowed regret computations finished, successful or not.",
                               MetricType::Counter, static_cast<double>(stats.computations)));
    families->push_back(Single(
        "okl_regret_failures_total",
        "Windowed regret computations that failed (e.g. the model was deleted meanwhile).",
        MetricType::Counter, static_cast<double>(stats.failures)));
    families->push_back(Single("okl_regret_busy_seconds_total",
                               "Wall time the regret workers spent computing, in seconds.",
                               MetricType::Counter, stats.busy_seconds));
    families->push_back(Single("okl_regret_queue_length",
                               "Models waiting for a regret computation.", MetricType::Gauge,
                               static_cast<double>(stats.queued)));
  }

  void CollectRpcs(std::vector<MetricFamily>* families) const {
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
    methods_.ForEach([&seen](const MethodSeries& series) { seen.push_back(&series); });
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

  void CollectModels(std::vector<MetricFamily>* families) const {
    MetricFamily expansion_size =
        Family("okl_model_expansion_size", "Terms stored in the model's kernel expansion.",
               MetricType::Gauge);
    MetricFamily steps =
        Family("okl_model_steps_total", "Labelled examples the model has observed.",
               MetricType::Counter);
    MetricFamily loss = Family("okl_model_loss_total",
                               "Cumulative prequential loss sum_t loss(y_t, p_t) of the model, "
                               "in its loss's units.",
                               MetricType::Counter);
    MetricFamily mistakes =
        Family("okl_model_mistakes_total",
               "Examples whose prequential prediction had the wrong sign (classification "
               "losses only).",
               MetricType::Counter);
    MetricFamily regret = Family(
        "okl_model_regret",
        "Windowed regret: online loss minus the batch comparator's loss over the last "
        "regret_window examples, in loss units; lags by okl_model_regret_staleness_steps.",
        MetricType::Gauge);
    MetricFamily regret_per_example =
        Family("okl_model_regret_per_example",
               "Windowed regret divided by the examples in the window, in loss units.",
               MetricType::Gauge);
    MetricFamily regret_staleness =
        Family("okl_model_regret_staleness_steps",
               "Examples observed since the newest example of the last regret computation.",
               MetricType::Gauge);
    MetricFamily regret_window =
        Family("okl_model_regret_window_size",
               "Examples in the window of the last regret computation.", MetricType::Gauge);
    MetricFamily truncation = Family(
        "okl_model_truncation_error_bound",
        "Bound on the RKHS-norm error of truncating the expansion to its budget (seed 003).",
        MetricType::Gauge);
    MetricFamily memory =
        Family("okl_model_memory_bytes", "Memory held by the model's expansion, in bytes.",
               MetricType::Gauge);

    double models = 0;
    double omitted = 0;
    double terms = 0;
    double bytes = 0;
    size_t with_series = 0;
    for (const std::shared_ptr<ModelEntry>& entry : registry_->List("")) {
      absl::StatusOr<ModelSummary> summary = entry->Summary();
      if (!summary.ok()) continue;  // deleted since List
      const ModelStats& stats = summary->stats;
      ++models;
      terms += stats.expansion_size;
      bytes += static_cast<double>(summary->memory_bytes);
      if (with_series >= options_.max_models) {
        ++omitted;
        continue;
      }
      if (options_.model_labels == ModelLabels::kNone) {
        ++omitted;
        continue;
      }
      ++with_series;
      const std::vector<ClientMetric::Label> labels = {{"tenant", Label(summary->tenant)},
                                                       {"model", Label(summary->model)}};
      auto add = [&labels](MetricFamily* family, double value) {
        family->metric.push_back(Sample(family->type, value, labels));
      };
      add(&expansion_size, stats.expansion_size);
      add(&steps, static_cast<double>(stats.steps));
      add(&loss, stats.cumulative_loss);
      if (IsClassificationLoss(summary->config.loss.type)) {
        add(&mistakes, static_cast<double>(stats.mistakes));
      }
      if (stats.regret.has_value()) {
        const RegretResult& r = *stats.regret;
        add(&regret, r.regret);
        if (r.window > 0) add(&regret_per_example, r.regret / static_cast<double>(r.window));
        add(&regret_staleness,
            stats.steps >= r.last_step ? static_cast<double>(stats.steps - r.last_step) : 0.0);
        add(&regret_window, static_cast<double>(r.window));
      }
      if (stats.truncation_error_bound.has_value()) {
        add(&truncation, *stats.truncation_error_bound);
      }
      add(&memory, static_cast<double>(summary->memory_bytes));
    }

    families->push_back(Single("okl_models", "Models held.", MetricType::Gauge, models));
    families->push_back(Single("okl_metrics_models_omitted",
                               "Models without okl_model_* series because of "
                               "--metrics_max_models; they count in the aggregates.",
                               MetricType::Gauge, omitted));
    families->push_back(Single("okl_expansion_terms",
                               "Terms stored in the expansions of all models.",
                               MetricType::Gauge, terms));
    families->push_back(Single("okl_expansion_bytes",
                               "Memory held by the expansions of all models, in bytes.",
                               MetricType::Gauge, bytes));
    for (MetricFamily* family :
         {&expansion_size, &steps, &loss, &mistakes, &regret, &regret_per_example,
          &regret_staleness, &regret_window, &truncation, &memory}) {
      if (!family->metric.empty()) families->push_back(std::move(*family));
    }
  }

  // A name as a per-model label value: itself, or the start of its SHA-256.
  std::string Label(const std::string& name) const {
    if (options_.model_labels == ModelLabels::kNames) return name;
    return Sha256Hex(name).substr(0, 16);
  }

  void CollectHost(std::vector<MetricFamily>* families) const {
    if (options_.host == nullptr) return;
    const ResourceQuotas& quotas = options_.host->quotas();
    const ResourceQuotas::Limits& limits = quotas.limits();
    const ResourceQuotas::Usage usage = quotas.usage();
    MetricFamily limit = Family("okl_quota_limit",
                                "The quota's limit (0: none): models, bytes or requests per "
                                "second, per tenant where the name says so.",
                                MetricType::Gauge);
    MetricFamily rejected = Family(
        "okl_quota_rejections_total",
        "Requests refused with RESOURCE_EXHAUSTED because they would exceed the quota.",
        MetricType::Counter);
    const std::array<double, kQuotaCount> limit_values = {
        static_cast<double>(limits.max_models), static_cast<double>(limits.max_models_per_tenant),
        static_cast<double>(limits.max_bytes_per_tenant),
        static_cast<double>(limits.max_memory_bytes), limits.max_requests_per_second_per_tenant};
    for (size_t i = 0; i < kQuotaCount; ++i) {
      const std::string name(QuotaName(static_cast<Quota>(i)));
      limit.metric.push_back(Sample(MetricType::Gauge, limit_values[i], {{"quota", name}}));
      rejected.metric.push_back(Sample(MetricType::Counter,
                                       static_cast<double>(usage.rejections[i]),
                                       {{"quota", name}}));
    }
    families->push_back(std::move(limit));
    families->push_back(std::move(rejected));
    families->push_back(Single("okl_quota_reserved_bytes",
                               "Worst-case bytes of all models, reserved against "
                               "--max_memory_bytes.",
                               MetricType::Gauge, static_cast<double>(usage.bytes)));
    families->push_back(Single("okl_checkpoint_failures_total",
                               "Checkpoints that failed (each is retried with back-off; the "
                               "log keeps every example meanwhile).",
                               MetricType::Counter,
                               static_cast<double>(options_.host->checkpoint_failures())));
    families->push_back(Single("okl_models_failing_checkpoints",
                               "Models whose latest checkpoint attempt failed.",
                               MetricType::Gauge,
                               static_cast<double>(options_.host->models_failing_checkpoints())));
  }

  const ModelRegistry* const registry_;
  const RegretScheduler* const regret_scheduler_;
  const Options options_;
  const std::string compiler_;
  const std::optional<double> start_time_;

  std::atomic<uint64_t> examples_observed_{0};
  std::atomic<double> examples_loss_{0.0};
  std::atomic<uint64_t> predictions_{0};
  MethodTable methods_;

  // The exposer holds a weak_ptr; the collector lives as long as this Impl.
  const std::shared_ptr<Collector> collector_;
  mutable Mutex mu_;
  // Declared last: destroyed (its HTTP threads joined) before what scrapes read.
  std::unique_ptr<prometheus::Exposer> exposer_ ABSL_GUARDED_BY(mu_);
  int exposer_port_ ABSL_GUARDED_BY(mu_) = 0;
  // Where the exposer's listener is reached from this process, to stop it quickly.
  std::string exposer_host_ ABSL_GUARDED_BY(mu_);
};

// --- ServerMetrics ----------------------------------------------------------------------

absl::StatusOr<ModelLabels> ParseModelLabels(absl::string_view text) {
  if (text == "names") return ModelLabels::kNames;
  if (text == "hashed") return ModelLabels::kHashed;
  if (text == "none") return ModelLabels::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics_model_labels must be names, hashed or none, got \"", text, "\""));
}

ServerMetrics::ServerMetrics(const ModelRegistry* registry,
                             const RegretScheduler* regret_scheduler, Options options)
    : impl_(std::make_unique<Impl>(registry, regret_scheduler, options)) {}

ServerMetrics::~ServerMetrics() = default;

absl::Status ServerMetrics::StartExposer(const std::string& address) {
  return impl_->StartExposer(address);
}

int ServerMetrics::exposer_port() const { return impl_->exposer_port(); }

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerMetrics::InterceptorCreators() {
  return impl_->InterceptorCreators();
}

void ServerMetrics::RecordObserved(size_t examples, double loss_sum) {
  impl_->RecordObserved(examples, loss_sum);
}

void ServerMetrics::RecordPredicted(size_t inputs) { impl_->RecordPredicted(inputs); }

std::string ServerMetrics::Scrape() const { return impl_->Scrape(); }

}  // namespace okl
