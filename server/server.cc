// server/server.cc

#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace okl {
namespace {

constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(5);
constexpr absl::Duration kFinishMargin = absl::Milliseconds(200);

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
  if (options.max_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be at least 1, got ", options.max_message_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

Server::Server(Options options)
    : options_(std::move(options)),
      registry_({.max_models = options_.max_models}),
      service_(&registry_, {.max_dim = options_.max_dim,
                            .max_terms = options_.max_terms,
                            .max_batch = options_.max_batch,
                            .observe_stream_api = options_.observe_stream_api}) {}

Server::~Server() { Shutdown(absl::Now()); }

absl::Status Server::Start() {
  WriterLock lock(&mu_);
  if (server_ != nullptr) return absl::FailedPreconditionError("the server was started before");
  if (absl::Status status = ValidateOptions(options_); !status.ok()) return status;

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
  // Recovery of stored models (the durability issue) goes here, before SERVING.
  service_.SetServing();
  SetHealth(true);
  return absl::OkStatus();
}

int Server::port() const {
  ReaderLock lock(&mu_);
  return port_;
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
}

std::shared_ptr<grpc::Channel> Server::InProcessChannel() {
  ReaderLock lock(&mu_);
  if (server_ == nullptr) return nullptr;
  return server_->InProcessChannel(grpc::ChannelArguments());
}

}  // namespace okl
