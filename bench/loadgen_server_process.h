// bench/loadgen_server_process.h
//
// An okl_server child process for okl_loadgen --spawn_server: started on 127.0.0.1:0
// with --port_file and --data_dir in a fresh temporary directory (removed when the
// server has stopped), ready once the port file exists and
// grpc.health.v1 reports SERVING, stopped with SIGTERM (the server's drain) and reaped.
// The destructor stops a server that is still running, so a setup failure never leaves
// one behind.
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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"

namespace okl::loadgen {

class ServerProcess {
 public:
  // Starts `binary` with `extra_args` after the listen and port-file flags and waits up
  // to `timeout` for it to serve, checking health over a channel with `credentials` (TLS
  // ones when extra_args turn TLS on; null: plaintext). On failure the child (if any) is
  // killed and reaped.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& extra_args,
      absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // "127.0.0.1:<port>".
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // The CPU time (user + system) the server has used so far, from /proc; -1 if unknown.
  double CpuSeconds() const;

  // SIGTERM, then waits up to `grace` for the exit (SIGKILL after that). An error if the
  // server did not exit 0 by itself.
  absl::Status Stop(absl::Duration grace);

 private:
  ServerProcess(pid_t pid, std::string temp_dir) : pid_(pid), temp_dir_(std::move(temp_dir)) {}
  // Reaps the child if it has exited; returns whether it has.
  bool Exited(int* wait_status);
  void RemoveTempDir();

  pid_t pid_;
  bool reaped_ = false;
  std::string temp_dir_;
  std::string address_;
};

}  // namespace okl::loadgen

#endif  // OKL_BENCH_LOADGEN_SERVER_PROCESS_H_
