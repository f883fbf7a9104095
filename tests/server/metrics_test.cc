// tests/server/metrics_test.cc
//
// ServerMetrics against real objects only: ModelHosts and ModelRegistries of real NORMA
// models, an in-process gRPC server (OklService and okl's HealthService) built with the
// metrics interceptor on a loopback port, and the prometheus-cpp exposer on another, read
// over HTTP by the small socket-level client below. Debian's promtool (OKL_PROMTOOL)
// checks the exposition.

#include "server/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/regret_scheduler.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"
#include "proto/bearer_token.h"
#include "server/rpc/health_service.h"
#include "server/host/hosted_model.h"
#include "server/events/model_events.h"
#include "server/host/model_host.h"
#include "server/rpc/service.h"
#include "tests/core/test_model_key.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/fault_file_system.h"
#include "tests/server/server_process.h"

namespace okl {
namespace {

using ::okl::testing::HasCode;
using ::okl::testing::IsOk;
using ::okl::testing::Ref;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// An in-memory host for the exposition tests: dim up to 1,024, `max_models` models.
ModelHost::Options InMemoryHostOptions(uint32_t max_models,
                                       RegretScheduler* regret_scheduler = nullptr) {
  ModelHost::Options options;
  options.max_dim = 1024;
  options.max_terms = 100000;
  options.quotas.max_models = max_models;
  options.regret_scheduler = regret_scheduler;
  return options;
}

// --- Reading the exposition -------------------------------------------------------------

// One sample's key as prometheus-cpp's TextSerializer writes it: name{l1="v1",l2="v2"}.
std::string Key(absl::string_view name,
                const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  if (labels.empty()) return std::string(name);
  return absl::StrCat(name, "{",
                      absl::StrJoin(labels, ",",
                                    [](std::string* out, const auto& label) {
                                      absl::StrAppend(out, label.first, "=\"", label.second,
                                                      "\"");
                                    }),
                      "}");
}

struct Exposition {
  std::map<std::string, double> samples;     // Key() -> value
  std::map<std::string, std::string> types;  // family -> "counter", "gauge", ...
  std::set<std::string> with_help;           // families with a HELP line

  bool Has(const std::string& key) const { return samples.count(key) > 0; }
  // The value of `key`; fails the test (and returns NaN) if it is missing.
  double Value(const std::string& key) const {
    auto it = samples.find(key);
    if (it == samples.end()) {
      ADD_FAILURE() << "no sample " << key;
      return std::nan("");
    }
    return it->second;
  }
  // The samples whose key contains `fragment`.
  std::vector<std::string> KeysContaining(absl::string_view fragment) const {
    std::vector<std::string> keys;
    for (const auto& [key, value] : samples) {
      if (absl::StrContains(key, fragment)) keys.push_back(key);
    }
    return keys;
  }
};

Exposition Parse(const std::string& text) {
  Exposition exposition;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 2) exposition.types[parts[0]] = parts[1];
      continue;
    }
    if (absl::ConsumePrefix(&line, "# HELP ")) {
      exposition.with_help.insert(std::string(line.substr(0, line.find(' '))));
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) {
      ADD_FAILURE() << "unparsable line: " << line;
      continue;
    }
    const std::string value(line.substr(space + 1));
    exposition.samples[std::string(line.substr(0, space))] =
        value == "+Inf" ? std::numeric_limits<double>::infinity()
                        : std::strtod(value.c_str(), nullptr);
  }
  return exposition;
}

