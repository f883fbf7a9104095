// server/server.cc

#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {
namespace {

constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(5);
constexpr absl::Duration kFinishMargin = absl::Milliseconds(200);
// How often the background thread looks for models that are due.
constexpr std::chrono::milliseconds kBackgroundPollInterval(100);

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

absl::Status ValidateOptions(const Server::Options& options) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("--listen is empty; give host:port, e.g. 0.0.0.0:50051");
  }
  if (options.max_models < 1) {
    return absl::InvalidArgumentError("--max_models must be at least 1");
  }
  if (options.max_dim < 1 || options.max_dim > kMaxDimension) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_dim must be 1 to ", kMaxDimension, ", got ", options.max_dim));
  }
  if (options.max_terms < 1 || options.max_terms > kMaxTerms) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_terms must be 1 to ", kMaxTerms, ", got ", options.max_terms));
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError("--max_batch must be at least 1");
  }
  if (options.checkpoint_every < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--checkpoint_every must not be negative");
  }
  if (options.regret_every_steps < 1) {
    return absl::InvalidArgumentError("--regret_every_steps must be at least 1");
  }
  if (options.regret_threads < 1 || options.regret_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--regret_threads must be between 1 and 64, got ", options.regret_threads));
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

}  // namespace

Server::Server(Options options)
    : options_(std::move(options)),
      regret_scheduler_({.threads = std::clamp(options_.regret_threads, 1, 64),
                         .every_steps = std::max<uint64_t>(options_.regret_every_steps, 1)}),
      registry_({.max_models = options_.max_models, .regret_scheduler = &regret_scheduler_}),
      service_(&registry_, {.max_dim = options_.max_dim,
                            .max_terms = options_.max_terms,
                            .max_batch = options_.max_batch,
                            .observe_stream_api = options_.observe_stream_api}),
      metrics_(&registry_, &regret_scheduler_, {.max_models = options_.metrics_max_models}) {
  service_.set_metrics(&metrics_);
}

Server::~Server() {
  Shutdown(absl::Now());
  StopBackgroundWork();
}

absl::Status Server::OpenStore() {
  if (options_.data_dir.empty()) return absl::OkStatus();
  OKL_ASSIGN_OR_RETURN(
      store_, ModelStore::Open(options_.data_dir, {.sync_writes = options_.sync_writes}));
  OKL_ASSIGN_OR_RETURN(
      RestoreStats stats,
      RestoreModels(
          store_.get(), &registry_,
          {.skip_damaged = options_.skip_damaged_models, .warn = [](absl::string_view line) {
             std::fprintf(stderr, "okl_server: %s\n", std::string(line).c_str());
           }}));
  std::fprintf(stderr,
               "okl_server: restored %zu model%s (%llu log batches, %llu examples replayed) "
               "in %.3f s\n",
               stats.models, stats.models == 1 ? "" : "s", static_cast<unsigned long long>(stats.log_batches),
               static_cast<unsigned long long>(stats.log_examples),
               absl::ToDoubleSeconds(stats.elapsed));
  service_.set_store(store_.get());
  return absl::OkStatus();
}

void Server::RunBackgroundWork() {
  absl::Time last_regret_refresh = absl::Now();
  std::unique_lock<std::mutex> lock(background_mu_);
  while (!background_stop_) {
    background_wake_.wait_for(lock, kBackgroundPollInterval);
    if (background_stop_) break;
    lock.unlock();
    CheckpointModels(/*all=*/false);
    if (options_.regret_refresh > absl::ZeroDuration() &&
        absl::Now() - last_regret_refresh >= options_.regret_refresh) {
      last_regret_refresh = absl::Now();
      for (const std::shared_ptr<ModelEntry>& entry : registry_.List("")) {
        entry->RefreshRegret();
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

size_t Server::CheckpointModels(bool all) {
  if (store_ == nullptr) return 0;
  size_t written = 0;
  const absl::Time now = absl::Now();
  for (const std::shared_ptr<ModelEntry>& entry : registry_.List("")) {
    auto* log = dynamic_cast<ModelLog*>(entry->journal().get());
    if (log == nullptr) continue;
    if (!all && !log->CheckpointDue(options_.checkpoint_every_examples,
                                    options_.checkpoint_every, now)) {
      continue;
    }
    absl::StatusOr<bool> done = CheckpointEntry(*entry);
    if (!done.ok()) {
      // The log keeps every record until a checkpoint succeeds, so nothing is lost; the
      // next round tries again.
      std::fprintf(stderr, "okl_server: checkpoint of model %s/%s failed: %s\n",
                   entry->tenant().c_str(), entry->model().c_str(),
                   std::string(done.status().message()).c_str());
    } else if (*done) {
      ++written;
    }
  }
  return written;
}

absl::Status Server::Start() {
  WriterLock lock(&mu_);
  if (server_ != nullptr) return absl::FailedPreconditionError("the server was started before");
  if (absl::Status status = ValidateOptions(options_); !status.ok()) return status;
  // Before listening: a store that cannot be restored stops the start, and no client
  // sees a server without its models.
  // (On failure the store stays open until ~Server: models restored so far refer to it.)
  if (absl::Status status = OpenStore(); !status.ok()) return status;
  if (!options_.metrics_address.empty()) {
    if (absl::Status status = metrics_.StartExposer(options_.metrics_address); !status.ok()) {
      return status;
    }
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, grpc::InsecureServerCredentials(), &port);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind a port in use
  // without an error; a port must belong to one server.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.RegisterService(&service_);
  builder.experimental().SetInterceptorCreators(metrics_.InterceptorCreators());
  if (!options_.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    if (server != nullptr) server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", options_.listen_address,
                     "\" (--listen): the port is in use, or the address is not host:port"));
  }
  server_ = std::move(server);
  port_ = port;
  SetHealth(false);
  background_thread_ = std::thread([this] { RunBackgroundWork(); });
  service_.SetServing();
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
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", serving);
  health->SetServingStatus(OklService::kServiceName, serving);
}

void Server::StartDraining() {
  WriterLock lock(&mu_);
  if (server_ == nullptr) return;
  service_.StartDraining();
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
  // checking holds one), so the okl calls are drained here first.
  while (service_.calls_in_flight() > 0 && absl::Now() < deadline) {
    absl::SleepFor(kDrainPollInterval);
  }
  // What is left are other services' calls and okl calls past the deadline. The margin
  // lets the okl calls that just returned send their responses before gRPC cancels the
  // rest. Idempotent, and blocks a second caller until the first shutdown is complete.
  server->Shutdown(absl::ToChronoTime(std::min(deadline, absl::Now() + kFinishMargin)));
  server->Wait();
  // No call runs now: checkpoint every model with a log, so that the next start replays
  // nothing.
  StopBackgroundWork();
  if (store_ == nullptr) return;
  std::call_once(final_checkpoint_, [this] {
    const absl::Time start = absl::Now();
    const size_t written = CheckpointModels(/*all=*/true);
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
