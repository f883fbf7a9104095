// proto/convert.h
//
// ToProto/FromProto overloads between the wire messages of okl/v1/okl.proto and core's
// plain C++ types, the dense copies of wire vectors that core computes on, the snapshot
// byte format (a serialized ModelSnapshot with its checksum), and a parser for
// ModelConfig in protobuf text format (the format of the `okl` tool's --config files).
// This is the one place that knows both sides: core never sees protobuf, and the server
// and client convert only through here.
//
// FromProto validates: it returns InvalidArgument naming the offending field for what
// the wire allows but the model cannot run (an unset oneof, an unknown enum number, a
// value ValidateConfig rejects). The ToProto overloads cannot fail. Every function is
// thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::ModelConfig config, okl::ParseModelConfigText(R"pb(
//     dim: 7
//     kernel { gaussian { gamma: 1 } }
//     loss { squared {} }
//     learning_rate { eta0: 0.5 }
//     lambda: 0.01
//     budget { max_terms: 512 }
//   )pb"));
//   okl::v1::ModelConfig wire = okl::ToProto(config);
//   OKL_ASSIGN_OR_RETURN(okl::ModelConfig again, okl::FromProto(wire));  // == config
//
//   okl::ExampleBatch batch;
//   OKL_RETURN_IF_ERROR(okl::FromProto(observe_request, config.dim, &batch));
//   OKL_RETURN_IF_ERROR(model->ObserveBatch(batch.xs, batch.ys, &observations));
#ifndef OKL_PROTO_CONVERT_H_
#define OKL_PROTO_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model_registry.h"
#include "core/model.h"
#include "okl/v1/okl.pb.h"

namespace okl {

// The newest ModelSnapshot layout: ToProto writes it for a selection (version 4 added its
// fields), kTrackerSnapshotFormatVersion for a KRLS tracker (version 3 added its fields),
// kExpansionSnapshotFormatVersion for every other kind, and FromProto reads them all.
inline constexpr uint32_t kSnapshotFormatVersion = 4;
inline constexpr uint32_t kTrackerSnapshotFormatVersion = 3;
inline constexpr uint32_t kExpansionSnapshotFormatVersion = 2;
// The oldest version still read: version 1 lacks the averaging window's fields (read as
// empty and zero) and random features.
inline constexpr uint32_t kOldestSnapshotFormatVersion = 1;

// Converts and validates a wire config. Unset fields whose proto3 zero would be a trap
// take core's defaults instead: hinge and novelty `rho` 1 (with rho = 0 a model that
// starts at f = 0 never sees a violation, so never learns), epsilon-insensitive
// `epsilon` 0.1, POWER's `theta` 0.5, krls_tracker's `forgetting` 1 and `jitter` 1e-6.
// UNSPECIFIED schedule means CONSTANT; UNSPECIFIED policy means OLDEST. A config with
// krls_tracker must leave learning_rate and budget unset (InvalidArgument naming them). The fields a kernel or loss does not read keep core's defaults.
// Then ValidateConfig runs.
absl::StatusOr<ModelConfig> FromProto(const v1::ModelConfig& proto);

// Writes the fields `config`'s kernel and loss read, and every other field. For every
// valid config whose unread fields hold core's defaults (what FromProto produces),
// FromProto(ToProto(config)) == config.
v1::ModelConfig ToProto(const ModelConfig& config);

// The canonical bytes of `config`: ToProto(config) serialized deterministically. Two
// configs are the same model configuration iff their canonical bytes are equal; unlike
// ==, this holds for every double (0.0 and -0.0 differ, a NaN equals itself), so a stored
// config always equals itself when read back.
std::string CanonicalConfigBytes(const ModelConfig& config);

// The complete state, with the oldest format_version that holds it (see above); a
// selection's live candidates are nested snapshots of their own (without checksum).
v1::ModelSnapshot ToProto(const ModelState& state);

// InvalidArgument if the format version is not one this build reads, the config is
// absent or invalid (as FromProto above), or a number is unrepresentable (scale 0, which
// proto3 cannot tell from unset). The consistency of the arrays with each other and with
// the config is left to NormaModel::FromState, which checks it. A server reading
// snapshot bytes reports these errors as DATA_LOSS.
absl::StatusOr<ModelState> FromProto(const v1::ModelSnapshot& proto);

// The wire statistics of a model whose loss is `loss`, which says where the margin
// goes: rho for hinge and novelty, epsilon for epsilon-insensitive, nowhere for the
// other losses (their margin is 0). An absent truncation bound or regret is 0.
v1::ModelStats ToProto(const ModelStats& stats, LossType loss);

// The inverse of ToProto above, for what the wire carries: the margin is read from rho
// or epsilon as `loss` says; a truncation bound of 0 is absent; the regret is absent
// while regret_at_step is 0 (no computation yet), and its online and comparator loss
// sums, which the wire does not carry, are 0. So FromProto(ToProto(s, loss), loss)
// gives back every field of the statistics a model of that loss reports but those two
// sums.
ModelStats FromProto(const v1::ModelStats& proto, LossType loss);

// The wire name of a model. No validation: the server checks names.
v1::ModelRef ModelRefToProto(absl::string_view tenant, absl::string_view model);

// The wire view of a model: ref, config and statistics.
v1::ModelInfo ToProto(const ModelSummary& summary);

// The inverse of ToProto above. InvalidArgument "config: ..." if the config does not
// convert (as FromProto of a ModelConfig); the names are not checked. memory_bytes is
// not on the wire: 0.
absl::StatusOr<ModelSummary> FromProto(const v1::ModelInfo& proto);

// --- Inputs -------------------------------------------------------------------------

// Writes `vector` densely into `out`, whose size is the model's dimension. Dense
// (`indices` empty): exactly out.size() values. Sparse: as many values as indices, the
// indices strictly increasing and below out.size(); the other entries become 0.
// InvalidArgument otherwise, saying what to fix; callers prefix where the vector was.
// Values are copied as they are: NaN and Inf are left for the model's validation.
absl::Status DensifyVector(const v1::Vector& vector, absl::Span<double> out);

// Writes x as the smaller of its two wire forms: its non-zeros (an index and a value each,
// about 12 bytes) when they are fewer than two thirds of it (and not none: a sparse
// vector without entries reads as an empty dense one), else every value. Sparse
// data (text, one-hot features) then costs what it carries, whatever the dim. A sparse
// vector does not say its length, so use it only where x's size was checked against the
// model's dim (as ObserveWriter does); DensifyVector at that dim gives x back.
void ToCompactVector(absl::Span<const double> x, v1::Vector* out);

// A batch of labelled examples as core takes them: xs holds ys.size() inputs of dim
// values each, term-major.
struct ExampleBatch {
  std::vector<double> xs;
  std::vector<double> ys;
};

// OK if `vector` fits a model of dimension `dim` as DensifyVector requires; allocates
// nothing, so a request's vectors are all checked before its dense copy is made.
absl::Status CheckVector(const v1::Vector& vector, uint32_t dim);

// The bytes a dense batch of `n` inputs of dimension `dim` (plus n labels) takes.
size_t DenseBatchBytes(size_t n, uint32_t dim);

// Replaces `batch` with request.examples() densified for a model of dimension `dim`.
// Every vector is checked first (InvalidArgument naming the first bad one,
// "examples[i].x: ..."), then the dense size (ResourceExhausted if DenseBatchBytes is
// over `max_bytes`, naming --max_request_bytes); only then is anything allocated, so a
// small sparse request cannot make the server allocate gigabytes. `batch` is
// unspecified after an error. The values are left for the model's validation.
absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim, ExampleBatch* batch,
                       size_t max_bytes = SIZE_MAX);

