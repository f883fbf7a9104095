// server/events/event_book.cc

#include "server/events/event_book.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/loss.h"
#include "core/sparse_vector.h"
#include "core/status_macros.h"
#include "server/base/failpoint.h"

namespace okl {
namespace {

// a - b, or 0 below it: the counts record's first version has no stored_bytes (read as 0).
uint64_t SaturatingSub(uint64_t a, uint64_t b) { return a - std::min(a, b); }

uint64_t RandomIdPrefix() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// The inputs of `events` (pending, so they hold theirs) as one batch. `dense` receives
// the values of a dense batch and `rows` the rows of a sparse one; both must outlive the
// batch.
InputBatch BatchOf(absl::Span<const StoredEvent> events, size_t dim,
                   std::vector<double>* dense, SparseRows* rows) {
  const bool sparse = !events.empty() && events.front().event.sparse;
  for (const StoredEvent& stored : events) {
    if (sparse) {
      rows->Append({stored.event.indices, stored.event.values});
    } else {
      dense->insert(dense->end(), stored.event.values.begin(), stored.event.values.end());
    }
  }
  return sparse ? InputBatch::Sparse(*rows) : InputBatch::Dense(*dense, dim);
}

}  // namespace

// --- MemoryEvents ---------------------------------------------------------------------

namespace {

// A copy of the events, in id order.
class CopiedEvents final : public EventCursor {
 public:
  explicit CopiedEvents(std::vector<StoredEvent> events) : events_(std::move(events)) {
    std::sort(events_.begin(), events_.end(), [](const StoredEvent& a, const StoredEvent& b) {
      return a.event.id < b.event.id;
    });
  }

  absl::StatusOr<std::vector<StoredEvent>> Next(size_t max) override {
    const size_t end = std::min(events_.size(), next_ + max);
    std::vector<StoredEvent> page(std::make_move_iterator(events_.begin() + next_),
                                  std::make_move_iterator(events_.begin() + end));
    next_ = end;
    return page;
  }

