// proto/convert.h
//
// ToProto/FromProto overloads between the wire messages of okl/v1/okl.proto and core's
// plain C++ types, and a parser for ModelConfig in protobuf text format (the format of
// the `okl` tool's --config files). This is the one place that knows both sides: core
// never sees protobuf, and the server and client convert only through here.
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
#ifndef OKL_PROTO_CONVERT_H_
#define OKL_PROTO_CONVERT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config.h"
#include "core/norma.h"
#include "okl/v1/okl.pb.h"

namespace okl {

// The ModelSnapshot layout ToProto writes and FromProto reads.
inline constexpr uint32_t kSnapshotFormatVersion = 1;

// Converts and validates a wire config. Unset fields whose proto3 zero would be a trap
// take core's defaults instead: hinge and novelty `rho` 1 (with rho = 0 a model that
// starts at f = 0 never sees a violation, so never learns), epsilon-insensitive
// `epsilon` 0.1, POWER's `theta` 0.5. UNSPECIFIED schedule means CONSTANT; UNSPECIFIED
// policy means OLDEST. The fields a kernel or loss does not read keep core's defaults.
// Then ValidateConfig runs.
absl::StatusOr<ModelConfig> FromProto(const v1::ModelConfig& proto);

// Writes the fields `config`'s kernel and loss read, and every other field. For every
// valid config whose unread fields hold core's defaults (what FromProto produces),
// FromProto(ToProto(config)) == config.
v1::ModelConfig ToProto(const ModelConfig& config);

// The complete state, with format_version = kSnapshotFormatVersion.
v1::ModelSnapshot ToProto(const ModelState& state);

// InvalidArgument if the format version is not kSnapshotFormatVersion, the config is
// absent or invalid (as FromProto above), or a number is unrepresentable (scale 0, which
// proto3 cannot tell from unset). The consistency of the arrays with each other and with
// the config is left to NormaModel::FromState, which checks it. A server reading
// snapshot bytes reports these errors as DATA_LOSS.
absl::StatusOr<ModelState> FromProto(const v1::ModelSnapshot& proto);

// The wire statistics. `regret` is not part of core's ModelStats and is left 0 for the
// caller to fill; an absent truncation bound is 0.
v1::ModelStats ToProto(const ModelStats& stats);

// Parses a ModelConfig written in protobuf text format, then converts it with FromProto.
// A syntax error (or an unknown field) is InvalidArgument "<source>:line:column: what"
// with 1-based line and column; a conversion error is "<source>: what". `source` names
// the text in messages, e.g. the file it came from.
absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text,
                                                 absl::string_view source = "<config>");

}  // namespace okl

#endif  // OKL_PROTO_CONVERT_H_
