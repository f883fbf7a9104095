// server/server.cc

#include "server/server.h"

#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/runtime/file.h"
#include "core/runtime/thread_name.h"
#include "core/status_macros.h"

namespace okl {
namespace {

constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(5);
constexpr absl::Duration kFinishMargin = absl::Milliseconds(200);
// How often the background thread looks for models that are due.
constexpr std::chrono::milliseconds kBackgroundPollInterval(100);
// Remembered events a model ends per background round (the rest wait for the next).
constexpr size_t kExpiredEventsPerRound = 10000;

// The name ProtoServerReflectionPlugin::name() returns.
constexpr char kReflectionPluginName[] = "proto_server_reflection";

// Loading gRPC's reflection library registers its plugin with every ServerBuilder of the
// process; this option takes it off one builder again, so that --reflection=false holds
// even beside a server that has reflection on (as in tests).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {}
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
      return plugin->name() == kReflectionPluginName;
    });
  }
};

// True if `address` (gRPC's host:port, [v6]:port, or unix:path) can be reached only
// from this machine.
bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  const size_t colon = address.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  if (host == "localhost" || host == "::1" || host == "ip6-localhost") return true;
  in_addr v4;
  const std::string host_string(host);
  return inet_pton(AF_INET, host_string.c_str(), &v4) == 1 &&
         (ntohl(v4.s_addr) >> 24) == 127;  // 127.0.0.0/8
}

// 3/4 of the memory this process may use: the machine's, or its cgroup's limit (a
// container's memory limit) if lower. The default budget for all models' worst-case bytes.
uint64_t DefaultMaxMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  uint64_t memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  // cgroup v2 ("max" when unlimited), then v1.
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const absl::StatusOr<std::string> text = ReadFile(path);
    uint64_t limit = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &limit) && limit > 0) {
      memory = std::min(memory, limit);
      break;
    }
  }
  return memory / 4 * 3;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    // The server cannot start without it, whatever errno said.
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "=", path, ": ", text.status().message()));
  }
  if (text->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", flag, "=", path, ": it is empty"));
  }
  return text;
}

absl::Status ValidateOptions(const Server::Options& options) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("--listen is empty; give host:port, e.g. 127.0.0.1:50051");
  }
  if (options.auth_tokens_file.empty() && !options.allow_unauthenticated &&
      !IsLoopbackAddress(options.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", options.listen_address,
        " serves beyond this machine, but without --auth_tokens_file anyone who reaches it "
        "could read, overwrite and delete every tenant's models: give "
        "--auth_tokens_file=PATH (see `okl token new`), listen on 127.0.0.1, or pass "
        "--allow_unauthenticated to accept that"));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both, or neither");
  }
  if (!options.tls_client_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file (mutual TLS) needs TLS: give --tls_cert_file and --tls_key_file");
  }
  if (options.service.max_request_bytes < 1) {
    return absl::InvalidArgumentError("--max_request_bytes must be at least 1");
  }
  if (options.service.offload_threads < 0 || options.service.offload_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--offload_threads must be 0 (one per core) to 1024, got ",
        options.service.offload_threads));
  }
  if (options.rpc_threads < 0 || options.rpc_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rpc_threads must be 0 (one per core) to 1024, got ", options.rpc_threads));
  }
  if (options.service.max_concurrent_restores < 1) {
    return absl::InvalidArgumentError("--max_concurrent_restores must be at least 1");
  }
  if (!(options.host.quotas.max_requests_per_second_per_tenant >= 0) ||
      !std::isfinite(options.host.quotas.max_requests_per_second_per_tenant)) {
    return absl::InvalidArgumentError(
        "--max_requests_per_second_per_tenant must be a finite number >= 0 (0: no limit)");
  }
  if (options.host.quotas.max_models < 1) {
    return absl::InvalidArgumentError("--max_models must be at least 1");
  }
  if (options.host.max_dim < 1 || options.host.max_dim > kMaxDimension) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_dim must be 1 to ", kMaxDimension, ", got ", options.host.max_dim));
  }
  if (options.host.max_sparse_dim < 1 || options.host.max_sparse_dim > kMaxSparseDimension) {
    return absl::InvalidArgumentError(absl::StrCat("--max_sparse_dim must be 1 to ",
                                                   kMaxSparseDimension, ", got ",
                                                   options.host.max_sparse_dim));
  }
  if (options.host.max_terms < 1 || options.host.max_terms > kMaxTerms) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_terms must be 1 to ", kMaxTerms, ", got ", options.host.max_terms));
  }
  if (options.host.max_classes < 2 || options.host.max_classes > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat("--max_classes must be 2 to ", kMaxClasses,
                                                   ", got ", options.host.max_classes));
  }
  if (options.service.max_batch < 1) {
    return absl::InvalidArgumentError("--max_batch must be at least 1");
  }
  if (options.host.checkpoint_every < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--checkpoint_every must not be negative");
  }
  if (options.regret.every_steps < 1) {
    return absl::InvalidArgumentError("--regret_every_steps must be at least 1");
  }
  if (options.regret.threads < 1 || options.regret.threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--regret_threads must be between 1 and 64, got ", options.regret.threads));
  }
  if (options.regret_refresh < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--regret_refresh must not be negative");
  }
  if (options.max_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be at least 1, got ", options.max_message_bytes));
  }
  return absl::OkStatus();
}


