// tests/server/server_process.h
//
// ServerProcess runs a real okl_server binary (ServerBinary(), tests/test_paths.h) as a
// child process on a loopback port, for end-to-end tests: it starts the server with
// --listen=127.0.0.1:0 and a private --port_file and --data_dir (or a given --data_dir
// that outlives it, for restart tests), waits (bounded) for the port file and for health
// SERVING, and hands out a channel and a stub. Stop() sends SIGTERM and waits for the
// exit; the destructor SIGKILLs a server still running and removes its temporary
// directory, so no test leaks a process. The child also dies with SIGKILL if the thread
// that started it exits first (PR_SET_PDEATHSIG): start servers from the test's main
// thread. For a server with TLS or bearer tokens, options' channel_security says how the
// harness's channels connect (see ChannelSecurity). The process itself is a SpawnedServer
// (client/spawned_server.h), the launcher the benchmarks use too; this class adds
// the tests' channels, stub and options.
//
// The health helpers below call grpc.health.v1 through the stubs generated from
// proto/grpc/health/v1/health.proto. grpc.reflection.v1alpha is spoken without generated
// stubs (Debian's libgrpc++ ships none, and listing the services is all the tests do):
// its messages are encoded by hand and decoded with protobuf's UnknownFieldSet, over
// grpc::GenericStub.
//
// ServerProcess is thread-compatible; its channel and stub are thread-safe.
//
// Example:
//   absl::StatusOr<std::unique_ptr<ServerProcess>> server =
//       ServerProcess::Start({.flags = {"--max_models=2"}});
//   ASSERT_TRUE(server.ok()) << server.status();
//   grpc::ClientContext context;
//   okl::v1::ModelInfo info;
//   grpc::Status status = (*server)->stub().GetModel(&context, ref, &info);
//   absl::StatusOr<int> exit = (*server)->Stop();  // a wait(2) status
//
//   // TLS and a bearer token (certificates from tests/server/test_certs.h):
//   ServerProcess::Start({.flags = {"--tls_cert_file=...", "--tls_key_file=...",
//                                   "--auth_tokens_file=..."},
//                         .channel_security = {.credentials = TlsCredentials(ca_pem),
//                                              .bearer_token = token}});
#ifndef OKL_TESTS_SERVER_SERVER_PROCESS_H_
#define OKL_TESTS_SERVER_SERVER_PROCESS_H_

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
#include "client/spawned_server.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "okl/v1/okl.grpc.pb.h"
#include "tests/server/free_port.h"  // PickUnusedPort, for the tests that include this

namespace okl::testing {

// How a test's channel reaches the server: its credentials, the name it expects in the
// server's certificate, and metadata every call carries. The default is plaintext with
// no metadata.
//
// The metadata is added by a client interceptor, not by call credentials: plaintext
// credentials cannot be composed with call credentials (grpc::CompositeChannelCredentials
// takes secure ones only) and a plaintext connection refuses call credentials of the
// default security level, while an interceptor works the same on both, and may send what
// no call credentials would (a malformed authorization).
struct ChannelSecurity {
  // Null: plaintext (grpc::InsecureChannelCredentials()).
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  // Non-empty: the name the server's certificate must carry, instead of the host of the
  // address connected to (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG; TLS only).
  std::string tls_target_name = "";
  // Non-empty: every call carries `authorization: Bearer <bearer_token>`.
  std::string bearer_token = "";
  // Any other metadata every call carries, as given, e.g. {"authorization", "Basic x"}.
  std::vector<std::pair<std::string, std::string>> metadata = {};
};

// TLS credentials trusting `root_certs` (PEM), with a client certificate if `cert_chain`
// and `private_key` are given (mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& root_certs,
                                                         const std::string& cert_chain = "",
                                                         const std::string& private_key = "");

