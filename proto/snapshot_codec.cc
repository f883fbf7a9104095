// proto/snapshot_codec.cc

#include "proto/snapshot_codec.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/select.h"
#include "core/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/convert.h"

namespace okl {

namespace {

// The checksum field's tag: field 100, wire type 1 (64-bit), as a varint.
constexpr char kChecksumTag[2] = {static_cast<char>(0xA1), static_cast<char>(0x06)};
constexpr size_t kChecksumFieldBytes = sizeof(kChecksumTag) + sizeof(uint64_t);

}  // namespace

uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325u;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3u;
  }
  return hash;
}

absl::StatusOr<std::string> EncodeSnapshot(const ModelState& state) {
  const v1::ModelSnapshot proto = ToProto(state);
  const size_t size = proto.ByteSizeLong();
  if (size + kChecksumFieldBytes > kMaxSnapshotBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the model's snapshot would take ", size + kChecksumFieldBytes,
                     " bytes, over protobuf's limit of ", kMaxSnapshotBytes,
                     "; a model with a smaller budget or dim can be snapshotted"));
  }
  std::string bytes;
  bytes.reserve(size + kChecksumFieldBytes);
  if (!proto.AppendToString(&bytes)) {
    return absl::InternalError("serializing the snapshot failed");
  }
  const uint64_t checksum = Fnv1a64(bytes);
  bytes.append(kChecksumTag, sizeof(kChecksumTag));
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(checksum >> (8 * i)));
  return bytes;
}

absl::StatusOr<ModelState> DecodeSnapshot(absl::string_view bytes) {
  if (bytes.size() < kChecksumFieldBytes) {
    return absl::DataLossError(
        absl::StrCat("snapshot is ", bytes.size(), " bytes, too short to be one (truncated?)"));
  }
  if (bytes.size() > kMaxSnapshotBytes) {
    return absl::DataLossError(absl::StrCat("snapshot is ", bytes.size(),
                                            " bytes, over the limit of ", kMaxSnapshotBytes));
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - kChecksumFieldBytes);
  const absl::string_view trailer = bytes.substr(body.size());
  if (trailer.substr(0, sizeof(kChecksumTag)) !=
      absl::string_view(kChecksumTag, sizeof(kChecksumTag))) {
    return absl::DataLossError(
        "snapshot does not end in its checksum field (truncated, or not a snapshot)");
  }
  uint64_t expected = 0;
  for (int i = 0; i < 8; ++i) {
    expected |= uint64_t{static_cast<unsigned char>(trailer[sizeof(kChecksumTag) + i])}
                << (8 * i);
  }
  const uint64_t actual = Fnv1a64(body);
  if (actual != expected) {
    return absl::DataLossError(absl::StrCat("snapshot checksum mismatch: the bytes hash to ",
                                            absl::Hex(actual), ", the snapshot says ",
                                            absl::Hex(expected), " (corrupted in transit?)"));
  }
  // Protobuf merges a repeated message field, so a second config would silently change
  // the first, which PeekSnapshotConfig read (and a Restore checked its limits against).
  {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(body.data()),
                                              static_cast<int>(body.size()));
    int configs = 0;
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
      if (tag == ((2 << 3) | 2)) ++configs;
      if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) break;
    }
    if (configs > 1) {
      return absl::DataLossError(
          absl::StrCat("snapshot holds ", configs, " config fields; a snapshot has one"));
    }
  }
  v1::ModelSnapshot proto;
  if (!proto.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::DataLossError("snapshot bytes do not parse as okl.v1.ModelSnapshot");
  }
  absl::StatusOr<ModelState> state = FromProto(proto);
  if (!state.ok()) {
    return absl::DataLossError(absl::StrCat("snapshot: ", state.status().message()));
  }
  return state;
}

