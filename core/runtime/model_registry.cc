#include "core/runtime/model_registry.h"

#include <algorithm>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "core/status_macros.h"

namespace okl {
namespace {

absl::Status NotFound(absl::string_view tenant, absl::string_view model) {
  return absl::NotFoundError(
      absl::StrCat("model \"", model, "\" of tenant \"", tenant, "\" does not exist"));
}

}  // namespace

ModelEntry::ModelEntry(std::string tenant, std::string model, std::unique_ptr<Model> learner,
                       std::shared_ptr<ModelJournal> journal, RegretScheduler* regret_scheduler)
    : tenant_(std::move(tenant)),
      model_(std::move(model)),
      config_(learner->config()),
      rules_(learner->batch_rules()),
      journal_(std::move(journal)),
      learner_(std::move(learner)),
      regret_scheduler_(config_.regret_window > 0 ? regret_scheduler : nullptr) {}

absl::Status ModelEntry::CheckLive() const {
  if (deleted_) return NotFound(tenant_, model_);
  return absl::OkStatus();
}

absl::Status ModelEntry::ObserveBatch(const InputBatch& xs, absl::Span<const double> ys,
                                      std::vector<Observation>* out, ModelStats* stats_after,
                                      const JournalNote* note) {
  OKL_ASSIGN_OR_RETURN(const ValidatedBatch batch, Validate(xs, ys));
  return ObserveBatch(batch, out, stats_after, note);
}

absl::Status ModelEntry::ObserveBatch(const ValidatedBatch& batch,
                                      std::vector<Observation>* out, ModelStats* stats_after,
                                      const JournalNote* note) {
  if (batch.rules() != rules_) {  // validated for another entry's config
    OKL_ASSIGN_OR_RETURN(const ValidatedBatch again,
                         Validate(batch.inputs(), batch.ys(), batch.class_labels()));
    return ObserveBatch(again, out, stats_after, note);
  }
  absl::Status status;
  bool regret_due = false;
  {
    writers_.fetch_add(1, std::memory_order_relaxed);
    // Released after the lock (destroyed in reverse order).
    absl::Cleanup done = [this] { writers_.fetch_sub(1, std::memory_order_relaxed); };
    WriterLock lock(&mu_);
    OKL_RETURN_IF_ERROR(CheckLive());
    // Only valid batches are logged; and a batch is logged before it is applied, in the
    // order of application, because both happen under this writer lock.
    if (journal_ != nullptr) {
      OKL_RETURN_IF_ERROR(learner_->CheckClassCapacity(batch));
      OKL_RETURN_IF_ERROR(journal_->Append(batch, note));
    }
    status = learner_->ObserveValidated(batch, out);
    if (stats_after != nullptr) *stats_after = StatsLocked();
    regret_due = RegretDue(learner_->steps());
  }
  if (regret_due) ScheduleRegret();
  return status;
}

ModelStats ModelEntry::StatsLocked() const {
  ModelStats stats = learner_->stats();
  PlainLock lock(&regret_mu_);
  stats.regret = regret_;
  return stats;
}

bool ModelEntry::RegretDue(uint64_t steps) {
  if (regret_scheduler_ == nullptr || steps == 0) return false;
  const uint64_t every = regret_scheduler_->every_steps();
  if (regret_requested_at_ > 0 && steps < regret_requested_at_ + every) return false;
  regret_requested_at_ = steps;
  return true;
}

void ModelEntry::ScheduleRegret() {
  // Null if the entry is not owned by a shared_ptr (never so in a registry).
  if (std::shared_ptr<ModelEntry> self = weak_from_this().lock()) {
    regret_scheduler_->Schedule(std::move(self));
  }
}

void ModelEntry::RefreshRegret() {
  if (regret_scheduler_ == nullptr) return;
  {
    WriterLock lock(&mu_);
    const uint64_t steps = learner_->steps();
    if (deleted_ || steps == 0 || regret_requested_at_ == steps) return;
    regret_requested_at_ = steps;
  }
  ScheduleRegret();
}

absl::Status ModelEntry::ComputeRegret() {
  if (config_.regret_window == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model \"", model_, "\" of tenant \"", tenant_,
                     "\" does not track regret (regret_window = 0)"));
  }
  RegretWindow window;
  double margin;
  {
    ReaderLock lock(&mu_);
    OKL_RETURN_IF_ERROR(CheckLive());
    window = learner_->RegretWindowCopy();
    margin = learner_->stats().margin;
  }
  if (window.size() == 0) return absl::OkStatus();
  OKL_ASSIGN_OR_RETURN(RegretResult result, okl::ComputeRegret(config_, margin, window));
  PlainLock lock(&regret_mu_);
  if (!regret_.has_value() || regret_->last_step < result.last_step) regret_ = result;
  return absl::OkStatus();
}

