// core/model_registry.h
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
//   OKL_ASSIGN_OR_RETURN(auto entry, registry.Create("acme", "churn", config));
//   std::vector<okl::Observation> out;
//   OKL_RETURN_IF_ERROR(entry->ObserveBatch(xs, ys, &out));
#ifndef OKL_CORE_MODEL_REGISTRY_H_
#define OKL_CORE_MODEL_REGISTRY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/mutex.h"
#include "core/norma.h"

namespace okl {

inline constexpr size_t kMaxNameLength = 64;

// OK if `name` is 1-64 characters of [A-Za-z0-9._-]; else InvalidArgument naming `what`
// ("tenant" or "model").
absl::Status ValidateName(absl::string_view what, absl::string_view name);

// A model's configuration and statistics at one moment.
struct ModelSummary {
  std::string tenant;
  std::string model;
  ModelConfig config;
  ModelStats stats;
  size_t memory_bytes = 0;
};

class ModelEntry {
 public:
  ModelEntry(std::string tenant, std::string model, std::unique_ptr<NormaModel> norma);

  ModelEntry(const ModelEntry&) = delete;
  ModelEntry& operator=(const ModelEntry&) = delete;

  const std::string& tenant() const { return tenant_; }
  const std::string& model() const { return model_; }
  // The model's configuration; fixed for the entry's life (Restore installs a new entry),
  // so it is read without the lock.
  const ModelConfig& config() const { return config_; }

  // NormaModel::ObserveBatch under the writer lock; NotFound once the entry is deleted.
  // If `stats_after` is set, it receives the statistics right after this batch, taken
  // under the same lock (another writer's batch may follow at once).
  absl::Status ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                            std::vector<Observation>* out, ModelStats* stats_after = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NormaModel::PredictBatch under a reader lock.
  absl::Status PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured) const
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<ModelSummary> Summary() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ModelState> ExportState() const ABSL_LOCKS_EXCLUDED(mu_);

  // Marks the entry deleted: work already holding the lock finishes, later calls fail.
  void MarkDeleted() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status CheckLive() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string tenant_;
  const std::string model_;
  const ModelConfig config_;
  mutable Mutex mu_;
  std::unique_ptr<NormaModel> norma_ ABSL_GUARDED_BY(mu_);
  bool deleted_ ABSL_GUARDED_BY(mu_) = false;
};

class ModelRegistry {
 public:
  struct Options {
    size_t max_models = 10000;  // Create and Put beyond this: ResourceExhausted
  };

  explicit ModelRegistry(Options options);

  // AlreadyExists if present, ResourceExhausted at max_models, InvalidArgument for a bad
  // name or config.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Create(absl::string_view tenant,
                                                     absl::string_view model,
                                                     const ModelConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Installs `norma` under (tenant, model), atomically replacing a model already there
  // (Restore). ResourceExhausted if it is new and the registry is full.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Put(absl::string_view tenant,
                                                  absl::string_view model,
                                                  std::unique_ptr<NormaModel> norma)
      ABSL_LOCKS_EXCLUDED(mu_);

  // NotFound if absent, InvalidArgument for a bad name.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Find(absl::string_view tenant,
                                                   absl::string_view model) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // NotFound if absent.
  absl::Status Delete(absl::string_view tenant, absl::string_view model)
      ABSL_LOCKS_EXCLUDED(mu_);

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

#endif  // OKL_CORE_MODEL_REGISTRY_H_
