// server/metrics/metrics.cc
//
// Everything is produced at scrape time by one prometheus::Collectable (ServerMetrics::Impl
// below), from the model registry (per-model series and aggregates), the ModelHost's quotas
// and checkpoints, the regret scheduler's stats, /proc/self (process_metrics.h), and
// atomics that the request path bumps: here for examples observed and predicted, in
// rpc_metrics.h for calls (where it says why not prometheus-cpp's own Counter and
// Histogram). metrics_exposer.h serves it over HTTP.

#include "server/metrics/metrics.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/model.h"
#include "core/runtime/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"
#include "server/events/event_book.h"
#include "server/metrics/metrics_exposer.h"
#include "server/metrics/metrics_families.h"
#include "server/events/model_events.h"
#include "server/host/model_host.h"
#include "server/metrics/process_metrics.h"
#include "server/metrics/rpc_metrics.h"
#include "server/auth/tokens.h"

namespace okl {
namespace {

using metrics_internal::AtomicHistogram;
using metrics_internal::Clock;
using metrics_internal::CollectProcessMetrics;
using metrics_internal::CollectRpcMetrics;
using metrics_internal::Family;
using metrics_internal::MakeRpcInterceptorFactory;
using metrics_internal::MethodTable;
using metrics_internal::MetricsExposer;
using metrics_internal::ProcessStartTime;
using metrics_internal::Sample;
using metrics_internal::Single;
using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

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

// --- Per-model series -------------------------------------------------------------------

// What a model's series are read from: its summary, and its event counts if it has an
// event book (it remembered events: delayed feedback).
struct ModelReading {
  const ModelSummary& summary;
  const std::optional<EventCounts>& events;