// The host's options as given, with the memory budget resolved and the server's regret
// scheduler.
ModelHost::Options HostOptions(const Server::Options& options, RegretScheduler* scheduler) {
  ModelHost::Options host = options.host;
  if (host.quotas.max_memory_bytes == 0) host.quotas.max_memory_bytes = DefaultMaxMemoryBytes();
  host.regret_scheduler = scheduler;
  return host;
}

ServerMetrics::Options MetricsOptions(const Server::Options& options, const ModelHost* host) {
  ServerMetrics::Options metrics = options.metrics;
  metrics.host = host;
  return metrics;
}

}  // namespace

Server::Server(Options options)
    : options_(std::move(options)),
      regret_scheduler_({.threads = std::clamp(options_.regret.threads, 1, 64),
                         .every_steps = std::max<uint64_t>(options_.regret.every_steps, 1),
                         .niceness = options_.regret.niceness}),
      host_(HostOptions(options_, &regret_scheduler_)),
      metrics_(ModelsOf(&host_), &regret_scheduler_, MetricsOptions(options_, &host_)) {}

Server::~Server() {
  Shutdown(absl::Now());
  StopBackgroundWork();
}

void Server::RunBackgroundWork() {
  absl::Time last_regret_refresh = absl::Now();
  std::unique_lock<std::mutex> lock(background_mu_);
  while (!background_stop_) {
    background_wake_.wait_for(lock, kBackgroundPollInterval);
    if (background_stop_) break;
    lock.unlock();
    UpdateWritesHealth(host_.MaintainStore(absl::Now()).writable);
    host_.CheckpointModels(/*all=*/false);
    // Delayed feedback: the waits that have ended, a bounded number a model per round.
    host_.ExpireEvents(absl::Now(), kExpiredEventsPerRound);
    if (options_.regret_refresh > absl::ZeroDuration() &&
        absl::Now() - last_regret_refresh >= options_.regret_refresh) {
      last_regret_refresh = absl::Now();
      for (const std::shared_ptr<HostedModel>& model : host_.List("")) {
        model->entry().RefreshRegret();
      }
    }
    lock.lock();
  }
}