 private:
  std::vector<StoredEvent> events_;
  size_t next_ = 0;
};

}  // namespace

MemoryEvents::MemoryEvents(std::vector<StoredEvent> events, const EventCounts& counts) {
  WriterLock lock(&mu_);
  for (StoredEvent& stored : events) {
    expiry_[{stored.event.expires, stored.event.id}] = true;
    std::string id = stored.event.id;
    events_[std::move(id)] = std::move(stored);
  }
  counts_ = counts;
}

absl::StatusOr<std::unique_ptr<EventCursor>> MemoryEvents::CaptureEvents() const {
  ReaderLock lock(&mu_);
  std::vector<StoredEvent> events;
  events.reserve(events_.size());
  for (const auto& [id, stored] : events_) events.push_back(stored);
  return std::make_unique<CopiedEvents>(std::move(events));
}

absl::Status MemoryEvents::Remember(absl::Span<const RememberedEvent> events,
                                    const EventCounts& counts, KnownIds) {
  WriterLock lock(&mu_);
  absl::flat_hash_set<absl::string_view> ids;
  for (const RememberedEvent& event : events) {
    if (events_.contains(event.id) || !ids.insert(event.id).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("event id \"", event.id, "\" is already remembered for this model"));
    }
  }
  for (const RememberedEvent& event : events) {
    events_[event.id] = StoredEvent{.state = EventState::kPending, .event = event};
    expiry_[{event.expires, event.id}] = true;
  }
  counts_ = counts;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StoredEvent>> MemoryEvents::FindEvent(absl::string_view id) const {
  ReaderLock lock(&mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::vector<StoredEvent>> MemoryEvents::DueEvents(absl::Time now,
                                                                 size_t max) const {
  ReaderLock lock(&mu_);
  std::vector<StoredEvent> due;
  for (auto it = expiry_.begin(); it != expiry_.end() && it->first.first <= now &&
                                  due.size() < max;
       ++it) {
    due.push_back(events_.at(it->first.second));
  }
  return due;
}

void MemoryEvents::ForgetLocked(const StoredEvent& stored) {
  events_.erase(stored.event.id);
  expiry_.erase({stored.event.expires, stored.event.id});
}

absl::Status MemoryEvents::ForgetEvents(absl::Span<const StoredEvent> events,
                                        const EventCounts& counts) {
  WriterLock lock(&mu_);
  for (const StoredEvent& stored : events) ForgetLocked(stored);
  counts_ = counts;
  return absl::OkStatus();
}

absl::StatusOr<EventCounts> MemoryEvents::LoadCounts() const {
  ReaderLock lock(&mu_);
  return counts_;
}

absl::StatusOr<std::optional<absl::Time>> MemoryEvents::NextExpiry() const {
  ReaderLock lock(&mu_);
  if (expiry_.empty()) return std::nullopt;
  return expiry_.begin()->first.first;
}

void MemoryEvents::NoteApplied(const EventNote& note) {
  WriterLock lock(&mu_);
  for (const StoredEvent& stored : note.labelled) {
    StoredEvent& kept = events_[stored.event.id];
    kept = stored;
    kept.state = EventState::kLabelled;
    kept.event.indices.clear();
    kept.event.values.clear();
  }
  for (const StoredEvent& stored : note.forgotten) ForgetLocked(stored);
  counts_ = note.counts;
}

// --- EventBook ------------------------------------------------------------------------

EventBook::EventBook(std::shared_ptr<EventStorage> storage, LossConfig loss, Limits limits,
                     EventQuotaAccount account)
    : storage_(std::move(storage)),
      loss_(loss),
      limits_(limits),
      tenant_(std::move(account.tenant)),
      quotas_(account.quotas),
      id_prefix_(RandomIdPrefix()) {}

absl::Status EventBook::Open() {
  OKL_ASSIGN_OR_RETURN(EventCounts counts, storage_->LoadCounts());
  OKL_ASSIGN_OR_RETURN(std::optional<absl::Time> next, storage_->NextExpiry());
  WriterLock lock(&mu_);
  counts_ = counts;
  next_due_ = next.value_or(absl::InfiniteFuture());
  if (quotas_ != nullptr) quotas_->AddEventBytes(tenant_, counts_.stored_bytes);
  return absl::OkStatus();
}

void EventBook::Close() {
  WriterLock lock(&mu_);
  ReleaseStoredBytes(counts_.stored_bytes);
  quotas_ = nullptr;
  closed_ = true;
}

void EventBook::ReleaseStoredBytes(uint64_t bytes) {
  if (quotas_ != nullptr && bytes > 0) quotas_->ReleaseEventBytes(tenant_, bytes);
}

EventCounts EventBook::counts() const {
  ReaderLock lock(&mu_);
  return counts_;
}

absl::StatusOr<EventBook::Captured> EventBook::Capture(
    const std::function<absl::Status()>& export_model) {
  const LongHold hold(this);
  WriterLock lock(&mu_);
  OKL_RETURN_IF_ERROR(export_model());
  Captured captured;
  OKL_ASSIGN_OR_RETURN(captured.events, storage_->CaptureEvents());
  captured.counts = counts_;
  return captured;
}

std::string EventBook::MakeId(absl::Time expires) {
  return ServerEventId(expires, id_prefix_, next_id_++);
}

absl::StatusOr<EventBook::Checked> EventBook::Check(const ModelEntry& entry,
                                                    const InputBatch& inputs,
                                                    absl::Span<const double> predictions,
                                                    const RememberOptions& options,
                                                    absl::Time now) const {
  const size_t n = inputs.size();
  if (entry.config().multiclass()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remember is not offered for a multi-class model (", LossTypeName(entry.config().loss.type),
        " loss): predict without it, and send each example with its class_label to Observe"));
  }
  if (!options.event_ids.empty() && options.event_ids.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remember.event_ids has ", options.event_ids.size(), " ids for ", n,
        " inputs: give one per input, or none and the server makes them"));
  }
  for (const std::string& id : options.event_ids) OKL_RETURN_IF_ERROR(ValidateEventId(id));
  if (options.wait < absl::ZeroDuration() || options.wait > limits_.max_wait) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remember.wait_seconds is ", absl::ToDoubleSeconds(options.wait),
        ": give 0 (the default, ", absl::FormatDuration(limits_.default_wait),
        ") to the server's --max_label_wait (", absl::ToDoubleSeconds(limits_.max_wait),
        " s)"));
  }
  if (options.default_label.has_value()) {
    // Checked now, as a label of each input: at expiry it must be applied, not refused.
    const absl::Status valid =
        entry.Validate(inputs, std::vector<double>(n, *options.default_label)).status();
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("remember.default_label: ", valid.message()));
    }
  }
  const absl::Time expires = now + (options.wait == absl::ZeroDuration()
                                        ? std::min(limits_.default_wait, limits_.max_wait)
                                        : options.wait);
  Checked checked;
  checked.caller_ids = !options.event_ids.empty();
  checked.events.resize(n);
  for (size_t i = 0; i < n; ++i) {
    RememberedEvent& event = checked.events[i];
    if (checked.caller_ids) event.id = options.event_ids[i];
    event.expires = expires;
    event.default_label = options.default_label;
    event.prediction = predictions[i];
    event.remembered = now;
    if (inputs.sparse()) {
      const SparseVectorView row = inputs.SparseRow(i);
      event.sparse = true;
      event.indices.assign(row.indices.begin(), row.indices.end());
      event.values.assign(row.values.begin(), row.values.end());
    } else {
      const absl::Span<const double> row = inputs.DenseRow(i);
      event.values.assign(row.begin(), row.end());
    }
  }
  return checked;
}