// Runs `promtool check metrics` on `text`; returns its exit status and its output.
std::pair<int, std::string> Promtool(const std::string& text) {
  static std::atomic<int> files{0};
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/okl_metrics_", getpid(), "_", files++, ".txt");
  {
    std::ofstream out(path);
    out << text;
  }
  const std::string command =
      absl::StrCat("'", OKL_PROMTOOL, "' check metrics < '", path, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  std::remove(path.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

using ::okl::testing::HttpGet;  // tests/server/server_process.h

// --- Models -----------------------------------------------------------------------------

ModelConfig Config(LossType loss, uint32_t max_terms = 64, uint32_t regret_window = 0) {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = loss};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  config.lambda = 0.01;
  config.budget = {.max_terms = max_terms, .policy = BudgetPolicy::kOldest};
  config.regret_window = regret_window;
  if (IsMulticlassLoss(loss)) config.max_classes = 4;
  return config;
}

// `n` examples from a fixed seed: inputs in [-1, 1], labels +-1 for the classification
// losses, a multi-class model's classes "neg", "pos" and "far" by the inputs' sum, and a
// smooth function of x otherwise.
void Feed(ModelEntry& entry, size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const uint32_t dim = entry.config().dim;
  std::vector<double> xs(n * dim);
  std::vector<double> ys(n);
  std::vector<std::string> classes;
  const bool multiclass = entry.config().multiclass();
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (uint32_t j = 0; j < dim; ++j) sum += xs[i * dim + j] = uniform(random);
    if (multiclass) {
      ys[i] = 0;
      classes.push_back(sum > 1 ? "far" : sum > 0 ? "pos" : "neg");
      continue;
    }
    ys[i] = IsClassificationLoss(entry.config().loss.type)
                ? (sum > 0 ? 1.0 : -1.0)
                : std::sin(sum) + 0.1 * uniform(random);
  }
  absl::StatusOr<ValidatedBatch> batch =
      entry.Validate(InputBatch::Dense(xs, dim), ys, classes);
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<Observation> out;
  ASSERT_TRUE(entry.ObserveBatch(*batch, &out).ok());
}

// `entry`, fed `examples` examples; null (with a failure) if it was not made.
std::shared_ptr<ModelEntry> Fed(absl::StatusOr<std::shared_ptr<ModelEntry>> entry,
                                size_t examples, uint32_t seed) {
  EXPECT_TRUE(entry.ok()) << entry.status();
  if (!entry.ok()) return nullptr;
  if (examples > 0) Feed(**entry, examples, seed);
  return *entry;
}

std::shared_ptr<ModelEntry> AddModel(ModelRegistry& registry, absl::string_view tenant,
                                     absl::string_view model, const ModelConfig& config,
                                     size_t examples, uint32_t seed) {
  return Fed(registry.Create(TestKey(tenant, model), config), examples, seed);
}

// The same through `host`, as CreateModel would: the model's entry.
std::shared_ptr<ModelEntry> AddModel(ModelHost& host, absl::string_view tenant,
                                     absl::string_view model, const ModelConfig& config,
                                     size_t examples, uint32_t seed) {
  absl::StatusOr<std::shared_ptr<HostedModel>> hosted =
      host.Create(TestKey(tenant, model), config);
  if (!hosted.ok()) return Fed(hosted.status(), examples, seed);
  return Fed((*hosted)->shared_entry(), examples, seed);
}

// The events of `entry`'s model in `host`, if it has a book.
std::optional<EventCounts> EventsOf(const ModelHost& host, const ModelEntry& entry) {
  absl::StatusOr<std::shared_ptr<HostedModel>> hosted =
      host.Find(TestKey(entry.tenant(), entry.model()));
  if (!hosted.ok() || (*hosted)->existing_book() == nullptr) return std::nullopt;
  return (*hosted)->event_counts();
}

ModelSummary SummaryOf(const ModelEntry& entry) {
  absl::StatusOr<ModelSummary> summary = entry.Summary();
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *summary : ModelSummary{};
}

// prometheus-cpp prints 16 significant digits, so a printed value is within 5e-16
// (relative) of the double; 1e-14 allows for that rounding and hides nothing larger.
void ExpectPrinted(double printed, double expected, const std::string& what) {
  EXPECT_NEAR(printed, expected, 1e-14 * std::max(1.0, std::abs(expected))) << what;
}

// --- An in-process gRPC server with the interceptor -------------------------------------

class TestServer {
 public:
  TestServer(ModelHost* host, ServerMetrics* metrics, OklService::Options options = {})
      : service_(host, /*authenticator=*/nullptr, options) {
    service_.set_metrics(metrics);
    grpc::EnableDefaultHealthCheckService(false);
    health_.SetServing("", true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    queue_threads_.emplace(std::vector<RawAsyncService*>{&service_, &health_}, /*threads=*/2,
                           &builder);
    builder.experimental().SetInterceptorCreators(metrics->InterceptorCreators());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    queue_threads_->Start();
    EXPECT_NE(port_, 0);
    service_.SetServing();
    channel_ = testing::MakeChannel(absl::StrCat("127.0.0.1:", port_));
    stub_ = v1::OnlineKernelLearning::NewStub(channel_);
  }

  ~TestServer() { Shutdown(); }

  void Shutdown() {
    if (server_ == nullptr) return;
    // Calls still open then (health Watch streams) are cancelled.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
    queue_threads_->Stop();
    server_.reset();
  }

  v1::OnlineKernelLearning::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() { return channel_; }

 private:
  OklService service_;
  HealthService health_;
  int port_ = 0;
  std::optional<CompletionQueueThreads> queue_threads_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::OnlineKernelLearning::Stub> stub_;
};

constexpr char kOkl[] = "okl.v1.OnlineKernelLearning";

// dim 2, at most 100 terms: at most 200 multiply-adds an input.
v1::ModelConfig SmallWireConfig() {
  return testing::ParseConfig(R"pb(
    dim: 2
    kernel { gaussian { gamma: 1 } }
    loss { squared {} }
    learning_rate { eta0: 0.3 }
    lambda: 0.01
    budget { max_terms: 100 }
  )pb");
}
constexpr char kHealth[] = "grpc.health.v1.Health";

std::string RequestsKey(absl::string_view service, absl::string_view method,
                        absl::string_view code) {
  return Key("okl_rpc_requests_total", {{"service", std::string(service)},
                                        {"method", std::string(method)},
                                        {"code", std::string(code)}});
}

std::string DurationCountKey(absl::string_view service, absl::string_view method) {
  return Key("okl_rpc_duration_seconds_count",
             {{"service", std::string(service)}, {"method", std::string(method)}});
}

// Every call counted under (service, method), all codes together.
double CallsOf(const Exposition& exposition, absl::string_view service,
               absl::string_view method) {
  double total = 0;
  const std::string prefix =
      absl::StrCat("okl_rpc_requests_total{service=\"", service, "\",method=\"", method, "\",");
  for (const auto& [key, value] : exposition.samples) {
    if (absl::StartsWith(key, prefix)) total += value;
  }
  return total;
}

// Checks the histogram of (service, method): `count` observations, cumulative buckets
// that never decrease and end at +Inf with the count, a positive sum.
void ExpectDurationHistogram(const Exposition& exposition, absl::string_view service,
                             absl::string_view method, double count) {
  const std::vector<std::pair<std::string, std::string>> labels = {
      {"service", std::string(service)}, {"method", std::string(method)}};
  EXPECT_EQ(exposition.Value(Key("okl_rpc_duration_seconds_count", labels)), count);
  EXPECT_GT(exposition.Value(Key("okl_rpc_duration_seconds_sum", labels)), 0.0);
  double previous = 0;
  int buckets = 0;
  for (const char* le :
       {"2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
        "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"}) {
    std::vector<std::pair<std::string, std::string>> bucket_labels = labels;
    bucket_labels.emplace_back("le", le);
    const std::string key = Key("okl_rpc_duration_seconds_bucket", bucket_labels);
    if (!exposition.Has(key)) {
      ADD_FAILURE() << "no bucket " << key;
      continue;
    }
    const double cumulative = exposition.Value(key);
    EXPECT_GE(cumulative, previous) << key;
    previous = cumulative;
    ++buckets;
  }
  EXPECT_EQ(buckets, 19);
  EXPECT_EQ(previous, count);
}

// --- Exposition -------------------------------------------------------------------------

TEST(ServerMetricsTest, PromtoolAcceptsTheExposition) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 50});
  ModelHost host(InMemoryHostOptions(/*max_models=*/100, &scheduler));
  AddModel(host, "acme", "hinge", Config(LossType::kHinge, 8, 32), 60, 1);
  AddModel(host, "acme", "squared", Config(LossType::kSquared, 64, 16), 40, 2);
  AddModel(host, "beta", "logistic", Config(LossType::kLogistic), 30, 3);
  scheduler.WaitIdle();
  ServerMetrics metrics(ModelsOf(&host), &scheduler, {});
  metrics.RecordObserved(130, 42.5);
  metrics.RecordPredicted(7);
  TestServer server(&host, &metrics);
  v1::ModelInfo info;
  EXPECT_TRUE(IsOk(testing::GetModel(server.stub(), Ref("acme", "hinge"), &info)));
  EXPECT_TRUE(HasCode(testing::GetModel(server.stub(), Ref("acme", "nope"), &info),
                      grpc::StatusCode::NOT_FOUND));
  EXPECT_TRUE(testing::CheckHealth(server.channel(), "").ok());

  const std::string text = metrics.Scrape();
  const Exposition exposition = Parse(text);
  // Every documented family is there, with its type and a HELP text.
  for (const auto& [family, type] : std::map<std::string, std::string>{
           {"okl_model_expansion_size", "gauge"},
           {"okl_model_steps_total", "counter"},
           {"okl_model_loss_total", "counter"},
           {"okl_model_mistakes_total", "counter"},
           {"okl_model_regret", "gauge"},
           {"okl_model_regret_per_example", "gauge"},
           {"okl_model_regret_staleness_steps", "gauge"},
           {"okl_model_regret_window_size", "gauge"},
           {"okl_model_truncation_error_bound", "gauge"},
           {"okl_model_memory_bytes", "gauge"},
           {"okl_models", "gauge"},
           {"okl_metrics_models_omitted", "gauge"},
           {"okl_expansion_terms", "gauge"},
           {"okl_expansion_bytes", "gauge"},
           {"okl_regret_computations_total", "counter"},
           {"okl_regret_failures_total", "counter"},
           {"okl_regret_busy_seconds_total", "counter"},
           {"okl_regret_queue_length", "gauge"},
           {"okl_examples_observed_total", "counter"},
           {"okl_examples_loss_total", "counter"},
           {"okl_predictions_total", "counter"},
           {"okl_offloaded_calls_total", "counter"},
           {"okl_rpc_requests_total", "counter"},
           {"okl_rpc_duration_seconds", "histogram"},
           {"okl_build_info", "gauge"},
           {"process_start_time_seconds", "gauge"},
           {"process_cpu_seconds_total", "counter"},
           {"process_resident_memory_bytes", "gauge"},
           {"process_virtual_memory_bytes", "gauge"},
           {"process_open_fds", "gauge"},
           {"process_max_fds", "gauge"},
       }) {
    auto it = exposition.types.find(family);
    if (it == exposition.types.end()) {
      ADD_FAILURE() << "no family " << family;
      continue;
    }
    EXPECT_EQ(it->second, type) << family;
    EXPECT_TRUE(exposition.with_help.count(family)) << family;
  }

  auto [exit_code, problems] = Promtool(text);
  EXPECT_EQ(exit_code, 0) << problems;
  EXPECT_THAT(problems, IsEmpty()) << text;
}

