// proto/snapshot_codec.h
//
// The snapshot byte format: a serialized ModelSnapshot (proto/convert.h's ToProto of a
// ModelState) with a trailing checksum, what Snapshot streams, Restore takes and the
// store keeps; its size bounds, and the config read from the first chunk. Every function
// is thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::string bytes, okl::EncodeSnapshot(model->ExportState()));
//   OKL_ASSIGN_OR_RETURN(okl::ModelState state, okl::DecodeSnapshot(bytes));
#ifndef OKL_PROTO_SNAPSHOT_CODEC_H_
#define OKL_PROTO_SNAPSHOT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config.h"
#include "core/model.h"
#include "okl/v1/okl.pb.h"

namespace okl {

// The size of the SnapshotChunks the server sends: the last may be shorter.
inline constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;

// FNV-1a, 64 bits: the snapshot's corruption check (see ModelSnapshot.checksum).
uint64_t Fnv1a64(absl::string_view bytes);

// Protobuf parses no message over 2 GiB - 1 bytes, so no snapshot may be longer.
inline constexpr size_t kMaxSnapshotBytes = 2147483647;

// The snapshot bytes of `state`: ToProto(state) serialized, then the checksum field
// (tag 0xA1 0x06 and FNV-1a 64 of the bytes before it, little-endian) appended.
// ResourceExhausted if they would exceed kMaxSnapshotBytes.
absl::StatusOr<std::string> EncodeSnapshot(const ModelState& state);

// Verifies the checksum of the model section of `bytes` (event pages after it are not
// read), parses the bytes before it as a ModelSnapshot
// and converts it with FromProto. DataLoss, saying which, if the bytes are too short, the
// checksum field is missing or does not match, the message does not parse, or
// FromProto rejects it. Whether the arrays are consistent is NormaModel::FromState's
// check; a server reports its error as DataLoss too.
absl::StatusOr<ModelState> DecodeSnapshot(absl::string_view bytes);

// A snapshot's two sections: the model's (the ModelSnapshot fields of its state, ending
// in its checksum field) and then the pages of the model's remembered events
// (ModelSnapshot.event_pages), each a SnapshotEventPage with its own checksum.
struct SnapshotSections {
  absl::string_view model;
  std::vector<absl::string_view> event_pages;
};
// Splits snapshot bytes into their sections (views into `bytes`). Bytes that hold no
// checksum field are all `model` (DecodeSnapshot then says what is wrong); DataLoss if
// anything but whole event pages follows the checksum.
absl::StatusOr<SnapshotSections> SplitSnapshot(absl::string_view bytes);

// Events per page of a snapshot: a page of d = 16 inputs is ~0.7 MiB, under a chunk's
// 1 MiB.
inline constexpr size_t kEventsPerSnapshotPage = 4096;

// An upper bound on the bytes of the pages of `max_events` events of a model of `config`
// (ids of 128 bytes, sparse inputs of dim non-zeros). Saturates at SIZE_MAX.
size_t MaxEventPagesBytes(const ModelConfig& config, uint64_t max_events);

// a + b, or SIZE_MAX if that overflows.
inline size_t SaturatingAdd(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// One event page as it follows a snapshot's model section: `page` serialized with its
// checksum, as field 101 (tag and length). Snapshot bytes are the model section
// (EncodeSnapshot) followed by any number of these.
std::string FrameEventPage(const v1::SnapshotEventPage& page);
// One page's bytes (a SnapshotSections::event_pages entry), checked and parsed; DataLoss
// if its checksum does not match or it does not parse.
absl::StatusOr<v1::SnapshotEventPage> DecodeEventPage(absl::string_view page);

// An upper bound on the size of EncodeSnapshot(state) for any state of a model of
// `config` (a full expansion and regret window). Saturates at SIZE_MAX.
size_t MaxSnapshotBytes(const ModelConfig& config);

// The config at the start of snapshot bytes, read from a prefix of them: a Restore
// learns what it is about to install from its first chunk, and checks limits and quotas
// before buffering the rest. nullopt if `prefix` ends before the config does; DataLoss
// if the bytes do not start as a snapshot of this format (format_version, then config)
// or the config is invalid.
absl::StatusOr<std::optional<ModelConfig>> PeekSnapshotConfig(absl::string_view prefix);

}  // namespace okl

#endif  // OKL_PROTO_SNAPSHOT_CODEC_H_
