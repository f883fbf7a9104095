// client/spawned_server.h
//
// SpawnedServer is an okl_server binary run as a child process on a loopback port: the one
// launcher that the end-to-end tests' harness (tests/server/server_process.h) and
// `okl_loadgen --spawn_server` (bench/loadgen_server_process.h) share. It runs and asks
// the server as a client does (a process, a port, grpc.health.v1), so it lives beside the
// client library. Start() runs the
// binary with --listen (127.0.0.1:0 by default), a --port_file and a --data_dir in a fresh
// temporary directory, and metrics on a free loopback port; WaitForPort() and then
// WaitForServing() wait, bounded, for the port file and for grpc.health.v1 SERVING; Stop()
// sends SIGTERM (the server's drain) and reaps the exit. The destructor SIGKILLs a server
// still running, reaps it and removes the temporary directory, so no caller leaks a
// process. The child also dies with SIGKILL if the thread that started it exits first
// (PR_SET_PDEATHSIG): start servers from the main thread.
//
// CheckServingStatus() below is the one grpc.health.v1 Check of the tests and the
// benchmarks, over the stub generated from proto/grpc/health/v1/health.proto;
// ProcStatusBytes() the one reading of a server's memory from /proc.
//
// No GoogleTest here: the benchmarks link it too.
//
// Thread-compatible: one owner calls it at a time.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<SpawnedServer> server,
//                        SpawnedServer::Start({.binary = "build/server/okl_server",
//                                              .flags = {"--max_models=2"}}));
//   const absl::Time deadline = absl::Now() + absl::Seconds(20);
//   OKL_ASSIGN_OR_RETURN(int port, server->WaitForPort(deadline));
//   std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
//       absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
//   OKL_RETURN_IF_ERROR(server->WaitForServing(channel, deadline));
//   ...
//   OKL_ASSIGN_OR_RETURN(int wait_status, server->Stop(absl::Seconds(30)));
#ifndef OKL_CLIENT_SPAWNED_SERVER_H_
#define OKL_CLIENT_SPAWNED_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/channel.h"

namespace okl::testing {

struct SpawnedServerOptions {
  // The okl_server binary (a path; not looked up in PATH).
  std::string binary;
  // Extra command-line flags. They follow the launcher's own --listen, --port_file,
  // --data_dir, --metrics_address and --metrics_port_file, so a flag given here wins.
  std::vector<std::string> flags = {};
  // The --listen address. Port 0 lets the server pick a free port (read from the port file).
  std::string listen = "127.0.0.1:0";
  // The --data_dir. Empty: "data" inside the temporary directory, removed with it. Set:
  // this directory (the server creates it if missing), which outlives the server.
  std::string data_dir = "";
  // The temporary directory's name before its random suffix, under the system's one.
  std::string temp_dir_prefix = "okl_server";
  // True: the server's stdout and stderr go to a file that Log() reads (and the errors of
  // the waits quote). False: both go to this process's stderr, e.g. so that a benchmark's
  // stdout carries its report alone.
  bool capture_output = true;
  // If set, the server runs with RLIMIT_FSIZE at this many bytes and SIGXFSZ ignored, so a
  // write that would grow any file past it fails with EFBIG: a full disk, as far as the
  // store can tell. (A captured log is bound by it too.)
  std::optional<uint64_t> file_size_limit = std::nullopt;
  // If set, a command (its first word an absolute path) that runs the server's command
  // line given after it, e.g. {"/usr/bin/unshare", ..., "sh", "-c", "... exec \"$@\"",
  // "sh"}: the server with a filesystem of the test's own. It must exec the server in the
  // same process, so that pid() stays the server's.
  std::vector<std::string> launcher = {};
};

// "exit code 0", "killed by signal 9": a wait(2) status in words.
std::string DescribeWaitStatus(int wait_status);

// grpc.health.v1.Health/Check of `service` ("" is the server as a whole), bounded by
// `timeout`: the status the server reports, or the call's error (NOT_FOUND for a service
// the server does not know).
absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckServingStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::string_view service,
    absl::Duration timeout);

// A "Name:   123 kB" line of /proc/PID/status (VmRSS, VmHWM, ...) in bytes: the memory
// the benchmarks report of a server, spawned or not. NotFound without such a line.
absl::StatusOr<uint64_t> ProcStatusBytes(pid_t pid, absl::string_view name);

class SpawnedServer {
 public:
  // Spawns the binary and returns at once. An error if it cannot be spawned.
  static absl::StatusOr<std::unique_ptr<SpawnedServer>> Start(SpawnedServerOptions options);

  SpawnedServer(const SpawnedServer&) = delete;
  SpawnedServer& operator=(const SpawnedServer&) = delete;

  // SIGKILLs the server if it still runs, reaps it and removes the temporary directory.
  ~SpawnedServer();

  // Waits until the port file holds a port (the server writes it whole once it listens)
  // and returns it. Unavailable if the server exits first, DeadlineExceeded at `deadline`.
  absl::StatusOr<int> WaitForPort(absl::Time deadline);
  // Checks grpc.health.v1 for service "" over `channel` until it says SERVING.
  // Unavailable if the server exits first, DeadlineExceeded at `deadline`.
  absl::Status WaitForServing(const std::shared_ptr<grpc::Channel>& channel,
                              absl::Time deadline);

  pid_t pid() const { return pid_; }
  const std::string& data_dir() const { return data_dir_; }
  // The raw text of the port file once WaitForPort() succeeded, as the server wrote it.
  const std::string& port_file_contents() const { return port_file_contents_; }
  // The metrics endpoint's port once WaitForPort() succeeded; 0 if metrics are off
  // (--metrics_address= among the flags).
  int metrics_port() const { return metrics_port_; }

  // Sends `signal` to the server without waiting.
  absl::Status Signal(int signal);
  // Waits up to `timeout` for the server to exit; returns its wait(2) status.
  // DeadlineExceeded if it still runs then.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);
  // SIGTERM, then WaitForExit(timeout); the wait status at once if it has exited already.
  absl::StatusOr<int> Stop(absl::Duration timeout);
  // SIGKILL, then waits for the exit.
  absl::StatusOr<int> Kill();
  // True while the process has not been seen to exit (reaps it if it has).
  bool Running();
  // True once an exit was seen (by Running() or the waits); the pid is not ours then.
  bool exited() const { return exited_; }

  // Everything the server wrote to stdout and stderr so far, if captured.
  std::string Log() const;

 private:
  explicit SpawnedServer(SpawnedServerOptions options) : options_(std::move(options)) {}

  // Log() as a suffix for an error message; empty if the output is not captured.
  std::string LogForError() const;

  SpawnedServerOptions options_;
  std::string dir_;  // the temporary directory, removed by the destructor
  std::string port_file_;
  std::string log_file_;  // empty unless captured
  std::string data_dir_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int wait_status_ = 0;
  std::string port_file_contents_;
  int metrics_port_ = 0;
};

}  // namespace okl::testing

#endif  // OKL_CLIENT_SPAWNED_SERVER_H_
