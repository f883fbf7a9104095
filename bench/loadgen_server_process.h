// bench/loadgen_server_process.h
//
// The okl_server child process of okl_loadgen --spawn_server: the shared launcher
// (client/spawned_server.h: 127.0.0.1:0, --port_file and --data_dir in a fresh
// temporary directory, ready once the port file exists and grpc.health.v1 reports
// SERVING, SIGTERM and reap on Stop(), SIGKILL on destruction) with what the benchmark
// adds: the server's output on our stderr (our stdout carries only the JSON result), TLS
// credentials for the readiness check, the server's CPU time, and a Stop() that demands a
// clean exit.
//
// Not thread-safe; one owner.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<ServerProcess> server,
//                        ServerProcess::Start("build/server/okl_server", {"--max_batch=1024"},
//                                             absl::Seconds(30)));
//   ... connect to server->address() ...
//   absl::Status stopped = server->Stop(absl::Seconds(15));
#ifndef OKL_BENCH_LOADGEN_SERVER_PROCESS_H_
#define OKL_BENCH_LOADGEN_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/spawned_server.h"
#include "grpcpp/security/credentials.h"

namespace okl::loadgen {

class ServerProcess {
 public:
  // Starts `binary` with `extra_args` after the launcher's flags and waits up to
  // `timeout` for it to serve, checking health over a channel with `credentials` (TLS
  // ones when extra_args turn TLS on; null: plaintext). `launcher`, if not empty, runs
  // the command line (e.g. taskset; see SpawnedServerOptions::launcher). On failure the
  // child (if any) is killed and reaped.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& extra_args,
      absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
      std::vector<std::string> launcher = {});

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // "127.0.0.1:<port>".
  const std::string& address() const { return address_; }
  pid_t pid() const { return process_->pid(); }

  // The CPU time (user + system) the server has used so far, from /proc; -1 if unknown.
  double CpuSeconds() const;

  // SIGTERM, then waits up to `grace` for the exit (SIGKILL after that). An error if the
  // server did not exit 0 by itself.
  absl::Status Stop(absl::Duration grace);

 private:
  ServerProcess(std::unique_ptr<testing::SpawnedServer> process, std::string address)
      : process_(std::move(process)), address_(std::move(address)) {}

  std::unique_ptr<testing::SpawnedServer> process_;
  std::string address_;
};

}  // namespace okl::loadgen

#endif  // OKL_BENCH_LOADGEN_SERVER_PROCESS_H_
