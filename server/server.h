// server/server.h
//
// okl::Server is okl_server without its command line: a gRPC server on one listening
// address that serves okl.v1.OnlineKernelLearning (OklService over a ModelHost),
// grpc.health.v1.Health and, unless turned off, server reflection. Tests run it
// in-process; okl_server_main.cc maps its flags onto Options.
//
// Health: the services "" and "okl.v1.OnlineKernelLearning" report NOT_SERVING until
// Start() has made the server ready, SERVING then, and NOT_SERVING again from
// StartDraining() (which Shutdown() implies) on. While starting and draining, okl calls
// fail with UNAVAILABLE. "okl.v1.OnlineKernelLearning/writes" is SERVING only while the
// others are and the model store accepts writes: a full disk makes it NOT_SERVING, and it
// comes back by itself once space is freed (the background thread resumes the store),
// while the other two stay SERVING: reads work, and restarting would not free the disk.
//
// Security: TLS (optionally mutual) on the port with tls_cert_file/tls_key_file
// (tls_client_ca_file); bearer tokens with auth_tokens_file (ReloadAuthTokens() re-reads
// it). Without tokens the server listens on loopback only, unless allow_unauthenticated.
//
// Durability and resources: the ModelHost (server/host/model_host.h) owns the models, their
// store (host.data_dir: restored before listening, checkpointed in the background and
// after the drain) and the quotas.
//
// Metrics: with a metrics_address, Start() serves Prometheus metrics there (ServerMetrics:
// per-model series read at scrape time, per-RPC counters and latency histograms from an
// interceptor on every call). Regret: models with a regret_window have their windowed
// regret recomputed in the background by a RegretScheduler (options.regret).
//
// Thread-safe: Shutdown() and StartDraining() may be called from any thread, any number
// of times; port() and InProcessChannel() after Start().
//
// Example:
//   okl::Server server({.listen_address = "127.0.0.1:0"});
//   OKL_RETURN_IF_ERROR(server.Start());
//   auto stub = okl::v1::OnlineKernelLearning::NewStub(grpc::CreateChannel(
//       absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
//   ...
//   server.Shutdown(absl::Seconds(10));  // in-flight calls get up to 10 s to finish
#ifndef OKL_SERVER_SERVER_H_
#define OKL_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/mutex.h"
#include "core/runtime/regret_scheduler.h"
#include "server/rpc/async_rpc.h"
#include "server/rpc/health_service.h"
#include "server/metrics/metrics.h"
#include "server/host/model_host.h"
#include "server/rpc/service.h"
#include "server/auth/tokens.h"

namespace okl {

class Server {
 public:
  // Each default is written once, here or in the component's own Options (ModelHost,
  // OklService, ServerMetrics, RegretScheduler); okl_server's flags take theirs from a
  // default-constructed Options and are named after the fields (okl_server --help).
  struct Options {
    // host:port (any address gRPC accepts); port 0 picks a free port, see port(). An
    // address beyond loopback needs auth_tokens_file or allow_unauthenticated.
    std::string listen_address = "127.0.0.1:50051";
    // TLS on the gRPC port: the server's certificate chain and private key (PEM files;
    // both or neither). With tls_client_ca_file too, mutual TLS: a client must present
    // a certificate signed by that CA.
    std::string tls_cert_file;
    std::string tls_key_file;
    std::string tls_client_ca_file;
    // Bearer tokens (server/auth/tokens.h): every okl call must carry one that grants it.
    // Empty: no authentication, which is allowed on loopback addresses only, unless
    // allow_unauthenticated.
    std::string auth_tokens_file;
    bool allow_unauthenticated = false;
    // The largest message the server receives; gRPC answers RESOURCE_EXHAUSTED beyond.
    int max_message_bytes = 64 << 20;
    // Serve grpc.reflection.v1alpha.ServerReflection.
    bool reflection = true;
    // The models: their limits, quotas, store and checkpoints. host.quotas.max_memory_bytes
    // 0 means 3/4 of the machine's memory (or of the cgroup's limit, in a container);
    // host.regret_scheduler is the server's own, whatever is set here.
    ModelHost::Options host;
    // The RPC handlers' per-request limits and the offload pool.
    OklService::Options service;
    // Threads serving the calls, each polling its own completion queue
    // (server/rpc/async_rpc.h); 0: one per CPU the server may use (UsableCpus).
    int32_t rpc_threads = 0;
    // host:port to serve Prometheus metrics on (/metrics); port 0 picks a free port, see
    // metrics_port(). Empty: no metrics endpoint. (okl_server's flag defaults to
    // 127.0.0.1:9464.)
    std::string metrics_address;
    // Per-model series; metrics.host is set by the server.
    ServerMetrics::Options metrics;
    // The background regret computations: a model with a regret_window is recomputed
    // after its first batch and then after every regret.every_steps examples, on
    // regret.threads threads (1 to 64) at idle CPU priority.
    RegretScheduler::Options regret;
    // A model whose regret does not cover its latest step (it went idle fewer than
    // regret.every_steps examples after the last computation) is recomputed within this
    // long. Zero: only every regret.every_steps examples.
    absl::Duration regret_refresh = absl::Seconds(10);
  };