TEST(ServerMetricsTest, PerModelSeriesEqualTheModelSummaries) {
  ModelRegistry registry({.max_models = 100});
  // Hinge with a small OLDEST budget and a constant rate: a truncation error bound, and
  // mistakes. Squared: neither. Regret is published by a synchronous ComputeRegret.
  std::shared_ptr<ModelEntry> hinge =
      AddModel(registry, "acme", "hinge", Config(LossType::kHinge, 8, 32), 50, 11);
  std::shared_ptr<ModelEntry> squared =
      AddModel(registry, "acme", "squared", Config(LossType::kSquared, 64), 25, 12);
  std::shared_ptr<ModelEntry> empty =
      AddModel(registry, "zeta", "empty", Config(LossType::kLogistic), 0, 13);
  ModelConfig tracker_config = Config(LossType::kSquared);
  tracker_config.learning_rate = {};
  tracker_config.lambda = 0;
  tracker_config.budget = {};
  tracker_config.krls_tracker = {.max_basis = 10, .noise_variance = 0.01};
  std::shared_ptr<ModelEntry> tracker =
      AddModel(registry, "zeta", "tracker", tracker_config, 40, 15);
  std::shared_ptr<ModelEntry> classes =
      AddModel(registry, "zeta", "classes", Config(LossType::kSoftmax), 40, 16);
  ASSERT_TRUE(hinge->ComputeRegret().ok());
  Feed(*hinge, 7, 14);  // the regret now lags by 7 steps
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {});

  const Exposition exposition = Parse(metrics.Scrape());
  double terms = 0;
  double bytes = 0;
  for (const std::shared_ptr<ModelEntry>& entry : {hinge, squared, empty, tracker, classes}) {
    const ModelSummary summary = SummaryOf(*entry);
    const ModelStats& stats = summary.stats;
    terms += stats.expansion_size;
    bytes += static_cast<double>(summary.memory_bytes);
    const std::vector<std::pair<std::string, std::string>> labels = {{"tenant", summary.tenant},
                                                                     {"model", summary.model}};
    const std::string name = absl::StrCat(summary.tenant, "/", summary.model);
    EXPECT_EQ(exposition.Value(Key("okl_model_expansion_size", labels)), stats.expansion_size)
        << name;
    EXPECT_EQ(exposition.Value(Key("okl_model_steps_total", labels)), stats.steps) << name;
    ExpectPrinted(exposition.Value(Key("okl_model_loss_total", labels)), stats.cumulative_loss,
                  name);
    EXPECT_EQ(exposition.Value(Key("okl_model_memory_bytes", labels)), summary.memory_bytes)
        << name;
    const LossType loss = summary.config.loss.type;
    if (IsClassificationLoss(loss) || IsMulticlassLoss(loss)) {
      EXPECT_EQ(exposition.Value(Key("okl_model_mistakes_total", labels)), stats.mistakes)
          << name;
    } else {
      EXPECT_FALSE(exposition.Has(Key("okl_model_mistakes_total", labels))) << name;
    }
    if (summary.config.multiclass()) {
      EXPECT_EQ(exposition.Value(Key("okl_model_classes", labels)), stats.classes.size())
          << name;
      EXPECT_GT(stats.classes.size(), 1u) << name;
    } else {
      EXPECT_FALSE(exposition.Has(Key("okl_model_classes", labels))) << name;
    }
    if (summary.config.krls_tracker_kind()) {
      EXPECT_GT(stats.noise_variance, 0.0);
      ExpectPrinted(exposition.Value(Key("okl_model_noise_variance", labels)),
                    stats.noise_variance, name);
    } else {
      EXPECT_FALSE(exposition.Has(Key("okl_model_noise_variance", labels))) << name;
    }
    if (stats.truncation_error_bound.has_value()) {
      ExpectPrinted(exposition.Value(Key("okl_model_truncation_error_bound", labels)),
                    *stats.truncation_error_bound, name);
    } else {
      EXPECT_FALSE(exposition.Has(Key("okl_model_truncation_error_bound", labels))) << name;
    }
    if (stats.regret.has_value()) {
      const RegretResult& regret = *stats.regret;
      ExpectPrinted(exposition.Value(Key("okl_model_regret", labels)), regret.regret, name);
      ExpectPrinted(exposition.Value(Key("okl_model_regret_per_example", labels)),
                    regret.regret / static_cast<double>(regret.window), name);
      EXPECT_EQ(exposition.Value(Key("okl_model_regret_staleness_steps", labels)),
                stats.steps - regret.last_step)
          << name;
      EXPECT_EQ(exposition.Value(Key("okl_model_regret_window_size", labels)), regret.window)
          << name;
    } else {
      EXPECT_THAT(exposition.KeysContaining(absl::StrCat("model=\"", summary.model, "\"")),
                  ::testing::Each(Not(HasSubstr("regret"))))
          << name;
    }
  }
  // The fixture is what the checks above are meant to cover.
  const ModelSummary hinge_summary = SummaryOf(*hinge);
  ASSERT_TRUE(hinge_summary.stats.truncation_error_bound.has_value());
  EXPECT_GT(*hinge_summary.stats.truncation_error_bound, 0.0);
  ASSERT_TRUE(hinge_summary.stats.regret.has_value());
  EXPECT_EQ(hinge_summary.stats.steps - hinge_summary.stats.regret->last_step, 7u);
  EXPECT_EQ(hinge_summary.stats.regret->window, 32u);
  EXPECT_GT(hinge_summary.stats.mistakes, 0u);

  EXPECT_EQ(exposition.Value("okl_models"), 5);
  EXPECT_EQ(exposition.Value("okl_metrics_models_omitted"), 0);
  EXPECT_EQ(exposition.Value("okl_expansion_terms"), terms);
  EXPECT_EQ(exposition.Value("okl_expansion_bytes"), bytes);
  // No scheduler given: no scheduler series.
  EXPECT_THAT(exposition.KeysContaining("okl_regret_"), IsEmpty());
}

// What CollectModels serves, written out independently of it: the four aggregates, then
// every per-model family that has a sample, in the order below, with its type and help.
class ExpectedModelSection {
 public:
  using Labels = std::vector<prometheus::ClientMetric::Label>;

