// server/events/event_snapshot.h
//
// A model's remembered events in its snapshot (ModelSnapshot.event_pages): the pages a
// Snapshot streams after the model's section, and the events and counts a Restore reads
// back from them, checked against the model's config before anything is installed.
#ifndef OKL_SERVER_EVENTS_EVENT_SNAPSHOT_H_
#define OKL_SERVER_EVENTS_EVENT_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "server/events/model_events.h"

namespace okl {

// One page, framed to follow the model's section (FrameEventPage): `counts` goes in the
// first page only (null in the others).
std::string EncodeEventPage(const EventCounts* counts, absl::Span<const StoredEvent> events);

// What the pages of a snapshot hold.
struct SnapshotEvents {
  EventCounts counts;  // pending: the pending events among `events`
  std::vector<StoredEvent> events;
};

// Every page of a snapshot (SnapshotSections::event_pages), decoded and checked: DataLoss
// naming the page and event if a page's checksum fails or it does not parse, an id is
// invalid or repeated, a pending event's input does not fit `config` (dim, sparse
// indices) or holds a value that is not finite, or a labelled one holds an input.
absl::StatusOr<SnapshotEvents> DecodeEventPages(absl::Span<const absl::string_view> pages,
                                                const ModelConfig& config);

}  // namespace okl

#endif  // OKL_SERVER_EVENTS_EVENT_SNAPSHOT_H_
