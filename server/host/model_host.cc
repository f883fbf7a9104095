// server/host/model_host.cc

#include "server/host/model_host.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "core/select.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "server/base/failpoint.h"

namespace okl {
namespace {

// A request retried after its model was replaced looks the model up this often in all.
constexpr int kMaxLookups = 3;

absl::Status FencedError(absl::string_view tenant, bool dropped) {
  if (dropped) {
    return absl::UnavailableError(absl::StrCat(
        "tenant \"", tenant, "\" has moved to another replica: nothing was done here; retry "
        "through the router, which sends the tenant's calls to its new replica"));
  }
  return absl::UnavailableError(absl::StrCat(
      "tenant \"", tenant, "\" is being moved to another replica: this write was not applied; "
      "retry in a moment (okl's client library does), and the router sends it to the "
      "tenant's new replica"));
}

}  // namespace

// Holds (tenant, model) for one mutation: mutations of one name run one at a time, in
// the order they claimed it, so the store sees them in the index's order.
class ModelHost::NameClaim {
 public:
  NameClaim(ModelHost* host, Key key) : host_(host), key_(std::move(key)) {
    PlainLock lock(&host_->claims_mu_);
    while (host_->claimed_.contains(key_)) host_->claim_released_.Wait(&host_->claims_mu_);
    host_->claimed_.insert(key_);
  }
  ~NameClaim() {
    {
      PlainLock lock(&host_->claims_mu_);
      host_->claimed_.erase(key_);
    }
    host_->claim_released_.SignalAll();
  }
  NameClaim(const NameClaim&) = delete;
  NameClaim& operator=(const NameClaim&) = delete;

 private:
  ModelHost* const host_;
  const Key key_;
};

ModelHost::WriteTicket::WriteTicket(ModelHost* host, absl::string_view tenant)
    : host_(host), tenant_(tenant) {
  PlainLock lock(&host_->writes_mu_);
  TenantWrites& writes = host_->tenant_writes_[tenant_];
  if (writes.fenced) {
    status_ = FencedError(tenant_, writes.dropped);
    return;
  }
  ++writes.in_flight;
}

ModelHost::WriteTicket::~WriteTicket() {
  if (!status_.ok()) return;
  bool fence_waits = false;
  {
    PlainLock lock(&host_->writes_mu_);
    auto it = host_->tenant_writes_.find(tenant_);
    TenantWrites& writes = it->second;
    --writes.in_flight;
    fence_waits = writes.fenced && writes.in_flight == 0;
    if (writes.in_flight == 0 && !writes.fenced) host_->tenant_writes_.erase(it);
  }
  if (fence_waits) host_->writes_finished_.SignalAll();
}

ModelHost::ModelHost(Options options)
    : options_(std::move(options)), quotas_(options_.quotas) {}

absl::Status ModelHost::Open() {
  if (options_.data_dir.empty()) return absl::OkStatus();
  OKL_ASSIGN_OR_RETURN(
      store_, ModelStore::Open(options_.data_dir,
                               {.sync_writes = options_.sync_writes,
                                .file_system = options_.store_file_system}));
  auto install = [this](const ModelKey& id, std::unique_ptr<Model> learner,
                        std::shared_ptr<ModelLog> log) -> absl::Status {
    std::shared_ptr<HostedModel> model = MakeHosted(id, std::move(learner), std::move(log));
    OKL_RETURN_IF_ERROR(Index(id, model, /*replace=*/false).status());
    quotas_.Add(id.tenant(), WorstCaseMemoryBytes(model->entry().config()));
    // A restored model has a window already: its regret need not wait for a batch.
    model->entry().RefreshRegret();
    OpenRememberedEvents(*model);
    return absl::OkStatus();
  };
  OKL_ASSIGN_OR_RETURN(
      RestoreStats stats,
      RestoreModels(
          store_.get(),
          {.skip_damaged = options_.skip_damaged_models, .warn = [](absl::string_view line) {
             std::fprintf(stderr, "okl_server: %s\n", std::string(line).c_str());
           }},
          install));
  std::fprintf(stderr,
               "okl_server: restored %zu model%s (%llu log batches, %llu examples replayed) "
               "in %.3f s\n",
               stats.models, stats.models == 1 ? "" : "s",
               static_cast<unsigned long long>(stats.log_batches),
               static_cast<unsigned long long>(stats.log_examples),
               absl::ToDoubleSeconds(stats.elapsed));
  return absl::OkStatus();
}

void ModelHost::OpenRememberedEvents(HostedModel& model) {
  absl::StatusOr<std::optional<absl::Time>> next = model.event_log()->NextExpiry();
  if (next.ok() && !next->has_value()) return;
  absl::Status book = next.ok() ? model.Book().status() : next.status();
  if (!book.ok()) {
    // The model serves; its events wait for its next Predict or Label to try again.
    std::fprintf(stderr, "okl_server: the remembered events of model %s/%s: %s\n",
                 model.entry().tenant().c_str(), model.entry().model().c_str(),
                 std::string(book.message()).c_str());
  }
}

std::shared_ptr<HostedModel> ModelHost::MakeHosted(const ModelKey& id,
                                                   std::unique_ptr<Model> learner,
                                                   std::shared_ptr<ModelLog> log) {
  auto entry = std::make_shared<ModelEntry>(id.tenant(), id.model(), std::move(learner), log,
                                            options_.regret_scheduler);
  return std::make_shared<HostedModel>(
      std::move(entry), std::move(log),
      HostedModel::EventSettings{.limits = options_.events, .quotas = &quotas_});
}

absl::StatusOr<std::shared_ptr<HostedModel>> ModelHost::Index(
    const ModelKey& id, std::shared_ptr<HostedModel> model, bool replace) {
  std::shared_ptr<HostedModel> replaced;
  {
    WriterLock lock(&models_mu_);
    auto it = models_.find(KeyOf(id));
    if (it != models_.end() && !replace) {
      return absl::AlreadyExistsError(absl::StrCat(id.Describe(), " already exists"));
    }
    if (it == models_.end()) {
      if (models_.size() >= options_.quotas.max_models) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the server holds its maximum of ", options_.quotas.max_models,
                         " models (--max_models); delete one first"));
      }
      models_.emplace(KeyOf(id), std::move(model));
    } else {
      replaced = std::exchange(it->second, std::move(model));
    }
  }
  return replaced;
}

