// client/spawned_server.cc

#include "client/spawned_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/runtime/file.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace okl::testing {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

// Polling period of the bounded waits (port file, health, exit).
constexpr absl::Duration kPollPeriod = absl::Milliseconds(10);
// Bounds each health check of WaitForServing().
constexpr absl::Duration kHealthCheckTimeout = absl::Seconds(1);

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The file's contents, or "" if it cannot be read (a file the server has not written yet).
std::string ReadFileOrEmpty(const std::string& path) { return ReadFile(path).value_or(""); }

}  // namespace

absl::StatusOr<uint64_t> ProcStatusBytes(pid_t pid, absl::string_view name) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  absl::StatusOr<std::string> status = ReadFile(path);
  if (!status.ok()) return status.status();
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (absl::ConsumeSuffix(&line, "kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return kib * 1024;
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", name, " line in ", path));
}

absl::StatusOr<HealthCheckResponse::ServingStatus> CheckServingStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::string_view service,
    absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  HealthCheckRequest request;
  request.set_service(std::string(service));
  HealthCheckResponse response;
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return response.status();
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return absl::StrCat("wait status ", wait_status);
}

absl::StatusOr<std::unique_ptr<SpawnedServer>> SpawnedServer::Start(
    SpawnedServerOptions options) {
  auto server = absl::WrapUnique(new SpawnedServer(std::move(options)));
  const SpawnedServerOptions& o = server->options_;
  // Said here, not as a child's exit code 127 in WaitForPort().
  if (::access(o.binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot run ", o.binary, ": ", std::strerror(errno)));
  }

  std::string dir_template =
      (std::filesystem::temp_directory_path() / absl::StrCat(o.temp_dir_prefix, ".XXXXXX"))
          .string();
  if (::mkdtemp(dir_template.data()) == nullptr) return ErrnoError("mkdtemp");
  server->dir_ = dir_template;
  server->port_file_ = server->dir_ + "/port";
  if (o.capture_output) server->log_file_ = server->dir_ + "/server.log";
  if (o.data_dir.empty()) {
    server->data_dir_ = server->dir_ + "/data";
    std::error_code error;
    std::filesystem::create_directory(server->data_dir_, error);
    if (error) return absl::InternalError(absl::StrCat("mkdir: ", error.message()));
  } else {
    server->data_dir_ = o.data_dir;
  }

  std::vector<std::string> args = o.launcher;
  args.insert(
      args.end(),
      {
          o.binary,
          absl::StrCat("--listen=", o.listen),
          absl::StrCat("--port_file=", server->port_file_),
          absl::StrCat("--data_dir=", server->data_dir_),
          // Metrics on a free loopback port, so that parallel servers never collide on 9464.
          "--metrics_address=127.0.0.1:0",
          absl::StrCat("--metrics_port_file=", server->dir_, "/metrics_port"),
      });
  args.insert(args.end(), o.flags.begin(), o.flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // Uncaptured, the server's stdout goes to our stderr as well.
  const int out_fd = o.capture_output ? ::open(server->log_file_.c_str(),
                                               O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                                      : ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (out_fd < 0) return ErrnoError("open the server's output");
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    ::close(out_fd);
    return ErrnoError("open /dev/null");
  }

  const bool limit_file_size = o.file_size_limit.has_value();
  rlimit file_size_limit{};
  if (limit_file_size) {
    file_size_limit.rlim_cur = *o.file_size_limit;
    file_size_limit.rlim_max = *o.file_size_limit;
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a multi-threaded parent: async-signal-safe calls only until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    if (limit_file_size) {
      // Ignored, SIGXFSZ does not kill the server: the write fails with EFBIG instead.
      // The disposition survives execv.
      ::signal(SIGXFSZ, SIG_IGN);
      if (::setrlimit(RLIMIT_FSIZE, &file_size_limit) != 0) ::_exit(126);
    }
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(null_fd);
  if (pid < 0) return ErrnoError("fork");
  server->pid_ = pid;
  return server;
}

SpawnedServer::~SpawnedServer() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exited_ = true;
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

absl::StatusOr<int> SpawnedServer::WaitForPort(absl::Time deadline) {
  while (true) {
    if (!Running()) {
      return absl::UnavailableError(
          absl::StrCat(options_.binary, " exited before writing ", port_file_, " (",
                       DescribeWaitStatus(wait_status_), ")", LogForError()));
    }
    std::string contents = ReadFileOrEmpty(port_file_);
    if (!contents.empty() && contents.back() == '\n') {
      port_file_contents_ = contents;
      contents.pop_back();
      int port = 0;
      if (!absl::SimpleAtoi(contents, &port) || port <= 0 || port > 65535) {
        return absl::InternalError(
            absl::StrCat("port file holds \"", port_file_contents_, "\", not a port"));
      }
      // Written before the port file; absent or 0 when metrics are off.
      const std::string metrics_port = ReadFileOrEmpty(dir_ + "/metrics_port");
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(metrics_port), &metrics_port_)) {
        metrics_port_ = 0;
      }
      return port;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.binary, " wrote no port file by ", absl::FormatTime(deadline),
                       LogForError()));
    }
    absl::SleepFor(kPollPeriod);
  }
}

absl::Status SpawnedServer::WaitForServing(const std::shared_ptr<grpc::Channel>& channel,
                                           absl::Time deadline) {
  absl::Status last = absl::UnknownError("no health check made");
  while (absl::Now() < deadline) {
    absl::StatusOr<HealthCheckResponse::ServingStatus> health =
        CheckServingStatus(channel, "", kHealthCheckTimeout);
    if (health.ok() && *health == HealthCheckResponse::SERVING) return absl::OkStatus();
    last = health.ok()
               ? absl::UnavailableError(HealthCheckResponse::ServingStatus_Name(*health))
               : health.status();
    if (!Running()) {
      return absl::UnavailableError(absl::StrCat(options_.binary, " exited (",
                                                 DescribeWaitStatus(wait_status_),
                                                 ") before it served", LogForError()));
    }
    absl::SleepFor(kPollPeriod);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      options_.binary, " is not SERVING (last: ", last.ToString(), ")", LogForError()));
}

absl::Status SpawnedServer::Signal(int signal) {
  if (pid_ <= 0 || exited_) return absl::FailedPreconditionError("okl_server is not running");
  if (::kill(pid_, signal) != 0) return ErrnoError("kill");
  return absl::OkStatus();
}

bool SpawnedServer::Running() {
  if (pid_ <= 0 || exited_) return false;
  int status = 0;
  const pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    exited_ = true;
    wait_status_ = status;
    return false;
  }
  return true;
}

absl::StatusOr<int> SpawnedServer::WaitForExit(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("okl_server was never started");
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "okl_server (pid ", pid_, ") still runs after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPollPeriod);
  }
  return wait_status_;
}

absl::StatusOr<int> SpawnedServer::Stop(absl::Duration timeout) {
  if (!Running()) return wait_status_;
  absl::Status sent = Signal(SIGTERM);
  if (!sent.ok()) return sent;
  return WaitForExit(timeout);
}

absl::StatusOr<int> SpawnedServer::Kill() {
  if (!Running()) return wait_status_;
  absl::Status sent = Signal(SIGKILL);
  if (!sent.ok()) return sent;
  return WaitForExit(absl::Seconds(10));
}

std::string SpawnedServer::Log() const {
  return log_file_.empty() ? "" : ReadFileOrEmpty(log_file_);
}

std::string SpawnedServer::LogForError() const {
  return log_file_.empty() ? "" : absl::StrCat("; its log:\n", Log());
}

}  // namespace okl::testing
