// proto/snapshot_codec.cc

#include "proto/snapshot_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/create_model.h"
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
constexpr uint32_t kChecksumFieldTag = (100 << 3) | 1;
constexpr size_t kChecksumFieldBytes = sizeof(kChecksumTag) + sizeof(uint64_t);
// ModelSnapshot.event_pages: field 101, length-delimited.
constexpr uint32_t kEventPageFieldTag = (101 << 3) | 2;

}  // namespace

uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325u;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3u;
  }
  return hash;
}

namespace {

// Appends the checksum field (tag 100, FNV-1a 64 of `bytes` so far) to serialized bytes.
void AppendChecksum(std::string* bytes) {
  const uint64_t checksum = Fnv1a64(*bytes);
  bytes->append(kChecksumTag, sizeof(kChecksumTag));
  for (int i = 0; i < 8; ++i) bytes->push_back(static_cast<char>(checksum >> (8 * i)));
}

// The bytes before the trailing checksum field of `bytes` (a snapshot's model section or
// an event page, named by `what`), once the checksum matches; DataLoss otherwise.
absl::StatusOr<absl::string_view> ChecksummedBody(absl::string_view bytes,
                                                  absl::string_view what) {
  if (bytes.size() < kChecksumFieldBytes) {
    return absl::DataLossError(
        absl::StrCat(what, " is ", bytes.size(), " bytes, too short to be one (truncated?)"));
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - kChecksumFieldBytes);
  const absl::string_view trailer = bytes.substr(body.size());
  if (trailer.substr(0, sizeof(kChecksumTag)) !=
      absl::string_view(kChecksumTag, sizeof(kChecksumTag))) {
    return absl::DataLossError(absl::StrCat(
        what, " does not end in its checksum field (truncated, or not a ", what, ")"));
  }
  uint64_t expected = 0;
  for (int i = 0; i < 8; ++i) {
    expected |= uint64_t{static_cast<unsigned char>(trailer[sizeof(kChecksumTag) + i])}
                << (8 * i);
  }
  const uint64_t actual = Fnv1a64(body);
  if (actual != expected) {
    return absl::DataLossError(absl::StrCat(what, " checksum mismatch: the bytes hash to ",
                                            absl::Hex(actual), ", the ", what, " says ",
                                            absl::Hex(expected), " (corrupted in transit?)"));
  }
  return body;
}

}  // namespace

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
  AppendChecksum(&bytes);
  return bytes;
}

absl::StatusOr<SnapshotSections> SplitSnapshot(absl::string_view bytes) {
  if (bytes.size() > kMaxSnapshotBytes) {
    return absl::DataLossError(absl::StrCat("snapshot is ", bytes.size(),
                                            " bytes, over the limit of ", kMaxSnapshotBytes));
  }
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  SnapshotSections sections;
  // The model's fields, up to and including its checksum (field 100, 64-bit).
  for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    if (tag == kChecksumFieldTag) {
      uint64_t ignored = 0;
      if (!in.ReadLittleEndian64(&ignored)) break;
      sections.model = bytes.substr(0, in.CurrentPosition());
      break;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  if (sections.model.empty()) {
    // Truncated, corrupted or not a snapshot: DecodeSnapshot says which.
    sections.model = bytes;
    return sections;
  }
  // Then event pages only (field 101, length-delimited).
  for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    uint32_t length = 0;
    if (tag != kEventPageFieldTag || !in.ReadVarint32(&length) ||
        length > bytes.size() - in.CurrentPosition()) {
      return absl::DataLossError(
          absl::StrCat("snapshot byte ", in.CurrentPosition(),
                       ": after the model's checksum a snapshot holds only event pages "
                       "(truncated or corrupted?)"));
    }
    sections.event_pages.push_back(bytes.substr(in.CurrentPosition(), length));
    if (!in.Skip(static_cast<int>(length))) break;
  }
  if (in.CurrentPosition() != static_cast<int>(bytes.size())) {
    return absl::DataLossError("a snapshot's event page is truncated");
  }
  return sections;
}