absl::Status ModelHost::CheckConfig(const ModelConfig& config) const {
  const bool sparse = config.sparse_storage();
  const uint32_t max_dim = sparse ? options_.max_sparse_dim : options_.max_dim;
  if (config.dim > max_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.dim ", config.dim, " is over this server's limit of ", max_dim,
        sparse ? " for sparse storage (--max_sparse_dim)"
               : " (--max_dim; sparse storage allows more, see --max_sparse_dim)"));
  }
  if (config.select_kind()) {
    // A selection runs its candidates (a default set's as they will be scaled): each
    // must fit this server as a model of its own would.
    const std::vector<ModelConfig> candidates = CandidateConfigs(config, 1.0);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const absl::Status status = CheckConfig(candidates[i]);
      if (!status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            config.select.candidates.empty() ? "select's default candidate "
                                             : "select.candidates[",
            i, config.select.candidates.empty() ? "" : "]", ": ", status.message()));
      }
    }
    if (const size_t bytes = MaxSnapshotBytes(config); bytes > kMaxSnapshotBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a selection of these candidates could outgrow the snapshot size limit: its "
          "snapshot may take ",
          bytes, " bytes, over ", kMaxSnapshotBytes,
          "; lower select.live or the candidates' sizes"));
    }
    return absl::OkStatus();
  }
  if (config.max_classes > options_.max_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.max_classes ", config.max_classes, " is over this server's limit of ",
                     options_.max_classes, " (--max_classes)"));
  }
  if (config.krls_tracker.max_basis > options_.max_basis) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.krls_tracker.max_basis ", config.krls_tracker.max_basis,
                     " is over this server's limit of ", options_.max_basis, " (--max_basis)"));
  }
  // A random-feature model's size is fixed by its dimension, a tracker's by max_basis; an
  // expansion needs a budget.
  if (config.budget.max_terms == 0 && config.random_features.dimension == 0 &&
      !config.krls_tracker_kind()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.budget.max_terms is 0 (unbounded), but this server needs a budget: set it to "
        "1 to ",
        options_.max_terms, " (--max_terms), or use random_features or krls_tracker"));
  }
  if (config.budget.max_terms > options_.max_terms) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.budget.max_terms ", config.budget.max_terms,
                     " is over this server's limit of ", options_.max_terms, " (--max_terms)"));
  }
  if (const size_t bytes = MaxSnapshotBytes(config); bytes > kMaxSnapshotBytes) {
    // A model that could not be snapshotted could never be checkpointed either.
    ModelConfig one_term = config;
    one_term.budget.max_terms = 1;
    ModelConfig two_terms = config;
    two_terms.budget.max_terms = 2;
    const size_t per_term = MaxSnapshotBytes(two_terms) - MaxSnapshotBytes(one_term);
    const size_t fixed = MaxSnapshotBytes(one_term) - per_term;
    const size_t most_terms = kMaxSnapshotBytes > fixed ? (kMaxSnapshotBytes - fixed) / per_term : 0;
    return absl::InvalidArgumentError(absl::StrCat(
        "a model of this config could outgrow the snapshot size limit: its snapshot may take ",
        bytes, " bytes, over ", kMaxSnapshotBytes, "; at dim ", config.dim,
        " budget.max_terms may be at most ", most_terms));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuotaReservation> ModelHost::Reserve(const ModelKey& id,
                                                    const ModelConfig& config) {
  const std::string& tenant = id.tenant();
  OKL_RETURN_IF_ERROR(CheckConfig(config));
  {
    // Refused now, before a Restore buffers its snapshot; Replace checks again.
    const WriteTicket ticket(this, tenant);
    OKL_RETURN_IF_ERROR(ticket.status());
  }
  const bool exists = Find(id).ok();
  return quotas_.Reserve(tenant, WorstCaseMemoryBytes(config), /*new_model=*/!exists);
}

absl::StatusOr<std::shared_ptr<HostedModel>> ModelHost::Create(const ModelKey& id,
                                                               const ModelConfig& config) {
  const std::string& tenant = id.tenant();
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  OKL_RETURN_IF_ERROR(CheckConfig(config));
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<Model> learner, CreateModel(config));
  const WriteTicket ticket(this, tenant);
  OKL_RETURN_IF_ERROR(ticket.status());
  NameClaim claim(this, KeyOf(id));
  if (Find(id).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(id.Describe(), " already exists"));
  }
  OKL_ASSIGN_OR_RETURN(QuotaReservation reservation,
                       quotas_.Reserve(tenant, WorstCaseMemoryBytes(config)));
  std::shared_ptr<ModelLog> log;
  if (store_ != nullptr) {
    // The config is durable before the model exists; no index lock is held.
    OKL_ASSIGN_OR_RETURN(log, store_->CreateModel(tenant, id.model(), config));
  }
  std::shared_ptr<HostedModel> model = MakeHosted(id, std::move(learner), log);
  if (absl::Status indexed = Index(id, model, /*replace=*/false).status(); !indexed.ok()) {
    if (log != nullptr) (void)store_->DeleteModel(log.get());  // what was just written
    return indexed;
  }
  reservation.Commit();
  return model;
}

