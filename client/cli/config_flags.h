// client/cli/config_flags.h
//
// The `okl` flags that set a model's configuration (--dim, --kernel, --gamma, ...), for
// `okl create` (with or without a --config file) and `okl replay --local`. Defined in
// config_flags.cc, beside the function that reads them into a ModelConfig.
#ifndef OKL_CLIENT_CLI_CONFIG_FLAGS_H_
#define OKL_CLIENT_CLI_CONFIG_FLAGS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cli/args.h"
#include "core/config.h"

namespace okl::cli {

// The names of the config flags, for the commands' flag lists.
inline constexpr absl::string_view kConfigFlags[] = {"dim",
                                                     "kernel",
                                                     "gamma",
                                                     "c",
                                                     "degree",
                                                     "t",
                                                     "loss",
                                                     "rho",
                                                     "max_classes",
                                                     "epsilon",
                                                     "delta",
                                                     "nu",
                                                     "eta0",
                                                     "schedule",
                                                     "theta",
                                                     "lambda",
                                                     "max_terms",
                                                     "policy",
                                                     "drop_below",
                                                     "offset",
                                                     "averaged",
                                                     "regret_window",
                                                     "averaging_window",
                                                     "random_features",
                                                     "feature_seed",
                                                     "max_nonzeros",
                                                     "max_basis",
                                                     "noise_variance",
                                                     "forgetting"};

// Sets the fields of *config from the config flags: every flag if `all` (no --config
// file), else only those given on `line` (they override the file). Usage errors (a
// value out of range, an unknown name, a flag that does not apply to the kernel, loss or
// schedule chosen) as InvalidArgument naming the flag.
absl::Status ApplyConfigFlags(const CommandLine& line, bool all, ModelConfig* config);

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_CONFIG_FLAGS_H_
