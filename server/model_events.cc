// server/model_events.cc

#include "server/model_events.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "server/model_store.h"

namespace okl {
namespace {

template <typename T>
void Put(const T& value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

// Reads a T from the front of `in`; false if it is too short.
template <typename T>
bool Take(absl::string_view* in, T* value) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(value, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

bool IsEventIdChar(char c) {
  return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' || c == '-';
}

}  // namespace

absl::Status ValidateEventId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("an event id is empty: give 1 to 128 bytes");
  if (id.size() > kMaxEventIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("event id \"", id.substr(0, 16), "...\" is ",
                                                   id.size(), " bytes: at most ",
                                                   kMaxEventIdBytes, " are accepted"));
  }
  for (char c : id) {
    if (!IsEventIdChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("event id \"", absl::CHexEscape(id),
                       "\" has a character outside [A-Za-z0-9._:-]"));
    }
  }
  return absl::OkStatus();
}

namespace {

// An expiry as the index keys and the server's ids write it. Times before the epoch sort
// as 0: an event is never remembered with one.
uint64_t ExpiryMicros(absl::Time expires) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMicros(expires)));
}

// The time 16 hex digits of µs since the epoch name (ExpiryMicros's form); nullopt if
// they are not such digits.
std::optional<absl::Time> ParseExpiryHex(absl::string_view hex) {
  uint64_t micros = 0;
  if (hex.size() != 16 || !absl::SimpleHexAtoi(hex, &micros) ||
      micros > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return absl::FromUnixMicros(static_cast<int64_t>(micros));
}

// An expiry index key, "<EventExpiryBegin><expiry, 16 hex>/<id>", taken apart.
struct ExpiryIndexKey {
  absl::Time expires;
  absl::string_view id;
};

// DataLoss if `key`, an index key under `begin`, is not of that form.
absl::StatusOr<ExpiryIndexKey> ParseExpiryIndexKey(absl::string_view key,
                                                   absl::string_view begin) {
  const absl::string_view rest = key.substr(std::min(key.size(), begin.size()));
  const std::optional<absl::Time> expires = ParseExpiryHex(rest.substr(0, 16));
  if (!expires.has_value() || rest.size() < 17 || rest[16] != '/') {
    return absl::DataLossError(
        absl::StrCat("the expiry index holds a bad key \"", absl::CHexEscape(key), "\""));
  }
  return ExpiryIndexKey{*expires, rest.substr(17)};
}

constexpr size_t kServerIdMinBytes = 16 + 16 + 1;
constexpr size_t kServerIdMaxBytes = 16 + 16 + 16;

}  // namespace

std::string ServerEventId(absl::Time expires, uint64_t prefix, uint64_t counter) {
  return absl::StrFormat("%016x%016x%x", ExpiryMicros(expires), prefix, counter);
}

std::optional<absl::Time> ServerEventIdExpiry(absl::string_view id) {
  if (id.size() < kServerIdMinBytes || id.size() > kServerIdMaxBytes) return std::nullopt;
  for (char c : id) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return std::nullopt;
  }
  return ParseExpiryHex(id.substr(0, 16));
}

bool KeptAtExpiryKey(const RememberedEvent& event) {
  const std::optional<absl::Time> named = ServerEventIdExpiry(event.id);
  return named.has_value() && ExpiryMicros(*named) == ExpiryMicros(event.expires);
}

std::string EventKey(uint64_t incarnation, absl::string_view id) {
  return absl::StrCat(IncarnationPrefix(incarnation), "e/", id);
}

std::string EventExpiryKey(uint64_t incarnation, absl::Time expires, absl::string_view id) {
  return absl::StrCat(IncarnationPrefix(incarnation), "x/",
                      absl::StrFormat("%016x", ExpiryMicros(expires)), "/", id);
}

std::string EventRecordKey(uint64_t incarnation, const RememberedEvent& event) {
  return KeptAtExpiryKey(event) ? EventExpiryKey(incarnation, event.expires, event.id)
                                : EventKey(incarnation, event.id);
}

void PutEvent(uint64_t incarnation, EventState state, const RememberedEvent& event,
              rocksdb::WriteBatch* batch) {
  const std::string expiry_key = EventExpiryKey(incarnation, event.expires, event.id);
  if (KeptAtExpiryKey(event)) {
    batch->Put(expiry_key, EncodeEvent(state, event));
    return;
  }
  batch->Put(EventKey(incarnation, event.id), EncodeEvent(state, event));
  batch->Put(expiry_key, "");
}