absl::StatusOr<std::shared_ptr<HostedModel>> ModelHost::Replace(const ModelKey& id,
                                                               const ModelState& state,
                                                               QuotaReservation reservation,
                                                               SnapshotEvents* events) {
  const std::string& tenant = id.tenant();
  OKL_RETURN_IF_ERROR(CheckConfig(state.config));
  absl::StatusOr<std::unique_ptr<Model>> learner = ModelFromState(state);
  if (!learner.ok()) {
    return absl::DataLossError(
        absl::StrCat("snapshot state is inconsistent: ", learner.status().message()));
  }
  const WriteTicket ticket(this, tenant);
  OKL_RETURN_IF_ERROR(ticket.status());
  NameClaim claim(this, KeyOf(id));
  absl::StatusOr<std::shared_ptr<HostedModel>> old = Find(id);
  // The events' bytes over those of the model they replace are held against the tenant's
  // quota until the new model's book counts them (and the old one's gives its back).
  uint64_t event_bytes = events != nullptr ? events->counts.stored_bytes : 0;
  if (old.ok()) event_bytes -= std::min(event_bytes, (*old)->event_counts().stored_bytes);
  OKL_RETURN_IF_ERROR(quotas_.ReserveEventBytes(tenant, event_bytes));
  const absl::Cleanup event_bytes_held = [&] {
    quotas_.ReleaseEventBytes(tenant, event_bytes);
  };
  std::shared_ptr<ModelLog> log;
  if (store_ != nullptr) {
    // One atomic write replaces the old model's config, checkpoint and log (and closes
    // the old log, so batches still arriving for it are retried on the new model).
    OKL_ASSIGN_OR_RETURN(log, store_->ReplaceModel(tenant, id.model(), state,
                                                   old.ok() ? (*old)->log() : nullptr, events));
    Failpoint("restore.written");
  }
  std::shared_ptr<HostedModel> model = MakeHosted(id, *std::move(learner), log);
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<HostedModel> replaced,
                       Index(id, model, /*replace=*/true));
  // Requests that found the old model see it as gone and are run again on this one.
  if (replaced != nullptr) replaced->Close();
  // A restored model has a window already: its regret need not wait for a batch.
  model->entry().RefreshRegret();
  if (events != nullptr) {
    // Its book now, so that the waits end on time. (A label is sent for these events
    // only once the Restore has returned: before, they were the replaced model's.)
    std::shared_ptr<MemoryEvents> memory;
    if (log == nullptr) {
      memory = std::make_shared<MemoryEvents>(std::move(events->events), events->counts);
    }
    absl::Status book = model->Book(std::move(memory)).status();
    if (!book.ok()) {
      std::fprintf(stderr, "okl_server: the remembered events of model %s/%s: %s\n",
                   tenant.c_str(), id.model().c_str(), std::string(book.message()).c_str());
    }
  }
  // The reservation counted a new model if the name was free when it was made; what
  // counts is whether one was replaced now.
  const uint64_t reserved_models = reservation.models();
  reservation.Commit();
  const uint64_t old_bytes = old.ok() ? WorstCaseMemoryBytes((*old)->entry().config()) : 0;
  const uint64_t models_now = old.ok() ? 0 : 1;
  quotas_.Release(tenant, old_bytes, reserved_models > models_now ? 1 : 0);
  if (models_now > reserved_models) quotas_.Add(tenant, 0, 1);
  return model;
}