struct ServerProcessOptions {
  // Extra command-line flags, e.g. "--max_models=2". They follow the harness's own
  // --listen, --port_file and --data_dir, so a flag given here wins.
  std::vector<std::string> flags = {};
  // The --listen address. Port 0 lets the server pick a free port (read from the port
  // file); a fixed port lets a test reach the server before it is ready.
  std::string listen = "127.0.0.1:0";
  // Bounds the wait for the port file and then for health SERVING.
  absl::Duration startup_timeout = absl::Seconds(20);
  // False: Start() returns as soon as the process runs; call WaitUntilServing() later.
  bool wait_until_serving = true;
  // The --data_dir. Empty: a fresh directory inside the private one, removed with it.
  // Set: this directory (the server creates it if missing), which outlives the server,
  // for restart tests; the caller removes it.
  std::string data_dir = "";
  // If set, the server runs with RLIMIT_FSIZE at this many bytes and SIGXFSZ ignored, so
  // a write that would grow any file past it fails with EFBIG: a full disk, as far as
  // the store can tell. (The server's log file is bound by it too.)
  std::optional<uint64_t> file_size_limit = std::nullopt;
  // A command that runs the server's command line (see SpawnedServerOptions::launcher).
  std::vector<std::string> launcher = {};
  // The harness's channels (channel(), NewChannel(), and the health checks that wait for
  // SERVING): plaintext without metadata by default. A server with --tls_cert_file needs
  // TLS credentials here; one with --auth_tokens_file, a bearer token for okl calls
  // (health needs none).
  ChannelSecurity channel_security = {};
  // The host address() names (and the channels connect to), e.g. "localhost" to match a
  // certificate's DNS name. Empty: the --listen host, or 127.0.0.1 for 0.0.0.0.
  std::string connect_host = "";
};

// grpc.health.v1.HealthCheckResponse.ServingStatus (the same numbers, checked in the .cc).
enum class ServingStatus {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};
std::string ServingStatusName(ServingStatus status);

class ServerProcess {
 public:
  // Spawns okl_server. Returns an error (with the server's log) if it cannot be spawned,
  // exits early, or is not SERVING within the startup timeout.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      ServerProcessOptions options = {});

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // SIGKILLs the server if it still runs, reaps it and removes its directory.
  ~ServerProcess();

  // Waits for the port file, connects, and waits for health SERVING on service "".
  absl::Status WaitUntilServing();

  pid_t pid() const { return process_->pid(); }
  // The bound port; 0 before WaitUntilServing() succeeded (or the fixed --listen port).
  int port() const { return port_; }
  std::string address() const;
  // The metrics endpoint's port (the harness passes --metrics_address=127.0.0.1:0); 0 if
  // a test turned metrics off with --metrics_address=.
  int metrics_port() const { return process_->metrics_port(); }
  // The raw text of the port file, as the server wrote it.
  const std::string& port_file_contents() const { return process_->port_file_contents(); }
  const std::string& data_dir() const { return process_->data_dir(); }

  // A channel (and a stub over it) made once the server was reachable.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::OnlineKernelLearning::Stub& stub() const { return *stub_; }
  // A channel over its own TCP connection, e.g. to see whether the server still accepts;
  // with options' channel_security.
  std::shared_ptr<grpc::Channel> NewChannel() const;

  // Sends `signal` to the server without waiting.
  absl::Status Signal(int signal);
  // Waits up to `timeout` for the server to exit; returns its wait(2) status.
  // DeadlineExceeded if it still runs then.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);
  // SIGTERM, then WaitForExit(timeout).
  absl::StatusOr<int> Stop(absl::Duration timeout = absl::Seconds(30));
  // SIGKILL, then waits for the exit.
  absl::StatusOr<int> Kill();
  // True while the process has not been seen to exit.
  bool Running();

  // Everything the server wrote to stdout and stderr so far.
  std::string Log() const;

 private:
  ServerProcess() = default;

  ServerProcessOptions options_;
  std::unique_ptr<SpawnedServer> process_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::OnlineKernelLearning::Stub> stub_;
};

// A channel to `address` that accepts messages of any size (the server's limits are what
// the tests probe) and, if `own_connection`, does not share a TCP connection with other
// channels.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           bool own_connection = false);
// The same, with `security`'s credentials, target name and metadata.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelSecurity& security,
                                           bool own_connection = false);