void Server::StopBackgroundWork() {
  // Once: two threads may shut down at once, and a thread is joined only once.
  std::call_once(background_stopped_, [this] {
    {
      std::lock_guard<std::mutex> lock(background_mu_);
      background_stop_ = true;
    }
    background_wake_.notify_all();
    if (background_thread_.joinable()) background_thread_.join();
  });
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Server::Credentials() const {
  if (options_.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  OKL_ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(options_.tls_key_file, "--tls_key_file"));
  OKL_ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(options_.tls_cert_file, "--tls_cert_file"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options_.tls_client_ca_file.empty()) {
    OKL_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                         ReadPemFile(options_.tls_client_ca_file, "--tls_client_ca_file"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::Status Server::ReloadAuthTokens() {
  if (authenticator_ == nullptr) {
    return absl::FailedPreconditionError("the server runs without --auth_tokens_file");
  }
  return authenticator_->Reload();
}

absl::Status Server::Start() {
  WriterLock lock(&mu_);
  if (server_ != nullptr) return absl::FailedPreconditionError("the server was started before");
  if (absl::Status status = ValidateOptions(options_); !status.ok()) return status;
  // Before listening: a store that cannot be restored stops the start, and no client
  // sees a server without its models.
  // (On failure the store stays open until ~Server: models restored so far refer to it.)
  if (absl::Status status = host_.Open(); !status.ok()) return status;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials();
  if (!credentials.ok()) return credentials.status();
  if (!options_.auth_tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<Authenticator>> authenticator =
        Authenticator::FromFile(options_.auth_tokens_file);
    if (!authenticator.ok()) return authenticator.status();
    authenticator_ = *std::move(authenticator);
  }
  service_ = std::make_unique<OklService>(
      &host_, authenticator_.get(),
      options_.service);
  service_->set_metrics(&metrics_);
  if (!options_.metrics_address.empty()) {
    if (absl::Status status = metrics_.StartExposer(options_.metrics_address); !status.ok()) {
      return status;
    }
  }

  // Health is served on the queues too (HealthService), not by gRPC's callback service.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, *credentials, &port);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind a port in use
  // without an error; a port must belong to one server.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  auto queue_threads = std::make_unique<CompletionQueueThreads>(
      std::vector<RawAsyncService*>{service_.get(), &health_},
      options_.rpc_threads > 0 ? options_.rpc_threads : UsableCpus(), &builder);
  builder.experimental().SetInterceptorCreators(metrics_.InterceptorCreators());
  if (!options_.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    if (server != nullptr) server->Shutdown();
    queue_threads->Stop();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", options_.listen_address,
                     "\" (--listen): the port is in use, or the address is not host:port"));
  }
  server_ = std::move(server);
  queue_threads->Start();
  queue_threads_ = std::move(queue_threads);
  port_ = port;
  SetHealth(false);
  background_thread_ = std::thread([this] {
    NameThisThread("okl-background");
    RunBackgroundWork();
  });
  service_->SetServing();
  SetHealth(true);
  return absl::OkStatus();
}

int Server::port() const {
  ReaderLock lock(&mu_);
  return port_;
}

int Server::metrics_port() const {
  ReaderLock lock(&mu_);
  return server_ == nullptr ? 0 : metrics_.exposer_port();
}

void Server::SetHealth(bool serving) {
  serving_ = serving;
  health_.SetServing("", serving);
  health_.SetServing(OklService::kServiceName, serving);
  health_.SetServing(OklService::kWritesHealthName, serving && store_writable_);
}

void Server::UpdateWritesHealth(bool store_writable) {
  WriterLock lock(&mu_);
  if (server_ == nullptr || store_writable == store_writable_) return;
  store_writable_ = store_writable;
  health_.SetServing(OklService::kWritesHealthName, serving_ && store_writable);
}

void Server::StartDraining() {
  WriterLock lock(&mu_);
  if (server_ == nullptr) return;
  service_->StartDraining();
  SetHealth(false);
}

void Server::Shutdown(absl::Time deadline) {
  grpc::Server* server;
  {
    ReaderLock lock(&mu_);
    server = server_.get();
  }
  if (server == nullptr) return;
  StartDraining();
  // gRPC's own Shutdown(deadline) would also wait for calls that never end by
  // themselves, such as health Watch streams (every channel with client-side health
  // checking holds one), so the okl calls are drained here first, then the watches end.
  while (service_->calls_in_flight() > 0 && absl::Now() < deadline) {
    absl::SleepFor(kDrainPollInterval);
  }
  health_.Shutdown();
  // What is left are other services' calls and okl calls past the deadline. The margin
  // lets the okl calls that just returned send their responses before gRPC cancels the
  // rest. Idempotent, and blocks a second caller until the first shutdown is complete.
  server->Shutdown(absl::ToChronoTime(std::min(deadline, absl::Now() + kFinishMargin)));
  server->Wait();
  // Every call has ended: the queues have nothing left but the requests gRPC cancelled.
  queue_threads_->Stop();
  // No call runs now: checkpoint every model with a log, so that the next start replays
  // nothing.
  StopBackgroundWork();
  if (!host_.has_store()) return;
  std::call_once(final_checkpoint_, [this] {
    const absl::Time start = absl::Now();
    const size_t written = host_.CheckpointModels(/*all=*/true);
    if (written > 0) {
      std::fprintf(stderr, "okl_server: checkpointed %zu models in %.3f s\n", written,
                   absl::ToDoubleSeconds(absl::Now() - start));
    }
  });
}

std::shared_ptr<grpc::Channel> Server::InProcessChannel() {
  ReaderLock lock(&mu_);
  if (server_ == nullptr) return nullptr;
  return server_->InProcessChannel(grpc::ChannelArguments());
}

}  // namespace okl
