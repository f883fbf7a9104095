// server/events/model_events.h
//
// Remembered events, for delayed feedback (docs/delayed-feedback.md): a Predict with
// `remember` keeps each input and the prediction served for it under an event id, until
// a label arrives or the wait ends. This file holds the event's value type, its record in
// the model store (read and written by EventLog, server/store/event_log.h), and the JournalNote
// through which a batch of labels changes its events in the same atomic write as the
// batch's log record (ModelLog, server/store/model_store.h).
//
// Store keys, under the model's incarnation (so deleting or replacing a model removes its
// events with the rest of the incarnation):
//   "i/<inc>/x/<expiry µs, 16 hex>/<id>"   the expiry index, in time order. An event whose
//                                          id the server made (ServerEventId) keeps its
//                                          record (EncodeEvent) here, and has no other
//                                          key; for any other event the entry is empty...
//   "i/<inc>/e/<event id>"                 ...and its record is here.
//   "i/<inc>/n"                            the model's EventCounts
// One key for the server's ids, since the store write is most of what a remembering
// Predict costs beyond a plain one: the id names its expiry, so a label finds the key
// from the id alone.
#ifndef OKL_SERVER_EVENTS_MODEL_EVENTS_H_
#define OKL_SERVER_EVENTS_MODEL_EVENTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/runtime/model_registry.h"

namespace rocksdb {
class WriteBatch;
}  // namespace rocksdb

namespace okl {

// "i/<inc>/": how every key of incarnation `inc` begins in the model store (its
// checkpoint and log, server/store/model_store.h, and its events), <inc> in 16 hex digits.
std::string IncarnationPrefix(uint64_t inc);

// Longest event id, in bytes.
inline constexpr size_t kMaxEventIdBytes = 128;

// InvalidArgument saying what to fix unless `id` is 1 to kMaxEventIdBytes bytes of
// [A-Za-z0-9._:-].
absl::Status ValidateEventId(absl::string_view id);

// One remembered input and what was served for it.
struct RememberedEvent {
  std::string id = {};
  absl::Time expires = absl::UnixEpoch();              // when its wait ends
  std::optional<double> default_label = std::nullopt;  // learned at expiry if set; else
                                                       // it is dropped
  double prediction = 0;                // the prediction served for it
  absl::Time remembered = absl::UnixEpoch();  // when (the epoch: not known)
  // The input: dense (`indices` empty, `values` holds dim entries) or sparse (both the
  // same length, indices strictly increasing).
  bool sparse = false;
  std::vector<uint32_t> indices = {};
  std::vector<double> values = {};

  friend bool operator==(const RememberedEvent&, const RememberedEvent&) = default;
};

enum class EventState : uint8_t {
  kPending = 1,   // awaiting its label
  kLabelled = 2,  // labelled (its input dropped); remembered until it would have expired,
                  // so that a repeated label is known as a duplicate
};

struct StoredEvent {
  EventState state = EventState::kPending;
  RememberedEvent event = {};

  friend bool operator==(const StoredEvent&, const StoredEvent&) = default;
};

// A model's event counters, stored with every change to its events.
struct EventCounts {
  uint64_t pending = 0;     // remembered, awaiting a label
  uint64_t applied = 0;     // labels applied
  uint64_t expired = 0;     // waits that ended without a label (default applied or not)
  uint64_t duplicates = 0;  // labels for events labelled before
  // The served loss: sum over applied labels of loss(y, the prediction served), and how
  // many.
  double served_loss = 0;
  uint64_t served_labels = 0;
  // What the model's stored events (pending and labelled) take: the sum of their
  // StoredEventBytes. The tenant's --max_event_bytes_per_tenant counts it.
  uint64_t stored_bytes = 0;