  const ModelStats& stats() const { return summary.stats; }
  // The last regret computation's `read` as a sample; nothing before the first one.
  std::optional<double> Regret(double (*read)(const RegretResult& regret,
                                              const ModelStats& stats)) const {
    if (!stats().regret.has_value()) return std::nullopt;
    return read(*stats().regret, stats());
  }
  // The event counter `field` as a sample; nothing for a model without an event book.
  template <typename T>
  std::optional<double> Events(T EventCounts::*field) const {
    if (!events.has_value()) return std::nullopt;
    return static_cast<double>(*events.*field);
  }
};

// One okl_model_* family: its name, help and type, and how a model's sample is read
// (exactly one of `value` and `candidate_value` is set).
struct ModelSeries {
  const char* name;
  const char* help;
  MetricType type;
  // The model's sample; nullopt where the series does not apply to the model.
  std::optional<double> (*value)(const ModelReading& model) = nullptr;
  // Instead of `value`, for the one family with a sample per candidate of a selection,
  // labelled with the candidate's index and whether it is the champion: candidate i's
  // sample, or nullopt where it has none.
  std::optional<double> (*candidate_value)(const ModelReading& model, size_t i) = nullptr;
};

// Every per-model family, in the order served; a family without samples is left out.
constexpr ModelSeries kModelSeries[] = {
    {"okl_model_expansion_size",
     "Terms stored in the model's kernel expansion (a KRLS tracker's dictionary bases; a "
     "random-feature model's features).",
     MetricType::Gauge,
     [](const ModelReading& m) -> std::optional<double> { return m.stats().expansion_size; }},
    {"okl_model_steps_total", "Labelled examples the model has observed.", MetricType::Counter,
     [](const ModelReading& m) -> std::optional<double> {
       return static_cast<double>(m.stats().steps);
     }},
    {"okl_model_loss_total",
     "Cumulative prequential loss sum_t loss(y_t, p_t) of the model, in its loss's units.",
     MetricType::Counter,
     [](const ModelReading& m) -> std::optional<double> { return m.stats().cumulative_loss; }},
    {"okl_model_mistakes_total",
     "Examples whose prequential prediction had the wrong sign, or a multi-class model's "
     "the wrong class (classification losses only).",
     MetricType::Counter,
     [](const ModelReading& m) -> std::optional<double> {
       const LossType loss = m.summary.config.loss.type;
       if (!IsClassificationLoss(loss) && !IsMulticlassLoss(loss)) return std::nullopt;
       return static_cast<double>(m.stats().mistakes);
     }},
    {"okl_model_classes", "Classes a multi-class model has learned (at most its max_classes).",
     MetricType::Gauge,
     [](const ModelReading& m) -> std::optional<double> {
       if (!m.summary.config.multiclass()) return std::nullopt;
       return static_cast<double>(m.stats().classes.size());
     }},
    // The regret series: models with regret tracking, once it was computed.
    {"okl_model_regret",
     "Windowed regret: online loss minus the batch comparator's loss over the last "
     "regret_window examples, in loss units; lags by okl_model_regret_staleness_steps.",
     MetricType::Gauge,
     [](const ModelReading& m) {
       return m.Regret([](const RegretResult& r, const ModelStats&) { return r.regret; });
     }},
    {"okl_model_regret_per_example",
     "Windowed regret divided by the examples in the window, in loss units.", MetricType::Gauge,
     [](const ModelReading& m) -> std::optional<double> {
       if (!m.stats().regret.has_value() || m.stats().regret->window == 0) return std::nullopt;
       return m.stats().regret->regret / static_cast<double>(m.stats().regret->window);
     }},
    {"okl_model_regret_staleness_steps",
     "Examples observed since the newest example of the last regret computation.",
     MetricType::Gauge,
     [](const ModelReading& m) {
       return m.Regret([](const RegretResult& r, const ModelStats& stats) {
         return stats.steps >= r.last_step ? static_cast<double>(stats.steps - r.last_step)
                                           : 0.0;
       });
     }},
    {"okl_model_regret_window_size", "Examples in the window of the last regret computation.",
     MetricType::Gauge,
     [](const ModelReading& m) {
       return m.Regret(
           [](const RegretResult& r, const ModelStats&) { return static_cast<double>(r.window); });
     }},
    {"okl_model_truncation_error_bound",
     "Bound on the RKHS-norm error of truncating the expansion to its budget (Kivinen, "
     "Smola and Williamson 2004).",
     MetricType::Gauge, [](const ModelReading& m) { return m.stats().truncation_error_bound; }},
    {"okl_model_memory_bytes", "Memory held by the model's expansion, in bytes.",
     MetricType::Gauge,
     [](const ModelReading& m) -> std::optional<double> {
       return static_cast<double>(m.summary.memory_bytes);
     }},
    {"okl_model_noise_variance",
     "A KRLS tracker's estimate of the label noise's variance, in the labels' units squared: "
     "the floor under its predictive variances.",
     MetricType::Gauge,
     [](const ModelReading& m) -> std::optional<double> {
       if (!m.summary.config.krls_tracker_kind()) return std::nullopt;
       return m.stats().noise_variance;
     }},
    {"okl_model_champion_changes_total",
     "A selection's (config.select) champion changes: a challenger's loss significantly "
     "below the champion's.",
     MetricType::Counter,
     [](const ModelReading& m) -> std::optional<double> {
       if (!m.summary.config.select_kind()) return std::nullopt;
       return static_cast<double>(m.stats().champion_changes);
     }},
    {.name = "okl_model_candidate_recent_loss",
     .help = "Each live candidate of a selection: its progressive loss averaged over ~1,000 "
             "recent steps (label candidate: its index; champion: 1 for the champion).",
     .type = MetricType::Gauge,
     .candidate_value = [](const ModelReading& m, size_t i) -> std::optional<double> {
       if (!m.summary.config.select_kind()) return std::nullopt;
       if (m.stats().candidates[i].status != CandidateStatus::kLive) return std::nullopt;
       return m.stats().candidates[i].recent_loss;
     }},
    // Delayed feedback: models that remembered events.
    {"okl_model_events_pending", "Remembered events awaiting their label.", MetricType::Gauge,
     [](const ModelReading& m) { return m.Events(&EventCounts::pending); }},
    {"okl_model_events_stored_bytes",
     "Bytes the model's remembered events (pending, and labelled until their wait ends) take "
     "in the store: their keys and records, counted against the tenant's "
     "--max_event_bytes_per_tenant.",
     MetricType::Gauge,
     [](const ModelReading& m) { return m.Events(&EventCounts::stored_bytes); }},
    {"okl_model_labels_applied_total", "Labels applied to remembered events.",
     MetricType::Counter,
     [](const ModelReading& m) { return m.Events(&EventCounts::applied); }},
    {"okl_model_events_expired_total",
     "Remembered events whose wait ended without a label (their default label applied, or "
     "dropped).",
     MetricType::Counter,
     [](const ModelReading& m) { return m.Events(&EventCounts::expired); }},
    {"okl_model_labels_duplicate_total",
     "Labels for events labelled before (the first label wins).", MetricType::Counter,
     [](const ModelReading& m) { return m.Events(&EventCounts::duplicates); }},
    {"okl_model_served_loss_total",
     "Loss of the predictions the model served, summed as their labels arrived (progressive "
     "validation under delay), in its loss's units.",
     MetricType::Counter,
     [](const ModelReading& m) { return m.Events(&EventCounts::served_loss); }},
    {"okl_model_served_labels_total", "Labels counted in okl_model_served_loss_total.",
     MetricType::Counter,
     [](const ModelReading& m) { return m.Events(&EventCounts::served_labels); }},
};

}  // namespace

// --- ServerMetrics::Impl ----------------------------------------------------------------

class ServerMetrics::Impl {
 public:
  Impl(ModelSource models, const RegretScheduler* regret_scheduler, Options options)
      : models_(std::move(models)),
        regret_scheduler_(regret_scheduler),
        options_(options),
        compiler_(CompilerName()),
        start_time_(ProcessStartTime()),
        collector_(std::make_shared<Collector>(this)) {}

