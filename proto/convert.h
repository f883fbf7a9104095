// proto/convert.h
//
// ToProto/FromProto overloads between the wire messages of okl/v1/okl.proto and core's
// plain C++ types: configs, snapshots, statistics and model summaries. Beside it in
// proto/: inputs.h (request vectors into the batches core computes on), snapshot_codec.h
// (the snapshot byte format) and config_text.h (configs in protobuf text format). This
// folder is the one place that knows both sides: core never sees protobuf, and the server
// and client convert only through here.
//
// FromProto validates: it returns InvalidArgument naming the offending field for what
// the wire allows but the model cannot run (an unset oneof, an unknown enum number, a
// value ValidateConfig rejects). The ToProto overloads cannot fail. Every function is
// thread-safe.
//
// Example:
//   okl::v1::ModelConfig wire = okl::ToProto(config);
//   OKL_ASSIGN_OR_RETURN(okl::ModelConfig again, okl::FromProto(wire));  // == config
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
#include "core/model.h"
#include "okl/v1/okl.pb.h"

namespace okl {

// The newest ModelSnapshot layout: ToProto writes it for a multi-class model (version 5
// added its classes), kSelectSnapshotFormatVersion for a selection (version 4 added its
// fields), kTrackerSnapshotFormatVersion for a KRLS tracker (version 3 added its fields),
// kExpansionSnapshotFormatVersion for every other kind, and FromProto reads them all.
inline constexpr uint32_t kSnapshotFormatVersion = 5;
inline constexpr uint32_t kSelectSnapshotFormatVersion = 4;
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

}  // namespace okl

#endif  // OKL_PROTO_CONVERT_H_
