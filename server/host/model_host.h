// server/host/model_host.h
//
// ModelHost holds the server's models: one HostedModel (server/host/hosted_model.h: core's
// model entry, its log in the durable ModelStore, its event book) per (tenant, model),
// found by one lookup, under the server's limits and quotas. It creates, replaces
// (Restore), deletes and finds models, checkpoints them in the background, and restores
// them all at start-up; the RPC handlers call it with plain values ("convert in, call,
// convert out") and never see journals, quotas' bookkeeping or retries.
//
// Locking, so that one tenant's large request never stalls another tenant:
//   - the index's lock covers lookups and pointer swaps only;
//   - a mutation (create, replace, delete) first claims the model's name, then does its
//     store I/O and encoding with no lock held, then swaps the model in the index.
//     Only mutations and retried requests of that same name wait for a claim.
//   - a request whose model was deleted or replaced after it found it (its log closed,
//     or the HostedModel closed) waits for the mutation to finish and looks again
//     (WithModel); at most three times.
//
// Tenant moves (okl move): a tenant's writes can be fenced. Every write (Create, Replace,
// Delete, WithModelForWrite) holds a per-tenant write ticket while it runs; a fence makes
// new writes of the tenant fail with Unavailable, having changed nothing, and waits until
// the tickets already held are returned, so the models then hold every acknowledged write.
// A fenced tenant's models may then be dropped: the tenant stays fenced, and every request
// of it that still reaches this replica gets Unavailable (retry: routed anew), not
// NotFound. Fences live in memory only: a restart lifts them.
//
// Resources: a model's worst-case bytes (WorstCaseMemoryBytes) are reserved against its
// tenant's and the server's quotas before it is built; a config whose snapshot could
// outgrow the snapshot limit is refused, so every model can always be checkpointed.
//
// Thread-safe.
//
// Example:
//   okl::ModelHost host({.data_dir = "./okl-data"});
//   OKL_RETURN_IF_ERROR(host.Open());  // the stored models, before serving
//   OKL_ASSIGN_OR_RETURN(okl::ModelKey key, okl::ModelKey::Make("acme", "churn"));
//   OKL_ASSIGN_OR_RETURN(auto model, host.Create(key, config));
//   std::shared_ptr<okl::HostedModel> found;
//   OKL_RETURN_IF_ERROR(host.WithModel(key, &found, [&](okl::HostedModel& m) {
//     return m.entry().ObserveBatch(xs, ys, &observations);
//   }));
#ifndef OKL_SERVER_HOST_MODEL_HOST_H_
#define OKL_SERVER_HOST_MODEL_HOST_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/norma.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/mutex.h"
#include "core/runtime/regret_scheduler.h"
#include "server/events/event_book.h"
#include "server/host/hosted_model.h"
#include "server/store/model_store.h"
#include "server/base/quotas.h"

namespace okl {

class ModelHost {
 public:
  // Each field is the okl_server flag of the same name.
  struct Options {
    // Largest ModelConfig.dim accepted by Create and Replace: for dense storage, and for
    // sparse storage (ModelConfig::sparse), whose memory max_nonzeros bounds instead.
    uint32_t max_dim = kMaxDimension;
    uint32_t max_sparse_dim = kMaxSparseDimension;
    // Largest budget.max_terms accepted; an unbounded budget (0) is refused too.
    uint32_t max_terms = 1000000;
    // Largest krls_tracker.max_basis accepted: a tracker holds two or three
    // (max_basis + 1)^2 matrices and a step costs O(max_basis^2) (1000: 16-24 MB and about
    // 1 ms a step; 500: 248 us).
    uint32_t max_basis = 1000;
    // Largest max_classes of a multi-class model accepted: each term keeps a coefficient
    // per class, so a model's memory and step grow with it as with max_terms.
    uint32_t max_classes = 1000;
    ResourceQuotas::Limits quotas;
    // The store's directory; empty: in memory only.
    std::string data_dir;
    bool sync_writes = false;
    bool skip_damaged_models = false;
    // A model is checkpointed once this many examples were logged since its last
    // checkpoint (0: not by count), or once this long passed with new examples (0: not
    // by time). A failed checkpoint is retried after 1 s, doubling up to 5 minutes.
    uint64_t checkpoint_every_examples = 10000;
    absl::Duration checkpoint_every = absl::Seconds(60);
    // Computes the regret of models with a regret_window; may be null.
    RegretScheduler* regret_scheduler = nullptr;
    // The filesystem the store uses (ModelStore::Options); null: the operating system's.
    std::shared_ptr<rocksdb::FileSystem> store_file_system;
    // Remembered events: the waits and the cap per model (--max_label_wait,
    // --max_pending_events).
    EventBook::Limits events = {};
  };