  ExpectedModelSection() {
    using prometheus::MetricType;
    for (const auto& [name, type, help] :
         std::vector<std::tuple<const char*, MetricType, const char*>>{
             {"okl_model_expansion_size", MetricType::Gauge,
              "Terms stored in the model's kernel expansion (a KRLS tracker's dictionary "
              "bases; a random-feature model's features)."},
             {"okl_model_steps_total", MetricType::Counter,
              "Labelled examples the model has observed."},
             {"okl_model_loss_total", MetricType::Counter,
              "Cumulative prequential loss sum_t loss(y_t, p_t) of the model, in its loss's "
              "units."},
             {"okl_model_mistakes_total", MetricType::Counter,
              "Examples whose prequential prediction had the wrong sign, or a multi-class "
              "model's the wrong class (classification losses only)."},
             {"okl_model_classes", MetricType::Gauge,
              "Classes a multi-class model has learned (at most its max_classes)."},
             {"okl_model_regret", MetricType::Gauge,
              "Windowed regret: online loss minus the batch comparator's loss over the last "
              "regret_window examples, in loss units; lags by "
              "okl_model_regret_staleness_steps."},
             {"okl_model_regret_per_example", MetricType::Gauge,
              "Windowed regret divided by the examples in the window, in loss units."},
             {"okl_model_regret_staleness_steps", MetricType::Gauge,
              "Examples observed since the newest example of the last regret computation."},
             {"okl_model_regret_window_size", MetricType::Gauge,
              "Examples in the window of the last regret computation."},
             {"okl_model_truncation_error_bound", MetricType::Gauge,
              "Bound on the RKHS-norm error of truncating the expansion to its budget "
              "(Kivinen, Smola and Williamson 2004)."},
             {"okl_model_memory_bytes", MetricType::Gauge,
              "Memory held by the model's expansion, in bytes."},
             {"okl_model_noise_variance", MetricType::Gauge,
              "A KRLS tracker's estimate of the label noise's variance, in the labels' units "
              "squared: the floor under its predictive variances."},
             {"okl_model_champion_changes_total", MetricType::Counter,
              "A selection's (config.select) champion changes: a challenger's loss "
              "significantly below the champion's."},
             {"okl_model_candidate_recent_loss", MetricType::Gauge,
              "Each live candidate of a selection: its progressive loss averaged over ~1,000 "
              "recent steps (label candidate: its index; champion: 1 for the champion)."},
             {"okl_model_events_pending", MetricType::Gauge,
              "Remembered events awaiting their label."},
             {"okl_model_events_stored_bytes", MetricType::Gauge,
              "Bytes the model's remembered events (pending, and labelled until their wait "
              "ends) take in the store: their keys and records, counted against the tenant's "
              "--max_event_bytes_per_tenant."},
             {"okl_model_labels_applied_total", MetricType::Counter,
              "Labels applied to remembered events."},
             {"okl_model_events_expired_total", MetricType::Counter,
              "Remembered events whose wait ended without a label (their default label "
              "applied, or dropped)."},
             {"okl_model_labels_duplicate_total", MetricType::Counter,
              "Labels for events labelled before (the first label wins)."},
             {"okl_model_served_loss_total", MetricType::Counter,
              "Loss of the predictions the model served, summed as their labels arrived "
              "(progressive validation under delay), in its loss's units."},
             {"okl_model_served_labels_total", MetricType::Counter,
              "Labels counted in okl_model_served_loss_total."},
         }) {
      prometheus::MetricFamily family;
      family.name = name;
      family.help = help;
      family.type = type;
      families_.push_back(std::move(family));
    }
  }

  // One sample of the family `name`, after those added before.
  void Add(absl::string_view name, const Labels& labels, double value) {
    for (prometheus::MetricFamily& family : families_) {
      if (family.name != name) continue;
      prometheus::ClientMetric sample;
      sample.label = labels;
      (family.type == prometheus::MetricType::Counter ? sample.counter.value
                                                      : sample.gauge.value) = value;
      family.metric.push_back(std::move(sample));
      return;
    }
    ADD_FAILURE() << "no family " << name;
  }

  // Every series of one model, as its summary and its events (if it has an event book)
  // say, under `labels`.
  void AddModel(const ModelSummary& summary, const std::optional<EventCounts>& events,
                const Labels& labels) {
    const ModelStats& stats = summary.stats;
    Add("okl_model_expansion_size", labels, stats.expansion_size);
    Add("okl_model_steps_total", labels, static_cast<double>(stats.steps));
    Add("okl_model_loss_total", labels, stats.cumulative_loss);
    const LossType loss = summary.config.loss.type;
    if (IsClassificationLoss(loss) || IsMulticlassLoss(loss)) {
      Add("okl_model_mistakes_total", labels, static_cast<double>(stats.mistakes));
    }
    if (summary.config.multiclass()) {
      Add("okl_model_classes", labels, static_cast<double>(stats.classes.size()));
    }
    if (stats.regret.has_value()) {
      const RegretResult& regret = *stats.regret;
      Add("okl_model_regret", labels, regret.regret);
      Add("okl_model_regret_per_example", labels,
          regret.regret / static_cast<double>(regret.window));
      Add("okl_model_regret_staleness_steps", labels,
          static_cast<double>(stats.steps - regret.last_step));
      Add("okl_model_regret_window_size", labels, static_cast<double>(regret.window));
    }
    if (stats.truncation_error_bound.has_value()) {
      Add("okl_model_truncation_error_bound", labels, *stats.truncation_error_bound);
    }
    Add("okl_model_memory_bytes", labels, static_cast<double>(summary.memory_bytes));
    if (summary.config.krls_tracker_kind()) {
      Add("okl_model_noise_variance", labels, stats.noise_variance);
    }
    if (summary.config.select_kind()) {
      Add("okl_model_champion_changes_total", labels,
          static_cast<double>(stats.champion_changes));
      for (size_t i = 0; i < stats.candidates.size(); ++i) {
        if (stats.candidates[i].status != CandidateStatus::kLive) continue;
        Labels candidate = labels;
        candidate.push_back({"candidate", absl::StrCat(i)});
        candidate.push_back({"champion", i == stats.champion ? "1" : "0"});
        Add("okl_model_candidate_recent_loss", candidate, stats.candidates[i].recent_loss);
      }
    }
    if (events.has_value()) {
      Add("okl_model_events_pending", labels, static_cast<double>(events->pending));
      Add("okl_model_events_stored_bytes", labels, static_cast<double>(events->stored_bytes));
      Add("okl_model_labels_applied_total", labels, static_cast<double>(events->applied));
      Add("okl_model_events_expired_total", labels, static_cast<double>(events->expired));
      Add("okl_model_labels_duplicate_total", labels, static_cast<double>(events->duplicates));
      Add("okl_model_served_loss_total", labels, events->served_loss);
      Add("okl_model_served_labels_total", labels, static_cast<double>(events->served_labels));
    }
  }

  // The text exposition: the aggregates, then the families with samples.
  std::string Text(double models, double omitted, double terms, double bytes) const {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& [name, help, value] :
         std::vector<std::tuple<const char*, const char*, double>>{
             {"okl_models", "Models held.", models},
             {"okl_metrics_models_omitted",
              "Models without okl_model_* series because of --metrics_max_models; they count "
              "in the aggregates.",
              omitted},
             {"okl_expansion_terms", "Terms stored in the expansions of all models.", terms},
             {"okl_expansion_bytes", "Memory held by the expansions of all models, in bytes.",
              bytes},
         }) {
      prometheus::MetricFamily family;
      family.name = name;
      family.help = help;
      family.type = prometheus::MetricType::Gauge;
      family.metric.emplace_back().gauge.value = value;
      families.push_back(std::move(family));
    }
    for (const prometheus::MetricFamily& family : families_) {
      if (!family.metric.empty()) families.push_back(family);
    }
    return prometheus::TextSerializer().Serialize(families);
  }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

// The part of a scrape that per-model series and their aggregates make: from okl_models
// up to the host's first family, okl_quota_limit.
std::string ModelSection(const std::string& text) {
  const size_t begin = text.find("# HELP okl_models ");
  const size_t end = text.find("# HELP okl_quota_limit ");
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    ADD_FAILURE() << "no per-model section in\n" << text;
    return "";
  }
  return text.substr(begin, end - begin);
}

