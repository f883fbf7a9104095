// bench/loadgen_server_process.cc

#include "bench/loadgen_server_process.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/loadgen_driver.h"

extern char** environ;

namespace okl::loadgen {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
constexpr int kServing = 1;  // grpc.health.v1.HealthCheckResponse.SERVING

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status))
    return absl::StrCat("killed by ", strsignal(WTERMSIG(wait_status)));
  return "stopped";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& extra_args,
    absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  std::string temp_template =
      (std::filesystem::temp_directory_path() / "okl_loadgen.XXXXXX").string();
  if (mkdtemp(temp_template.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  const std::string port_file = temp_template + "/port";

  // The store goes to the temporary directory too (not okl_server's default of
  // ./okl-data in whatever directory the benchmark runs from); --server_args may name
  // another (the last occurrence of a flag wins) or turn it off with --data_dir=.
  // Metrics are served on a free loopback port, as in production they are on; measure
  // without them with --server_args=--metrics_address=.
  std::vector<std::string> args = {
      binary, "--listen=127.0.0.1:0", absl::StrCat("--port_file=", port_file),
      absl::StrCat("--data_dir=", temp_template, "/data"), "--metrics_address=127.0.0.1:0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // The server's stdout goes to our stderr: our stdout carries only the JSON result.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    std::filesystem::remove_all(temp_template);
    return absl::NotFoundError(
        absl::StrCat("cannot start ", binary, " (--spawn_server): ", std::strerror(spawned)));
  }
  std::unique_ptr<ServerProcess> server(new ServerProcess(pid, temp_template));

  const absl::Time deadline = absl::Now() + timeout;
  int port = 0;
  while (port == 0) {
    int wait_status = 0;
    if (server->Exited(&wait_status)) {
      return absl::UnavailableError(
          absl::StrCat(binary, " ", DescribeExit(wait_status), " before it served"));
    }
    std::ifstream in(port_file);
    std::string text;
    if (in && std::getline(in, text) && absl::SimpleAtoi(text, &port) && port > 0) break;
    port = 0;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(binary, " wrote no port file within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPollInterval);
  }
  server->address_ = absl::StrCat("127.0.0.1:", port);

  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      server->address_,
      credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  absl::Status last = absl::UnavailableError("no health check answered");
  while (absl::Now() < deadline) {
    absl::StatusOr<int> health = HealthCheck(*channel, "", absl::Seconds(2));
    if (health.ok() && *health == kServing) return server;
    last = health.ok() ? absl::UnavailableError(absl::StrCat("health status ", *health))
                       : health.status();
    absl::SleepFor(kPollInterval);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      binary, " is not SERVING after ", absl::FormatDuration(timeout), ": ", last.message()));
}

ServerProcess::~ServerProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int wait_status = 0;
    waitpid(pid_, &wait_status, 0);
  }
  RemoveTempDir();
}

bool ServerProcess::Exited(int* wait_status) {
  if (reaped_) return true;
  const pid_t result = waitpid(pid_, wait_status, WNOHANG);
  if (result == pid_) reaped_ = true;
  return reaped_;
}

void ServerProcess::RemoveTempDir() {
  if (temp_dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(temp_dir_, ignored);
  temp_dir_.clear();
}

double ServerProcess::CpuSeconds() const {
  if (reaped_) return -1;
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return -1;
  // Fields after the command name (which may contain spaces) start with field 3.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int index = 3; fields >> field; ++index) {
    if (index == 14 || index == 15) {  // utime, stime
      double value = 0;
      if (!absl::SimpleAtod(field, &value)) return -1;
      ticks += value;
      if (index == 15) break;
    }
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::Status ServerProcess::Stop(absl::Duration grace) {
  int wait_status = 0;
  if (!Exited(&wait_status)) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (!Exited(&wait_status)) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &wait_status, 0);
        reaped_ = true;
        RemoveTempDir();
        return absl::DeadlineExceededError(absl::StrCat(
            "okl_server did not stop within ", absl::FormatDuration(grace), " of SIGTERM"));
      }
      absl::SleepFor(kPollInterval);
    }
    RemoveTempDir();
  } else {
    RemoveTempDir();
    return absl::InternalError(
        absl::StrCat("okl_server ", DescribeExit(wait_status), " before it was stopped"));
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return absl::InternalError(absl::StrCat("okl_server ", DescribeExit(wait_status)));
  }
  return absl::OkStatus();
}

}  // namespace okl::loadgen
