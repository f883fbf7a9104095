// bench/loadgen_server_process.cc

#include "bench/loadgen_server_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/runtime/file.h"
#include "grpcpp/create_channel.h"

namespace okl::loadgen {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& extra_args,
    absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials,
    std::vector<std::string> launcher) {
  // The store goes to the temporary directory too (not okl_server's default of
  // ./okl-data in whatever directory the benchmark runs from); --server_args may name
  // another (the last occurrence of a flag wins) or turn it off with --data_dir=.
  // Metrics are served on a free loopback port, as in production they are on; measure
  // without them with --server_args=--metrics_address=.
  absl::StatusOr<std::unique_ptr<testing::SpawnedServer>> process =
      testing::SpawnedServer::Start({.binary = binary,
                                     .flags = extra_args,
                                     .temp_dir_prefix = "okl_loadgen",
                                     .capture_output = false,
                                     .launcher = std::move(launcher)});
  if (!process.ok()) {
    return absl::Status(process.status().code(),
                        absl::StrCat("--spawn_server: ", process.status().message()));
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> port = (*process)->WaitForPort(deadline);
  if (!port.ok()) return port.status();
  std::unique_ptr<ServerProcess> server(
      new ServerProcess(*std::move(process), absl::StrCat("127.0.0.1:", *port)));
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      server->address_,
      credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  if (absl::Status serving = server->process_->WaitForServing(channel, deadline);
      !serving.ok()) {
    return serving;
  }
  return server;
}

double ServerProcess::CpuSeconds() const {
  if (process_->exited()) return -1;
  absl::StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid(), "/stat"));
  if (!stat.ok()) return -1;
  // Fields after the command name (which may contain spaces) start with field 3.
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 > stat->size()) return -1;
  std::istringstream fields(stat->substr(paren + 2));
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
  if (!process_->Running()) {
    absl::StatusOr<int> wait_status = process_->WaitForExit(absl::ZeroDuration());
    return absl::InternalError(
        absl::StrCat("okl_server ", testing::DescribeWaitStatus(wait_status.value_or(0)),
                     " before it was stopped"));
  }
  absl::StatusOr<int> wait_status = process_->Stop(grace);
  if (!wait_status.ok()) {
    (void)process_->Kill();
    return absl::DeadlineExceededError(absl::StrCat(
        "okl_server did not stop within ", absl::FormatDuration(grace), " of SIGTERM"));
  }
  if (!WIFEXITED(*wait_status) || WEXITSTATUS(*wait_status) != 0) {
    return absl::InternalError(
        absl::StrCat("okl_server ", testing::DescribeWaitStatus(*wait_status)));
  }
  return absl::OkStatus();
}

}  // namespace okl::loadgen