// A plain HTTP/1.0 GET of http://127.0.0.1:<port><path> (e.g. the metrics endpoint's
// /metrics); the body of a 200 response, an error otherwise. Bounded by 10 s.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// The value of the sample `series` (a name and its labels exactly as exposed, e.g.
// okl_quota_rejections_total{quota="models"}) on the /metrics of the metrics endpoint at
// `port`; NotFound if it has no such sample.
absl::StatusOr<double> MetricValue(int port, absl::string_view series);

// One call to any method, by name, with raw message bytes: the client side of a bidi
// stream, which on the wire serves unary and server-streaming methods as well. Every
// operation blocks until done or the call's deadline passes. Not thread-safe.
class GenericCall {
 public:
  // Starts the call to `method` ("/package.Service/Method"). If `wait_for_ready`, the
  // call waits (until the deadline) for the channel to connect instead of failing.
  GenericCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
              absl::Duration deadline, bool wait_for_ready = false);
  GenericCall(const GenericCall&) = delete;
  GenericCall& operator=(const GenericCall&) = delete;
  // Cancels the call if it has not finished.
  ~GenericCall();

  bool Write(const std::string& message);
  bool WritesDone();
  // The next message, or nullopt at the end of the stream (or on failure).
  std::optional<std::string> Read();
  grpc::Status Finish();
  void Cancel() { context_.TryCancel(); }

 private:
  bool Wait(void* tag);

  grpc::ClientContext context_;
  grpc::CompletionQueue queue_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
};

// grpc.health.v1.Health/Check for `service` ("" is the server as a whole). Returns the
// call's status as an absl::Status (NOT_FOUND for a service the server does not know).
absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          absl::string_view service,
                                          absl::Duration timeout = absl::Seconds(5));

// grpc.health.v1.Health/Watch for `service`: the stream of statuses the server pushes.
// The constructor returns once the request is sent (with `wait_for_ready`, once the
// channel connected, or the deadline passed). Not thread-safe.
class HealthWatch {
 public:
  HealthWatch(const std::shared_ptr<grpc::Channel>& channel, absl::string_view service,
              absl::Duration deadline, bool wait_for_ready = false);
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;
  // Cancels the call if it has not finished.
  ~HealthWatch();

  // The next status pushed, or nullopt when the stream ends (see Finish()).
  std::optional<ServingStatus> Next();
  void Cancel() { context_.TryCancel(); }
  // Waits for the call's status (until it is cancelled or its deadline passes, for a
  // stream the server keeps open); later calls return the same status.
  grpc::Status Finish();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> reader_;
  std::optional<grpc::Status> status_;
};

// The services grpc.reflection.v1alpha.ServerReflection lists; the call's status (e.g.
// UNIMPLEMENTED when reflection is off) as an error.
absl::StatusOr<std::vector<std::string>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout = absl::Seconds(5));

// Converts a grpc::Status (same code numbers, message kept).
absl::Status FromGrpcStatus(const grpc::Status& status);

// What a finished command printed, and how it ended.
struct CommandResult {
  int wait_status = 0;  // as from wait(2)
  std::string out;      // its stdout
  std::string err;      // its stderr

  // The exit code, or -1 if the command did not exit by itself (a signal).
  int exit_code() const;
};

// Runs argv[0] (a path; not looked up in PATH) with argv, stdin from /dev/null, and the
// environment of this process with `env` ("NAME=value" each) set on top of it; waits
// for it to end. An error only if it cannot be run at all.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env = {});

// A fresh directory under the system's temporary directory, named after `prefix`, removed
// with everything in it when the object goes; for a --data_dir that outlives a server.
class TempDir {
 public:
  explicit TempDir(absl::string_view prefix = "okl_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The store's directory inside it (created by the server).
  std::string data_dir() const { return path_ + "/data"; }

 private:
  std::string path_;  // empty if it could not be made (the test has failed then)
};

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_SERVER_PROCESS_H_
