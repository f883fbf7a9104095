// server/rpc/health_service.h
//
// grpc.health.v1.Health on okl_server's completion queues (server/rpc/async_rpc.h). gRPC's
// built-in health service would do, but it runs on the callback API, whose threads would
// then poll beside the queues' and hand every okl call between them.
//
// Check answers a service's status now (NOT_FOUND for one never set); Watch sends it, then
// every change, until the client cancels or Shutdown() ends the stream. A service's
// status is SERVING or NOT_SERVING; Watch of one never set sends SERVICE_UNKNOWN, and
// then its status once set.
//
// Thread-safe.
//
// Example:
//   okl::HealthService health;
//   health.SetServing("", true);
//   CompletionQueueThreads threads({&health, ...}, 2, &builder);
#ifndef OKL_SERVER_RPC_HEALTH_SERVICE_H_
#define OKL_SERVER_RPC_HEALTH_SERVICE_H_

#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/runtime/mutex.h"
#include "grpc/health/v1/health.pb.h"
#include "server/rpc/async_rpc.h"

namespace okl {

class HealthService final : public RawAsyncService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService();

  // Sets `service`'s status ("" is the server as a whole) and tells its watchers.
  void SetServing(absl::string_view service, bool serving) ABSL_LOCKS_EXCLUDED(mu_);

  // `service`'s status; SERVICE_UNKNOWN if never set.
  ServingStatus Status(absl::string_view service) const ABSL_LOCKS_EXCLUDED(mu_);

  // Every service NOT_SERVING; each Watch sends that, then ends with UNAVAILABLE, and
  // later Watches end at once. For the server's shutdown, which would otherwise wait
  // for the watches until its deadline.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using CheckCall =
      UnaryCall<grpc::health::v1::HealthCheckRequest, grpc::health::v1::HealthCheckResponse>;
  class WatchCall;

  // Registers `watch` and returns the status it sends first, or nullopt after Shutdown().
  std::optional<ServingStatus> AddWatch(WatchCall* watch, const std::string& service)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveWatch(WatchCall* watch) ABSL_LOCKS_EXCLUDED(mu_);

  CheckCall::Handler check_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WatchCall*, std::string> watches_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace okl

#endif  // OKL_SERVER_RPC_HEALTH_SERVICE_H_