absl::Status ModelEntry::PredictBatch(const InputBatch& xs, absl::Span<double> out,
                                      PredictionMode mode, double* margin) const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckLive());
  if (margin != nullptr) *margin = learner_->margin();
  return learner_->PredictBatch(xs, out, mode);
}

absl::Status ModelEntry::PredictBatchWithVariance(const InputBatch& xs, absl::Span<double> out,
                                                  absl::Span<double> variances) const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckLive());
  return learner_->PredictBatchWithVariance(xs, out, variances);
}

namespace {

// PredictAll's chunks: at most this many inputs, and for a model with variances about
// this many multiply-adds (one input of a tracker at M = 1000 with forgetting).
constexpr size_t kPredictChunk = 256;
constexpr double kPredictChunkWork = 1 << 23;

}  // namespace

absl::StatusOr<BatchPrediction> ModelEntry::PredictAll(
    const InputBatch& xs, const std::function<absl::Status(size_t)>& before_chunk) const {
  const size_t n = xs.size();
  if (!xs.sparse() && xs.dense_values().size() != n * config_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.dense_values().size(),
                                                   " input values, not a multiple of dim ",
                                                   config_.dim));
  }
  if (config_.multiclass()) return PredictClasses(xs, before_chunk);
  const bool novelty = config_.loss.type == LossType::kNovelty;
  bool variance = has_predictive_variance();
  BatchPrediction answer;
  answer.predictions.resize(n);
  if (novelty) answer.novel.resize(n);
  if (variance) answer.variances.resize(n);
  const size_t chunk =
      variance ? static_cast<size_t>(std::clamp(kPredictChunkWork /
                                                    WorstCaseWorkPerExample(config_),
                                                1.0, static_cast<double>(kPredictChunk)))
               : kPredictChunk;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t count = std::min(chunk, n - begin);
    if (begin > 0 && before_chunk) OKL_RETURN_IF_ERROR(before_chunk(begin));
    const InputBatch part = xs.Subrange(begin, count);
    const absl::Span<double> out = absl::MakeSpan(answer.predictions).subspan(begin, count);
    if (variance) {
      const absl::Status status = PredictBatchWithVariance(
          part, out, absl::MakeSpan(answer.variances).subspan(begin, count));
      if (status.ok()) continue;
      // A selection's new champion has none: variances for every input or for none.
      if (!absl::IsFailedPrecondition(status) || !config_.select_kind()) return status;
      variance = false;
      answer.variances.clear();
    }
    double rho = 0;  // read with the chunk's predictions, under the same lock
    OKL_RETURN_IF_ERROR(
        PredictBatch(part, out, PredictionMode::kConfigured, novelty ? &rho : nullptr));
    if (!novelty) continue;
    for (size_t i = 0; i < count; ++i) answer.novel[begin + i] = out[i] < rho;
  }
  return answer;
}

absl::StatusOr<BatchPrediction> ModelEntry::PredictClasses(
    const InputBatch& xs, const std::function<absl::Status(size_t)>& before_chunk) const {
  const size_t n = xs.size();
  BatchPrediction answer;
  answer.predictions.resize(n);
  answer.class_score_begins.reserve(n);
  for (size_t begin = 0; begin < n; begin += kPredictChunk) {
    const size_t count = std::min(kPredictChunk, n - begin);
    if (begin > 0 && before_chunk) OKL_RETURN_IF_ERROR(before_chunk(begin));
    const size_t first_score = answer.class_scores.size();
    size_t classes = 0;
    {
      ReaderLock lock(&mu_);
      OKL_RETURN_IF_ERROR(CheckLive());
      OKL_RETURN_IF_ERROR(learner_->PredictClassBatch(
          xs.Subrange(begin, count), &answer.predicted_classes, &answer.class_scores));
      classes = learner_->classes().size();
      // Classes only join, so the last chunk's names every index of the earlier ones.
      if (begin + count == n) answer.classes = learner_->classes();
    }
    for (size_t i = 0; i < count; ++i) {
      answer.class_score_begins.push_back(first_score + i * classes);
      const uint32_t c = answer.predicted_classes[begin + i];
      answer.predictions[begin + i] =
          c == kNoClass ? 0.0 : answer.class_scores[first_score + i * classes + c];
    }
  }
  return answer;
}