absl::StatusOr<std::vector<std::string>> EventBook::Remember(
    const ModelEntry& entry, const InputBatch& inputs, absl::Span<const double> predictions,
    const RememberOptions& options, absl::Time now) {
  OKL_ASSIGN_OR_RETURN(Checked checked, Check(entry, inputs, predictions, options, now));
  const LongHold hold(this);  // it may be large (a Predict offloaded)
  RememberRequest request;
  request.events = std::move(checked.events);
  if (checked.caller_ids) {
    // The caller's ids may be known: looked up, and written alone, so that one request's
    // known id refuses that request only.
    return WriteAlone(request, EventStorage::KnownIds::kLookUp);
  }
  // Group commit: the requests that queue while a write is under way are written by
  // whichever of them takes the lock next, in one storage write (one log write, however
  // many callers remember at once).
  {
    PlainLock lock(&queue_mu_);
    queue_.push_back(&request);
  }
  std::vector<std::unique_ptr<RememberRequest>> written;
  {
    WriterLock lock(&mu_);
    if (!request.done) written = WriteQueued();
  }
  Answer(std::move(written));
  OKL_RETURN_IF_ERROR(request.status);
  return request.ids;
}

void EventBook::RememberLater(Checked checked, const Scheduler& schedule, RememberDone done) {
  // The scheduled work holds the book: its model may be deleted meanwhile.
  std::shared_ptr<EventBook> self = weak_from_this().lock();
  if (self == nullptr || checked.caller_ids) {
    // Written alone: caller ids after their lookup (see Remember), on the scheduler's
    // thread; a book not held by a shared_ptr, now, on this one.
    auto request = std::make_shared<RememberRequest>();
    request->events = std::move(checked.events);
    const EventStorage::KnownIds known = checked.caller_ids
                                             ? EventStorage::KnownIds::kLookUp
                                             : EventStorage::KnownIds::kNoneCanBe;
    auto write = [book = this, request, known, done = std::move(done)]() mutable {
      std::move(done)(book->WriteAlone(*request, known));
    };
    if (self == nullptr) return write();
    schedule([self, write = std::move(write)]() mutable { write(); });
    return;
  }
  auto request = std::make_unique<RememberRequest>();
  request->events = std::move(checked.events);
  request->answer = std::move(done);
  bool schedule_writer = false;
  {
    PlainLock lock(&queue_mu_);
    queue_.push_back(request.release());  // owned by the queue until written
    schedule_writer = !std::exchange(writer_scheduled_, true);
  }
  // One writer for all that queue before it runs: one hand-off and one storage write
  // however many Predicts remember meanwhile.
  if (schedule_writer) schedule([self] { self->WriteLater(); });
}

void EventBook::WriteLater() {
  std::vector<std::unique_ptr<RememberRequest>> written;
  {
    WriterLock lock(&mu_);
    {
      PlainLock queue_lock(&queue_mu_);
      writer_scheduled_ = false;  // what queues from now on needs a writer of its own
    }
    written = WriteQueued();
  }
  Answer(std::move(written));
}

std::vector<std::unique_ptr<EventBook::RememberRequest>> EventBook::WriteQueued() {
  std::vector<RememberRequest*> queued;
  {
    PlainLock queue_lock(&queue_mu_);
    queued.swap(queue_);
  }
  std::vector<std::unique_ptr<RememberRequest>> later;
  if (queued.empty()) return later;
  WriteRemembered(queued, EventStorage::KnownIds::kNoneCanBe)
      .IgnoreError();  // each has its own
  for (RememberRequest* request : queued) {
    if (request->answer != nullptr) later.emplace_back(request);
  }
  return later;
}

absl::StatusOr<std::vector<std::string>> EventBook::WriteAlone(RememberRequest& request,
                                                               EventStorage::KnownIds known) {
  WriterLock lock(&mu_);
  OKL_RETURN_IF_ERROR(WriteRemembered({&request}, known));
  return std::move(request.ids);
}

void EventBook::Answer(std::vector<std::unique_ptr<RememberRequest>> written) {
  for (std::unique_ptr<RememberRequest>& request : written) {
    if (request->status.ok()) {
      std::move(request->answer)(std::move(request->ids));
    } else {
      std::move(request->answer)(request->status);
    }
  }
}

