// proto/config_text.h
//
// ModelConfig in protobuf text format: the format of the `okl` tool's --config files and
// of client/examples/. Thread-safe.
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
#ifndef OKL_PROTO_CONFIG_TEXT_H_
#define OKL_PROTO_CONFIG_TEXT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config.h"

namespace okl {

// Parses a ModelConfig written in protobuf text format, then converts it with FromProto.
// A syntax error (or an unknown field) is InvalidArgument "<source>:line:column: what"
// with 1-based line and column; a conversion error is "<source>: what". `source` names
// the text in messages, e.g. the file it came from.
absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text,
                                                 absl::string_view source = "<config>");

}  // namespace okl

#endif  // OKL_PROTO_CONFIG_TEXT_H_
