// server/events/event_snapshot.cc

#include "server/events/event_snapshot.h"

#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/sparse_vector.h"
#include "core/status_macros.h"
#include "okl/v1/okl.pb.h"
#include "proto/snapshot_codec.h"

namespace okl {

namespace {

void ToProto(const StoredEvent& stored, v1::SnapshotEvent* proto) {
  const RememberedEvent& event = stored.event;
  proto->set_event_id(event.id);
  proto->set_labelled(stored.state == EventState::kLabelled);
  proto->set_expires_unix_micros(absl::ToUnixMicros(event.expires));
  if (event.default_label.has_value()) proto->set_default_label(*event.default_label);
  proto->set_prediction(event.prediction);
  if (event.remembered != absl::UnixEpoch()) {
    proto->set_remembered_unix_micros(absl::ToUnixMicros(event.remembered));
  }
  if (stored.state == EventState::kLabelled) return;  // its input was dropped
  proto->set_sparse(event.sparse);
  proto->mutable_indices()->Add(event.indices.begin(), event.indices.end());
  proto->mutable_values()->Add(event.values.begin(), event.values.end());
}

// The event, checked against the model's config; `where` names it in an error.
absl::StatusOr<StoredEvent> FromProto(const v1::SnapshotEvent& proto, const ModelConfig& config,
                                      const std::string& where) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(where, " (\"", proto.event_id(), "\"): ", what));
  };
  if (absl::Status id = ValidateEventId(proto.event_id()); !id.ok()) return bad(id.message());
  StoredEvent stored;
  stored.state = proto.labelled() ? EventState::kLabelled : EventState::kPending;
  RememberedEvent& event = stored.event;
  event.id = proto.event_id();
  event.expires = absl::FromUnixMicros(proto.expires_unix_micros());
  if (proto.has_default_label()) {
    if (!std::isfinite(proto.default_label())) return bad("its default label is not finite");
    event.default_label = proto.default_label();
  }
  event.prediction = proto.prediction();
  event.remembered = absl::FromUnixMicros(proto.remembered_unix_micros());
  if (proto.labelled()) {
    if (proto.values_size() > 0 || proto.indices_size() > 0) {
      return bad("a labelled event holds an input");
    }
    return stored;
  }
  event.sparse = proto.sparse();
  event.indices.assign(proto.indices().begin(), proto.indices().end());
  event.values.assign(proto.values().begin(), proto.values().end());
  if (event.sparse) {
    // Checked as a request's sparse input is (any number of non-zeros up to dim).
    const absl::Status valid =
        ValidateSparseVector("its sparse input", SparseVectorView{event.indices, event.values},
                             config.dim, config.dim);
    if (!valid.ok()) return bad(valid.message());
    return stored;
  }
  if (!event.indices.empty() || event.values.size() != config.dim) {
    return bad(absl::StrCat("its input has ", event.values.size(),
                            " values; the model's dim is ", config.dim));
  }
  for (double value : event.values) {
    if (!std::isfinite(value)) return bad("its input holds a value that is not finite");
  }
  return stored;
}

}  // namespace

std::string EncodeEventPage(const EventCounts* counts, absl::Span<const StoredEvent> events) {
  v1::SnapshotEventPage page;
  if (counts != nullptr) {
    v1::SnapshotEventCounts* proto = page.mutable_counts();
    proto->set_applied(counts->applied);
    proto->set_expired(counts->expired);
    proto->set_duplicates(counts->duplicates);
    proto->set_served_loss(counts->served_loss);
    proto->set_served_labels(counts->served_labels);
  }
  page.mutable_events()->Reserve(static_cast<int>(events.size()));
  for (const StoredEvent& event : events) ToProto(event, page.add_events());
  return FrameEventPage(page);
}

absl::StatusOr<SnapshotEvents> DecodeEventPages(absl::Span<const absl::string_view> pages,
                                                const ModelConfig& config) {
  SnapshotEvents decoded;
  absl::flat_hash_set<std::string> ids;
  for (size_t p = 0; p < pages.size(); ++p) {
    absl::StatusOr<v1::SnapshotEventPage> page = DecodeEventPage(pages[p]);
    if (!page.ok()) {
      return absl::DataLossError(
          absl::StrCat("the snapshot's event page ", p + 1, ": ", page.status().message()));
    }
    if (page->has_counts()) {
      if (p != 0) {
        return absl::DataLossError(absl::StrCat("the snapshot's event page ", p + 1,
                                                " holds counts; only the first has them"));
      }
      const v1::SnapshotEventCounts& counts = page->counts();
      decoded.counts.applied = counts.applied();
      decoded.counts.expired = counts.expired();
      decoded.counts.duplicates = counts.duplicates();
      decoded.counts.served_loss = counts.served_loss();
      decoded.counts.served_labels = counts.served_labels();
    }
    for (int i = 0; i < page->events_size(); ++i) {
      OKL_ASSIGN_OR_RETURN(
          StoredEvent event,
          FromProto(page->events(i), config,
                    absl::StrCat("the snapshot's event page ", p + 1, ", event ", i + 1)));
      if (!ids.insert(event.event.id).second) {
        return absl::DataLossError(
            absl::StrCat("the snapshot holds event \"", event.event.id, "\" twice"));
      }
      if (event.state == EventState::kPending) ++decoded.counts.pending;
      decoded.counts.stored_bytes += StoredEventBytes(event.state, event.event);
      decoded.events.push_back(std::move(event));
    }
  }
  return decoded;
}

}  // namespace okl