absl::Status EventBook::WriteRemembered(absl::Span<RememberRequest* const> requests,
                                        EventStorage::KnownIds known) {
  EventCounts after = counts_;
  absl::Time first_expiry = absl::InfiniteFuture();
  std::vector<RememberedEvent> events;
  std::vector<RememberRequest*> written;
  uint64_t reserved = 0;  // event bytes, from the tenant's quota
  for (RememberRequest* request : requests) {
    const size_t n = request->events.size();
    request->done = true;
    if (closed_) {
      // Its model was deleted or replaced (a store's log refuses the same way).
      request->status = absl::NotFoundError("the model was deleted or replaced");
      continue;
    }
    if (n > limits_.max_pending - std::min(limits_.max_pending, after.pending)) {
      request->status = absl::ResourceExhaustedError(
          absl::StrCat("the model has ", after.pending, " events awaiting labels, and ", n,
                       " more would pass the server's --max_pending_events (",
                       limits_.max_pending, "): label or let expire some first"));
      continue;
    }
    uint64_t bytes = 0;
    for (RememberedEvent& event : request->events) {
      if (event.id.empty()) event.id = MakeId(event.expires);
      bytes += StoredEventBytes(EventState::kPending, event);
    }
    if (quotas_ != nullptr) {
      request->status = quotas_->ReserveEventBytes(tenant_, bytes);
      if (!request->status.ok()) continue;
      reserved += bytes;
    }
    after.pending += n;
    after.stored_bytes += bytes;
    request->ids.reserve(n);
    for (RememberedEvent& event : request->events) {
      request->ids.push_back(event.id);
      first_expiry = std::min(first_expiry, event.expires);
      events.push_back(std::move(event));
    }
    written.push_back(request);
  }
  if (written.empty()) return requests.size() == 1 ? requests[0]->status : absl::OkStatus();
  const absl::Status status = storage_->Remember(events, after, known);
  for (RememberRequest* request : written) request->status = status;
  if (!status.ok()) {
    ReleaseStoredBytes(reserved);
    return status;
  }
  Failpoint("remember.written");
  counts_ = after;
  next_due_ = std::min(next_due_, first_expiry);
  return absl::OkStatus();
}

absl::StatusOr<EventBook::Labelled> EventBook::Label(
    ModelEntry& entry, absl::Span<const std::pair<std::string, double>> labels,
    absl::Time now) {
  // The whole request first: one malformed label refuses it, and nothing is read.
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto& [id, y] = labels[i];
    if (absl::Status valid = ValidateEventId(id); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels[", i, "]: ", valid.message(), " (no label applied)"));
    }
    if (!std::isfinite(y)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels[", i, "]: the label of event \"", id, "\" is not a finite number"));
    }
  }
  const Loss loss(loss_);
  const LongHold hold(this);
  WriterLock lock(&mu_);
  Labelled result;
  result.outcomes.reserve(labels.size());
  EventNote note;
  note.counts = counts_;
  std::vector<double> ys;
  uint64_t freed = 0;                                  // stored bytes
  absl::flat_hash_set<absl::string_view> applied_ids;  // by this request
  for (const auto& [id, y] : labels) {
    std::optional<StoredEvent> stored;
    if (!applied_ids.contains(id)) {
      OKL_ASSIGN_OR_RETURN(stored, storage_->FindEvent(id));
    }
    if (applied_ids.contains(id) ||
        (stored.has_value() && stored->state == EventState::kLabelled)) {
      result.outcomes.push_back(LabelOutcome::kDuplicate);
      ++note.counts.duplicates;
    } else if (!stored.has_value() || stored->event.expires <= now) {
      result.outcomes.push_back(LabelOutcome::kUnknown);
    } else {
      result.outcomes.push_back(LabelOutcome::kApplied);
      ++note.counts.applied;
      --note.counts.pending;
      // Its input leaves the store; its id stays, to tell a repeated label.
      freed += StoredEventBytes(EventState::kPending, stored->event) -
               StoredEventBytes(EventState::kLabelled, stored->event);
      note.counts.served_loss +=
          loss.At(y, stored->event.prediction, loss.InitialMargin()).value;
      ++note.counts.served_labels;
      note.labelled.push_back(*std::move(stored));
      ys.push_back(y);
      applied_ids.insert(id);
    }
  }
  note.counts.stored_bytes = SaturatingSub(note.counts.stored_bytes, freed);
  if (!note.labelled.empty()) {
    std::vector<double> dense;
    SparseRows rows;
    const InputBatch batch = BatchOf(note.labelled, entry.config().dim, &dense, &rows);
    // Validated before anything is stored, so that a label the loss refuses changes
    // nothing.
    OKL_ASSIGN_OR_RETURN(const ValidatedBatch valid, entry.Validate(batch, ys));
    Failpoint("label.checked");
    absl::Status applied = entry.ObserveBatch(valid, &result.observations, nullptr, &note);
    // A batch that diverged part-way stays applied (and logged) as Observe's does: its
    // events are labelled all the same, as its replay would have them.
    if (!applied.ok() && !absl::IsFailedPrecondition(applied)) return applied;
    storage_->NoteApplied(note);
    // What the counts gave back (less than `freed` under a counts record of the first
    // version, which holds no stored bytes).
    ReleaseStoredBytes(counts_.stored_bytes - note.counts.stored_bytes);
    counts_ = note.counts;
    Failpoint("label.applied");
    if (!applied.ok()) return applied;
    for (const StoredEvent& stored : note.labelled) {
      if (stored.event.remembered == absl::UnixEpoch()) continue;  // not known
      result.delays.push_back(now - stored.event.remembered);
    }
  } else if (note.counts.duplicates != counts_.duplicates) {
    // Only duplicates: their count is stored on its own.
    OKL_RETURN_IF_ERROR(storage_->ForgetEvents({}, note.counts));
    counts_ = note.counts;
  }
  return result;
}

