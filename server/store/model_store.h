// server/store/model_store.h
//
// ModelStore keeps okl's models durable in a RocksDB database (--data_dir): per model its
// config, its latest checkpoint (the exported state after log record S) and the logged
// batches after S. ModelLog is one model's write-ahead log, the core::ModelJournal that a
// ModelEntry appends each validated batch to before applying it. RestoreModels() is what
// the server does before SERVING: every stored model, checkpoint plus replayed log, handed
// to the ModelHost (or into a ModelRegistry). No gRPC here; RocksDB is visible only in model_store.cc.
//
// Layout (one column family; names are [A-Za-z0-9._-], so '/' separates safely):
//   "v"                      the format marker, "okl-store 1"
//   "m/<tenant>/<model>"     the model's incarnation and config (+ FNV-1a 64 checksum)
//   "i/<inc>/c"              the checkpoint: last log sequence S it covers, snapshot bytes
//   "i/<inc>/l/<seq>"        one logged batch (+ checksum); seq = 1, 2, ... per incarnation
// <inc> and <seq> are 16 hex digits, so keys sort numerically. Every creation and Restore
// gets a new incarnation: a re-created model never sees an old log, and deleting a model
// is one atomic batch (its "m/" key plus a DeleteRange over "i/<inc>/"). Data under an
// incarnation no "m/" key names (left by a crash between the two steps of a Restore, or by
// a write racing a Delete) is an orphan: LoadModels ignores and removes it.
//
// Thread-safe: ModelStore may be used from any number of threads; ModelLog serialises
// its own writes.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(auto store, okl::ModelStore::Open("./okl-data", {}));
//   okl::ModelRegistry registry({});
//   OKL_ASSIGN_OR_RETURN(okl::RestoreStats stats,
//                        okl::RestoreModels(store.get(), &registry, {}));
//   // Live models get their log from store->CreateModel / ReplaceModel.
#ifndef OKL_SERVER_STORE_MODEL_STORE_H_
#define OKL_SERVER_STORE_MODEL_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/mutex.h"
#include "server/events/event_snapshot.h"
#include "server/events/model_events.h"

namespace rocksdb {
class DB;
class WriteBatch;
class Env;
class Status;
class FileSystem;
}  // namespace rocksdb

namespace okl {

class ModelLog;

// One stored model as LoadModels reads it.
struct StoredModel {
  std::string tenant;
  std::string model;
  uint64_t incarnation = 0;
  ModelConfig config;
  std::optional<ModelState> checkpoint;  // absent: the model starts empty
  uint64_t checkpoint_seq = 0;           // the last log sequence the checkpoint covers
  // The logged batches after the checkpoint, in order: xs term-major, ys.
  struct Batch {
    uint64_t seq = 0;
    std::vector<double> xs;  // a dense record's inputs, example-major
    SparseRows sparse_xs;    // a sparse record's inputs (then xs is empty)
    bool sparse = false;
    std::vector<double> ys;
    std::vector<std::string> class_labels;  // a multi-class model's, one per example
    InputBatch inputs(uint32_t dim) const {
      return sparse ? InputBatch::Sparse(sparse_xs) : InputBatch::Dense(xs, dim);
    }
  };
  std::vector<Batch> log;
};

// Whether the store accepts writes, and what it refused. RocksDB stops all writes after
// a failed write of its log or tables (reads go on); a full filesystem is resumable
// (ModelStore::TryResume, once there is room), any other I/O error only by a restart.
struct StoreHealth {
  bool writable = true;
  bool resumable = true;         // meaningful while !writable
  std::string error;             // RocksDB's text of the error that stopped writes
  uint64_t no_space_refusals = 0;   // writes refused: the filesystem was full
  uint64_t io_error_refusals = 0;   // writes refused: another I/O error
  uint64_t resumptions = 0;         // times writes resumed after stopping
};

// A store write that failed in a way that may still have left it durable (an fsync
// that failed after the bytes reached the log): the caller knows the model is
// unchanged, not whether a restart will replay the write. The service then leaves out
// its "nothing was applied" trailer, so that no client resends it blindly.
bool WriteOutcomeUnknown(const absl::Status& status);

class ModelStore {
 public:
  struct Options {
    // fsync the write-ahead log on every write (power-loss safety); without it a write is
    // in the OS's page cache when acknowledged, which survives a crash of the process.
    bool sync_writes = false;
    // The filesystem RocksDB uses; null: the operating system's. Tests inject faults.
    std::shared_ptr<rocksdb::FileSystem> file_system;
  };

