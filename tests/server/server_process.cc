// tests/server/server_process.cc

#include "tests/server/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/runtime/file.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

extern char** environ;

namespace okl::testing {
namespace {

using ::google::protobuf::UnknownField;
using ::google::protobuf::UnknownFieldSet;
using ::grpc::health::v1::HealthCheckResponse;

// A draining gRPC server waits until each client acknowledges its GOAWAY, and a C++
// client reads an idle connection only when its "backup poller" runs, every 5 s by
// default: every Stop() would take 5 s. Polling every 50 ms makes it take milliseconds.
// gRPC reads the variable in its first grpc_init(), hence a static initializer (an
// explicit setting in the environment wins).
const bool kFastBackupPolling = [] {
  ::setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50", /*overwrite=*/0);
  return true;
}();

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The file's contents, or "" if it cannot be read (a log the server has not written yet).
std::string ReadFileOrEmpty(const std::string& path) { return ReadFile(path).value_or(""); }

// Appends a protobuf varint.
void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Appends a length-delimited field (string, bytes or message).
void AppendLengthDelimited(int field, absl::string_view bytes, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | 2, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

}  // namespace

std::string ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kUnknown:
      return "UNKNOWN";
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return absl::StrCat("ServingStatus(", static_cast<int>(status), ")");
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

namespace {

using Metadata = std::vector<std::pair<std::string, std::string>>;

// Adds `metadata` to every call's initial metadata.
class MetadataInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(std::shared_ptr<const Metadata> metadata)
      : metadata_(std::move(metadata)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* sent = methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *metadata_) sent->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const Metadata> metadata_;
};

class MetadataInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(std::shared_ptr<const Metadata> metadata)
      : metadata_(std::move(metadata)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new MetadataInterceptor(metadata_);
  }

