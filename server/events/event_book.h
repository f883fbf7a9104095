// server/events/event_book.h
//
// EventBook: one model's remembered events and the rules of delayed feedback over them
// (docs/delayed-feedback.md). A Predict with `remember` hands the book its inputs and
// predictions; a Label hands it (event id, y) pairs, and the book applies each pending
// event's label to the model exactly once, as Observe(x_e, y) at that moment; at expiry
// it applies an event's default label or drops it, once.
//
// The events live in an EventStorage: the model store (EventLog, durable: a label's log
// record and its event's new state are one write) or memory (a model without a store).
// The book's lock orders everything done to its events (the model's event lock); it is
// taken before the model's writer lock, and held across the storage's reads and writes,
// which are the model's own (other models never wait for it).
//
// Thread-safe.
#ifndef OKL_SERVER_EVENTS_EVENT_BOOK_H_
#define OKL_SERVER_EVENTS_EVENT_BOOK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/input_batch.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/mutex.h"
#include "proto/label_outcome.h"
#include "server/events/model_events.h"
#include "server/base/quotas.h"

namespace okl {

// A point-in-time view of a storage's events, read a page at a time (a Snapshot's).
class EventCursor {
 public:
  virtual ~EventCursor() = default;
  // Up to `max` more events, in id order; none once every event was read.
  virtual absl::StatusOr<std::vector<StoredEvent>> Next(size_t max) = 0;
};

// Where a book keeps its events. EventLog (server/store/event_log.h) implements it over the
// model store; MemoryEvents below in memory.
class EventStorage {
 public:
  virtual ~EventStorage() = default;
  // Whether Remember looks each id up: a caller's ids may be known already; ids the book
  // made (a random 64-bit prefix of its own and a counter) cannot be, and looking them
  // up would cost a read per event.
  enum class KnownIds { kLookUp, kNoneCanBe };
  // Stores `events` as pending, and `counts`, in one write; AlreadyExists (nothing
  // stored) if (kLookUp) an id is repeated or known. Every id is valid (ValidateEventId):
  // EventBook checks a caller's, and makes its own so.
  virtual absl::Status Remember(absl::Span<const RememberedEvent> events,
                                const EventCounts& counts,
                                KnownIds known = KnownIds::kLookUp) = 0;
  virtual absl::StatusOr<std::optional<StoredEvent>> FindEvent(absl::string_view id) const = 0;
  // Up to `max` events whose wait ended at or before `now`, earliest first.
  virtual absl::StatusOr<std::vector<StoredEvent>> DueEvents(absl::Time now,
                                                             size_t max) const = 0;
  // Removes `events`, and stores `counts`, in one write.
  virtual absl::Status ForgetEvents(absl::Span<const StoredEvent> events,
                                    const EventCounts& counts) = 0;
  // The counts last stored (zeros if none).
  virtual absl::StatusOr<EventCounts> LoadCounts() const = 0;
  // When the earliest wait stored ends; nullopt if no event is stored.
  virtual absl::StatusOr<std::optional<absl::Time>> NextExpiry() const = 0;
  // Called after a batch carrying `note` was applied to the model. A storage whose model
  // has a journal wrote the note with the batch's record and does nothing here; memory
  // applies it now.
  virtual void NoteApplied(const EventNote& note) = 0;
  // The events stored now; later changes do not show in it.
  virtual absl::StatusOr<std::unique_ptr<EventCursor>> CaptureEvents() const = 0;
};

// EventStorage in memory, for a model kept in memory only.
class MemoryEvents final : public EventStorage {
 public:
  MemoryEvents() = default;
  // Holding `events` and `counts` (a Restore's, checked by DecodeEventPages).
  MemoryEvents(std::vector<StoredEvent> events, const EventCounts& counts);