// Every per-model series, to the byte: names, help, types, labels, values and the order
// of families and samples, over a model of each kind that has series of its own, the
// label modes that name models, and a model beyond --metrics_max_models.
TEST(ServerMetricsTest, PerModelSectionIsExactlyEachModelsSeriesInOrder) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  // In (tenant, model) order. NORMA hinge: mistakes, a truncation error bound, regret
  // (published by a synchronous ComputeRegret, lagging by 7 steps). Squared: none of them.
  std::shared_ptr<ModelEntry> hinge =
      AddModel(host, "acme", "hinge", Config(LossType::kHinge, 8, 32), 50, 61);
  ASSERT_TRUE(hinge->ComputeRegret().ok());
  Feed(*hinge, 7, 62);
  std::shared_ptr<ModelEntry> squared =
      AddModel(host, "acme", "squared", Config(LossType::kSquared, 64), 25, 63);
  // Remembered events: pending, labelled, labelled twice and expired.
  std::shared_ptr<ModelEntry> feedback =
      AddModel(host, "feedback", "ads", Config(LossType::kSquared), 20, 64);
  // A selection of the default set, two candidates live at once (the others wait).
  ModelConfig select_config;
  select_config.dim = 3;
  select_config.loss = {.type = LossType::kSquared};
  select_config.select.enabled = true;
  select_config.select.live = 2;
  std::shared_ptr<ModelEntry> select =
      AddModel(host, "zeta", "select", select_config, 300, 65);
  ModelConfig tracker_config = Config(LossType::kSquared);
  tracker_config.learning_rate = {};
  tracker_config.lambda = 0;
  tracker_config.budget = {};
  tracker_config.krls_tracker = {.max_basis = 10, .noise_variance = 0.01};
  std::shared_ptr<ModelEntry> tracker =
      AddModel(host, "zeta", "tracker", tracker_config, 40, 66);
  // Beyond max_models: aggregates only.
  std::shared_ptr<ModelEntry> late =
      AddModel(host, "zz", "late", Config(LossType::kLogistic), 10, 67);
  const std::vector<std::shared_ptr<ModelEntry>> with_series = {hinge, squared, feedback,
                                                                select, tracker};

  {
    ServerMetrics metrics(ModelsOf(&host), nullptr, {});
    TestServer server(&host, &metrics);
    const v1::ModelRef ref = Ref("feedback", "ads");
    const std::vector<v1::Vector> inputs = testing::MakeProbes(3, 5, 68);
    v1::PredictResponse first;
    ASSERT_TRUE(IsOk(testing::PredictRemembering(
        server.stub(), ref, absl::MakeConstSpan(inputs).subspan(0, 3), {}, &first)));
    v1::LabelResponse labelled;
    ASSERT_TRUE(
        IsOk(testing::Label(server.stub(), ref, {{first.event_ids(0), 0.5}}, &labelled)));
    ASSERT_TRUE(
        IsOk(testing::Label(server.stub(), ref, {{first.event_ids(0), 0.7}}, &labelled)));
    host.ExpireEvents(absl::Now() + absl::Hours(24 * 8), 100);  // past every wait
    v1::PredictResponse second;
    ASSERT_TRUE(IsOk(testing::PredictRemembering(
        server.stub(), ref, absl::MakeConstSpan(inputs).subspan(3), {}, &second)));
  }

  for (const ModelLabels model_labels : {ModelLabels::kNames, ModelLabels::kHashed}) {
    SCOPED_TRACE(ModelLabelsName(model_labels));
    ServerMetrics metrics(ModelsOf(&host), nullptr,
                          {.max_models = 5, .model_labels = model_labels, .host = &host});
    ExpectedModelSection expected;
    double terms = 0;
    double bytes = 0;
    for (const std::shared_ptr<ModelEntry>& entry : with_series) {
      const ModelSummary summary = SummaryOf(*entry);
      terms += summary.stats.expansion_size;
      bytes += static_cast<double>(summary.memory_bytes);
      auto label = [model_labels](const std::string& name) {
        return model_labels == ModelLabels::kNames ? name : Sha256Hex(name).substr(0, 16);
      };
      const std::optional<EventCounts> events = EventsOf(host, *entry);
      expected.AddModel(summary, events,
                        {{"tenant", label(summary.tenant)}, {"model", label(summary.model)}});
    }
    const ModelSummary late_summary = SummaryOf(*late);
    terms += late_summary.stats.expansion_size;
    bytes += static_cast<double>(late_summary.memory_bytes);
    EXPECT_EQ(ModelSection(metrics.Scrape()), expected.Text(6, 1, terms, bytes));
  }

  // The fixture has what the comparison is meant to cover.
  const ModelStats hinge_stats = SummaryOf(*hinge).stats;
  ASSERT_TRUE(hinge_stats.regret.has_value());
  EXPECT_EQ(hinge_stats.steps - hinge_stats.regret->last_step, 7u);
  EXPECT_GT(hinge_stats.regret->window, 0u);
  EXPECT_GT(hinge_stats.truncation_error_bound.value_or(0), 0.0);
  EXPECT_GT(hinge_stats.mistakes, 0u);
  const EventCounts events = EventsOf(host, *feedback).value_or(EventCounts{});
  EXPECT_EQ(events.pending, 2u);
  EXPECT_EQ(events.applied, 1u);
  EXPECT_EQ(events.duplicates, 1u);
  EXPECT_EQ(events.expired, 2u);
  EXPECT_EQ(events.served_labels, 1u);
  EXPECT_GT(events.stored_bytes, 0u);
  EXPECT_GT(events.served_loss, 0.0);
  EXPECT_GT(SummaryOf(*tracker).stats.noise_variance, 0.0);
  const ModelStats select_stats = SummaryOf(*select).stats;
  size_t live = 0;
  for (const CandidateStats& candidate : select_stats.candidates) {
    live += candidate.status == CandidateStatus::kLive;
  }
  EXPECT_EQ(live, 2u);
  EXPECT_GT(select_stats.candidates.size(), live);
}

TEST(ServerMetricsTest, DeletedModelsSeriesVanish) {
  ModelRegistry registry({.max_models = 100});
  AddModel(registry, "acme", "kept", Config(LossType::kHinge), 20, 21);
  AddModel(registry, "acme", "gone", Config(LossType::kHinge), 20, 22);
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {});
  const Exposition before = Parse(metrics.Scrape());
  EXPECT_THAT(before.KeysContaining("model=\"gone\""), Not(IsEmpty()));
  EXPECT_EQ(before.Value("okl_models"), 2);

  ASSERT_TRUE(registry.Delete(TestKey("acme", "gone")).ok());
  const Exposition after = Parse(metrics.Scrape());
  EXPECT_THAT(after.KeysContaining("model=\"gone\""), IsEmpty());
  EXPECT_THAT(after.KeysContaining("model=\"kept\""), Not(IsEmpty()));
  EXPECT_EQ(after.Value("okl_models"), 1);
}