  explicit Server(Options options);
  // Shuts down at once (no grace) if still running.
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Validates the options (InvalidArgument naming the flag), opens the store and restores
  // its models (FailedPrecondition for an unusable data_dir, DataLoss naming a damaged
  // model), binds and starts serving, then reports SERVING. Unavailable if the address
  // cannot be bound; FailedPrecondition if called twice.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);

  // The bound port (resolving port 0); 0 before Start().
  int port() const ABSL_LOCKS_EXCLUDED(mu_);
  // The metrics endpoint's bound port; 0 before Start() or without metrics_address.
  int metrics_port() const ABSL_LOCKS_EXCLUDED(mu_);

  // Health NOT_SERVING and UNAVAILABLE for new okl calls; running calls go on.
  void StartDraining() ABSL_LOCKS_EXCLUDED(mu_);

  // StartDraining(), then stops accepting connections and calls, lets calls in flight
  // finish until `deadline`, cancels those still running then, and returns once all
  // have ended. A no-op before Start(); later calls wait for the first to finish.
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_) {
    Shutdown(absl::Now() + grace);
  }

  // Re-reads the tokens file (SIGHUP); on an error the previous tokens stay in force.
  // FailedPrecondition without auth_tokens_file.
  absl::Status ReloadAuthTokens();

  // A channel to this server that bypasses the network; after Start().
  std::shared_ptr<grpc::Channel> InProcessChannel() ABSL_LOCKS_EXCLUDED(mu_);

  // The models served. Thread-safe.
  ModelHost& host() { return host_; }
  // The background regret computations. Thread-safe.
  RegretScheduler& regret_scheduler() { return regret_scheduler_; }

 private:
  void SetHealth(bool serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the writes health name from the store's health, if it changed.
  void UpdateWritesHealth(bool store_writable) ABSL_LOCKS_EXCLUDED(mu_);
  // The gRPC port's credentials: TLS (mutual if configured) or none.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() const;
  // The background thread's loop, until StopBackgroundWork(): resumes a store that
  // stopped on a full disk (ModelHost::MaintainStore), checkpoints the models that are
  // due (with a store) and, every regret_refresh, asks for the regret of models
  // whose regret does not cover their latest step.
  void RunBackgroundWork();
  void StopBackgroundWork();

  const Options options_;
  // Declared before the registry: the registry's entries call it until they are gone.
  RegretScheduler regret_scheduler_;
  ModelHost host_;
  // Set once by Start() before serving, with auth_tokens_file; then fixed (Reload is
  // thread-safe).
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<OklService> service_;
  HealthService health_;
  ServerMetrics metrics_;

  mutable Mutex mu_;
  // Set once by Start(); destroyed by ~Server only, so Shutdown() may use it unlocked.
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  // Set with server_, and like it used unlocked by Shutdown().
  std::unique_ptr<CompletionQueueThreads> queue_threads_;
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;         // as SetHealth set it
  bool store_writable_ ABSL_GUARDED_BY(mu_) = true;   // as the background thread saw it

  // The background thread's sleep; std::mutex for std::condition_variable (it guards only
  // the stop flag).
  std::mutex background_mu_;
  std::condition_variable background_wake_;
  bool background_stop_ = false;
  std::thread background_thread_;
  std::once_flag background_stopped_;
  // The final checkpoint of every model runs once, however often Shutdown() is called.
  std::once_flag final_checkpoint_;
};

}  // namespace okl

#endif  // OKL_SERVER_SERVER_H_