  friend bool operator==(const EventCounts&, const EventCounts&) = default;
};

// The events a batch's log record changes, written in the same atomic write as the record
// (ModelEntry::ObserveBatch's note, ModelLog::Append):
class EventNote final : public JournalNote {
 public:
  // The model's counters after the batch.
  EventCounts counts;
  // Pending events the batch labels: stored as labelled, without their inputs.
  std::vector<StoredEvent> labelled;
  // Events removed with their index entries (an expired event whose default label the
  // batch applies).
  std::vector<StoredEvent> forgotten;
};

// The id the server makes for an event that expires at `expires`: the expiry (µs since
// the epoch, 16 hex digits), the book's random `prefix` (16), and the book's `counter`
// (1 to 16): 33 to 48 lowercase hexadecimal digits, distinct in a book by its counter.
// (The first form of server-made ids, 32 digits, names no expiry: its events are kept as
// a caller's id's are.)
std::string ServerEventId(absl::Time expires, uint64_t prefix, uint64_t counter);
// The expiry an id names if it has ServerEventId's form, else nullopt. (A caller may
// choose such an id: it names an expiry all the same, which is only a place to look.)
std::optional<absl::Time> ServerEventIdExpiry(absl::string_view id);
// Whether `event`'s record is kept at its expiry index key (its id names its expiry),
// rather than at EventKey beside an empty index entry.
bool KeptAtExpiryKey(const RememberedEvent& event);

// The store's keys and record of an event (the layout above).
std::string EventKey(uint64_t incarnation, absl::string_view id);
std::string EventExpiryKey(uint64_t incarnation, absl::Time expires, absl::string_view id);
// Where `event`'s record is: its expiry key if KeptAtExpiryKey, else its EventKey.
std::string EventRecordKey(uint64_t incarnation, const RememberedEvent& event);
// Adds to `batch` the keys that store `event` in `state`: its record, and its empty index
// entry unless the record is kept at that entry's key.
void PutEvent(uint64_t incarnation, EventState state, const RememberedEvent& event,
              rocksdb::WriteBatch* batch);
// Adds to `batch` the deletion of every key of `event`.
void DeleteEvent(uint64_t incarnation, const RememberedEvent& event,
                 rocksdb::WriteBatch* batch);
std::string EventCountsKey(uint64_t incarnation);
// Counts: pending, applied, expired, duplicates, served_labels (u64), served_loss (raw
// double), stored_bytes (u64): 56 bytes. The record's first version, 48 bytes, ends before
// stored_bytes, which it reads as 0; any other length is DataLoss.
std::string EncodeEventCounts(const EventCounts& counts);
absl::StatusOr<EventCounts> DecodeEventCounts(absl::string_view value);
// The expiry index of an incarnation lies in [EventExpiryBegin, EventExpiryKey(inc, t, ""))
// for the events that expire before t.
std::string EventExpiryBegin(uint64_t incarnation);
// An expiry index key, "<begin><expiry, 16 hex>/<id>", taken apart; `id` points into the
// key.
struct ExpiryIndexKey {
  absl::Time expires;
  absl::string_view id;
};
// DataLoss if `key`, an index key under `begin` (EventExpiryBegin, or "" for a key with
// that prefix removed), is not of that form.
absl::StatusOr<ExpiryIndexKey> ParseExpiryIndexKey(absl::string_view key,
                                                   absl::string_view begin);

// Record: state (u8), expires (i64 µs since the epoch), has default (u8), default label,
// prediction (raw doubles), sparse (u8), n (u32), then n indices (u32, sparse only) and
// n values (raw doubles), then when it was remembered (i64 µs): 39 bytes and the input.
// The record's first version, 31 bytes and the input, ends before the remembered time,
// which it reads as the epoch (not known); the decoder tells the two apart by what is left
// after the n values: 8 bytes or none. A labelled event keeps no input. No checksum of its
// own: RocksDB checksums its log records and table blocks.
std::string EncodeEvent(EventState state, const RememberedEvent& event);
// DataLoss naming the event if `value` is not a record EncodeEvent wrote.
absl::StatusOr<StoredEvent> DecodeEvent(absl::string_view id, absl::string_view value);

// The bytes `event` takes in the store in `state`: its keys (one if KeptAtExpiryKey, else
// two) and its record (a labelled event's record keeps no input). Events kept in memory are
// counted the same, so that a tenant's event quota means one thing whatever holds its models.
uint64_t StoredEventBytes(EventState state, const RememberedEvent& event);

}  // namespace okl

#endif  // OKL_SERVER_EVENTS_MODEL_EVENTS_H_