TEST(ServerMetricsTest, MaxModelsCapsPerModelSeriesButNotTheAggregates) {
  ModelRegistry registry({.max_models = 100});
  // Created out of order: the cap keeps the first in (tenant, model) order.
  std::shared_ptr<ModelEntry> c =
      AddModel(registry, "b", "a", Config(LossType::kSquared), 30, 31);
  std::shared_ptr<ModelEntry> a =
      AddModel(registry, "a", "x", Config(LossType::kSquared), 10, 32);
  std::shared_ptr<ModelEntry> b =
      AddModel(registry, "a", "y", Config(LossType::kSquared), 20, 33);
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {.max_models = 2});

  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_TRUE(exposition.Has(Key("okl_model_steps_total", {{"tenant", "a"}, {"model", "x"}})));
  EXPECT_TRUE(exposition.Has(Key("okl_model_steps_total", {{"tenant", "a"}, {"model", "y"}})));
  EXPECT_THAT(exposition.KeysContaining("tenant=\"b\""), IsEmpty());
  EXPECT_EQ(exposition.KeysContaining("okl_model_steps_total").size(), 2u);
  EXPECT_EQ(exposition.Value("okl_models"), 3);
  EXPECT_EQ(exposition.Value("okl_metrics_models_omitted"), 1);
  double terms = 0;
  double bytes = 0;
  for (const auto& entry : {a, b, c}) {
    const ModelSummary summary = SummaryOf(*entry);
    terms += summary.stats.expansion_size;
    bytes += static_cast<double>(summary.memory_bytes);
  }
  EXPECT_GT(SummaryOf(*c).stats.expansion_size, 0u);  // the omitted model counts
  EXPECT_EQ(exposition.Value("okl_expansion_terms"), terms);
  EXPECT_EQ(exposition.Value("okl_expansion_bytes"), bytes);
}

TEST(ServerMetricsTest, RegretSchedulerStatsAreExported) {
  RegretScheduler scheduler({.threads = 1, .every_steps = 20});
  ModelRegistry registry({.max_models = 100, .regret_scheduler = &scheduler});
  std::shared_ptr<ModelEntry> entry =
      AddModel(registry, "acme", "hinge", Config(LossType::kHinge, 64, 16), 30, 41);
  Feed(*entry, 30, 42);
  scheduler.WaitIdle();
  ServerMetrics metrics(ModelsOf(&registry), &scheduler, {});

  const Exposition exposition = Parse(metrics.Scrape());
  const RegretScheduler::Stats stats = scheduler.stats();
  EXPECT_GE(stats.computations, 1u);
  EXPECT_EQ(exposition.Value("okl_regret_computations_total"), stats.computations);
  EXPECT_EQ(exposition.Value("okl_regret_failures_total"), stats.failures);
  ExpectPrinted(exposition.Value("okl_regret_busy_seconds_total"), stats.busy_seconds,
                "busy seconds");
  EXPECT_EQ(exposition.Value("okl_regret_queue_length"), 0);
  EXPECT_TRUE(
      exposition.Has(Key("okl_model_regret", {{"tenant", "acme"}, {"model", "hinge"}})));
}

TEST(ServerMetricsTest, RecordObservedAndPredictedAccumulate) {
  ModelRegistry registry({.max_models = 10});
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {});
  Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value("okl_examples_observed_total"), 0);
  EXPECT_EQ(exposition.Value("okl_examples_loss_total"), 0);
  EXPECT_EQ(exposition.Value("okl_predictions_total"), 0);
  EXPECT_EQ(exposition.Value("okl_models"), 0);

  metrics.RecordObserved(10, 2.5);
  metrics.RecordObserved(5, 0.25);
  metrics.RecordObserved(3, std::nan(""));  // the examples count; the NaN does not
  metrics.RecordPredicted(4);
  metrics.RecordPredicted(1);
  exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value("okl_examples_observed_total"), 18);
  EXPECT_EQ(exposition.Value("okl_examples_loss_total"), 2.75);  // exact in binary
  EXPECT_EQ(exposition.Value("okl_predictions_total"), 5);
}

TEST(ServerMetricsTest, BuildInfoAndProcessSeriesDescribeThisProcess) {
  ModelRegistry registry({.max_models = 10});
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {});
  const Exposition exposition = Parse(metrics.Scrape());

  const std::vector<std::string> build = exposition.KeysContaining("okl_build_info{");
  ASSERT_EQ(build.size(), 1u);
  EXPECT_THAT(build[0], HasSubstr("version=\"0.1.0\""));
  EXPECT_THAT(build[0], ::testing::ContainsRegex("compiler=\"(gcc|clang) [0-9]+\\."));
  EXPECT_THAT(build[0], HasSubstr("build_type=\""));
  EXPECT_EQ(exposition.samples.at(build[0]), 1);

  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const double start = exposition.Value("process_start_time_seconds");
  // /proc's start time has clock-tick (10 ms) resolution; the test runs for seconds.
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
  EXPECT_GE(exposition.Value("process_cpu_seconds_total"), 0);
  EXPECT_GT(exposition.Value("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(exposition.Value("process_virtual_memory_bytes"),
            exposition.Value("process_resident_memory_bytes"));
  EXPECT_GE(exposition.Value("process_open_fds"), 3);  // stdin, stdout, stderr at least
  EXPECT_GE(exposition.Value("process_max_fds"), exposition.Value("process_open_fds"));
}

// --- RPCs -------------------------------------------------------------------------------

TEST(ServerMetricsRpcTest, CountsEveryCallByMethodAndCode) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  const v1::ModelConfig config = SmallWireConfig();
  ASSERT_TRUE(IsOk(testing::CreateModel(server.stub(), Ref("t", "m"), config)));
  v1::ModelInfo info;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(IsOk(testing::GetModel(server.stub(), Ref("t", "m"), &info)));
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(HasCode(testing::GetModel(server.stub(), Ref("t", "missing"), &info),
                        grpc::StatusCode::NOT_FOUND));
  }
  ASSERT_TRUE(HasCode(testing::CreateModel(server.stub(), Ref("t", "m"), config),
                      grpc::StatusCode::ALREADY_EXISTS));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<testing::ServingStatus> health = testing::CheckHealth(server.channel(), "");
    ASSERT_TRUE(health.ok()) << health.status();
  }

  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "GetModel", "OK")), 4);
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "GetModel", "NOT_FOUND")), 3);
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "CreateModel", "OK")), 1);
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "CreateModel", "ALREADY_EXISTS")), 1);
  EXPECT_EQ(exposition.Value(RequestsKey(kHealth, "Check", "OK")), 2);
  // Only codes that occurred have series.
  EXPECT_EQ(exposition.KeysContaining("okl_rpc_requests_total{").size(), 5u);
  ExpectDurationHistogram(exposition, kOkl, "GetModel", 7);
  ExpectDurationHistogram(exposition, kOkl, "CreateModel", 2);
  ExpectDurationHistogram(exposition, kHealth, "Check", 2);
  // Calls on loopback take well under a second.
  EXPECT_LT(exposition.Value(Key("okl_rpc_duration_seconds_sum",
                                 {{"service", kOkl}, {"method", "GetModel"}})),
            7.0);
}

