// core/runtime/model_registry.h
//
// ModelRegistry owns the models of every tenant, keyed by (tenant, model name), and
// ModelEntry guards one model. The locking follows what SGD and serving need:
//   - Observes on one model apply one at a time (a writer lock per model);
//   - Predicts on one model run concurrently with each other (reader mode);
//   - different models never wait for each other: the registry's own lock is taken in
//     reader mode only for the hash lookup and is never held while a model computes.
// Deleting or replacing a model while requests are in flight is safe: requests hold a
// shared_ptr to the entry they found; a deleted entry refuses new work with NOT_FOUND.
// Both classes are thread-safe.
//
// Example:
//   okl::ModelRegistry registry({.max_models = 1000});
//   OKL_ASSIGN_OR_RETURN(okl::ModelKey key, okl::ModelKey::Make("acme", "churn"));
//   OKL_ASSIGN_OR_RETURN(auto entry, registry.Create(key, config));
//   std::vector<okl::Observation> out;
//   OKL_RETURN_IF_ERROR(entry->ObserveBatch(xs, ys, &out));
#ifndef OKL_CORE_RUNTIME_MODEL_REGISTRY_H_
#define OKL_CORE_RUNTIME_MODEL_REGISTRY_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/model.h"
#include "core/regret.h"
#include "core/runtime/model_key.h"
#include "core/runtime/mutex.h"
#include "core/runtime/regret_scheduler.h"

namespace okl {

// What the caller of ModelEntry::ObserveBatch asks the journal to record in the same
// atomic write as the batch (the server's store: the remembered events a batch of labels
// consumes, so that a crash keeps both or neither). Opaque to core: the journal that
// understands it downcasts.
class JournalNote {
 public:
  virtual ~JournalNote() = default;
};

// The write-ahead log of one model, as core sees it: whoever makes models durable (the
// server's ModelStore) implements it, and ModelEntry calls it. Core never persists
// anything itself.
class ModelJournal {
 public:
  virtual ~ModelJournal() = default;

  // Called by ModelEntry::ObserveBatch with the entry's writer lock held, with a batch
  // validated against the entry's config, before its first example is applied, so
  // the journal sees batches in exactly the order they are applied. Returns OK only once
  // the batch is logged; any other status is returned to the caller and the model is left
  // unchanged. NotFound means the journal was closed (the model deleted or replaced).
  // The batch is dense or sparse as the caller gave it (core/input_batch.h), with its
  // class labels if it has them, and the model has room for its classes
  // (Model::CheckClassCapacity). `note` (may be null) is the caller's, written atomically
  // with the batch.
  virtual absl::Status Append(const ValidatedBatch& batch, const JournalNote* note) = 0;
};

// A batch's predictions and what the model tells of each input (ModelEntry::PredictAll).
struct BatchPrediction {
  std::vector<double> predictions;  // f(x), one per input
  // The predictive variance of each input: a KRLS tracker's, or a selection's whose
  // champion was one for the whole batch; else empty.
  std::vector<double> variances;
  // For the novelty loss, whether each input is novel (f(x) < rho, with the rho of the
  // model that predicted it); else empty.
  std::vector<bool> novel;
  // A multi-class model's (else all empty): its classes when the last input was
  // predicted (a class keeps its index once learned, so these name every index below),
  // and per input the index of its predicted class (kNoClass before any class was
  // known; predictions then holds the class's score, or 0) and the scores of the classes
  // known when it was predicted: class_scores[class_score_begins[i] ..
  // class_score_begins[i + 1]) (the last row ends at class_scores.size()).
  std::vector<std::string> classes;
  std::vector<uint32_t> predicted_classes;
  std::vector<double> class_scores;
  std::vector<size_t> class_score_begins;

  // Input i's class scores.
  absl::Span<const double> ClassScoresOf(size_t i) const {
    const size_t end =
        i + 1 < class_score_begins.size() ? class_score_begins[i + 1] : class_scores.size();
    return absl::MakeConstSpan(class_scores).subspan(class_score_begins[i],
                                                     end - class_score_begins[i]);
  }
};

class ModelEntry : public std::enable_shared_from_this<ModelEntry> {
 public:
  // `journal` may be null: the model is then kept in memory only. With a
  // `regret_scheduler` (which must outlive the entry's batches) and a regret_window in the
  // config, the entry asks it for a regret computation after its first batch and after
  // every scheduler->every_steps() more examples; the entry must be owned by a shared_ptr.
  ModelEntry(std::string tenant, std::string model, std::unique_ptr<Model> learner,
             std::shared_ptr<ModelJournal> journal = nullptr,
             RegretScheduler* regret_scheduler = nullptr);