// Replaces `xs` with request.inputs() densified for a model of dimension `dim`
// (inputs_size() * dim values, term-major), with the checks and the bound of the
// ObserveRequest overload ("inputs[i]: ...").
absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim,
                       std::vector<double>* xs, size_t max_bytes = SIZE_MAX);

// The sparse form of the two above, for a model with sparse storage
// (ModelConfig::sparse_storage()): each vector becomes a row of its non-zeros (zeros
// dropped, given or not), so a request costs what it carries, whatever the model's dim.
// Every vector is checked as CheckVector does, then the rows' size (ResourceExhausted if
// SparseBatchBytes is over `max_bytes`) before anything is allocated.
struct SparseExampleBatch {
  SparseRows xs;
  std::vector<double> ys;
};
absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim,
                       SparseExampleBatch* batch, size_t max_bytes = SIZE_MAX);
absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim, SparseRows* xs,
                       size_t max_bytes = SIZE_MAX);
// The most bytes `n` rows of `entries` non-zeros in all (plus n labels) take.
size_t SparseBatchBytes(size_t n, size_t entries);

// Appends one prediction and one loss per observation, in order.
void AppendToProto(absl::Span<const Observation> observations, v1::ObserveResponse* response);

// The trailing metadata of an Observe or ObserveStream that okl_server refused with
// UNAVAILABLE: how many of the call's messages were applied (nothing of the later ones),
// so that a client may send the rest again.
inline constexpr char kBatchesAppliedMetadataKey[] = "okl-batches-applied";

// --- Snapshot bytes -----------------------------------------------------------------

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

// Verifies the trailing checksum of `bytes`, parses the bytes before it as a ModelSnapshot and
// converts it with FromProto. DataLoss, saying which, if the bytes are too short, the
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

// Parses a ModelConfig written in protobuf text format, then converts it with FromProto.
// A syntax error (or an unknown field) is InvalidArgument "<source>:line:column: what"
// with 1-based line and column; a conversion error is "<source>: what". `source` names
// the text in messages, e.g. the file it came from.
absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text,
                                                 absl::string_view source = "<config>");

}  // namespace okl

#endif  // OKL_PROTO_CONVERT_H_