 private:
  const std::shared_ptr<const Metadata> metadata_;
};

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& root_certs,
                                                         const std::string& cert_chain,
                                                         const std::string& private_key) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = root_certs;
  ssl.pem_cert_chain = cert_chain;
  ssl.pem_private_key = private_key;
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, bool own_connection) {
  return MakeChannel(address, ChannelSecurity(), own_connection);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelSecurity& security,
                                           bool own_connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A server that is not up yet (or restarting) is retried soon, not after gRPC's
  // default 1 s backoff: the tests' waits are bounded and short. Not
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as each connection attempt's
  // deadline (20 s by default), and at 50 ms a TLS handshake with a sanitized server on a
  // loaded machine timed out ("connection attempt timed out before receiving SETTINGS
  // frame"), failing the call UNAVAILABLE.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!security.tls_target_name.empty()) {
    args.SetSslTargetNameOverride(security.tls_target_name);
  }
  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      security.credentials != nullptr ? security.credentials
                                      : grpc::InsecureChannelCredentials();
  auto metadata = std::make_shared<Metadata>(security.metadata);
  if (!security.bearer_token.empty()) {
    metadata->emplace_back("authorization", absl::StrCat("Bearer ", security.bearer_token));
  }
  if (metadata->empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<MetadataInterceptorFactory>(std::move(metadata)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  struct Socket {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ~Socket() {
      if (fd >= 0) ::close(fd);
    }
  } sock;
  if (sock.fd < 0) return ErrnoError("socket");
  const timeval timeout = {.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(sock.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(sock.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(sock.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        ::send(sock.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return ErrnoError("send");
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::recv(sock.fd, buffer, sizeof(buffer), 0);
    if (n < 0) return absl::DeadlineExceededError("recv failed or timed out");
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  const size_t end_of_headers = response.find("\r\n\r\n");
  if (end_of_headers == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no end of headers in: ", response));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (!absl::StartsWith(status_line, "HTTP/1.") || !absl::StrContains(status_line, " 200 ")) {
    return absl::UnavailableError(absl::StrCat("HTTP status: ", status_line));
  }
  return response.substr(end_of_headers + 4);
}

absl::StatusOr<double> MetricValue(int port, absl::string_view series) {
  absl::StatusOr<std::string> text = HttpGet(port, "/metrics");
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (line.size() > series.size() && absl::StartsWith(line, series) &&
        line[series.size()] == ' ') {
      double value = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series, " on /metrics"));
}

int CommandResult::exit_code() const {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: no argv");
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  arg_pointers.push_back(nullptr);

  // This process's environment, with `env`'s names replaced.
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const absl::string_view current(*entry);
    const absl::string_view name = current.substr(0, current.find('='));
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& given) {
      return absl::StartsWith(given, absl::StrCat(name, "="));
    });
    if (!replaced) environment.emplace_back(current);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> env_pointers;
  for (std::string& entry : environment) env_pointers.push_back(entry.data());
  env_pointers.push_back(nullptr);

  std::string dir_template =
      (std::filesystem::temp_directory_path() / "okl_command.XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) return ErrnoError("mkdtemp");
  const std::string out_path = dir_template + "/stdout";
  const std::string err_path = dir_template + "/stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, arg_pointers[0], &actions, nullptr,
                                    arg_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  CommandResult result;
  absl::Status status;
  if (spawned != 0) {
    status =
        absl::InternalError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(spawned)));
  } else {
    while (::waitpid(pid, &result.wait_status, 0) < 0) {
      if (errno != EINTR) {
        status = ErrnoError("waitpid");
        break;
      }
    }
    result.out = ReadFileOrEmpty(out_path);
    result.err = ReadFileOrEmpty(err_path);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_template, ignored);
  if (!status.ok()) return status;
  return result;
}

TempDir::TempDir(absl::string_view prefix) {
  std::string path = (std::filesystem::temp_directory_path() /
                      absl::StrCat(prefix, ".XXXXXX")).string();
  if (::mkdtemp(path.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  path_ = path;
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

// --- ServerProcess ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    ServerProcessOptions options) {
  auto server = absl::WrapUnique(new ServerProcess());
  server->options_ = std::move(options);
  // The tests keep absl::Mutex's deadlock detection on, which okl_server turns off.
  std::vector<std::string> flags = {"--mutex_deadlock_detection"};
  flags.insert(flags.end(), server->options_.flags.begin(), server->options_.flags.end());
  absl::StatusOr<std::unique_ptr<SpawnedServer>> process =
      SpawnedServer::Start({.binary = ServerBinary(),
                            .flags = std::move(flags),
                            .listen = server->options_.listen,
                            .data_dir = server->options_.data_dir,
                            .temp_dir_prefix = "okl_server_test",
                            .file_size_limit = server->options_.file_size_limit,
                            .launcher = server->options_.launcher});
  if (!process.ok()) return process.status();
  server->process_ = *std::move(process);

  if (server->options_.wait_until_serving) {
    absl::Status status = server->WaitUntilServing();
    if (!status.ok()) return status;  // the destructor kills the process
  }
  return server;
}

// The channel and stub go before the process they connect to.
ServerProcess::~ServerProcess() {
  stub_.reset();
  channel_.reset();
}

absl::Status ServerProcess::WaitUntilServing() {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  absl::StatusOr<int> port = process_->WaitForPort(deadline);
  if (!port.ok()) return port.status();
  port_ = *port;
  channel_ = MakeChannel(address(), options_.channel_security);
  stub_ = v1::OnlineKernelLearning::NewStub(channel_);
  return process_->WaitForServing(channel_, deadline);
}

std::string ServerProcess::address() const {
  const std::vector<std::string> parts = absl::StrSplit(options_.listen, ':');
  std::string host = "127.0.0.1";
  if (!options_.connect_host.empty()) {
    host = options_.connect_host;
  } else if (parts.size() == 2 && !parts[0].empty() && parts[0] != "0.0.0.0") {
    host = parts[0];
  }
  int port = port_;
  if (port == 0 && parts.size() == 2) (void)absl::SimpleAtoi(parts[1], &port);
  return absl::StrCat(host, ":", port);
}

std::shared_ptr<grpc::Channel> ServerProcess::NewChannel() const {
  return MakeChannel(address(), options_.channel_security, /*own_connection=*/true);
}

absl::Status ServerProcess::Signal(int signal) { return process_->Signal(signal); }

bool ServerProcess::Running() { return process_->Running(); }

absl::StatusOr<int> ServerProcess::WaitForExit(absl::Duration timeout) {
  return process_->WaitForExit(timeout);
}

absl::StatusOr<int> ServerProcess::Stop(absl::Duration timeout) {
  return process_->Stop(timeout);
}

absl::StatusOr<int> ServerProcess::Kill() { return process_->Kill(); }

std::string ServerProcess::Log() const { return process_->Log(); }

// --- GenericCall -----------------------------------------------------------------------

GenericCall::GenericCall(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& method, absl::Duration deadline,
                         bool wait_for_ready)
    : stub_(channel) {
  context_.set_deadline(DeadlineAfter(deadline));
  context_.set_wait_for_ready(wait_for_ready);
  call_ = stub_.PrepareCall(&context_, method, &queue_);
  started_ = true;
  call_->StartCall(this);
  if (!Wait(this)) Cancel();  // Finish() reports why
}

GenericCall::~GenericCall() {
  if (started_ && !finished_) {
    context_.TryCancel();
    Finish();
  }
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

bool GenericCall::Wait(void* tag) {
  void* got = nullptr;
  bool ok = false;
  // Every operation completes by the call's deadline, so this cannot block forever.
  if (!queue_.Next(&got, &ok)) return false;
  return got == tag && ok;
}

bool GenericCall::Write(const std::string& message) {
  grpc::Slice slice(message);
  grpc::ByteBuffer buffer(&slice, 1);
  call_->Write(buffer, this);
  return Wait(this);
}

bool GenericCall::WritesDone() {
  call_->WritesDone(this);
  return Wait(this);
}

std::optional<std::string> GenericCall::Read() {
  grpc::ByteBuffer buffer;
  call_->Read(&buffer, this);
  if (!Wait(this)) return std::nullopt;
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return std::nullopt;
  std::string message;
  for (const grpc::Slice& slice : slices) {
    message.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return message;
}

grpc::Status GenericCall::Finish() {
  grpc::Status status;
  call_->Finish(&status, this);
  Wait(this);
  finished_ = true;
  return status;
}

// --- Health and reflection -------------------------------------------------------------

// The harness's enum is the generated one under test-friendly names.
static_assert(static_cast<int>(ServingStatus::kUnknown) == HealthCheckResponse::UNKNOWN);
static_assert(static_cast<int>(ServingStatus::kServing) == HealthCheckResponse::SERVING);
static_assert(static_cast<int>(ServingStatus::kNotServing) == HealthCheckResponse::NOT_SERVING);
static_assert(static_cast<int>(ServingStatus::kServiceUnknown) ==
              HealthCheckResponse::SERVICE_UNKNOWN);

absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          absl::string_view service, absl::Duration timeout) {
  absl::StatusOr<HealthCheckResponse::ServingStatus> status =
      CheckServingStatus(channel, service, timeout);
  if (!status.ok()) return status.status();
  return static_cast<ServingStatus>(*status);
}

HealthWatch::HealthWatch(const std::shared_ptr<grpc::Channel>& channel,
                         absl::string_view service, absl::Duration deadline,
                         bool wait_for_ready)
    : stub_(grpc::health::v1::Health::NewStub(channel)) {
  context_.set_deadline(DeadlineAfter(deadline));
  context_.set_wait_for_ready(wait_for_ready);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  reader_ = stub_->Watch(&context_, request);
}

HealthWatch::~HealthWatch() {
  if (!status_.has_value()) {
    context_.TryCancel();
    Finish();
  }
}

std::optional<ServingStatus> HealthWatch::Next() {
  HealthCheckResponse response;
  if (!reader_->Read(&response)) return std::nullopt;
  return static_cast<ServingStatus>(response.status());
}

grpc::Status HealthWatch::Finish() {
  if (!status_.has_value()) status_ = reader_->Finish();
  return *status_;
}

absl::StatusOr<std::vector<std::string>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  GenericCall call(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                   timeout);
  // ServerReflectionRequest { list_services = 7: "*" } ("the content is not checked").
  std::string request;
  AppendLengthDelimited(7, "*", &request);
  call.Write(request);
  call.WritesDone();
  std::optional<std::string> response = call.Read();
  grpc::Status status = call.Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!response.has_value()) return absl::InternalError("reflection sent no response");

  // ServerReflectionResponse { list_services_response = 6: ListServiceResponse
  //   { repeated ServiceResponse service = 1 { string name = 1 } }; error_response = 7 }
  UnknownFieldSet fields;
  if (!fields.ParseFromString(*response)) {
    return absl::InternalError("unparsable ServerReflectionResponse");
  }
  std::vector<std::string> names;
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& field = fields.field(i);
    if (field.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    if (field.number() == 7) {
      return absl::InternalError("reflection answered with an ErrorResponse");
    }
    if (field.number() != 6) continue;
    UnknownFieldSet list;
    if (!list.ParseFromString(field.length_delimited())) {
      return absl::InternalError("unparsable ListServiceResponse");
    }
    for (int j = 0; j < list.field_count(); ++j) {
      if (list.field(j).number() != 1 ||
          list.field(j).type() != UnknownField::TYPE_LENGTH_DELIMITED) {
        continue;
      }
      UnknownFieldSet service;
      if (!service.ParseFromString(list.field(j).length_delimited())) {
        return absl::InternalError("unparsable ServiceResponse");
      }
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1 &&
            service.field(k).type() == UnknownField::TYPE_LENGTH_DELIMITED) {
          names.push_back(service.field(k).length_delimited());
        }
      }
    }
  }
  return names;
}

}  // namespace okl::testing
