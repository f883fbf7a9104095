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

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config.h"
#include "core/model.h"

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

// Verifies the trailing checksum of `bytes`, parses the bytes before it as a ModelSnapshot
// and converts it with FromProto. DataLoss, saying which, if the bytes are too short, the
// checksum field is missing or does not match, the message does not parse, or
// FromProto rejects it. Whether the arrays are consistent is NormaModel::FromState's
// check; a server reports its error as DataLoss too.
absl::StatusOr<ModelState> DecodeSnapshot(absl::string_view bytes);

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
