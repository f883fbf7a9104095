// tests/server/etcd_cluster.cc

#include "tests/server/etcd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "server/etcd/etcd_client.h"
#include "tests/server/free_port.h"

extern char** environ;

namespace okl::testing {
namespace {

constexpr absl::Duration kPollPeriod = absl::Milliseconds(20);
// Start() tries again with new ports if a member could not bind its own (another process
// took a port between its release and etcd's bind).
constexpr int kAttempts = 3;

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool connected =
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return connected;
}

// Whether `pid` has exited (and is reaped now).
bool Exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(EtcdClusterOptions options) {
  if (options.members < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an etcd cluster needs a member, got ", options.members));
  }
  std::string dir = (std::filesystem::temp_directory_path() / "okl_etcd.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) return ErrnoError("mkdtemp");
  auto cluster = std::unique_ptr<EtcdCluster>(new EtcdCluster(std::move(dir)));
  absl::Status status;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    status = cluster->Launch(options, attempt);
    if (status.ok()) return cluster;
    cluster->KillAll();
    // Only a port taken under us is worth another attempt.
    if (!absl::StrContains(status.message(), "address already in use")) break;
  }
  return status;
}

absl::Status EtcdCluster::Launch(const EtcdClusterOptions& options, int attempt) {
  members_.clear();
  std::set<int> ports;
  for (int i = 0; i < options.members; ++i) {
    Member member;
    member.name = absl::StrCat("m", i);
    // Distinct ports: the kernel may hand a released port out again.
    while (member.client_port == 0 || ports.count(member.client_port) > 0) {
      absl::StatusOr<int> port = PickUnusedPort();
      if (!port.ok()) return port.status();
      member.client_port = *port;
    }
    ports.insert(member.client_port);
    while (member.peer_port == 0 || ports.count(member.peer_port) > 0) {
      absl::StatusOr<int> port = PickUnusedPort();
      if (!port.ok()) return port.status();
      member.peer_port = *port;
    }
    ports.insert(member.peer_port);
    const std::string base = absl::StrCat(dir_, "/", attempt, "-", member.name);
    member.data_dir = base + ".data";
    member.log_path = base + ".log";
    members_.push_back(std::move(member));
  }
  std::vector<std::string> initial_cluster;
  for (const Member& member : members_) {
    initial_cluster.push_back(
        absl::StrCat(member.name, "=http://127.0.0.1:", member.peer_port));
  }

  // Every member's environment: ours without ETCD_* variables, which etcd reads as flags.
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (!absl::StartsWith(*variable, "ETCD")) environment.emplace_back(*variable);
  }
  std::vector<char*> envp;
  for (std::string& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);

  for (Member& member : members_) {
    const std::string client_url = absl::StrCat("http://127.0.0.1:", member.client_port);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", member.peer_port);
    std::vector<std::string> args = {
        OKL_ETCD_BINARY,
        absl::StrCat("--name=", member.name),
        absl::StrCat("--data-dir=", member.data_dir),
        absl::StrCat("--listen-client-urls=", client_url),
        absl::StrCat("--advertise-client-urls=", client_url),
        absl::StrCat("--listen-peer-urls=", peer_url),
        absl::StrCat("--initial-advertise-peer-urls=", peer_url),
        absl::StrCat("--initial-cluster=", absl::StrJoin(initial_cluster, ",")),
        "--initial-cluster-state=new",
        absl::StrCat("--initial-cluster-token=okl-test-", ::getpid()),
        "--logger=zap",
        "--log-outputs=stderr",
    };
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    const int out_fd =
        ::open(member.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) return ErrnoError("open etcd's log");
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
      ::close(out_fd);
      return ErrnoError("open /dev/null");
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
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(out_fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out_fd);
    ::close(null_fd);
    if (pid < 0) return ErrnoError("fork");
    member.pid = pid;
  }

  const absl::Time deadline = absl::Now() + options.startup_timeout;
  for (int i = 0; i < size(); ++i) {
    Member& member = members_[i];
    // First the port, polled, since a gRPC channel refused once waits out a reconnect
    // backoff (a second) before it tries again.
    while (!Accepts(member.client_port)) {
      if (Exited(member.pid)) {
        member.pid = -1;
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", member.name, " exited while starting; its log:\n", Log(i)));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "etcd member ", member.name, " did not listen on 127.0.0.1:", member.client_port,
            " within ", absl::FormatDuration(options.startup_timeout), "; its log:\n", Log(i)));
      }
      absl::SleepFor(kPollPeriod);
    }
    absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> client = etcd::EtcdClient::Create(
        {.endpoints = endpoint(i), .call_timeout = absl::Milliseconds(500)});
    if (!client.ok()) return client.status();
    absl::Status last = absl::UnknownError("not asked yet");
    while (true) {
      if (Exited(member.pid)) {
        member.pid = -1;
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", member.name, " exited while starting; its log:\n", Log(i)));
      }
      absl::StatusOr<etcd::MemberStatus> status = (*client)->Status();
      if (status.ok() && status->leader_id != 0) break;
      last = status.ok() ? absl::UnavailableError("no leader yet") : status.status();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("etcd member ", member.name, " did not answer with a leader within ",
                         absl::FormatDuration(options.startup_timeout), " (", last.ToString(),
                         "); its log:\n", Log(i)));
      }
      absl::SleepFor(kPollPeriod);
    }
  }
  return absl::OkStatus();
}

void EtcdCluster::KillAll() {
  for (int i = 0; i < size(); ++i) (void)Kill(i);
}

EtcdCluster::~EtcdCluster() {
  KillAll();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string EtcdCluster::endpoint(int member) const {
  return absl::StrCat("127.0.0.1:", members_.at(member).client_port);
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> all;
  for (int i = 0; i < size(); ++i) all.push_back(endpoint(i));
  return absl::StrJoin(all, ",");
}

absl::Status EtcdCluster::Kill(int member) {
  Member& m = members_.at(member);
  if (m.pid < 0) return absl::OkStatus();
  if (::kill(m.pid, SIGKILL) != 0) return ErrnoError("kill");
  int status = 0;
  while (::waitpid(m.pid, &status, 0) < 0 && errno == EINTR) {
  }
  m.pid = -1;
  return absl::OkStatus();
}

std::string EtcdCluster::Log(int member) const {
  return ReadFileOrEmpty(members_.at(member).log_path);
}

}  // namespace okl::testing