// A Predict over max_inline_work runs on the offload threads, with the same answers and
// errors as inline, and counts in okl_offloaded_calls_total.
TEST(ServerMetricsRpcTest, PredictsOverMaxInlineWorkAreOffloadedCountedAndAnswerTheSame) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  const v1::ModelConfig config = SmallWireConfig();  // 200 multiply-adds an input at most
  TestServer inline_server(&host, &metrics, {.max_inline_work = 1000});
  TestServer offloading(&host, &metrics, {.max_inline_work = 1000, .offload_threads = 1});
  ASSERT_TRUE(IsOk(testing::CreateModel(inline_server.stub(), Ref("t", "m"), config)));
  const std::vector<v1::Example> stream = testing::MakeStream(config, 40, 3);
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(testing::Observe(inline_server.stub(), Ref("t", "m"), stream, &observed)));

  auto offloaded = [&] {
    return Parse(metrics.Scrape()).Value("okl_offloaded_calls_total");
  };
  // 5 inputs (1,000 multiply-adds) run inline; 6 inputs are over the limit.
  for (const size_t inputs : {size_t{1}, size_t{5}, size_t{6}, size_t{50}}) {
    SCOPED_TRACE(inputs);
    const std::vector<v1::Vector> probes = testing::MakeProbes(2, inputs, 11);
    const double before = offloaded();
    std::vector<double> here, there;
    ASSERT_TRUE(IsOk(testing::Predict(inline_server.stub(), Ref("t", "m"), probes, &here)));
    ASSERT_TRUE(IsOk(testing::Predict(offloading.stub(), Ref("t", "m"), probes, &there)));
    EXPECT_EQ(testing::Bits(here), testing::Bits(there));
    EXPECT_EQ(here.size(), inputs);
    EXPECT_EQ(offloaded() - before, inputs > 5 ? 2 : 0);
  }
  // An offloaded Predict fails as an inline one does, and changes nothing.
  const std::vector<v1::Vector> wrong_dim = testing::MakeProbes(3, 10, 12);
  std::vector<double> ignored;
  const double before = offloaded();
  const grpc::Status status =
      testing::Predict(offloading.stub(), Ref("t", "m"), wrong_dim, &ignored);
  EXPECT_TRUE(HasCode(status, grpc::StatusCode::INVALID_ARGUMENT)) << status.error_message();
  EXPECT_EQ(offloaded() - before, 1);
  EXPECT_EQ(Parse(metrics.Scrape()).Value(RequestsKey(kOkl, "Predict", "INVALID_ARGUMENT")), 1);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(testing::GetModel(offloading.stub(), Ref("t", "m"), &info)));
  EXPECT_EQ(info.stats().steps(), 40u);
}

// A GetModel or Predict that would wait for a batch being applied to its model runs on
// the offload threads (gRPC's threads carry other tenants' calls), and answers once the
// batch is applied, with the model after it.
TEST(ServerMetricsRpcTest, ReadsThatWouldWaitForAWriterAreOffloadedAndSeeItsBatch) {
  // A store whose log appends can be held, as a slow disk would hold them: a batch then
  // waits in its log write with the model's writer lock held.
  const std::string dir = absl::StrCat(::testing::TempDir(), "/okl_metrics_busy_", getpid());
  std::filesystem::remove_all(dir);
  const absl::Cleanup remove_dir = [&] { std::filesystem::remove_all(dir); };
  auto file_system = std::make_shared<testing::FaultInjectingFileSystem>();
  ModelHost::Options options = InMemoryHostOptions(/*max_models=*/10);
  options.data_dir = dir;
  options.store_file_system = file_system;
  ModelHost host(options);
  ASSERT_TRUE(host.Open().ok());
  // Over a registry of its own: a scrape reads every model, and would wait for the writer.
  ModelRegistry no_models({});
  ServerMetrics metrics(ModelsOf(&no_models), nullptr, {});
  TestServer server(&host, &metrics);
  absl::StatusOr<std::shared_ptr<HostedModel>> busy =
      host.Create(TestKey("t", "busy"), Config(LossType::kSquared));
  ASSERT_TRUE(busy.ok()) << busy.status();
  ModelEntry* const entry = &(*busy)->entry();
  EXPECT_FALSE(entry->writing());
  // Another model, which a held write would hold too: made before the hold.
  AddModel(host, "u", "idle", Config(LossType::kSquared), 5, 9);

  file_system->Arm({.op = testing::FaultInjectingFileSystem::Op::kAppend,
                    .file_suffix = ".log",
                    .hold = true});
  std::thread writer([&] {
    std::vector<Observation> out;
    EXPECT_TRUE(entry->ObserveBatch(std::vector<double>{0.1, 0.2, 0.3}, {1.0}, &out).ok());
  });
  file_system->WaitHeld();
  EXPECT_TRUE(entry->writing());
  v1::ModelInfo info;
  std::vector<double> predictions;
  grpc::Status get_status, predict_status;
  std::thread reader([&] {
    get_status = testing::GetModel(server.stub(), Ref("t", "busy"), &info);
    predict_status =
        testing::Predict(server.stub(), Ref("t", "busy"), testing::MakeProbes(3, 2, 5),
                         &predictions);
  });
  // The GetModel was handed to the offload threads and waits there.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Parse(metrics.Scrape()).Value("okl_offloaded_calls_total") < 1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Parse(metrics.Scrape()).Value("okl_offloaded_calls_total"), 1);
  // Meanwhile another model's calls run inline.
  v1::ModelInfo idle;
  EXPECT_TRUE(IsOk(testing::GetModel(server.stub(), Ref("u", "idle"), &idle)));
  EXPECT_EQ(Parse(metrics.Scrape()).Value("okl_offloaded_calls_total"), 1);

  file_system->Disarm();
  writer.join();
  reader.join();
  EXPECT_FALSE(entry->writing());
  ASSERT_TRUE(IsOk(get_status)) << get_status.error_message();
  EXPECT_EQ(info.stats().steps(), 1u) << "the GetModel did not wait for the batch";
  ASSERT_TRUE(IsOk(predict_status)) << predict_status.error_message();
  EXPECT_EQ(predictions.size(), 2u);
}

// A stream is one call: one count and one duration.
TEST(StreamCountTest, AStreamCountsOnce) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  const v1::ModelConfig config = testing::ParseConfig(R"pb(
    dim: 2
    kernel { gaussian { gamma: 1 } }
    loss { hinge { rho: 1 } }
    learning_rate { eta0: 0.3 }
    lambda: 0.01
    budget { max_terms: 100 }
  )pb");
  ASSERT_TRUE(IsOk(testing::CreateModel(server.stub(), Ref("t", "m"), config)));
  const std::vector<v1::Example> stream = testing::MakeStream(config, 30, /*seed=*/5);
  const size_t sizes[] = {10};
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(testing::ObserveStream(
      server.stub(), Ref("t", "m"), testing::SplitIntoBatches(stream, sizes), &response)));
  ASSERT_TRUE(
      HasCode(testing::ObserveStream(server.stub(), Ref("t", "missing"),
                                     testing::SplitIntoBatches(stream, sizes), &response),
              grpc::StatusCode::NOT_FOUND));

  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "ObserveStream", "OK")), 1);
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "ObserveStream", "NOT_FOUND")), 1);
  EXPECT_EQ(CallsOf(exposition, kOkl, "ObserveStream"), 2);
  ExpectDurationHistogram(exposition, kOkl, "ObserveStream", 2);
}

TEST(ServerMetricsRpcTest, ACancelledStreamCountsOnceAndTheServerShutsDownCleanly) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  {
    testing::HealthWatch watch(server.channel(), "", absl::Seconds(10));
    ASSERT_EQ(watch.Next(), testing::ServingStatus::kServing);
    watch.Cancel();
    EXPECT_TRUE(HasCode(watch.Finish(), grpc::StatusCode::CANCELLED));
  }
  // The server learns of the cancellation asynchronously.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (CallsOf(Parse(metrics.Scrape()), kHealth, "Watch") < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(CallsOf(Parse(metrics.Scrape()), kHealth, "Watch"), 1);

  // A watch still open at shutdown ends then, and counts once too.
  testing::HealthWatch open(server.channel(), "", absl::Seconds(10));
  ASSERT_EQ(open.Next(), testing::ServingStatus::kServing);
  server.Shutdown();
  open.Finish();
  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(CallsOf(exposition, kHealth, "Watch"), 2);
  ExpectDurationHistogram(exposition, kHealth, "Watch", 2);
}