  absl::Status Remember(absl::Span<const RememberedEvent> events, const EventCounts& counts,
                        KnownIds known = KnownIds::kLookUp) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<StoredEvent>> FindEvent(absl::string_view id) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<StoredEvent>> DueEvents(absl::Time now,
                                                     size_t max) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ForgetEvents(absl::Span<const StoredEvent> events,
                            const EventCounts& counts) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<EventCounts> LoadCounts() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<absl::Time>> NextExpiry() const override
      ABSL_LOCKS_EXCLUDED(mu_);
  void NoteApplied(const EventNote& note) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<EventCursor>> CaptureEvents() const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ForgetLocked(const StoredEvent& stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  absl::flat_hash_map<std::string, StoredEvent> events_ ABSL_GUARDED_BY(mu_);
  // The expiry index: (expires, id), in time order.
  std::map<std::pair<absl::Time, std::string>, bool> expiry_ ABSL_GUARDED_BY(mu_);
  EventCounts counts_ ABSL_GUARDED_BY(mu_);
};

// Where an EventBook counts its events' stored bytes (EventCounts::stored_bytes): against
// `tenant`'s --max_event_bytes_per_tenant in `quotas`; null: nowhere.
struct EventQuotaAccount {
  ResourceQuotas* quotas = nullptr;
  std::string tenant = {};
};

class EventBook : public std::enable_shared_from_this<EventBook> {
 public:
  struct Limits {
    absl::Duration default_wait = absl::Minutes(10);  // a request's wait of 0
    absl::Duration max_wait = absl::Hours(24 * 7);    // --max_label_wait
    uint64_t max_pending = 10'000'000;                 // --max_pending_events
  };
  // What a Predict asks to remember.
  struct RememberOptions {
    // (Initialized members: designated initializers may leave any of them out.)
    std::vector<std::string> event_ids = {};  // one per input; empty: the book makes them
    absl::Duration wait = absl::ZeroDuration();  // zero: Limits::default_wait
    std::optional<double> default_label = std::nullopt;
  };
  struct Labelled {
    std::vector<LabelOutcome> outcomes;      // per label, in order
    std::vector<Observation> observations;   // per applied label, in order
    // Per applied label whose remembering time is known: the time since then.
    std::vector<absl::Duration> delays;
  };

  // `storage` holds the model's events (its EventLog, or a MemoryEvents); `loss` is the
  // model's, for the served loss.
  EventBook(std::shared_ptr<EventStorage> storage, LossConfig loss, Limits limits,
            EventQuotaAccount account = {});

