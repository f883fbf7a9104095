// server/store/event_log.cc

#include "server/store/event_log.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace okl {

EventLog::EventLog(std::shared_ptr<ModelLog> log)
    : log_(std::move(log)), incarnation_(log_->incarnation()) {}

rocksdb::DB* EventLog::db() const { return log_->store_->db_.get(); }

absl::Status EventLog::Remember(absl::Span<const RememberedEvent> events,
                                const EventCounts& counts, KnownIds known) {
  // The keys go in region by region (the caller ids' records, the expiry index, the
  // counts), each in the order the book made them: RocksDB's memtable then inserts a key
  // next to the one before instead of searching its skip list from the top, which
  // interleaved keys made a third of a remembering Predict's server time.
  rocksdb::WriteBatch batch;
  absl::flat_hash_set<absl::string_view> ids;
  for (const RememberedEvent& event : events) {
    // The book's own ids are distinct by construction.
    if (known == KnownIds::kLookUp && !ids.insert(event.id).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("event id \"", event.id, "\" is given twice in one request"));
    }
    if (!KeptAtExpiryKey(event)) {
      batch.Put(EventKey(incarnation_, event.id), EncodeEvent(EventState::kPending, event));
    }
  }
  for (const RememberedEvent& event : events) {
    batch.Put(EventExpiryKey(incarnation_, event.expires, event.id),
              KeptAtExpiryKey(event) ? EncodeEvent(EventState::kPending, event) : "");
  }
  batch.Put(EventCountsKey(incarnation_), EncodeEventCounts(counts));
  WriterLock remember_lock(&remember_mu_);
  for (const RememberedEvent& event : events) {
    if (known == KnownIds::kNoneCanBe) break;
    OKL_ASSIGN_OR_RETURN(std::optional<StoredEvent> stored, FindEvent(event.id));
    if (stored.has_value()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "event id \"", event.id, "\" is already remembered for this model: give each ",
          "prediction its own id, or leave event_ids empty and the server makes them"));
    }
  }
  return log_->WriteIfOpen(&batch);
}

absl::StatusOr<std::optional<std::string>> EventLog::ReadEventKey(
    absl::string_view id, const std::string& key) const {
  std::string value;
  const rocksdb::Status status = db()->Get(rocksdb::ReadOptions(), key, &value);
  if (status.IsNotFound()) return std::nullopt;
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read event \"", id, "\": ", status.ToString()));
  }
  return value;
}

absl::StatusOr<std::optional<StoredEvent>> EventLog::FindEvent(absl::string_view id) const {
  if (const std::optional<absl::Time> expires = ServerEventIdExpiry(id)) {
    OKL_ASSIGN_OR_RETURN(std::optional<std::string> value,
                         ReadEventKey(id, EventExpiryKey(incarnation_, *expires, id)));
    // Empty: an index entry, of a caller's id of this form whose record is at EventKey.
    if (value.has_value() && !value->empty()) return DecodeEvent(id, *value);
  }
  OKL_ASSIGN_OR_RETURN(std::optional<std::string> value,
                       ReadEventKey(id, EventKey(incarnation_, id)));
  if (!value.has_value()) return std::nullopt;
  return DecodeEvent(id, *value);
}

absl::StatusOr<EventCounts> EventLog::LoadCounts() const {
  std::string value;
  const rocksdb::Status status =
      db()->Get(rocksdb::ReadOptions(), EventCountsKey(incarnation_), &value);
  if (status.IsNotFound()) return EventCounts{};
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read the event counts: ", status.ToString()));
  }
  return DecodeEventCounts(value);
}

absl::StatusOr<std::optional<absl::Time>> EventLog::NextExpiry() const {
  const std::string begin = EventExpiryBegin(incarnation_);
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions()));
  it->Seek(begin);
  if (!it->status().ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read its events: ", it->status().ToString()));
  }
  if (!it->Valid() || !it->key().starts_with(begin)) return std::nullopt;
  OKL_ASSIGN_OR_RETURN(
      const ExpiryIndexKey key,
      ParseExpiryIndexKey(absl::string_view(it->key().data(), it->key().size()), begin));
  return key.expires;
}

absl::StatusOr<std::vector<StoredEvent>> EventLog::DueEvents(absl::Time now,
                                                             size_t max) const {
  const std::string begin = EventExpiryBegin(incarnation_);
  // Every index key of an event due at or before `now` sorts before this one.
  const std::string end = EventExpiryKey(incarnation_, now + absl::Microseconds(1), "");
  rocksdb::ReadOptions read;
  const rocksdb::Slice upper(end);
  read.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(read));
  std::vector<StoredEvent> due;
  for (it->Seek(begin); it->Valid() && due.size() < max; it->Next()) {
    OKL_ASSIGN_OR_RETURN(
        const ExpiryIndexKey key,
        ParseExpiryIndexKey(absl::string_view(it->key().data(), it->key().size()), begin));
    const absl::string_view id = key.id;
    const absl::string_view value(it->value().data(), it->value().size());
    if (!value.empty()) {  // the record itself
      OKL_ASSIGN_OR_RETURN(StoredEvent stored, DecodeEvent(id, value));
      due.push_back(std::move(stored));
      continue;
    }
    OKL_ASSIGN_OR_RETURN(std::optional<std::string> record,
                         ReadEventKey(id, EventKey(incarnation_, id)));
    if (!record.has_value()) {
      return absl::DataLossError(absl::StrCat("the expiry index names event \"", id,
                                              "\", which is not stored"));
    }
    OKL_ASSIGN_OR_RETURN(StoredEvent stored, DecodeEvent(id, *record));
    due.push_back(std::move(stored));
  }
  if (!it->status().ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read its events: ", it->status().ToString()));
  }
  return due;
}