  explicit ModelHost(Options options);

  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  // With a data_dir: opens the store and restores every stored model (checkpoint plus
  // replayed log), counting them against the quotas. Call once, before
  // serving. FailedPrecondition for an unusable data_dir, DataLoss naming a damaged model.
  absl::Status Open();

  // InvalidArgument naming the flag if `config` is over max_dim, max_terms, max_basis or
  // max_classes, has no budget (an expansion), or could outgrow the snapshot size limit.
  absl::Status CheckConfig(const ModelConfig& config) const;

  // CheckConfig, then reserves a model of `config` against the tenant's and the server's
  // quotas (a replacement of an existing model reserves bytes only). For Restore, which
  // reserves as soon as it knows the config, before it buffers the snapshot.
  absl::StatusOr<QuotaReservation> Reserve(const ModelKey& id, const ModelConfig& config);

  // A new model: AlreadyExists if present, ResourceExhausted over a quota,
  // InvalidArgument for a bad config; durable before it is visible.
  absl::StatusOr<std::shared_ptr<HostedModel>> Create(const ModelKey& id,
                                                      const ModelConfig& config);

  // Installs a model continuing from `state` under `id`, replacing one there
  // (Restore), with the quota `reservation` from Reserve(). DataLoss if the state is
  // inconsistent. The store holds the new model before it is visible; the model replaced
  // is closed (server/host/hosted_model.h). `events`, if given (a snapshot's, from
  // DecodeEventPages), become the new model's remembered events, stored in the same
  // write; else it has none.
  absl::StatusOr<std::shared_ptr<HostedModel>> Replace(const ModelKey& id,
                                                       const ModelState& state,
                                                       QuotaReservation reservation,
                                                       SnapshotEvents* events = nullptr);

  // NotFound if absent. The model is closed: calls still holding it get NotFound.
  absl::Status Delete(const ModelKey& id);

  // NotFound if absent (Unavailable if its tenant moved away: CheckNotMoved).
  absl::StatusOr<std::shared_ptr<HostedModel>> Find(const ModelKey& id) const
      ABSL_LOCKS_EXCLUDED(models_mu_);

  // Runs `work` on the model: `*model` if set (a stream's model, found before), else the
  // one found now (stored in `*model`). If `work` fails with NotFound because the model
  // was deleted or replaced meanwhile, waits for that mutation to finish and runs it on
  // the model then found, at most three times in all. `work` must change nothing when it
  // returns NotFound (ModelEntry's, EventBook's and HostedModel's methods do not).
  absl::Status WithModel(const ModelKey& id, std::shared_ptr<HostedModel>* model,
                         const std::function<absl::Status(HostedModel&)>& work);

  // WithModel for a write (an Observe's batch): under a write ticket of the tenant, so
  // Unavailable, with nothing run, while the tenant is fenced.
  absl::Status WithModelForWrite(const ModelKey& id, std::shared_ptr<HostedModel>* model,
                                 const std::function<absl::Status(HostedModel&)>& work);

  // The models of `tenant` (all if empty), sorted by (tenant, model).
  std::vector<std::shared_ptr<HostedModel>> List(absl::string_view tenant) const
      ABSL_LOCKS_EXCLUDED(models_mu_);
  // How many models are hosted.
  size_t size() const ABSL_LOCKS_EXCLUDED(models_mu_);

  // --- Tenant moves ---------------------------------------------------------------------

  // A write of `tenant` in flight (every write holds one while it runs; RememberWriter
  // holds one until its reply): a fence on the tenant waits until it is returned.
  // status() is Unavailable, with no ticket held, while the tenant is fenced: the write
  // must then change nothing.
  class WriteTicket {
   public:
    WriteTicket(ModelHost* host, absl::string_view tenant);
    ~WriteTicket();
    WriteTicket(const WriteTicket&) = delete;
    WriteTicket& operator=(const WriteTicket&) = delete;

    const absl::Status& status() const { return status_; }

   private:
    ModelHost* const host_;
    const std::string tenant_;
    absl::Status status_;
  };

  // Fences `tenant`'s writes (see the top of this file), then waits until the writes
  // already running have finished. DeadlineExceeded if they have not by `deadline`: the
  // fence stays up (lift it, or fence again to wait again).
  absl::Status FenceWrites(absl::string_view tenant, absl::Time deadline);
  // Lifts the tenant's fence, and forgets that its models were dropped. OK if none.
  void LiftFence(absl::string_view tenant);
  // FenceWrites, then deletes every model of the tenant here; the fence stays. The names
  // of the models deleted, in order.
  absl::StatusOr<std::vector<std::string>> DropTenant(absl::string_view tenant,
                                                      absl::Time deadline);
  // Unavailable if the tenant's models were dropped (moved to another replica); for
  // requests that read, whose model would otherwise be NotFound here.
  absl::Status CheckNotMoved(absl::string_view tenant) const;