  ~Impl() {
    // Stop serving scrapes before anything they read goes away.
    std::unique_ptr<MetricsExposer> exposer;
    {
      WriterLock lock(&mu_);
      exposer = std::move(exposer_);
    }
    exposer.reset();  // outside the lock: stopping waits for the HTTP threads
  }

  absl::Status StartExposer(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_) {
    WriterLock lock(&mu_);
    if (exposer_ != nullptr) {
      return absl::FailedPreconditionError("the metrics exposer was started before");
    }
    absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
        MetricsExposer::Start(address, collector_);
    if (!exposer.ok()) return exposer.status();
    exposer_ = *std::move(exposer);
    return absl::OkStatus();
  }

  int exposer_port() const ABSL_LOCKS_EXCLUDED(mu_) {
    ReaderLock lock(&mu_);
    return exposer_ != nullptr ? exposer_->port() : 0;
  }

  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorCreators() {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        creators;
    creators.push_back(MakeRpcInterceptorFactory(&methods_));
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

  void RecordOffloaded() { offloaded_.fetch_add(1, std::memory_order_relaxed); }

  void RecordLabelDelay(absl::Duration delay) {
    label_delay_.Observe(
        std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(delay)));
  }

  std::string Scrape() const { return prometheus::TextSerializer().Serialize(Collect()); }