  ModelEntry(const ModelEntry&) = delete;
  ModelEntry& operator=(const ModelEntry&) = delete;

  const std::string& tenant() const { return tenant_; }
  const std::string& model() const { return model_; }
  // The model's configuration; fixed for the entry's life (Restore installs a new entry),
  // so it is read without the lock.
  const ModelConfig& config() const { return config_; }
  // The model's journal (null if none); fixed for the entry's life.
  const std::shared_ptr<ModelJournal>& journal() const { return journal_; }

  // The batch, validated against this entry's config (Model::Validate; no lock taken, as
  // the config is fixed). A caller validates a request once where it enters, then
  // applies it, whole or in parts (ValidatedBatch::Subrange).
  absl::StatusOr<ValidatedBatch> Validate(
      const InputBatch& xs, absl::Span<const double> ys,
      absl::Span<const std::string> class_labels = {}) const {
    return ValidatedBatch::Make(rules_, xs, ys, class_labels);
  }

  // Model::ObserveValidated under the writer lock; NotFound once the entry is deleted.
  // With a journal, the batch is appended to it first, and not applied if that fails; a
  // batch the model would refuse whole (Model::CheckClassCapacity) is refused before.
  // A batch validated against other rules (another entry's) is validated again first.
  // If `stats_after` is set, it receives the statistics right after this batch, taken
  // under the same lock (another writer's batch may follow at once). `note` goes to the
  // journal with the batch (ModelJournal::Append); without a journal it is ignored.
  absl::Status ObserveBatch(const ValidatedBatch& batch, std::vector<Observation>* out,
                            ModelStats* stats_after = nullptr,
                            const JournalNote* note = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Validate, then the above.
  absl::Status ObserveBatch(const InputBatch& xs, absl::Span<const double> ys,
                            std::vector<Observation>* out, ModelStats* stats_after = nullptr,
                            const JournalNote* note = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a dense batch (ys.size() * dim values).
  absl::Status ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                            std::vector<Observation>* out, ModelStats* stats_after = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_) {
    return ObserveBatch(InputBatch::Dense(xs, config_.dim), ys, out, stats_after);
  }
  // Model::PredictBatch under a reader lock. If `margin` is not null, it receives the
  // model's margin (rho of novelty, see ModelStats::margin) read under the same lock, so
  // that a novelty decision f(x) < rho compares the prediction with its own model's rho.
  absl::Status PredictBatch(const InputBatch& xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured,
                            double* margin = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured,
                            double* margin = nullptr) const ABSL_LOCKS_EXCLUDED(mu_) {
    if (xs.size() != out.size() * config_.dim) {  // what Model::PredictBatch says of it
      ReaderLock lock(&mu_);
      return learner_->PredictBatch(xs, out, mode);
    }
    return PredictBatch(InputBatch::Dense(xs, config_.dim), out, mode, margin);
  }

  // A whole request's predictions, with variances where the model has them and novelty
  // flags for the novelty loss. The inputs are predicted in chunks, each under its own
  // reader lock, so that a long batch lets writers in between: at most 256 inputs, or
  // for a model with variances (O(M^2) each for a tracker of M bases) about 2^23
  // multiply-adds. Before each chunk after the first, `before_chunk` (if set) is called
  // with the inputs predicted so far, and an error from it ends the call with that error
  // (a cancelled call). A selection whose champion changes to one without variances
  // mid-batch answers none. A multi-class model answers its classes and scores; a class
  // it learns during the call is in the later chunks' rows only. NotFound once deleted.
  absl::StatusOr<BatchPrediction> PredictAll(
      const InputBatch& xs,
      const std::function<absl::Status(size_t predicted)>& before_chunk = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Model::PredictBatchWithVariance under a reader lock: a KRLS tracker's predictions
  // with their predictive variances (or a selection's whose champion is one).
  absl::Status PredictBatchWithVariance(const InputBatch& xs, absl::Span<double> out,
                                        absl::Span<double> variances) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Model::has_predictive_variance under a reader lock. A selection's answer changes with
  // its champion, so PredictBatchWithVariance may still fail (FailedPrecondition) after
  // this said true.
  bool has_predictive_variance() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<ModelSummary> Summary() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ModelState> ExportState() const ABSL_LOCKS_EXCLUDED(mu_);
  // The same, calling `under_lock` while the state cannot change (no batch is being
  // applied or journaled), so a checkpointer can read the journal's position that
  // matches the state.
  absl::StatusOr<ModelState> ExportState(const std::function<void()>& under_lock) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Computes the windowed regret of the model's current window on the calling thread
  // (the reader lock is held only to copy the window) and publishes it in stats().regret
  // unless a newer result is there already. NotFound once deleted; FailedPrecondition
  // without regret tracking; OK with nothing published while the window is empty.
  absl::Status ComputeRegret() ABSL_LOCKS_EXCLUDED(mu_, regret_mu_);

  // Asks the regret scheduler for a computation now if the entry tracks regret, has a
  // scheduler, and no computation was asked for at its latest step: a restored model, or
  // one that went idle fewer than every_steps examples after its last computation (the
  // server calls this periodically, --regret_refresh).
  void RefreshRegret() ABSL_LOCKS_EXCLUDED(mu_);

  // Marks the entry deleted: work already holding the lock finishes, later calls fail.
  void MarkDeleted() ABSL_LOCKS_EXCLUDED(mu_);

  // True while an ObserveBatch waits for or holds the writer lock: a PredictBatch now
  // would wait for it, journal write included. A hint for where to run a read (the server
  // keeps reads that would wait off gRPC's threads): a batch may begin right after.
  bool writing() const { return writers_.load(std::memory_order_relaxed) > 0; }

 private:
  absl::Status CheckLive() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // PredictAll for a multi-class model.
  absl::StatusOr<BatchPrediction> PredictClasses(
      const InputBatch& xs, const std::function<absl::Status(size_t)>& before_chunk) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // learner_->stats() with the published regret.
  ModelStats StatsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_LOCKS_EXCLUDED(regret_mu_);
  // True if the scheduler should be asked now, after a batch ending at `steps`; updates
  // the step of the last request.
  bool RegretDue(uint64_t steps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleRegret();

  const std::string tenant_;
  const std::string model_;
  const ModelConfig config_;
  const BatchRules rules_;  // of config_
  const std::shared_ptr<ModelJournal> journal_;
  mutable Mutex mu_;
  std::unique_ptr<Model> learner_ ABSL_GUARDED_BY(mu_);
  bool deleted_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> writers_{0};  // ObserveBatch calls waiting for or holding mu_
  RegretScheduler* const regret_scheduler_;
  // The model's steps at the last request; 0: never asked (a request needs steps > 0).
  uint64_t regret_requested_at_ ABSL_GUARDED_BY(mu_) = 0;
  // Its own lock, so that publishing a result never waits for a batch.
  mutable PlainMutex regret_mu_;
  std::optional<RegretResult> regret_ ABSL_GUARDED_BY(regret_mu_);
};

class ModelRegistry {
 public:
  struct Options {
    size_t max_models = 10000;  // Create and Put beyond this: ResourceExhausted
    // Computes the regret of models with a regret_window; null: regret is never
    // computed. Must outlive the registry's entries' batches.
    RegretScheduler* regret_scheduler = nullptr;
  };

  explicit ModelRegistry(Options options);

  // AlreadyExists if present, ResourceExhausted at max_models, InvalidArgument for a bad
  // config. `journal` (may be null) becomes the new entry's: whoever makes
  // models durable writes the model to its store first, with no registry lock held.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Create(
      const ModelKey& id, const ModelConfig& config,
      std::shared_ptr<ModelJournal> journal = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Installs `learner` under `id`, atomically replacing a model already there
  // (Restore), which is marked deleted. ResourceExhausted if it is new and the registry
  // is full.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Put(
      const ModelKey& id, std::unique_ptr<Model> learner,
      std::shared_ptr<ModelJournal> journal = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // NotFound if absent.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Find(const ModelKey& id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Removes the model and marks its entry deleted. NotFound if absent.
  absl::Status Delete(const ModelKey& id) ABSL_LOCKS_EXCLUDED(mu_);

  // The models of `tenant` (every tenant's if empty), sorted by (tenant, model).
  std::vector<std::shared_ptr<ModelEntry>> List(absl::string_view tenant) const
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::pair<std::string, std::string>;

  const Options options_;
  mutable Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<ModelEntry>> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_MODEL_REGISTRY_H_