void DeleteEvent(uint64_t incarnation, const RememberedEvent& event,
                 rocksdb::WriteBatch* batch) {
  batch->Delete(EventExpiryKey(incarnation, event.expires, event.id));
  if (!KeptAtExpiryKey(event)) batch->Delete(EventKey(incarnation, event.id));
}

std::string EventCountsKey(uint64_t incarnation) {
  return absl::StrCat(IncarnationPrefix(incarnation), "n");
}

std::string EncodeEventCounts(const EventCounts& counts) {
  std::string value;
  for (uint64_t n : {counts.pending, counts.applied, counts.expired, counts.duplicates,
                     counts.served_labels}) {
    Put(n, &value);
  }
  Put(counts.served_loss, &value);
  Put(counts.stored_bytes, &value);
  return value;
}

absl::StatusOr<EventCounts> DecodeEventCounts(absl::string_view value) {
  EventCounts counts;
  if (!Take(&value, &counts.pending) || !Take(&value, &counts.applied) ||
      !Take(&value, &counts.expired) || !Take(&value, &counts.duplicates) ||
      !Take(&value, &counts.served_labels) || !Take(&value, &counts.served_loss) ||
      (!value.empty() && !Take(&value, &counts.stored_bytes)) || !value.empty()) {
    return absl::DataLossError("the model's event counts are damaged");
  }
  return counts;
}

std::string EventExpiryBegin(uint64_t incarnation) {
  return absl::StrCat(IncarnationPrefix(incarnation), "x/");
}

namespace {

// An event record's fixed part: state, expires, has default, default, prediction, sparse,
// n, remembered.
constexpr size_t kEventRecordFixedBytes = 1 + 8 + 1 + 8 + 8 + 1 + 4 + 8;

// The values (and, if sparse, indices) an event's record keeps in `state`.
uint32_t KeptInputSize(EventState state, const RememberedEvent& event) {
  return state == EventState::kPending ? static_cast<uint32_t>(event.values.size()) : 0;
}

size_t InputBytes(uint32_t n, bool sparse) { return size_t{n} * (sparse ? 12 : 8); }

}  // namespace

uint64_t StoredEventBytes(EventState state, const RememberedEvent& event) {
  // "i/<16>/x/<16>/<id>" and, unless the record is kept there, "i/<16>/e/<id>", as
  // EventExpiryKey and EventKey make them.
  constexpr size_t kExpiryKeyFixedBytes = 2 + 16 + 3 + 16 + 1;
  constexpr size_t kEventKeyFixedBytes = 2 + 16 + 3;
  const size_t keys = KeptAtExpiryKey(event)
                          ? kExpiryKeyFixedBytes + event.id.size()
                          : kExpiryKeyFixedBytes + kEventKeyFixedBytes + 2 * event.id.size();
  return keys + kEventRecordFixedBytes + InputBytes(KeptInputSize(state, event), event.sparse);
}

std::string EncodeEvent(EventState state, const RememberedEvent& event) {
  const uint32_t n = KeptInputSize(state, event);
  std::string value;
  value.reserve(kEventRecordFixedBytes + InputBytes(n, event.sparse));
  Put(static_cast<uint8_t>(state), &value);
  Put(absl::ToUnixMicros(event.expires), &value);
  Put(static_cast<uint8_t>(event.default_label.has_value()), &value);
  Put(event.default_label.value_or(0.0), &value);
  Put(event.prediction, &value);
  Put(static_cast<uint8_t>(event.sparse), &value);
  Put(n, &value);
  if (n > 0 && event.sparse) {
    value.append(reinterpret_cast<const char*>(event.indices.data()), 4 * size_t{n});
  }
  if (n > 0) value.append(reinterpret_cast<const char*>(event.values.data()), 8 * size_t{n});
  Put(absl::ToUnixMicros(event.remembered), &value);
  return value;
}