absl::Status ModelHost::Delete(const ModelKey& id) {
  const WriteTicket ticket(this, id.tenant());
  OKL_RETURN_IF_ERROR(ticket.status());
  return DeleteModel(id);
}

absl::Status ModelHost::DeleteModel(const ModelKey& id) {
  NameClaim claim(this, KeyOf(id));
  OKL_ASSIGN_OR_RETURN(std::shared_ptr<HostedModel> model, Find(id));
  if (ModelLog* log = model->log(); log != nullptr) {
    OKL_RETURN_IF_ERROR(store_->DeleteModel(log));
  }
  {
    WriterLock lock(&models_mu_);
    models_.erase(KeyOf(id));  // the claim kept it there
  }
  model->Close();
  quotas_.Release(id.tenant(), WorstCaseMemoryBytes(model->entry().config()));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostedModel>> ModelHost::Find(const ModelKey& id) const {
  {
    ReaderLock lock(&models_mu_);
    if (auto it = models_.find(KeyOf(id)); it != models_.end()) return it->second;
  }
  return NotFoundUnlessMoved(id.tenant(), absl::NotFoundError(absl::StrCat(
                                              id.Describe(), " does not exist")));
}

absl::Status ModelHost::NotFoundUnlessMoved(absl::string_view tenant, absl::Status status) const {
  if (status.code() != absl::StatusCode::kNotFound) return status;
  OKL_RETURN_IF_ERROR(CheckNotMoved(tenant));
  return status;
}

absl::Status ModelHost::WithModel(const ModelKey& id, std::shared_ptr<HostedModel>* model,
                                  const std::function<absl::Status(HostedModel&)>& work) {
  absl::Status status;
  for (int lookup = 1; lookup <= kMaxLookups; ++lookup) {
    if (*model == nullptr) {
      OKL_ASSIGN_OR_RETURN(*model, Find(id));
    }
    status = work(**model);
    if (status.code() != absl::StatusCode::kNotFound) return status;
    // Deleted or replaced since it was found. A Restore closes the old log before it
    // swaps the model: wait for it to finish, then look again.
    model->reset();
    WaitUntilUnclaimed(KeyOf(id));
  }
  return NotFoundUnlessMoved(id.tenant(), status);
}

absl::Status ModelHost::WithModelForWrite(
    const ModelKey& id, std::shared_ptr<HostedModel>* model,
    const std::function<absl::Status(HostedModel&)>& work) {
  const WriteTicket ticket(this, id.tenant());
  OKL_RETURN_IF_ERROR(ticket.status());
  return WithModel(id, model, work);
}

absl::Status ModelHost::FenceWrites(absl::string_view tenant, absl::Time deadline) {
  OKL_RETURN_IF_ERROR(ValidateName("tenant", tenant));
  PlainLock lock(&writes_mu_);
  tenant_writes_[tenant].fenced = true;
  while (true) {
    // The entry stays while fenced: tickets erase only unfenced entries.
    const TenantWrites& writes = tenant_writes_.find(tenant)->second;
    if (!writes.fenced) {
      return absl::AbortedError(absl::StrCat("the fence of tenant \"", tenant,
                                             "\" was lifted while this call waited for its "
                                             "writes to finish"));
    }
    if (writes.in_flight == 0) return absl::OkStatus();
    if (!writes_finished_.WaitUntil(&writes_mu_, deadline) && absl::Now() >= deadline) {
      const int running = tenant_writes_.find(tenant)->second.in_flight;
      if (running == 0) return absl::OkStatus();
      return absl::DeadlineExceededError(absl::StrCat(
          running, " write(s) of tenant \"", tenant,
          "\" were still running at the deadline; the fence stays up: fence again to wait "
          "for them, or lift it"));
    }
  }
}

void ModelHost::LiftFence(absl::string_view tenant) {
  bool waiters = false;
  {
    PlainLock lock(&writes_mu_);
    auto it = tenant_writes_.find(tenant);
    if (it == tenant_writes_.end()) return;
    waiters = it->second.fenced;
    if (it->second.in_flight == 0) {
      tenant_writes_.erase(it);
    } else {
      it->second.fenced = false;
      it->second.dropped = false;
    }
  }
  if (waiters) writes_finished_.SignalAll();  // a FenceWrites still waiting gives up
}

absl::StatusOr<std::vector<std::string>> ModelHost::DropTenant(absl::string_view tenant,
                                                               absl::Time deadline) {
  OKL_RETURN_IF_ERROR(FenceWrites(tenant, deadline));
  std::vector<std::string> dropped;
  for (const std::shared_ptr<HostedModel>& model : List(tenant)) {
    const std::string& name = model->entry().model();
    OKL_ASSIGN_OR_RETURN(const ModelKey id, ModelKey::Make(tenant, name));
    absl::Status deleted = DeleteModel(id);
    if (!deleted.ok() && deleted.code() != absl::StatusCode::kNotFound) {
      return absl::Status(deleted.code(),
                          absl::StrCat("deleting model \"", name, "\" after ",
                                       dropped.size(), " other(s): ", deleted.message()));
    }
    dropped.push_back(name);
  }
  PlainLock lock(&writes_mu_);
  if (auto it = tenant_writes_.find(tenant); it != tenant_writes_.end() && it->second.fenced) {
    it->second.dropped = true;
  }
  return dropped;
}

absl::Status ModelHost::CheckNotMoved(absl::string_view tenant) const {
  PlainLock lock(&writes_mu_);
  auto it = tenant_writes_.find(tenant);
  if (it != tenant_writes_.end() && it->second.dropped) return FencedError(tenant, true);
  return absl::OkStatus();
}

void ModelHost::WaitUntilUnclaimed(const Key& key) {
  PlainLock lock(&claims_mu_);
  while (claimed_.contains(key)) claim_released_.Wait(&claims_mu_);
}

std::vector<std::shared_ptr<HostedModel>> ModelHost::List(absl::string_view tenant) const {
  std::vector<std::pair<Key, std::shared_ptr<HostedModel>>> found;
  {
    ReaderLock lock(&models_mu_);
    for (const auto& [key, model] : models_) {
      if (tenant.empty() || key.first == tenant) found.emplace_back(key, model);
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::shared_ptr<HostedModel>> models;
  models.reserve(found.size());
  for (auto& [key, model] : found) models.push_back(std::move(model));
  return models;
}

std::vector<std::shared_ptr<HostedModel>> ModelHost::AllModels() const {
  std::vector<std::shared_ptr<HostedModel>> models;
  ReaderLock lock(&models_mu_);
  models.reserve(models_.size());
  for (const auto& [key, model] : models_) models.push_back(model);
  return models;
}

size_t ModelHost::size() const {
  ReaderLock lock(&models_mu_);
  return models_.size();
}

size_t ModelHost::CheckpointModels(bool all) {
  // A store that refuses writes would fail every checkpoint and back every model off.
  if (store_ == nullptr || !store_->health().writable) return 0;
  size_t written = 0;
  const absl::Time now = absl::Now();
  for (const std::shared_ptr<HostedModel>& model : AllModels()) {
    ModelLog* log = model->log();
    if (log == nullptr) continue;
    if (!all && !log->CheckpointDue(options_.checkpoint_every_examples,
                                    options_.checkpoint_every, now)) {
      continue;
    }
    const ModelEntry* entry = &model->entry();
    absl::StatusOr<bool> done = CheckpointEntry(*entry, log);
    if (!done.ok()) {
      // The log keeps every record until a checkpoint succeeds, so nothing is lost; the
      // model is tried again after a back-off.
      checkpoint_failures_.fetch_add(1);
      log->CheckpointFailed(absl::Now());
      std::fprintf(stderr, "okl_server: checkpoint of model %s/%s failed: %s\n",
                   entry->tenant().c_str(), entry->model().c_str(),
                   std::string(done.status().message()).c_str());
    } else if (*done) {
      ++written;
    }
  }
  return written;
}

StoreHealth ModelHost::store_health() const {
  return store_ == nullptr ? StoreHealth{} : store_->health();
}

std::optional<uint64_t> ModelHost::store_free_bytes() const {
  struct statvfs fs;
  if (store_ == nullptr || ::statvfs(store_->path().c_str(), &fs) != 0) return std::nullopt;
  return uint64_t{fs.f_bavail} * fs.f_frsize;
}

StoreHealth ModelHost::MaintainStore(absl::Time now, absl::Duration retry_every) {
  if (store_ == nullptr) return StoreHealth{};
  const StoreHealth health = store_->health();
  if (health.writable || !health.resumable) return health;
  const int64_t now_ns = absl::ToUnixNanos(now);
  int64_t last = last_resume_attempt_ns_.load();
  // One attempt per interval, even if two threads call at once. An attempt on a disk
  // still full costs one failed table-file creation.
  if (now_ns - last < absl::ToInt64Nanoseconds(retry_every) ||
      !last_resume_attempt_ns_.compare_exchange_strong(last, now_ns)) {
    return health;
  }
  (void)store_->TryResume();  // the store's log line reports the change, if any
  return store_->health();
}

size_t ModelHost::models_failing_checkpoints() const {
  size_t failing = 0;
  for (const std::shared_ptr<HostedModel>& model : AllModels()) {
    if (ModelLog* log = model->log(); log != nullptr && log->checkpoint_failing()) ++failing;
  }
  return failing;
}

// --- Delayed feedback -------------------------------------------------------------------

size_t ModelHost::ExpireEvents(absl::Time now, size_t max_per_model) {
  size_t ended = 0;
  for (const std::shared_ptr<HostedModel>& model : AllModels()) {
    const std::shared_ptr<EventBook> book = model->existing_book();
    if (book == nullptr) continue;
    ModelEntry* entry = &model->entry();
    const WriteTicket ticket(this, entry->tenant());
    if (!ticket.status().ok()) continue;  // fenced: the events wait for the fence
    absl::StatusOr<size_t> done = book->Expire(*entry, now, max_per_model);
    if (done.ok()) {
      ended += *done;
    } else if (!absl::IsNotFound(done.status())) {
      std::fprintf(stderr, "okl_server: expiring the events of model %s/%s failed: %s\n",
                   entry->tenant().c_str(), entry->model().c_str(),
                   std::string(done.status().message()).c_str());
    }
  }
  return ended;
}

}  // namespace okl