absl::StatusOr<size_t> EventBook::Expire(ModelEntry& entry, absl::Time now, size_t max) {
  {
    // Before the first wait ends: nothing read, and (the sweep looks every 100 ms) not
    // counted as a long hold.
    ReaderLock lock(&mu_);
    if (now < next_due_) return 0;
  }
  const LongHold hold(this);
  WriterLock lock(&mu_);
  if (now < next_due_) return 0;
  OKL_ASSIGN_OR_RETURN(std::vector<StoredEvent> due, storage_->DueEvents(now, max));
  if (due.empty()) {
    OKL_ASSIGN_OR_RETURN(std::optional<absl::Time> next, storage_->NextExpiry());
    next_due_ = next.value_or(absl::InfiniteFuture());
    return 0;
  }
  // One write ends every due wait: the default labels' record (if any) with the removal
  // of every due event and the counts. Were the events without a default removed by a
  // write of their own, a crash between the two writes would leave them stored while the
  // counts had them expired already, and the next sweep would count them again.
  EventNote note;
  note.counts = counts_;
  std::vector<StoredEvent> defaulted;  // pending with a default label, in expiry order
  std::vector<double> ys;
  uint64_t freed = 0;  // stored bytes
  for (StoredEvent& stored : due) {
    freed += StoredEventBytes(stored.state, stored.event);
    if (stored.state == EventState::kPending) {
      --note.counts.pending;
      ++note.counts.expired;
    }
    if (stored.state == EventState::kPending && stored.event.default_label.has_value()) {
      ys.push_back(*stored.event.default_label);
      defaulted.push_back(std::move(stored));
    } else {
      note.forgotten.push_back(std::move(stored));
    }
  }
  note.counts.stored_bytes = SaturatingSub(note.counts.stored_bytes, freed);
  bool written = false;
  if (!defaulted.empty()) {
    std::vector<double> dense;
    SparseRows rows;
    const InputBatch batch = BatchOf(defaulted, entry.config().dim, &dense, &rows);
    note.forgotten.insert(note.forgotten.end(), std::make_move_iterator(defaulted.begin()),
                          std::make_move_iterator(defaulted.end()));
    std::vector<Observation> observations;
    absl::Status applied = entry.ObserveBatch(batch, ys, &observations, nullptr, &note);
    // InvalidArgument: Remember checked the default labels, so this is not expected; the
    // events are dropped (below) rather than tried again at every sweep.
    if (!absl::IsInvalidArgument(applied)) {
      if (!applied.ok() && !absl::IsFailedPrecondition(applied)) return applied;
      storage_->NoteApplied(note);
      written = true;
      Failpoint("expiry.applied");
    }
  }
  if (!written) {
    OKL_RETURN_IF_ERROR(storage_->ForgetEvents(note.forgotten, note.counts));
    Failpoint("expiry.forgotten");
  }
  ReleaseStoredBytes(counts_.stored_bytes - note.counts.stored_bytes);  // as Label's
  counts_ = note.counts;
  OKL_ASSIGN_OR_RETURN(std::optional<absl::Time> next, storage_->NextExpiry());
  next_due_ = next.value_or(absl::InfiniteFuture());
  return due.size();
}

}  // namespace okl