absl::StatusOr<StoredEvent> DecodeEvent(absl::string_view id, absl::string_view value) {
  auto damaged = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("remembered event \"", id, "\" is damaged: ", what));
  };
  StoredEvent out;
  out.event.id = std::string(id);
  uint8_t state = 0, has_default = 0, sparse = 0;
  int64_t micros = 0;
  double default_label = 0;
  uint32_t n = 0;
  if (!Take(&value, &state) || !Take(&value, &micros) || !Take(&value, &has_default) ||
      !Take(&value, &default_label) || !Take(&value, &out.event.prediction) ||
      !Take(&value, &sparse) || !Take(&value, &n)) {
    return damaged("its record is truncated");
  }
  if (state != static_cast<uint8_t>(EventState::kPending) &&
      state != static_cast<uint8_t>(EventState::kLabelled)) {
    return damaged(absl::StrCat("unknown state ", state));
  }
  out.state = static_cast<EventState>(state);
  out.event.expires = absl::FromUnixMicros(micros);
  if (has_default != 0) out.event.default_label = default_label;
  out.event.sparse = sparse != 0;
  const size_t expected = InputBytes(n, out.event.sparse);
  if (value.size() == expected + sizeof(int64_t)) {
    int64_t remembered = 0;
    absl::string_view trailer = value.substr(expected);
    Take(&trailer, &remembered);
    out.event.remembered = absl::FromUnixMicros(remembered);
    value = value.substr(0, expected);
  }
  if (value.size() != expected) {
    return damaged(absl::StrCat("its input holds ", value.size(), " bytes for ", n,
                                " values"));
  }
  if (out.state == EventState::kLabelled && n != 0) return damaged("a labelled event has an input");
  if (n == 0) return out;
  if (out.event.sparse) {
    out.event.indices.resize(n);
    std::memcpy(out.event.indices.data(), value.data(), 4 * size_t{n});
    value.remove_prefix(4 * size_t{n});
  }
  out.event.values.resize(n);
  std::memcpy(out.event.values.data(), value.data(), 8 * size_t{n});
  return out;
}

// --- ModelLog's events (declared in server/model_store.h) ----------------------------

absl::Status ModelLog::Remember(absl::Span<const RememberedEvent> events,
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
  // Under mu_ (shared), so a Delete or Restore of the model, which closes the log under
  // it, cannot leave these keys behind under the incarnation it removed.
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckOpen());
  return Write(&batch);
}

absl::StatusOr<std::optional<std::string>> ModelLog::ReadEventKey(
    absl::string_view id, const std::string& key) const {
  std::string value;
  const rocksdb::Status status = store_->db_->Get(rocksdb::ReadOptions(), key, &value);
  if (status.IsNotFound()) return std::nullopt;
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read event \"", id, "\": ", status.ToString()));
  }
  return value;
}

absl::StatusOr<std::optional<StoredEvent>> ModelLog::FindEvent(absl::string_view id) const {
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

absl::StatusOr<EventCounts> ModelLog::LoadCounts() const {
  std::string value;
  const rocksdb::Status status =
      store_->db_->Get(rocksdb::ReadOptions(), EventCountsKey(incarnation_), &value);
  if (status.IsNotFound()) return EventCounts{};
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the model store cannot read the event counts: ", status.ToString()));
  }
  return DecodeEventCounts(value);
}

absl::StatusOr<std::optional<absl::Time>> ModelLog::NextExpiry() const {
  const std::string begin = EventExpiryBegin(incarnation_);
  std::unique_ptr<rocksdb::Iterator> it(store_->db_->NewIterator(rocksdb::ReadOptions()));
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

absl::StatusOr<std::vector<StoredEvent>> ModelLog::DueEvents(absl::Time now,
                                                             size_t max) const {
  const std::string begin = EventExpiryBegin(incarnation_);
  // Every index key of an event due at or before `now` sorts before this one.
  const std::string end = EventExpiryKey(incarnation_, now + absl::Microseconds(1), "");
  rocksdb::ReadOptions read;
  const rocksdb::Slice upper(end);
  read.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(store_->db_->NewIterator(read));
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

absl::StatusOr<std::unique_ptr<EventCursor>> ModelLog::CaptureEvents() const {
  return std::make_unique<StoredEventCursor>(store_->db_.get(), incarnation_);
}

absl::Status ModelLog::ForgetEvents(absl::Span<const StoredEvent> events,
                                    const EventCounts& counts) {
  rocksdb::WriteBatch batch;
  batch.Put(EventCountsKey(incarnation_), EncodeEventCounts(counts));
  for (const StoredEvent& stored : events) DeleteEvent(incarnation_, stored.event, &batch);
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckOpen());
  return Write(&batch);
}

}  // namespace okl