size_t MaxSnapshotBytes(const ModelConfig& config) {
  // The packed fields' tags and lengths, the scalars, the config and the checksum fit in
  // the fixed part.
  constexpr uint64_t kFixedBytes = 4096;
  if (config.select_kind()) {
    // The live candidates' nested snapshots (the largest that can be live together, each
    // with its tag and length), a record per candidate (nine fields of at most 11 bytes,
    // its tag and length), its config in the outer one, and the warm-up examples.
    std::vector<size_t> nested;
    const std::vector<ModelConfig> candidates = CandidateConfigs(config, 1.0);
    for (const ModelConfig& candidate : candidates) {
      const size_t bytes = MaxSnapshotBytes(candidate);
      if (bytes == SIZE_MAX) return SIZE_MAX;
      nested.push_back(bytes + 16);
    }
    std::sort(nested.rbegin(), nested.rend());
    uint64_t total = kFixedBytes;
    for (size_t i = 0; i < std::min(nested.size(), LiveCandidates(config)); ++i)
      total += nested[i];
    for (const ModelConfig& candidate : candidates) {
      total += 9 * 11 + 4 + CanonicalConfigBytes(candidate).size() + 4;
    }
    total += kScaleExamples * (uint64_t{config.dim} + 1) * sizeof(double);
    return total;
  }
  const uint64_t dim = config.dim;
  const uint64_t window_bytes = uint64_t{config.regret_window} * (dim + 2) * sizeof(double);
  const std::optional<ModelCapacity> capacity = LargestState(config);
  if (!capacity.has_value()) return SIZE_MAX;
  // Random features: the weights and, averaged, their sums. Per term: the support (dim
  // doubles), the coefficient, added_at (a varint of at most 10 bytes) and, averaged,
  // three more doubles; per retired term, its support, two sums and retired_at.
  // Under sparse storage a term's support is at most max_nonzeros indices (varints of at
  // most 5 bytes) and values, and its row's end (a varint of at most 10 bytes).
  const uint64_t per_feature = sizeof(double) * (config.averaged ? 2 : 1);
  const uint64_t support_bytes =
      config.sparse_storage() ? uint64_t{config.sparse.max_nonzeros} * (5 + sizeof(double)) + 10
                              : dim * sizeof(double);
  const uint64_t per_term = support_bytes + sizeof(double) + 10 + (config.averaged ? 24 : 0);
  const uint64_t per_retired = support_bytes + 2 * sizeof(double) + 10;
  // A KRLS tracker: per basis its support, mean and coefficient, and its rows of the two
  // or three packed triangles.
  const uint64_t bases = capacity->bases;
  const uint64_t matrices = config.krls_tracker.forgetting < 1 ? 3 : 2;
  const uint64_t tracker_bytes =
      sizeof(double) * (bases * (dim + 2) + matrices * bases * (bases + 1) / 2);
  return kFixedBytes + capacity->features * per_feature + capacity->terms * per_term +
         capacity->retired_terms * per_retired + window_bytes + tracker_bytes;
}

absl::StatusOr<std::optional<ModelConfig>> PeekSnapshotConfig(absl::string_view prefix) {
  // Protobuf writes known fields in field-number order, so a snapshot's bytes start with
  // format_version (field 1, varint) and then config (field 2, length-delimited).
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(prefix.data()),
                                            static_cast<int>(prefix.size()));
  constexpr uint32_t kVersionTag = (1 << 3) | 0;
  constexpr uint32_t kConfigTag = (2 << 3) | 2;
  uint32_t tag = in.ReadTag();
  if (tag == 0) {
    if (prefix.size() < 16) return std::nullopt;
    return absl::DataLossError("the snapshot bytes do not start with a field");
  }
  if (tag != kVersionTag) {
    return absl::DataLossError(
        "the snapshot bytes do not start with format_version (not a snapshot?)");
  }
  uint32_t version = 0;
  if (!in.ReadVarint32(&version)) return std::nullopt;
  if (version < kOldestSnapshotFormatVersion || version > kSnapshotFormatVersion) {
    return absl::DataLossError(absl::StrCat(
        "snapshot format_version ", version, " is not supported (this build reads versions ",
        kOldestSnapshotFormatVersion, " to ", kSnapshotFormatVersion, ")"));
  }
  tag = in.ReadTag();
  if (tag == 0) return std::nullopt;
  if (tag != kConfigTag) {
    return absl::DataLossError("the snapshot has no config after its format_version");
  }
  uint32_t length = 0;
  if (!in.ReadVarint32(&length)) return std::nullopt;
  if (static_cast<size_t>(in.CurrentPosition()) + length > prefix.size()) return std::nullopt;
  v1::ModelConfig proto;
  if (!proto.ParseFromArray(prefix.data() + in.CurrentPosition(), static_cast<int>(length))) {
    return absl::DataLossError("the snapshot's config does not parse");
  }
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  if (!config.ok()) {
    return absl::DataLossError(absl::StrCat("snapshot config: ", config.status().message()));
  }
  return std::optional<ModelConfig>(*std::move(config));
}

}  // namespace okl