  // Reads the stored counts and when the first wait ends, and adds the stored bytes to
  // the tenant's (unchecked: they are stored already); call once before the rest.
  absl::Status Open() ABSL_LOCKS_EXCLUDED(mu_);
  // The model is gone (deleted or replaced) or the book is not kept: returns its stored
  // bytes to the tenant's quota and counts nothing from now on; a Remember after it is
  // NotFound, nothing remembered.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // Remembers each of `inputs` (of `entry`'s model) with the prediction served for it
  // (`predictions`, one per input) until `now` + the wait; returns the event ids, one per
  // input. InvalidArgument for ids that are not one per input or not valid, a wait below
  // zero or over the limit, or a default label the model's loss does not accept (it is
  // checked as a label of each input now); AlreadyExists for an id
  // known already; ResourceExhausted past max_pending or the tenant's event bytes. On any
  // error nothing is remembered.
  absl::StatusOr<std::vector<std::string>> Remember(const ModelEntry& entry,
                                                    const InputBatch& inputs,
                                                    absl::Span<const double> predictions,
                                                    const RememberOptions& options,
                                                    absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Remember in two halves, for a caller that answers later (a remembering Predict served
  // on the queue's thread): Check does Remember's checks and copies the events; then
  // RememberLater queues them and returns at once. Every request queued until a writer
  // runs is written in one storage write, on a thread of `schedule`'s, and `done` runs
  // there with the request's ids (or its refusal: Remember's errors but InvalidArgument).
  // The work scheduled holds the book; a book not held by a std::shared_ptr writes at
  // once instead, and runs `done` before RememberLater returns.
  struct Checked {
    std::vector<RememberedEvent> events;  // empty ids: the book makes them
    bool caller_ids = false;              // then written alone, after a lookup
  };
  using RememberDone = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>) &&>;
  using Scheduler = std::function<void(absl::AnyInvocable<void() &&>)>;
  absl::StatusOr<Checked> Check(const ModelEntry& entry, const InputBatch& inputs,
                                absl::Span<const double> predictions,
                                const RememberOptions& options, absl::Time now) const;
  void RememberLater(Checked checked, const Scheduler& schedule, RememberDone done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Applies each label to its pending event, as one Observe batch on `entry` of the
  // applied ones in order (see the top of this file). The request is checked whole first:
  // a malformed event id (ValidateEventId) or a y that is not finite is InvalidArgument
  // for the whole request, which then changes nothing; so is a y the model's loss does
  // not accept. A pending event whose wait has ended is kUnknown.
  absl::StatusOr<Labelled> Label(ModelEntry& entry,
                                 absl::Span<const std::pair<std::string, double>> labels,
                                 absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the waits that ended by `now`, at most `max` events: a pending event with a
  // default label has it applied (one Observe batch on `entry`), one without is dropped,
  // and a labelled one is forgotten. Returns how many events it ended. Before the first
  // wait ends it returns 0 at once, reading nothing.
  absl::StatusOr<size_t> Expire(ModelEntry& entry, absl::Time now, size_t max)
      ABSL_LOCKS_EXCLUDED(mu_);

  EventCounts counts() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a Label, an expiry, a Snapshot's capture or a Remember holds the book's lock
  // or waits for it. Those may hold it long (across the store's reads and the model's
  // steps), so RememberLater's writer, due to run on a queue's thread, which serves
  // every tenant's calls, should wait for them elsewhere (RememberWriter does).
  bool Busy() const { return long_holds_.load(std::memory_order_relaxed) > 0; }

  // The model and its events at one moment, for a Snapshot: `export_model` (which copies
  // the model's state) runs under the book's lock, and the events and counts are captured
  // with it, so that no label, expiry or remember falls between the two.
  struct Captured {
    EventCounts counts;
    std::unique_ptr<EventCursor> events;
  };
  absl::StatusOr<Captured> Capture(const std::function<absl::Status()>& export_model)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A fresh id for an event that expires at `expires` (ServerEventId): its expiry, 16 hex
  // digits drawn for this book, then the book's counter.
  std::string MakeId(absl::Time expires) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One Predict's events to remember, until a writer has written them (or refused them):
  // then `done`, with their ids and the write's status. Read and written under mu_.
  // A request of Remember lives on its caller's stack, which waits for mu_; one of
  // RememberLater's is owned by the queue until its writer has run `answer`.
  struct RememberRequest {
    std::vector<RememberedEvent> events;  // an empty id: the book makes one
    std::vector<std::string> ids;
    absl::Status status;
    bool done = false;
    RememberDone answer = nullptr;  // RememberLater's
  };
  // Writes every queued request (server-made ids) in one storage write. Returns
  // RememberLater's among them, whose `answer` the caller runs once mu_ is released.
  std::vector<std::unique_ptr<RememberRequest>> WriteQueued()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `request` in a storage write of its own; its ids, or its refusal.
  absl::StatusOr<std::vector<std::string>> WriteAlone(RememberRequest& request,
                                                      EventStorage::KnownIds known)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the answers of `written` (WriteQueued's), with no lock held.
  static void Answer(std::vector<std::unique_ptr<RememberRequest>> written);
  // RememberLater's writer: WriteQueued, then Answer.
  void WriteLater() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the events of `requests` in one storage write (those that fit under
  // max_pending and the tenant's event bytes; the rest are refused), in order, and marks
  // each done. Returns the
  // write's status (or the one request's refusal).
  absl::Status WriteRemembered(absl::Span<RememberRequest* const> requests,
                               EventStorage::KnownIds known) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns `bytes` of the stored ones to the tenant's quota (after a write removed them).
  void ReleaseStoredBytes(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Counted in long_holds_ for its scope, which covers the taking of mu_ by what may hold
  // it long (see Busy).
  class LongHold {
   public:
    explicit LongHold(const EventBook* book) : book_(book) {
      book_->long_holds_.fetch_add(1, std::memory_order_relaxed);
    }
    ~LongHold() { book_->long_holds_.fetch_sub(1, std::memory_order_relaxed); }
    LongHold(const LongHold&) = delete;
    LongHold& operator=(const LongHold&) = delete;

   private:
    const EventBook* const book_;
  };

  const std::shared_ptr<EventStorage> storage_;
  const LossConfig loss_;
  const Limits limits_;
  const std::string tenant_;
  mutable Mutex mu_;
  ResourceQuotas* quotas_ ABSL_GUARDED_BY(mu_);  // null: not counted (or closed)
  bool closed_ ABSL_GUARDED_BY(mu_) = false;     // Close()d: remembers nothing more
  EventCounts counts_ ABSL_GUARDED_BY(mu_);
  // Remembering requests of server-made ids waiting for mu_ (group commit). Taken
  // after mu_ or alone.
  PlainMutex queue_mu_;
  std::vector<RememberRequest*> queue_ ABSL_GUARDED_BY(queue_mu_);
  // A WriteLater is scheduled and has not yet taken the queue.
  bool writer_scheduled_ ABSL_GUARDED_BY(queue_mu_) = false;
  // No wait ends before this (InfiniteFuture: none stored), so that a sweep over many
  // books reads the store only for those with something due.
  absl::Time next_due_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  const uint64_t id_prefix_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // LongHolds alive (a hint: read without the lock).
  mutable std::atomic<int> long_holds_{0};
};

}  // namespace okl

#endif  // OKL_SERVER_EVENTS_EVENT_BOOK_H_
