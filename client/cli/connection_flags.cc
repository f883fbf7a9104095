// client/cli/connection_flags.cc

#include "client/cli/connection_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, server, "",
          "okl_server's address, host:port (default: $OKL_SERVER, else 127.0.0.1:50051)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30),
          "the deadline of each call (observe: of each stream), e.g. 500ms, 30s, 2m; "
          "health's default is 5s");
ABSL_FLAG(bool, json, false, "print the result as one JSON object on stdout");
ABSL_FLAG(bool, tls, false,
          "connect with TLS, authenticating the server by the system's roots");
ABSL_FLAG(std::string, tls_ca, "",
          "connect with TLS, authenticating the server by the CA certificates (PEM) in FILE");
ABSL_FLAG(std::string, tls_cert, "",
          "a client certificate chain (PEM) for mutual TLS; needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "the client certificate's private key (PEM)");
ABSL_FLAG(std::string, token, "",
          "send `authorization: Bearer TOKEN` with every call (default: $OKL_TOKEN); use "
          "with TLS, or only on a trusted network");

namespace okl::cli {

std::string EnvOr(const char* name, absl::string_view fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

absl::StatusOr<ConnectionOptions> ConnectionFromFlags(const CommandLine& line,
                                                      absl::Duration default_timeout) {
  ConnectionOptions options;
  options.server = line.Given("server") ? absl::GetFlag(FLAGS_server)
                                        : EnvOr("OKL_SERVER", "127.0.0.1:50051");
  if (options.server.empty()) return absl::InvalidArgumentError("--server must not be empty");
  options.timeout = line.Given("timeout") ? absl::GetFlag(FLAGS_timeout) : default_timeout;
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  options.tls = absl::GetFlag(FLAGS_tls);
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  options.token = line.Given("token") ? absl::GetFlag(FLAGS_token) : EnvOr("OKL_TOKEN", "");
  return options;
}

Output OutputFromFlags() { return {.json = absl::GetFlag(FLAGS_json)}; }

}  // namespace okl::cli