namespace {

// The events of an incarnation as a RocksDB snapshot holds them, in id order: the records
// at EventKey and those at expiry keys, merged. The latter are in id order too, since the
// key is the id's expiry and then the id, and the id begins with that expiry.
class StoredEventCursor final : public EventCursor {
 public:
  StoredEventCursor(rocksdb::DB* db, uint64_t incarnation)
      : db_(db),
        snapshot_(db->GetSnapshot()),
        at_event_key_(db, snapshot_, EventKey(incarnation, "")),
        at_expiry_key_(db, snapshot_, EventExpiryBegin(incarnation)) {}
  ~StoredEventCursor() override {
    at_event_key_.it.reset();
    at_expiry_key_.it.reset();
    db_->ReleaseSnapshot(snapshot_);
  }

  absl::StatusOr<std::vector<StoredEvent>> Next(size_t max) override {
    std::vector<StoredEvent> page;
    while (page.size() < max) {
      // Past the index entries of events whose records are at EventKey.
      while (at_expiry_key_.it->Valid() && at_expiry_key_.it->value().empty()) {
        at_expiry_key_.it->Next();
      }
      const bool event_key = at_event_key_.it->Valid();
      const bool expiry_key = at_expiry_key_.it->Valid();
      if (!event_key && !expiry_key) break;
      // "<begin><id>" and "<begin><16 hex>/<id>"
      const absl::string_view event_id = event_key ? at_event_key_.Key() : "";
      absl::string_view expiry_id;
      if (expiry_key) {
        OKL_ASSIGN_OR_RETURN(const ExpiryIndexKey key,
                             ParseExpiryIndexKey(at_expiry_key_.Key(), ""));
        expiry_id = key.id;
      }
      Region& from =
          !event_key || (expiry_key && expiry_id <= event_id) ? at_expiry_key_ : at_event_key_;
      const absl::string_view id = &from == &at_expiry_key_ ? expiry_id : event_id;
      OKL_ASSIGN_OR_RETURN(
          StoredEvent stored,
          DecodeEvent(id, absl::string_view(from.it->value().data(), from.it->value().size())));
      page.push_back(std::move(stored));
      // One id at both (a caller's id of the server's form, remembered before its record
      // moved): FindEvent reads the expiry key's, and so does a snapshot.
      if (event_key && expiry_key && event_id == expiry_id) at_event_key_.it->Next();
      from.it->Next();
    }
    for (const Region* region : {&at_event_key_, &at_expiry_key_}) {
      if (!region->it->status().ok()) {
        return absl::UnavailableError(absl::StrCat("the model store cannot read its events: ",
                                                   region->it->status().ToString()));
      }
    }
    return page;
  }

 private:
  // The keys that begin with `begin`, read at the snapshot.
  struct Region {
    Region(rocksdb::DB* db, const rocksdb::Snapshot* snapshot, std::string begin_key)
        : begin(std::move(begin_key)),
          // Every key "<...>/e/<id>" sorts before "<...>/e0" ('0' follows '/').
          end(begin.substr(0, begin.size() - 1) + "0"),
          upper(end) {
      rocksdb::ReadOptions read;
      read.snapshot = snapshot;
      read.iterate_upper_bound = &upper;
      it.reset(db->NewIterator(read));
      it->Seek(begin);
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

    // The current key past `begin`.
    absl::string_view Key() const {
      const absl::string_view key(it->key().data(), it->key().size());
      return key.substr(std::min(key.size(), begin.size()));
    }

    const std::string begin;
    const std::string end;
    const rocksdb::Slice upper;
    std::unique_ptr<rocksdb::Iterator> it;
  };

  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
  Region at_event_key_;
  Region at_expiry_key_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EventCursor>> EventLog::CaptureEvents() const {
  return std::make_unique<StoredEventCursor>(db(), incarnation_);
}

absl::Status EventLog::ForgetEvents(absl::Span<const StoredEvent> events,
                                    const EventCounts& counts) {
  rocksdb::WriteBatch batch;
  batch.Put(EventCountsKey(incarnation_), EncodeEventCounts(counts));
  for (const StoredEvent& stored : events) DeleteEvent(incarnation_, stored.event, &batch);
  return log_->WriteIfOpen(&batch);
}

}  // namespace okl