// Clients choose the paths they call: paths the server does not have share one series
// instead of making new ones.
TEST(ServerMetricsRpcTest, UnknownMethodsCountUnderOther) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  for (const char* method : {"/okl.v1.OnlineKernelLearning/NoSuchMethod", "/no.Such/Service",
                             "/not-a-method", "/no.Such/Service"}) {
    testing::GenericCall call(server.channel(), method, absl::Seconds(5));
    call.Write("");
    call.WritesDone();
    EXPECT_TRUE(HasCode(call.Finish(), grpc::StatusCode::UNIMPLEMENTED)) << method;
  }
  v1::ModelInfo info;
  ASSERT_TRUE(HasCode(testing::GetModel(server.stub(), Ref("t", "missing"), &info),
                      grpc::StatusCode::NOT_FOUND));

  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value(RequestsKey("other", "other", "UNIMPLEMENTED")), 4);
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "GetModel", "NOT_FOUND")), 1);
  EXPECT_EQ(exposition.KeysContaining("okl_rpc_requests_total{").size(), 2u);
  ExpectDurationHistogram(exposition, "other", "other", 4);
  auto [exit_code, problems] = Promtool(metrics.Scrape());
  EXPECT_EQ(exit_code, 0) << problems;
}

TEST(ServerMetricsRpcTest, ConcurrentCallsAndScrapesCountExactly) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 50;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      const Exposition exposition = Parse(metrics.Scrape());
      // A scrape sees each histogram's count and buckets agree, whatever runs meanwhile.
      const std::string count = DurationCountKey(kOkl, "GetModel");
      if (exposition.Has(count)) {
        EXPECT_EQ(
            exposition.Value(count),
            exposition.Value(Key("okl_rpc_duration_seconds_bucket",
                                 {{"service", kOkl}, {"method", "GetModel"}, {"le", "+Inf"}})));
      }
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&server] {
      v1::ModelInfo info;
      for (int i = 0; i < kCallsPerThread; ++i) {
        EXPECT_TRUE(HasCode(testing::GetModel(server.stub(), Ref("t", "missing"), &info),
                            grpc::StatusCode::NOT_FOUND));
      }
    });
  }
  for (std::thread& client : clients) client.join();
  done = true;
  scraper.join();
  const Exposition exposition = Parse(metrics.Scrape());
  EXPECT_EQ(exposition.Value(RequestsKey(kOkl, "GetModel", "NOT_FOUND")),
            kThreads * kCallsPerThread);
  ExpectDurationHistogram(exposition, kOkl, "GetModel", kThreads * kCallsPerThread);
}

// --- The exposer ------------------------------------------------------------------------

// A TCP listener on 127.0.0.1 at a free port, held for the test's duration.
class BusyPort {
 public:
  BusyPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~BusyPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ServerMetricsExposerTest, ServesWhatScrapeReturns) {
  ModelHost host(InMemoryHostOptions(/*max_models=*/10));
  AddModel(host, "acme", "hinge", Config(LossType::kHinge, 8), 30, 51);
  AddModel(host, "acme", "squared", Config(LossType::kSquared), 20, 52);
  ServerMetrics metrics(ModelsOf(&host), nullptr, {});
  TestServer server(&host, &metrics);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(testing::GetModel(server.stub(), Ref("acme", "hinge"), &info)));
  metrics.RecordPredicted(3);
  EXPECT_EQ(metrics.exposer_port(), 0);
  {
    // A failed start leaves the object ready for another try.
    BusyPort busy;
    EXPECT_EQ(metrics.StartExposer(absl::StrCat("127.0.0.1:", busy.port())).code(),
              absl::StatusCode::kUnavailable);
    EXPECT_EQ(metrics.exposer_port(), 0);
  }
  ASSERT_TRUE(metrics.StartExposer("127.0.0.1:0").ok());
  ASSERT_GT(metrics.exposer_port(), 0);
  EXPECT_EQ(metrics.StartExposer("127.0.0.1:0").code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::string> served = HttpGet(metrics.exposer_port(), "/metrics");
  ASSERT_TRUE(served.ok()) << served.status();
  const Exposition http = Parse(*served);
  const Exposition local = Parse(metrics.Scrape());

  // /metrics adds prometheus-cpp's own exposer_* families (scrapes, bytes, latency) and
  // nothing else.
  std::set<std::string> http_families;
  std::set<std::string> exposer_families;
  for (const auto& [family, type] : http.types) {
    (absl::StartsWith(family, "exposer_") ? exposer_families : http_families).insert(family);
  }
  std::set<std::string> local_families;
  for (const auto& [family, type] : local.types) local_families.insert(family);
  EXPECT_EQ(http_families, local_families);
  EXPECT_EQ(exposer_families.size(), 3u);

  // The same series, with the same values except the process's own, which move.
  std::map<std::string, double> http_samples;
  for (const auto& [key, value] : http.samples) {
    if (!absl::StartsWith(key, "exposer_")) http_samples[key] = value;
  }
  EXPECT_EQ(http_samples.size(), local.samples.size());
  for (const auto& [key, value] : local.samples) {
    auto it = http_samples.find(key);
    if (it == http_samples.end()) {
      ADD_FAILURE() << "not served: " << key;
      continue;
    }
    if (!absl::StartsWith(key, "process_")) {
      EXPECT_EQ(it->second, value) << key;
    }
  }
  EXPECT_EQ(http.Value(RequestsKey(kOkl, "GetModel", "OK")), 1);
  EXPECT_EQ(http.Value("okl_predictions_total"), 3);
  EXPECT_EQ(http.Value("okl_models"), 2);

  // promtool accepts what is served, prometheus-cpp's families included.
  auto [exit_code, problems] = Promtool(*served);
  EXPECT_EQ(exit_code, 0) << problems;
  EXPECT_THAT(problems, IsEmpty()) << *served;
}

TEST(ServerMetricsExposerTest, AnAddressInUseIsUnavailableAndNamesTheFlag) {
  ModelRegistry registry({.max_models = 10});
  BusyPort busy;
  const std::string address = absl::StrCat("127.0.0.1:", busy.port());
  ServerMetrics metrics(ModelsOf(&registry), nullptr, {});
  const absl::Status status = metrics.StartExposer(address);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("--metrics_address"));
  EXPECT_THAT(status.message(), HasSubstr(address));
  EXPECT_EQ(metrics.exposer_port(), 0);

  const absl::Status garbage = metrics.StartExposer("not an address");
  EXPECT_EQ(garbage.code(), absl::StatusCode::kUnavailable) << garbage;
  EXPECT_THAT(garbage.message(), HasSubstr("--metrics_address"));
}

// civetweb's listener would see the stop only after its 2 s poll timeout; ServerMetrics
// wakes it, so that okl_server exits promptly.
TEST(ServerMetricsExposerTest, DestructionStopsTheExposerPromptly) {
  ModelRegistry registry({.max_models = 10});
  for (const char* address : {"127.0.0.1:0", "0.0.0.0:0"}) {
    auto metrics =
        std::make_unique<ServerMetrics>(ModelsOf(&registry), nullptr, ServerMetrics::Options{});
    ASSERT_TRUE(metrics->StartExposer(address).ok()) << address;
    const int port = metrics->exposer_port();
    ASSERT_TRUE(HttpGet(port, "/metrics").ok()) << address;
    const absl::Time start = absl::Now();
    metrics.reset();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << address;
    EXPECT_FALSE(HttpGet(port, "/metrics").ok()) << address;  // nobody listens any more
  }
}

}  // namespace
}  // namespace okl
