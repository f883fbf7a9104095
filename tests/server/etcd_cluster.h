// tests/server/etcd_cluster.h
//
// EtcdCluster runs a real etcd cluster (Debian's etcd 3.4, the binary compiled in as
// OKL_ETCD_BINARY) of one or more members as child processes on loopback, for the tests of
// okl's etcd client and what is built on it. Start() gives each member a client and a peer
// port (PickUnusedPort, free_port.h: etcd cannot listen on port 0 and say which port it
// got, so a member that then fails to bind its port makes Start try again with new ports),
// a data directory in a fresh temporary one, and waits (bounded) until every member answers
// Maintenance.Status and knows a leader. Kill() SIGKILLs one member, e.g. to take a
// cluster's quorum away. The destructor SIGKILLs every member still running, reaps them
// and removes the temporary directory. Each member also dies with SIGKILL if the thread
// that started it exits first (PR_SET_PDEATHSIG): start clusters from the test's main
// thread.
//
// Not server_process.h's ServerProcess: that harness's library depends on okl_server,
// which an etcd test has no use for.
//
// Thread-compatible: one owner calls it at a time.
//
// Example:
//   absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start();
//   ASSERT_TRUE(etcd.ok()) << etcd.status();
//   auto client = okl::etcd::EtcdClient::Create({.endpoints = (*etcd)->endpoints()});
#ifndef OKL_TESTS_SERVER_ETCD_CLUSTER_H_
#define OKL_TESTS_SERVER_ETCD_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace okl::testing {

struct EtcdClusterOptions {
  int members = 1;
  // Bounds the wait for every member to answer with a leader, per attempt.
  absl::Duration startup_timeout = absl::Seconds(15);
};

class EtcdCluster {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(EtcdClusterOptions options = {});

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;
  // SIGKILLs the members still running, reaps them and removes the directory.
  ~EtcdCluster();

  int size() const { return static_cast<int>(members_.size()); }
  // Member `member`'s client address, 127.0.0.1:PORT.
  std::string endpoint(int member) const;
  // Every member's, comma-separated: EtcdClientOptions::endpoints.
  std::string endpoints() const;

  // SIGKILLs member `member` and reaps it.
  absl::Status Kill(int member);

  // What member `member` wrote to stdout and stderr so far.
  std::string Log(int member) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    std::string log_path;
    pid_t pid = -1;  // -1 once reaped
  };

  explicit EtcdCluster(std::string dir) : dir_(std::move(dir)) {}
  // Spawns every member on fresh ports and waits until all answer with a leader.
  absl::Status Launch(const EtcdClusterOptions& options, int attempt);
  void KillAll();

  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_ETCD_CLUSTER_H_