  // Checkpoints the models that are due (every model with a log if `all`), each encoded
  // and written with no lock held. Returns how many were written. A failure is logged and
  // counted, and that model's next attempt backs off exponentially. None is tried while
  // the store refuses writes: they are due again once it accepts them.
  size_t CheckpointModels(bool all);

  // Whether the store accepts writes (always, without a store), and its refusals.
  StoreHealth store_health() const;
  // Bytes free to this process on the store's filesystem; nullopt without a store or if
  // the filesystem cannot say.
  std::optional<uint64_t> store_free_bytes() const;
  // If the store's writes stopped on a full filesystem, tries to resume them, at most once
  // per `retry_every`; call it regularly (the server's background thread does). Returns
  // the store's health after.
  StoreHealth MaintainStore(absl::Time now, absl::Duration retry_every = absl::Seconds(1));

  // --- Delayed feedback (server/events/event_book.h, docs/delayed-feedback.md) -----------------

  // Ends the waits that have ended by `now`, at most `max_per_model` events per model
  // with a book, under each tenant's write ticket (a fenced tenant's wait until its fence
  // lifts). Returns how many events it ended; a model's failure is logged, and tried
  // again next time.
  size_t ExpireEvents(absl::Time now, size_t max_per_model);

  bool has_store() const { return store_ != nullptr; }
  const EventBook::Limits& event_limits() const { return options_.events; }
  ResourceQuotas& quotas() { return quotas_; }
  const ResourceQuotas& quotas() const { return quotas_; }
  // Checkpoints that failed since start.
  uint64_t checkpoint_failures() const { return checkpoint_failures_.load(); }
  // Models whose latest checkpoint attempt failed.
  size_t models_failing_checkpoints() const;

 private:
  using Key = std::pair<std::string, std::string>;
  static Key KeyOf(const ModelKey& id) { return Key(id.tenant(), id.model()); }
  class NameClaim;

  struct TenantWrites {
    int in_flight = 0;     // write tickets held
    bool fenced = false;   // new tickets are refused
    bool dropped = false;  // the models were dropped after the fence
  };

  // Deletes the model; the caller holds a write ticket of the tenant, or its fence.
  absl::Status DeleteModel(const ModelKey& id);
  // With NotFound, Unavailable instead if the tenant was dropped (CheckNotMoved).
  absl::Status NotFoundUnlessMoved(absl::string_view tenant, absl::Status status) const;

  // Waits until no mutation holds (tenant, model).
  void WaitUntilUnclaimed(const Key& key) ABSL_LOCKS_EXCLUDED(claims_mu_);

  // A HostedModel of `learner` under `id` with `log` (null without a store) as its
  // journal.
  std::shared_ptr<HostedModel> MakeHosted(const ModelKey& id, std::unique_ptr<Model> learner,
                                          std::shared_ptr<ModelLog> log);
  // Puts `model` in the index under `id`, returning the one it replaces (null if none),
  // which the caller closes. ResourceExhausted, nothing changed, if the name is new and
  // the server holds quotas.max_models models; AlreadyExists if `replace` is false and
  // the name is taken. The caller holds the name's claim.
  absl::StatusOr<std::shared_ptr<HostedModel>> Index(const ModelKey& id,
                                                     std::shared_ptr<HostedModel> model,
                                                     bool replace)
      ABSL_LOCKS_EXCLUDED(models_mu_);
  // Every model, in no order: for the background rounds (checkpoints, expiries).
  std::vector<std::shared_ptr<HostedModel>> AllModels() const ABSL_LOCKS_EXCLUDED(models_mu_);
  // Opens the book of a restored model with remembered events, so that their waits end
  // on time without waiting for its next Predict or Label.
  void OpenRememberedEvents(HostedModel& model);

  const Options options_;
  ResourceQuotas quotas_;
  // The models, by (tenant, model): the one index of this host.
  mutable Mutex models_mu_;
  absl::flat_hash_map<Key, std::shared_ptr<HostedModel>> models_ ABSL_GUARDED_BY(models_mu_);
  // Set once by Open() before serving; then fixed.
  std::unique_ptr<ModelStore> store_;

  PlainMutex claims_mu_;
  CondVar claim_released_;
  absl::flat_hash_set<Key> claimed_ ABSL_GUARDED_BY(claims_mu_);

  std::atomic<uint64_t> checkpoint_failures_{0};
  // When MaintainStore last asked the store to resume (Unix nanoseconds).
  std::atomic<int64_t> last_resume_attempt_ns_{0};

  // Tenants with write tickets held or a fence up (others have no entry).
  mutable PlainMutex writes_mu_;
  CondVar writes_finished_;
  absl::flat_hash_map<std::string, TenantWrites> tenant_writes_ ABSL_GUARDED_BY(writes_mu_);
};

}  // namespace okl

#endif  // OKL_SERVER_HOST_MODEL_HOST_H_