bool ModelEntry::has_predictive_variance() const {
  ReaderLock lock(&mu_);
  return learner_->has_predictive_variance();
}

absl::StatusOr<ModelSummary> ModelEntry::Summary() const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckLive());
  return ModelSummary{.tenant = tenant_,
                      .model = model_,
                      .config = learner_->config(),
                      .stats = StatsLocked(),
                      .memory_bytes = learner_->MemoryBytes()};
}

absl::StatusOr<ModelState> ModelEntry::ExportState() const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckLive());
  return learner_->ExportState();
}

absl::StatusOr<ModelState> ModelEntry::ExportState(
    const std::function<void()>& under_lock) const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckLive());
  under_lock();
  return learner_->ExportState();
}

void ModelEntry::MarkDeleted() {
  WriterLock lock(&mu_);
  deleted_ = true;
}

ModelRegistry::ModelRegistry(Options options) : options_(options) {}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Create(
    const ModelKey& id, const ModelConfig& config, std::shared_ptr<ModelJournal> journal) {
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<Model> learner, CreateModel(config));
  Key key(id.tenant(), id.model());
  auto entry = std::make_shared<ModelEntry>(key.first, key.second, std::move(learner),
                                            std::move(journal), options_.regret_scheduler);
  WriterLock lock(&mu_);
  if (models_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat(id.Describe(), " already exists"));
  }
  if (models_.size() >= options_.max_models) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds its maximum of ", options_.max_models,
                     " models (--max_models); delete one first"));
  }
  models_.emplace(std::move(key), entry);
  return entry;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Put(
    const ModelKey& id, std::unique_ptr<Model> learner, std::shared_ptr<ModelJournal> journal) {
  Key key(id.tenant(), id.model());
  auto entry = std::make_shared<ModelEntry>(key.first, key.second, std::move(learner),
                                            std::move(journal), options_.regret_scheduler);
  std::shared_ptr<ModelEntry> replaced;
  {
    WriterLock lock(&mu_);
    auto it = models_.find(key);
    if (it == models_.end()) {
      if (models_.size() >= options_.max_models) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the server holds its maximum of ", options_.max_models,
                         " models (--max_models); delete one first"));
      }
      models_.emplace(std::move(key), entry);
    } else {
      replaced = std::exchange(it->second, entry);
    }
  }
  // Requests that found the old entry see it as gone and are retried by their callers.
  if (replaced) replaced->MarkDeleted();
  // A restored model has a window already: its regret need not wait for a batch.
  entry->RefreshRegret();
  return entry;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Find(const ModelKey& id) const {
  ReaderLock lock(&mu_);
  auto it = models_.find(Key(id.tenant(), id.model()));
  if (it == models_.end()) return NotFound(id.tenant(), id.model());
  return it->second;
}

absl::Status ModelRegistry::Delete(const ModelKey& id) {
  std::shared_ptr<ModelEntry> entry;
  {
    WriterLock lock(&mu_);
    auto it = models_.find(Key(id.tenant(), id.model()));
    if (it == models_.end()) return NotFound(id.tenant(), id.model());
    entry = std::move(it->second);
    models_.erase(it);
  }
  entry->MarkDeleted();
  return absl::OkStatus();
}

std::vector<std::shared_ptr<ModelEntry>> ModelRegistry::List(absl::string_view tenant) const {
  std::vector<std::shared_ptr<ModelEntry>> entries;
  {
    ReaderLock lock(&mu_);
    for (const auto& [key, entry] : models_) {
      if (tenant.empty() || key.first == tenant) entries.push_back(entry);
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a->tenant(), a->model()) < std::tie(b->tenant(), b->model());
  });
  return entries;
}

size_t ModelRegistry::size() const {
  ReaderLock lock(&mu_);
  return models_.size();
}

}  // namespace okl