  std::vector<MetricFamily> Collect() const {
    std::vector<MetricFamily> families;
    CollectProcess(&families);
    CollectRequestPath(&families);
    CollectRegretScheduler(&families);
    CollectRpcMetrics(methods_, &families);
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

    CollectProcessMetrics(start_time_, families);
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
    families->push_back(Single(
        "okl_offloaded_calls_total",
        "Unary calls run on the offload threads rather than inline on gRPC's: every write, "
        "ListModels and FenceTenant, Predicts over --max_inline_work, and reads that would "
        "wait for a batch being applied to their model.",
        MetricType::Counter, static_cast<double>(offloaded_.load(std::memory_order_relaxed))));
    MetricFamily label_delay =
        Family("okl_label_delay_seconds",
               "Delayed feedback: the time from a remembering Predict to its event's applied "
               "label, over every model.",
               MetricType::Histogram);
    ClientMetric delays;
    delays.histogram = label_delay_.Collect();
    label_delay.metric.push_back(std::move(delays));
    families->push_back(std::move(label_delay));
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

  void CollectModels(std::vector<MetricFamily>* families) const {
    std::vector<MetricFamily> per_model;  // indexed as kModelSeries
    for (const ModelSeries& series : kModelSeries) {
      per_model.push_back(Family(series.name, series.help, series.type));
    }
    double models = 0;
    double omitted = 0;
    double terms = 0;
    double bytes = 0;
    size_t with_series = 0;
    for (const MetricsModel& listed : models_()) {
      absl::StatusOr<ModelSummary> summary = listed.entry->Summary();
      if (!summary.ok()) continue;  // deleted since List
      ++models;
      terms += summary->stats.expansion_size;
      bytes += static_cast<double>(summary->memory_bytes);
      if (with_series >= options_.max_models || options_.model_labels == ModelLabels::kNone) {
        ++omitted;
        continue;
      }
      ++with_series;
      std::optional<EventCounts> events;
      if (listed.book != nullptr) events = listed.book->counts();
      const ModelReading model = {*summary, events};
      const std::vector<ClientMetric::Label> labels = {{"tenant", Label(summary->tenant)},
                                                       {"model", Label(summary->model)}};
      for (size_t s = 0; s < per_model.size(); ++s) {
        const ModelSeries& series = kModelSeries[s];
        if (series.value != nullptr) {
          if (const std::optional<double> value = series.value(model)) {
            per_model[s].metric.push_back(Sample(series.type, *value, labels));
          }
          continue;
        }
        for (size_t i = 0; i < model.stats().candidates.size(); ++i) {
          const std::optional<double> value = series.candidate_value(model, i);
          if (!value) continue;
          std::vector<ClientMetric::Label> candidate_labels = labels;
          candidate_labels.push_back({"candidate", absl::StrCat(i)});
          candidate_labels.push_back({"champion", i == model.stats().champion ? "1" : "0"});
          per_model[s].metric.push_back(Sample(series.type, *value, candidate_labels));
        }
      }
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
    for (MetricFamily& family : per_model) {
      if (!family.metric.empty()) families->push_back(std::move(family));
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
        static_cast<double>(limits.max_models),
        static_cast<double>(limits.max_models_per_tenant),
        static_cast<double>(limits.max_bytes_per_tenant),
        static_cast<double>(limits.max_memory_bytes),
        limits.max_requests_per_second_per_tenant,
        static_cast<double>(limits.max_event_bytes_per_tenant)};
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
    families->push_back(Single("okl_quota_event_bytes",
                               "Bytes all tenants' remembered events take in the store, each "
                               "tenant's counted against --max_event_bytes_per_tenant.",
                               MetricType::Gauge, static_cast<double>(usage.event_bytes)));
    families->push_back(Single("okl_checkpoint_failures_total",
                               "Checkpoints that failed (each is retried with back-off; the "
                               "log keeps every example meanwhile).",
                               MetricType::Counter,
                               static_cast<double>(options_.host->checkpoint_failures())));
    families->push_back(Single("okl_models_failing_checkpoints",
                               "Models whose latest checkpoint attempt failed.",
                               MetricType::Gauge,
                               static_cast<double>(options_.host->models_failing_checkpoints())));
    if (options_.host->has_store()) CollectStore(families);
  }

  // Whether the store takes writes, what it refused and how much room its filesystem has.
  void CollectStore(std::vector<MetricFamily>* families) const {
    const StoreHealth health = options_.host->store_health();
    families->push_back(Single("okl_store_writable",
                               "1 while the model store accepts writes; 0 while it refuses "
                               "them (a full disk: resumes once space is freed; another I/O "
                               "error: until a restart). Reads work either way.",
                               MetricType::Gauge, health.writable ? 1.0 : 0.0));
    MetricFamily refused = Family("okl_store_write_failures_total",
                                  "Writes (Observe batches, creations, deletions, restores, "
                                  "checkpoints) the model store refused, by cause.",
                                  MetricType::Counter);
    refused.metric.push_back(Sample(MetricType::Counter,
                                    static_cast<double>(health.no_space_refusals),
                                    {{"kind", "no_space"}}));
    refused.metric.push_back(Sample(MetricType::Counter,
                                    static_cast<double>(health.io_error_refusals),
                                    {{"kind", "io_error"}}));
    families->push_back(std::move(refused));
    families->push_back(Single("okl_store_resumptions_total",
                               "Times the model store resumed writes after a full disk, "
                               "without a restart.",
                               MetricType::Counter, static_cast<double>(health.resumptions)));
    if (const std::optional<uint64_t> free = options_.host->store_free_bytes(); free) {
      families->push_back(Single("okl_store_free_bytes",
                                 "Bytes free to okl_server on the model store's filesystem "
                                 "(--data_dir), read at scrape time.",
                                 MetricType::Gauge, static_cast<double>(*free)));
    }
  }

  const ModelSource models_;
  const RegretScheduler* const regret_scheduler_;
  const Options options_;
  const std::string compiler_;
  const std::optional<double> start_time_;

  std::atomic<uint64_t> examples_observed_{0};
  std::atomic<double> examples_loss_{0.0};
  std::atomic<uint64_t> predictions_{0};
  std::atomic<uint64_t> offloaded_{0};
  AtomicHistogram label_delay_{metrics_internal::kLabelDelayBounds.data(),
                               metrics_internal::kLabelDelayBounds.size()};
  MethodTable methods_;

  // The exposer holds a weak_ptr; the collector lives as long as this Impl.
  const std::shared_ptr<Collector> collector_;
  mutable Mutex mu_;
  // Declared last: destroyed (its HTTP threads joined) before what scrapes read.
  std::unique_ptr<MetricsExposer> exposer_ ABSL_GUARDED_BY(mu_);
};

// --- ServerMetrics ----------------------------------------------------------------------

absl::string_view ModelLabelsName(ModelLabels labels) {
  switch (labels) {
    case ModelLabels::kNames:
      return "names";
    case ModelLabels::kHashed:
      return "hashed";
    case ModelLabels::kNone:
      return "none";
  }
  return "names";
}

absl::StatusOr<ModelLabels> ParseModelLabels(absl::string_view text) {
  for (const ModelLabels labels : {ModelLabels::kNames, ModelLabels::kHashed, ModelLabels::kNone}) {
    if (text == ModelLabelsName(labels)) return labels;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics_model_labels must be names, hashed or none, got \"", text, "\""));
}

ModelSource ModelsOf(const ModelHost* host) {
  return [host] {
    std::vector<MetricsModel> models;
    for (const std::shared_ptr<HostedModel>& model : host->List("")) {
      models.push_back({model->shared_entry(), model->existing_book()});
    }
    return models;
  };
}

ModelSource ModelsOf(const ModelRegistry* registry) {
  return [registry] {
    std::vector<MetricsModel> models;
    for (std::shared_ptr<ModelEntry>& entry : registry->List("")) {
      models.push_back({std::move(entry), nullptr});
    }
    return models;
  };
}

ServerMetrics::ServerMetrics(ModelSource models, const RegretScheduler* regret_scheduler,
                             Options options)
    : impl_(std::make_unique<Impl>(std::move(models), regret_scheduler, options)) {}

ServerMetrics::~ServerMetrics() = default;

absl::Status ServerMetrics::StartExposer(const std::string& address) {
  return impl_->StartExposer(address);
}

int ServerMetrics::exposer_port() const { return impl_->exposer_port(); }

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerMetrics::InterceptorCreators() {
  return impl_->InterceptorCreators();
}

void ServerMetrics::RecordLabelDelay(absl::Duration delay) { impl_->RecordLabelDelay(delay); }

void ServerMetrics::RecordObserved(size_t examples, double loss_sum) {
  impl_->RecordObserved(examples, loss_sum);
}

void ServerMetrics::RecordPredicted(size_t inputs) { impl_->RecordPredicted(inputs); }

void ServerMetrics::RecordOffloaded() { impl_->RecordOffloaded(); }

std::string ServerMetrics::Scrape() const { return impl_->Scrape(); }

}  // namespace okl
