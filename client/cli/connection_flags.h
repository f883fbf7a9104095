// client/cli/connection_flags.h
//
// The `okl` flags every command that talks to okl_server takes: the server's address,
// the call deadline, TLS, the bearer token and --json. Defined in connection_flags.cc,
// beside the functions that read them.
#ifndef OKL_CLIENT_CLI_CONNECTION_FLAGS_H_
#define OKL_CLIENT_CLI_CONNECTION_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"

namespace okl::cli {

inline constexpr absl::string_view kConnectionFlags[] = {
    "server", "timeout", "tls", "tls_ca", "tls_cert", "tls_key", "token", "json"};

// The environment variable `name`, or `fallback` if it is unset or empty.
std::string EnvOr(const char* name, absl::string_view fallback);

// The connection flags given on `line`, with the environment's defaults ($OKL_SERVER,
// $OKL_TOKEN) and `default_timeout` for an unset --timeout. InvalidArgument naming the
// flag for an empty server, a timeout not positive, or --tls_cert without --tls_key.
absl::StatusOr<ConnectionOptions> ConnectionFromFlags(const CommandLine& line,
                                                      absl::Duration default_timeout);

// How results are printed (--json).
Output OutputFromFlags();

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_CONNECTION_FLAGS_H_