  // Opens (creating if missing) the store in directory `path`. FailedPrecondition naming
  // the path if it cannot be created or opened (not a directory, no permission, locked by
  // another process) or holds another format; DataLoss if RocksDB finds it corrupt.
  static absl::StatusOr<std::unique_ptr<ModelStore>> Open(const std::string& path,
                                                          Options options);
  ~ModelStore();

  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

  const std::string& path() const { return path_; }
  const Options& options() const { return options_; }

  // Reads every stored model, one at a time, in (tenant, model) order, into `on_model`;
  // a model whose records cannot be decoded or do not fit together goes to `on_damaged`
  // with what is wrong instead (its data stays). Orphaned data is deleted. An error
  // returned by a callback stops the load and is returned. DataLoss for corruption that
  // cannot be attributed to one model.
  absl::Status LoadModels(
      const std::function<absl::Status(StoredModel model)>& on_model,
      const std::function<absl::Status(absl::string_view tenant, absl::string_view model,
                                       absl::string_view what)>& on_damaged);

  // Writes the config of a new model (a fresh incarnation) durably; returns its log.
  absl::StatusOr<std::shared_ptr<ModelLog>> CreateModel(absl::string_view tenant,
                                                        absl::string_view model,
                                                        const ModelConfig& config);

  // Replaces the model (or creates it) with `state`, the Restore path: one atomic write
  // stores the config and checkpoint under a fresh incarnation and removes the replaced
  // incarnation's config, checkpoint and log. `replaced` is the replaced model's log
  // (null if there is none); it is closed. `events` (if any: a snapshot's) are the new
  // incarnation's remembered events and counts, in the same write. Returns the new log.
  absl::StatusOr<std::shared_ptr<ModelLog>> ReplaceModel(
      absl::string_view tenant, absl::string_view model, const ModelState& state,
      ModelLog* replaced, const SnapshotEvents* events = nullptr);

  // The log of a model LoadModels returned, continuing after its last record.
  std::shared_ptr<ModelLog> OpenLog(const StoredModel& model);

  // Removes a model's config, checkpoint and log in one atomic write, and closes `log`.
  absl::Status DeleteModel(ModelLog* log);

  // Flushes RocksDB's memtables to files (so the next open replays no WAL); for tests and
  // graceful shutdown.
  absl::Status Flush();

  // Whether writes are accepted now, and the refusals counted since Open.
  StoreHealth health() const;

  // If writes stopped on a full filesystem, asks RocksDB to resume them: it first
  // flushes its memtables, so it needs room for them. OK if writes are accepted now (or
  // never stopped); the error again while there is no room (cheap: try again later);
  // FailedPrecondition if the error is one only a restart clears.
  absl::Status TryResume();

  class WriteHealth;  // model_store.cc's: what RocksDB's listener reports

 private:
  friend class ModelLog;
  friend class EventLog;
  ModelStore(std::string path, Options options, std::unique_ptr<rocksdb::Env> env,
             std::shared_ptr<WriteHealth> write_health, std::unique_ptr<rocksdb::DB> db);

  // The client's status for a failed write (counted in health()).
  absl::Status WriteError(const rocksdb::Status& status);

  // A fresh incarnation, above every one the store has seen.
  uint64_t NewIncarnation() { return next_incarnation_.fetch_add(1); }

  const std::string path_;
  const Options options_;
  const std::unique_ptr<rocksdb::Env> env_;  // null: RocksDB's default; outlives db_
  const std::shared_ptr<WriteHealth> write_health_;  // shared with RocksDB's listener
  const std::unique_ptr<rocksdb::DB> db_;
  std::atomic<uint64_t> next_incarnation_{1};
};

// One model's write-ahead log and checkpoint position: core's ModelJournal for its
// ModelEntry. Its remembered events are an EventLog's (server/store/event_log.h). Thread-safe;
// its lock is taken inside the entry's writer lock (Append) or alone, never the other
// way around.
class ModelLog final : public ModelJournal {
 public:
  ModelLog(ModelStore* store, std::string tenant, std::string model, uint64_t incarnation,
           uint64_t next_seq, uint64_t checkpoint_seq);

  const std::string& tenant() const { return tenant_; }
  const std::string& model() const { return model_; }
  uint64_t incarnation() const { return incarnation_; }

  // Writes the batch as record next_seq (sync if the store says so). ResourceExhausted
  // ("the model store is full ...") or Unavailable ("the model store cannot write ...")
  // if RocksDB refuses; NotFound once closed. The sequence advances only on success.
  absl::Status Append(const ValidatedBatch& examples, const JournalNote* note) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Where the log is: the sequence of the last record appended (0: none) and the
  // examples appended in all. Read it where the state cannot change, i.e. inside
  // ModelEntry::ExportState(under_lock), to pair it with a state.
  struct Position {
    uint64_t seq = 0;
    uint64_t examples = 0;
  };
  Position position() const ABSL_LOCKS_EXCLUDED(mu_);