std::string FrameEventPage(const v1::SnapshotEventPage& page) {
  std::string body;
  page.AppendToString(&body);  // without its checksum: AppendChecksum adds it last
  AppendChecksum(&body);
  std::string framed;
  google::protobuf::io::StringOutputStream stream(&framed);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.WriteTag(kEventPageFieldTag);
  out.WriteVarint32(static_cast<uint32_t>(body.size()));
  out.WriteRaw(body.data(), static_cast<int>(body.size()));
  out.Trim();
  return framed;
}

absl::StatusOr<v1::SnapshotEventPage> DecodeEventPage(absl::string_view page) {
  OKL_ASSIGN_OR_RETURN(absl::string_view body, ChecksummedBody(page, "event page"));
  v1::SnapshotEventPage proto;
  if (!proto.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::DataLossError("a snapshot's event page does not parse");
  }
  return proto;
}

absl::StatusOr<ModelState> DecodeSnapshot(absl::string_view bytes) {
  OKL_ASSIGN_OR_RETURN(const SnapshotSections sections, SplitSnapshot(bytes));
  OKL_ASSIGN_OR_RETURN(const absl::string_view body,
                       ChecksummedBody(sections.model, "snapshot"));
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

size_t MaxEventPagesBytes(const ModelConfig& config, uint64_t max_events) {
  // Per event: its tag and length (6), the id (3 + 128), the two flags, two times,
  // default label and prediction (2 + 2 + 11 + 11 + 9 + 9), the packed indices and values
  // (two tags and lengths, 12, and 5 + 8 bytes per non-zero). Per page: tag, length,
  // counts and checksum.
  const uint64_t per_event = 6 + 131 + 44 + 12 + uint64_t{config.dim} * 13;
  const uint64_t per_page = 6 + 64 + 10;
  const uint64_t pages = max_events / kEventsPerSnapshotPage + 1;
  if (max_events > (SIZE_MAX - pages * per_page) / per_event) return SIZE_MAX;
  return max_events * per_event + pages * per_page;
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
  // doubles), the coefficient (a multi-class model's one per class), added_at (a varint
  // of at most 10 bytes) and, averaged, three more doubles; per retired term, its
  // support, two sums and retired_at. A multi-class model's classes: each a tag, a
  // length of at most 2 bytes and at most kMaxClassLabelBytes.
  // Under sparse storage a term's support is at most max_nonzeros indices (varints of at
  // most 5 bytes) and values, and its row's end (a varint of at most 10 bytes).
  const uint64_t per_feature = sizeof(double) * (config.averaged ? 2 : 1);
  const uint64_t support_bytes =
      config.sparse_storage() ? uint64_t{config.sparse.max_nonzeros} * (5 + sizeof(double)) + 10
                              : dim * sizeof(double);
  const uint64_t coefficients = std::max<uint64_t>(capacity->classes, 1);
  const uint64_t per_term =
      support_bytes + coefficients * sizeof(double) + 10 + (config.averaged ? 24 : 0);
  const uint64_t class_bytes = uint64_t{capacity->classes} * (kMaxClassLabelBytes + 4);
  const uint64_t per_retired = support_bytes + 2 * sizeof(double) + 10;
  // A KRLS tracker: per basis its support, mean and coefficient, and its rows of the two
  // or three packed triangles.
  const uint64_t bases = capacity->bases;
  const uint64_t matrices = config.krls_tracker.forgetting < 1 ? 3 : 2;
  const uint64_t tracker_bytes =
      sizeof(double) * (bases * (dim + 2) + matrices * bases * (bases + 1) / 2);
  return kFixedBytes + capacity->features * per_feature + capacity->terms * per_term +
         capacity->retired_terms * per_retired + window_bytes + tracker_bytes + class_bytes;
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
