// server/events/model_events.cc

#include "server/events/model_events.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "rocksdb/write_batch.h"

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

std::string IncarnationPrefix(uint64_t inc) { return absl::StrFormat("i/%016x/", inc); }

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

constexpr size_t kServerIdMinBytes = 16 + 16 + 1;
constexpr size_t kServerIdMaxBytes = 16 + 16 + 16;

}  // namespace

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

}  // namespace okl