  // True if a checkpoint is due: at least `every_examples` examples were logged since the
  // last one, or `every` (if positive) has passed since it and at least one was logged.
  bool CheckpointDue(uint64_t every_examples, absl::Duration every, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // True if records were logged after the last checkpoint.
  bool HasLog() const ABSL_LOCKS_EXCLUDED(mu_);

  // Records a failed checkpoint attempt at `now`: CheckpointDue stays false for 1 s after
  // the first consecutive failure, doubling with each further one up to 5 minutes, so a
  // model that cannot be checkpointed is not encoded again every poll. A checkpoint that
  // succeeds ends the back-off.
  void CheckpointFailed(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // True if the latest checkpoint attempt failed.
  bool checkpoint_failing() const ABSL_LOCKS_EXCLUDED(mu_);

  // Append's `note`, if an EventNote (server/events/model_events.h), changes its events in the
  // same atomic write as the record.

  // Writes `state`, which is the model at `at` (after record at.seq), as the checkpoint,
  // and removes the records up to at.seq, in one atomic write. A no-op if a checkpoint at
  // or after at.seq was written already, or the log is closed.
  absl::Status Checkpoint(const ModelState& state, Position at) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class ModelStore;
  friend class EventLog;  // writes under this log's incarnation, reads the store

  // NotFound if the log is closed (the model deleted or replaced).
  absl::Status CheckOpen() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes `batch` (sync if the store says so); the store's error if RocksDB refuses.
  absl::Status Write(rocksdb::WriteBatch* batch) const;
  // Write, under mu_ (shared) and only while the log is open, so that a Delete or
  // Restore of the model, which closes the log under mu_, cannot leave the batch's keys
  // behind under the incarnation it removed.
  absl::Status WriteIfOpen(rocksdb::WriteBatch* batch) const ABSL_LOCKS_EXCLUDED(mu_);

  ModelStore* const store_;
  const std::string tenant_;
  const std::string model_;
  const uint64_t incarnation_;
  mutable Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);
  uint64_t checkpoint_seq_ ABSL_GUARDED_BY(mu_);
  uint64_t examples_ ABSL_GUARDED_BY(mu_) = 0;  // appended by this process
  uint64_t examples_at_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_checkpoint_ ABSL_GUARDED_BY(mu_);
  int failed_checkpoints_ ABSL_GUARDED_BY(mu_) = 0;  // consecutive
  absl::Time retry_checkpoint_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// What RestoreModels did.
struct RestoreStats {
  size_t models = 0;
  size_t skipped = 0;         // damaged models skipped (skip_damaged)
  uint64_t log_batches = 0;   // replayed
  uint64_t log_examples = 0;  // replayed
  absl::Duration elapsed;
};

struct RestoreOptions {
  // Skip a damaged model (reporting it through `warn`) instead of failing.
  bool skip_damaged = false;
  // Receives one line per skipped model; may be null.
  std::function<void(absl::string_view)> warn;
};

// Where RestoreModels puts each model it restored: under `id`, the model and its log
// (whose journal it must become). An error stops the restore.
using RestoredModelSink = std::function<absl::Status(
    const ModelKey& id, std::unique_ptr<Model> learner, std::shared_ptr<ModelLog> log)>;

// Loads every model of `store` and hands it to `install` with its log: checkpoint (or the
// empty model) plus the logged batches replayed through NormaModel::ObserveBatch with
// their boundaries, so a batch that diverged (FailedPrecondition) when live diverges
// identically. DataLoss "model TENANT/MODEL is damaged: ..." for the first damaged model
// unless options.skip_damaged; FailedPrecondition "cannot restore model TENANT/MODEL"
// with `install`'s error (e.g. a server full of models).
absl::StatusOr<RestoreStats> RestoreModels(ModelStore* store, const RestoreOptions& options,
                                           const RestoredModelSink& install);
// The same into `registry` (each entry's journal its log), for tools and tests; the
// server's ModelHost installs its own.
absl::StatusOr<RestoreStats> RestoreModels(ModelStore* store, ModelRegistry* registry,
                                           const RestoreOptions& options);

// Checkpoints `entry`, whose journal is `log`, if it has log records after its last
// checkpoint: the state and its log position are read under the entry's lock, the
// snapshot is encoded and written outside it. Returns whether one was written.
absl::StatusOr<bool> CheckpointEntry(const ModelEntry& entry, ModelLog* log);

}  // namespace okl

#endif  // OKL_SERVER_STORE_MODEL_STORE_H_
