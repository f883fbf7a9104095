// tests/server/security_test.cc
//
// okl_server's security, against the real binary over real TLS (certificates made with
// openssl by TestCertificates) and a real tokens file:
//   - TLS and mutual TLS: who completes a handshake and who does not;
//   - the authorization matrix: every kind of caller (no token, malformed headers, an
//     unknown token, and five grants) x every RPC x its own tenant and another one, each
//     cell with the exact status code, and a rejected call checked to have changed
//     nothing (every model's fingerprint and the list of models);
//   - ListModels' visibility per token, and health open to everyone;
//   - token rotation on SIGHUP, and a broken tokens file keeping the old tokens;
//   - secure by default: a non-loopback --listen without tokens refuses to start;
//   - no token in the server's log or in a status message;
//   - --metrics_model_labels=names|hashed|none on /metrics;
//   - okl::Client and the `okl` tool (OKL_BINARY) end to end over mutual TLS with a token.
//
// Under ctest every test runs in its own process with its own server and certificates.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "server/tokens.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"

#ifndef OKL_BINARY
#error "OKL_BINARY must name the okl binary (set by tests/server/CMakeLists.txt)"
#endif

namespace okl::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Code = ::grpc::StatusCode;

constexpr char kConfigText[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.01
  budget { max_terms: 64 }
)pb";

constexpr absl::Duration kWait = absl::Seconds(20);

// --- Callers ---------------------------------------------------------------------------

// Who calls: without a token, with a malformed authorization (the admin's valid token
// under another scheme, or bare), with a token the server does not know, or with one of
// the five tokens of the tokens file.
enum class Who {
  kNoToken,
  kWrongScheme,
  kBareToken,
  kUnknownToken,
  kReadA,
  kWriteA,
  kWriteAB,
  kReadAll,
  kAdmin,
};

constexpr Who kEveryone[] = {Who::kNoToken,      Who::kWrongScheme, Who::kBareToken,
                             Who::kUnknownToken, Who::kReadA,       Who::kWriteA,
                             Who::kWriteAB,      Who::kReadAll,     Who::kAdmin};

// The tokens file's grants: role and tenants column.
struct TokenSpec {
  Who who;
  const char* role;
  const char* tenants;
};
constexpr TokenSpec kTokenSpecs[] = {
    {Who::kReadA, "read", "a"},   {Who::kWriteA, "write", "a"}, {Who::kWriteAB, "write", "a,b"},
    {Who::kReadAll, "read", "*"}, {Who::kAdmin, "admin", "*"},
};

std::string WhoName(Who who) {
  switch (who) {
    case Who::kNoToken:
      return "NoToken";
    case Who::kWrongScheme:
      return "WrongScheme";
    case Who::kBareToken:
      return "BareToken";
    case Who::kUnknownToken:
      return "UnknownToken";
    case Who::kReadA:
      return "ReadA";
    case Who::kWriteA:
      return "WriteA";
    case Who::kWriteAB:
      return "WriteAB";
    case Who::kReadAll:
      return "ReadAll";
    case Who::kAdmin:
      return "Admin";
  }
  return "?";
}

// So that gtest and ctest show a cell's parameters by name.
void PrintTo(Who who, std::ostream* out) { *out << WhoName(who); }

bool HasValidToken(Who who) {
  return who != Who::kNoToken && who != Who::kWrongScheme && who != Who::kBareToken &&
         who != Who::kUnknownToken;
}

bool Covers(Who who, absl::string_view tenant) {
  switch (who) {
    case Who::kReadA:
    case Who::kWriteA:
      return tenant == "a";
    case Who::kWriteAB:
      return tenant == "a" || tenant == "b";
    case Who::kReadAll:
    case Who::kAdmin:
      return true;
    default:
      return false;
  }
}

bool CanWrite(Who who) {
  return who == Who::kWriteA || who == Who::kWriteAB || who == Who::kAdmin;
}

// --- The RPCs --------------------------------------------------------------------------

enum class Rpc {
  kCreateModel,
  kGetModel,
  kListModels,
  kDeleteModel,
  kObserve,
  kObserveStream,
  kPredict,
  kSnapshot,
  kRestore,
  kFenceTenant,
};

constexpr Rpc kEveryRpc[] = {Rpc::kCreateModel,   Rpc::kGetModel, Rpc::kListModels,
                             Rpc::kDeleteModel,   Rpc::kObserve,  Rpc::kObserveStream,
                             Rpc::kPredict,       Rpc::kSnapshot, Rpc::kRestore,
                             Rpc::kFenceTenant};

std::string RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kCreateModel:
      return "CreateModel";
    case Rpc::kGetModel:
      return "GetModel";
    case Rpc::kListModels:
      return "ListModels";
    case Rpc::kDeleteModel:
      return "DeleteModel";
    case Rpc::kObserve:
      return "Observe";
    case Rpc::kObserveStream:
      return "ObserveStream";
    case Rpc::kPredict:
      return "Predict";
    case Rpc::kSnapshot:
      return "Snapshot";
    case Rpc::kRestore:
      return "Restore";
    case Rpc::kFenceTenant:
      return "FenceTenant";
  }
  return "?";
}

void PrintTo(Rpc rpc, std::ostream* out) { *out << RpcName(rpc); }

bool IsWrite(Rpc rpc) {
  return rpc == Rpc::kCreateModel || rpc == Rpc::kDeleteModel || rpc == Rpc::kObserve ||
         rpc == Rpc::kObserveStream || rpc == Rpc::kRestore;
}

// The contract: no valid token, UNAUTHENTICATED; a tenant or a method the grant does not
// cover, PERMISSION_DENIED; otherwise the RPC's own outcome (OK in the matrix's calls).
Code Expected(Who who, Rpc rpc, absl::string_view tenant) {
  if (!HasValidToken(who)) return Code::UNAUTHENTICATED;
  if (!Covers(who, tenant)) return Code::PERMISSION_DENIED;
  if (IsWrite(rpc) && !CanWrite(who)) return Code::PERMISSION_DENIED;
  if (rpc == Rpc::kFenceTenant && who != Who::kAdmin) return Code::PERMISSION_DENIED;
  return Code::OK;
}

// --- A server with TLS and tokens ------------------------------------------------------

absl::Status WriteFile(const std::string& path, absl::string_view contents) {
  // Written beside and renamed, so that the server never reads half a file.
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << contents;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ", path));
  }
  return absl::OkStatus();
}

// A tokens-file line for `token`.
std::string TokenLine(absl::string_view token, absl::string_view role,
                      absl::string_view tenants) {
  return absl::StrCat(Sha256Hex(token), " ", role, " ", tenants, "\n");
}

struct SecureServerOptions {
  bool mutual_tls = false;
  std::vector<std::string> flags = {};
  std::string listen = "127.0.0.1:0";
  std::string connect_host = "";
};

// okl_server with TLS (mutual if asked) and a tokens file granting kTokenSpecs, one fresh
// token each; the harness's channel is TLS (with the client certificate under mutual TLS)
// and carries the admin's token.
class SecureServer {
 public:
  static absl::StatusOr<std::unique_ptr<SecureServer>> Start(SecureServerOptions options = {}) {
    auto server = std::unique_ptr<SecureServer>(new SecureServer());
    server->mutual_tls_ = options.mutual_tls;
    absl::StatusOr<std::unique_ptr<TestCertificates>> certs = TestCertificates::Generate();
    if (!certs.ok()) return certs.status();
    server->certs_ = *std::move(certs);
    std::string file;
    for (const TokenSpec& spec : kTokenSpecs) {
      absl::StatusOr<std::string> token = NewToken();
      if (!token.ok()) return token.status();
      server->tokens_[spec.who] = *token;
      absl::StrAppend(&file, TokenLine(*token, spec.role, spec.tenants));
    }
    absl::StatusOr<std::string> unknown = NewToken();
    if (!unknown.ok()) return unknown.status();
    server->unknown_token_ = *unknown;
    server->tokens_file_ = server->certs_->dir() + "/tokens";
    if (absl::Status written = WriteFile(server->tokens_file_, file); !written.ok()) {
      return written;
    }

    ServerProcessOptions process;
    process.flags = server->certs_->ServerFlags(options.mutual_tls);
    process.flags.push_back(absl::StrCat("--auth_tokens_file=", server->tokens_file_));
    process.flags.insert(process.flags.end(), options.flags.begin(), options.flags.end());
    process.listen = options.listen;
    process.connect_host = options.connect_host;
    process.channel_security = server->SecurityFor(Who::kAdmin);
    absl::StatusOr<std::unique_ptr<ServerProcess>> started =
        ServerProcess::Start(std::move(process));
    if (!started.ok()) return started.status();
    server->process_ = *std::move(started);
    return server;
  }

  ServerProcess& process() { return *process_; }
  Stub& admin() { return process_->stub(); }
  const TestCertificates& certs() const { return *certs_; }
  const std::string& tokens_file() const { return tokens_file_; }

  // The token of a caller that has one in the file (the admin's for the malformed ones),
  // or the unknown one.
  const std::string& token(Who who) const {
    if (who == Who::kUnknownToken) return unknown_token_;
    if (!HasValidToken(who)) return tokens_.at(Who::kAdmin);
    return tokens_.at(who);
  }

  // Every token this test knows: the file's and the unknown one.
  std::vector<std::string> AllTokens() const {
    std::vector<std::string> all = {unknown_token_};
    for (const auto& [who, token] : tokens_) all.push_back(token);
    return all;
  }

  // TLS trusting the test CA (with the client certificate under mutual TLS) and `who`'s
  // authorization header.
  ChannelSecurity SecurityFor(Who who) const {
    ChannelSecurity security;
    security.credentials = mutual_tls_ ? TlsCredentials(certs_->ca.pem, certs_->client_cert.pem,
                                                        certs_->client_key.pem)
                                       : TlsCredentials(certs_->ca.pem);
    switch (who) {
      case Who::kNoToken:
        break;
      case Who::kWrongScheme:
        security.metadata = {{"authorization", absl::StrCat("Basic ", token(who))}};
        break;
      case Who::kBareToken:
        security.metadata = {{"authorization", token(who)}};
        break;
      default:
        security.bearer_token = token(who);
    }
    return security;
  }

  std::unique_ptr<Stub> StubFor(Who who) const {
    return v1::OnlineKernelLearning::NewStub(
        MakeChannel(process_->address(), SecurityFor(who), /*own_connection=*/true));
  }

 private:
  SecureServer() = default;

  bool mutual_tls_ = false;
  std::unique_ptr<TestCertificates> certs_;
  std::map<Who, std::string> tokens_;
  std::string unknown_token_;
  std::string tokens_file_;
  std::unique_ptr<ServerProcess> process_;
};

// Waits until the server's log holds `text` at least `count` times.
::testing::AssertionResult LogEventually(ServerProcess& server, const std::string& text,
                                         int count = 1) {
  const absl::Time deadline = absl::Now() + kWait;
  int seen = 0;
  while (absl::Now() < deadline) {
    const std::string log = server.Log();
    seen = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) {
      ++seen;
    }
    if (seen >= count) return ::testing::AssertionSuccess();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return ::testing::AssertionFailure()
         << "the log holds \"" << text << "\" " << seen << " time(s), not " << count << ":\n"
         << server.Log();
}

// --- Models and their fingerprints -----------------------------------------------------

const v1::ModelConfig& Config() {
  static const v1::ModelConfig* const config = new v1::ModelConfig(ParseConfig(kConfigText));
  return *config;
}

const std::vector<v1::Vector>& Probes() {
  static const auto* const probes = new std::vector<v1::Vector>(MakeProbes(2, 5, /*seed=*/7));
  return *probes;
}

// Creates tenant/model and observes `n` examples from `seed`.
::testing::AssertionResult MakeModel(Stub& stub, absl::string_view tenant,
                                     absl::string_view model, size_t n, uint64_t seed) {
  const v1::ModelRef ref = Ref(tenant, model);
  if (grpc::Status status = CreateModel(stub, ref, Config()); !status.ok()) {
    return ::testing::AssertionFailure()
           << "CreateModel " << RefName(ref) << ": " << Describe(status);
  }
  v1::ObserveResponse response;
  if (grpc::Status status = Observe(stub, ref, MakeStream(Config(), n, seed), &response);
      !status.ok()) {
    return ::testing::AssertionFailure()
           << "Observe " << RefName(ref) << ": " << Describe(status);
  }
  return ::testing::AssertionSuccess();
}

// Every model the server holds ("tenant/model"), with its fingerprint, as the admin
// sees it.
using World = std::map<std::string, ModelFingerprint>;

absl::StatusOr<World> SeeWorld(Stub& admin) {
  v1::ListModelsResponse list;
  if (grpc::Status status = ListModels(admin, "", &list); !status.ok()) {
    return absl::InternalError(absl::StrCat("ListModels: ", Describe(status)));
  }
  World world;
  for (const v1::ModelInfo& info : list.models()) {
    absl::StatusOr<ModelFingerprint> fingerprint = Fingerprint(admin, info.ref(), Probes());
    if (!fingerprint.ok()) return fingerprint.status();
    world[RefName(info.ref())] = *fingerprint;
  }
  return world;
}

uint64_t Steps(const ModelFingerprint& fingerprint) {
  v1::ModelStats stats;
  stats.ParseFromString(fingerprint.stats);
  return stats.steps();
}

// --- TLS and mutual TLS ----------------------------------------------------------------

// A call that must fail at the transport: no TLS session, so no okl status.
grpc::Status GetModelOver(const std::shared_ptr<grpc::Channel>& channel) {
  std::unique_ptr<Stub> stub = v1::OnlineKernelLearning::NewStub(channel);
  v1::ModelInfo info;
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  return stub->GetModel(&context, Ref("t", "m"), &info);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TestCertificates>> certs = TestCertificates::Generate();
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *std::move(certs);
  }

  // A TLS server (mutual if asked) without tokens, whose harness channel trusts the CA
  // (and presents the client certificate under mutual TLS).
  std::unique_ptr<ServerProcess> StartServer(bool mutual, std::string connect_host = "") {
    ServerProcessOptions options;
    options.flags = certs_->ServerFlags(mutual);
    options.channel_security.credentials =
        mutual ? TlsCredentials(certs_->ca.pem, certs_->client_cert.pem, certs_->client_key.pem)
               : TlsCredentials(certs_->ca.pem);
    options.connect_host = std::move(connect_host);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  std::shared_ptr<grpc::Channel> Channel(const ServerProcess& server,
                                         std::shared_ptr<grpc::ChannelCredentials> credentials,
                                         std::string tls_target_name = "") {
    return MakeChannel(
        server.address(),
        {.credentials = std::move(credentials), .tls_target_name = std::move(tls_target_name)},
        /*own_connection=*/true);
  }

  std::unique_ptr<TestCertificates> certs_;
};

TEST_F(TlsTest, ServerAcceptsAClientThatTrustsItsCaAndServesHealthOverTls) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<ServingStatus> health = CheckHealth(server->channel(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("t", "m"), Config())));
  v1::ModelInfo info;
  EXPECT_TRUE(IsOk(GetModel(server->stub(), Ref("t", "m"), &info)));
}

TEST_F(TlsTest, ClientMayConnectByTheNameLocalhost) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false, "localhost");
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->address(), StartsWith("localhost:"));
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("t", "m"), Config())));
}

TEST_F(TlsTest, PlaintextClientGetsUnavailable) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<grpc::Channel> plaintext = MakeChannel(server->address(), true);
  EXPECT_TRUE(HasCode(GetModelOver(plaintext), Code::UNAVAILABLE));
  absl::StatusOr<ServingStatus> health = CheckHealth(plaintext, "");
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable) << health.status();
}

TEST_F(TlsTest, ClientTrustingAnotherCaGetsUnavailable) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(HasCode(GetModelOver(Channel(*server, TlsCredentials(certs_->other_ca.pem))),
                      Code::UNAVAILABLE));
}

TEST_F(TlsTest, ClientExpectingAnotherServerNameGetsUnavailable) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(
      HasCode(GetModelOver(Channel(*server, TlsCredentials(certs_->ca.pem), "okl.example.com")),
              Code::UNAVAILABLE));
  // The override to a name the certificate does carry works.
  EXPECT_TRUE(
      HasCode(GetModelOver(Channel(*server, TlsCredentials(certs_->ca.pem), "localhost")),
              Code::NOT_FOUND));
}

TEST_F(TlsTest, MutualTlsAcceptsAClientCertificateFromItsCa) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<ServingStatus> health = CheckHealth(server->channel(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("t", "m"), Config())));
  EXPECT_TRUE(
      IsOk(GetModelOver(Channel(*server, TlsCredentials(certs_->ca.pem, certs_->client_cert.pem,
                                                        certs_->client_key.pem)))));
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<grpc::Channel> channel =
      Channel(*server, TlsCredentials(certs_->ca.pem));
  EXPECT_TRUE(HasCode(GetModelOver(channel), Code::UNAVAILABLE));
  absl::StatusOr<ServingStatus> health = CheckHealth(channel, "");
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable) << health.status();
}

TEST_F(TlsTest, MutualTlsRefusesAClientCertificateFromAnotherCa) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(HasCode(GetModelOver(Channel(
                          *server, TlsCredentials(certs_->ca.pem, certs_->other_client_cert.pem,
                                                  certs_->other_client_key.pem))),
                      Code::UNAVAILABLE));
}

TEST_F(TlsTest, MutualTlsRefusesAPlaintextClient) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(HasCode(GetModelOver(MakeChannel(server->address(), true)), Code::UNAVAILABLE));
}

// --- The authorization matrix ----------------------------------------------------------

// The own tenant of the one-tenant tokens, and a tenant no one-or-two-tenant token covers.
constexpr char kOwnTenant[] = "a";
constexpr char kOtherTenant[] = "c";

using Cell = std::tuple<Who, Rpc, bool /*own tenant*/>;

std::string CellName(const ::testing::TestParamInfo<Cell>& info) {
  const auto& [who, rpc, own] = info.param;
  return absl::StrCat(WhoName(who), "_", RpcName(rpc), "_",
                      own ? "OwnTenantA" : "OtherTenantC");
}

class AuthorizationMatrixTest : public ::testing::TestWithParam<Cell> {};

// One cell: a server holding a/m, b/m and c/m (20 examples each) and b/donor (40), the
// caller's one call on tenant/m (or tenant/new for CreateModel, b/donor's snapshot for
// Restore), its exact code, and then every model as it must be.
TEST_P(AuthorizationMatrixTest, CallGetsTheExpectedCodeAndRejectedCallsChangeNothing) {
  const auto& [who, rpc, own] = GetParam();
  const std::string tenant = own ? kOwnTenant : kOtherTenant;
  const Code expected = Expected(who, rpc, tenant);
  SCOPED_TRACE(absl::StrCat(WhoName(who), " calls ", RpcName(rpc), " on tenant ", tenant,
                            ", expecting ", CodeName(expected)));

  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  Stub& admin = (*server)->admin();
  uint64_t seed = 1;
  for (const char* t : {"a", "b", "c"}) ASSERT_TRUE(MakeModel(admin, t, "m", 20, seed++));
  ASSERT_TRUE(MakeModel(admin, "b", "donor", 40, 99));
  std::string donor;
  ASSERT_TRUE(IsOk(Snapshot(admin, Ref("b", "donor"), &donor)));
  absl::StatusOr<World> before = SeeWorld(admin);
  ASSERT_TRUE(before.ok()) << before.status();

  std::unique_ptr<Stub> caller = (*server)->StubFor(who);
  const v1::ModelRef target = Ref(tenant, "m");
  const std::string target_name = RefName(target);
  constexpr size_t kObserved = 5;
  grpc::Status status;
  v1::ModelInfo info;
  v1::ListModelsResponse list;
  std::vector<double> predictions;
  std::string snapshot;
  switch (rpc) {
    case Rpc::kCreateModel:
      status = CreateModel(*caller, Ref(tenant, "new"), Config(), &info);
      break;
    case Rpc::kGetModel:
      status = GetModel(*caller, target, &info);
      break;
    case Rpc::kListModels:
      status = ListModels(*caller, tenant, &list);
      break;
    case Rpc::kDeleteModel:
      status = DeleteModel(*caller, target);
      break;
    case Rpc::kObserve: {
      v1::ObserveResponse response;
      status = Observe(*caller, target, MakeStream(Config(), kObserved, 11), &response);
      break;
    }
    case Rpc::kObserveStream: {
      v1::ObserveResponse response;
      const std::vector<v1::Example> examples = MakeStream(Config(), kObserved, 12);
      const size_t sizes[] = {2, 3};
      status = ObserveStream(*caller, target, SplitIntoBatches(examples, sizes), &response);
      break;
    }
    case Rpc::kPredict:
      status = Predict(*caller, target, Probes(), &predictions);
      break;
    case Rpc::kSnapshot:
      status = Snapshot(*caller, target, &snapshot);
      break;
    case Rpc::kRestore:
      status = Restore(*caller, target, donor, /*chunk_bytes=*/256, &info);
      break;
    case Rpc::kFenceTenant: {
      grpc::ClientContext context;
      SetDeadline(&context);
      v1::FenceTenantRequest request;
      request.set_tenant(tenant);
      request.set_fenced(true);
      v1::FenceTenantResponse response;
      status = caller->FenceTenant(&context, request, &response);
      break;
    }
  }
  EXPECT_TRUE(HasCode(status, expected));
  for (const std::string& token : (*server)->AllTokens()) {
    EXPECT_THAT(status.error_message(), Not(HasSubstr(token))) << "the message shows a token";
  }

  absl::StatusOr<World> after = SeeWorld(admin);
  ASSERT_TRUE(after.ok()) << after.status();
  if (rpc == Rpc::kFenceTenant) {
    // A fence changes no model; an accepted one refuses the tenant's writes after it.
    EXPECT_EQ(*after, *before);
    v1::ObserveResponse response;
    EXPECT_TRUE(HasCode(Observe(admin, target, MakeStream(Config(), 1, 13), &response),
                        status.ok() ? Code::UNAVAILABLE : Code::OK));
    return;
  }
  if (expected != Code::OK || !status.ok()) {
    EXPECT_EQ(*after, *before) << "a rejected call changed the models";
    return;
  }
  // Accepted: exactly the call's effect.
  World others_before = *before;
  World others_after = *after;
  for (World* world : {&others_before, &others_after}) {
    world->erase(target_name);
    world->erase(RefName(Ref(tenant, "new")));
  }
  EXPECT_EQ(others_after, others_before) << "the call changed another model";
  switch (rpc) {
    case Rpc::kCreateModel:
      EXPECT_TRUE(after->contains(RefName(Ref(tenant, "new"))));
      EXPECT_EQ(after->at(target_name), before->at(target_name));
      break;
    case Rpc::kDeleteModel:
      EXPECT_FALSE(after->contains(target_name));
      break;
    case Rpc::kObserve:
    case Rpc::kObserveStream:
      ASSERT_TRUE(after->contains(target_name));
      EXPECT_EQ(Steps(after->at(target_name)), Steps(before->at(target_name)) + kObserved);
      break;
    case Rpc::kRestore:
      ASSERT_TRUE(after->contains(target_name));
      EXPECT_EQ(after->at(target_name).probe_bits, before->at("b/donor").probe_bits);
      EXPECT_EQ(Steps(after->at(target_name)), 40u);
      break;
    case Rpc::kGetModel:
      EXPECT_EQ(info.stats().steps(), 20u);
      EXPECT_EQ(*after, *before);
      break;
    case Rpc::kListModels: {
      std::vector<std::string> names;
      for (const v1::ModelInfo& model : list.models()) names.push_back(RefName(model.ref()));
      EXPECT_THAT(names, ElementsAre(target_name));
      EXPECT_EQ(*after, *before);
      break;
    }
    case Rpc::kPredict:
      EXPECT_EQ(Bits(predictions), before->at(target_name).probe_bits);
      EXPECT_EQ(*after, *before);
      break;
    case Rpc::kSnapshot:
      EXPECT_FALSE(snapshot.empty());
      EXPECT_EQ(*after, *before);
      break;
    case Rpc::kFenceTenant:
      break;  // checked above
  }
}

INSTANTIATE_TEST_SUITE_P(EveryCallerRpcAndTenant, AuthorizationMatrixTest,
                         ::testing::Combine(::testing::ValuesIn(kEveryone),
                                            ::testing::ValuesIn(kEveryRpc), ::testing::Bool()),
                         CellName);

// --- Visibility, health, and the header's grammar --------------------------------------

TEST(AuthorizationTest, ListModelsWithoutATenantShowsOnlyTheTenantsTheTokenCovers) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  for (const char* t : {"a", "b", "c"}) {
    ASSERT_TRUE(MakeModel((*server)->admin(), t, "m1", 3, 1));
    ASSERT_TRUE(MakeModel((*server)->admin(), t, "m2", 3, 2));
  }
  const std::map<Who, std::vector<std::string>> visible = {
      {Who::kReadA, {"a/m1", "a/m2"}},
      {Who::kWriteA, {"a/m1", "a/m2"}},
      {Who::kWriteAB, {"a/m1", "a/m2", "b/m1", "b/m2"}},
      {Who::kReadAll, {"a/m1", "a/m2", "b/m1", "b/m2", "c/m1", "c/m2"}},
      {Who::kAdmin, {"a/m1", "a/m2", "b/m1", "b/m2", "c/m1", "c/m2"}},
  };
  for (Who who : kEveryone) {
    SCOPED_TRACE(WhoName(who));
    std::unique_ptr<Stub> stub = (*server)->StubFor(who);
    v1::ListModelsResponse list;
    const grpc::Status status = ListModels(*stub, "", &list);
    if (!HasValidToken(who)) {
      EXPECT_TRUE(HasCode(status, Code::UNAUTHENTICATED));
      EXPECT_EQ(list.models_size(), 0);
      continue;
    }
    ASSERT_TRUE(IsOk(status));
    std::vector<std::string> names;
    for (const v1::ModelInfo& info : list.models()) names.push_back(RefName(info.ref()));
    EXPECT_THAT(names, ElementsAreArray(visible.at(who)));
    // And per tenant: a covered tenant lists its models, another one is refused.
    for (const char* t : {"a", "b", "c"}) {
      v1::ListModelsResponse one;
      EXPECT_TRUE(HasCode(ListModels(*stub, t, &one),
                          Covers(who, t) ? Code::OK : Code::PERMISSION_DENIED))
          << "tenant " << t;
    }
  }
}

TEST(AuthorizationTest, TwoTenantTokenWritesBothAndNoThird) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Stub> stub = (*server)->StubFor(Who::kWriteAB);
  EXPECT_TRUE(IsOk(CreateModel(*stub, Ref("a", "m"), Config())));
  EXPECT_TRUE(IsOk(CreateModel(*stub, Ref("b", "m"), Config())));
  EXPECT_TRUE(HasCode(CreateModel(*stub, Ref("c", "m"), Config()), Code::PERMISSION_DENIED));
  EXPECT_TRUE(HasCode(CreateModel(*stub, Ref("ab", "m"), Config()), Code::PERMISSION_DENIED));
}

// A refusal reads the same whether or not the other tenant's model exists: a token cannot
// probe another tenant's model names.
TEST(AuthorizationTest, RefusalsDoNotTellWhetherTheModelExists) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(MakeModel((*server)->admin(), "c", "exists", 3, 1));
  std::unique_ptr<Stub> stub = (*server)->StubFor(Who::kWriteA);
  const v1::ModelRef exists = Ref("c", "exists");
  const v1::ModelRef absent = Ref("c", "absent");
  v1::ModelInfo info;
  std::vector<double> predictions;
  std::string snapshot;
  const std::vector<std::pair<std::string, std::function<grpc::Status(const v1::ModelRef&)>>>
      calls = {
          {"GetModel", [&](const v1::ModelRef& ref) { return GetModel(*stub, ref, &info); }},
          {"DeleteModel", [&](const v1::ModelRef& ref) { return DeleteModel(*stub, ref); }},
          {"CreateModel",
           [&](const v1::ModelRef& ref) { return CreateModel(*stub, ref, Config()); }},
          {"Predict",
           [&](const v1::ModelRef& ref) {
             return Predict(*stub, ref, Probes(), &predictions);
           }},
          {"Snapshot",
           [&](const v1::ModelRef& ref) { return Snapshot(*stub, ref, &snapshot); }},
      };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    const grpc::Status on_existing = call(exists);
    const grpc::Status on_absent = call(absent);
    EXPECT_TRUE(HasCode(on_existing, Code::PERMISSION_DENIED));
    EXPECT_TRUE(HasCode(on_absent, Code::PERMISSION_DENIED));
    EXPECT_EQ(on_existing.error_message(), on_absent.error_message());
  }
}

TEST(AuthorizationTest, HealthIsOpenWithoutAToken) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  for (Who who : {Who::kNoToken, Who::kWrongScheme, Who::kUnknownToken}) {
    SCOPED_TRACE(WhoName(who));
    const std::shared_ptr<grpc::Channel> channel =
        MakeChannel((*server)->process().address(), (*server)->SecurityFor(who), true);
    for (const char* service : {"", "okl.v1.OnlineKernelLearning"}) {
      absl::StatusOr<ServingStatus> health = CheckHealth(channel, service);
      ASSERT_TRUE(health.ok()) << health.status();
      EXPECT_EQ(*health, ServingStatus::kServing);
    }
  }
}

TEST(AuthorizationTest, TheBearerSchemeIsCaseInsensitiveAndNothingElseIsAccepted) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(MakeModel((*server)->admin(), "a", "m", 3, 1));
  const std::string& token = (*server)->token(Who::kReadA);
  const std::vector<std::pair<std::string, Code>> cases = {
      {absl::StrCat("Bearer ", token), Code::OK},
      {absl::StrCat("bearer ", token), Code::OK},
      {absl::StrCat("BEARER ", token), Code::OK},
      {"Bearer", Code::UNAUTHENTICATED},
      {"Bearer ", Code::UNAUTHENTICATED},
      {absl::StrCat("Bearer ", token, "x"), Code::UNAUTHENTICATED},
      {absl::StrCat("Bearer ", token.substr(0, token.size() - 1)), Code::UNAUTHENTICATED},
      {absl::StrCat("Bearer ", Sha256Hex(token)), Code::UNAUTHENTICATED},  // the hash
      {absl::StrCat("Token ", token), Code::UNAUTHENTICATED},
      {"", Code::UNAUTHENTICATED},
  };
  for (const auto& [authorization, code] : cases) {
    SCOPED_TRACE(absl::StrCat("authorization: \"", authorization, "\""));
    ChannelSecurity security = (*server)->SecurityFor(Who::kNoToken);
    security.metadata = {{"authorization", authorization}};
    std::unique_ptr<Stub> stub = v1::OnlineKernelLearning::NewStub(
        MakeChannel((*server)->process().address(), security, true));
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(*stub, Ref("a", "m"), &info), code));
  }
}

// --- Rotation --------------------------------------------------------------------------

TEST(TokenRotationTest, SighupSwapsTheTokensWithoutARestart) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = (*server)->process();
  const pid_t pid = process.pid();
  ASSERT_TRUE(MakeModel((*server)->admin(), "a", "m", 3, 1));
  std::unique_ptr<Stub> old_stub = (*server)->StubFor(Who::kWriteA);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(*old_stub, Ref("a", "m"), &info)));

  absl::StatusOr<std::string> fresh = NewToken();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(WriteFile((*server)->tokens_file(),
                        absl::StrCat("# rotated\n", TokenLine(*fresh, "write", "a")))
                  .ok());
  ASSERT_TRUE(process.Signal(SIGHUP).ok());
  ASSERT_TRUE(LogEventually(process, "SIGHUP: re-read --auth_tokens_file"));

  EXPECT_TRUE(HasCode(GetModel(*old_stub, Ref("a", "m"), &info), Code::UNAUTHENTICATED));
  // The admin's token was in the old file only, too.
  EXPECT_TRUE(
      HasCode(GetModel((*server)->admin(), Ref("a", "m"), &info), Code::UNAUTHENTICATED));
  ChannelSecurity security = (*server)->SecurityFor(Who::kNoToken);
  security.bearer_token = *fresh;
  std::unique_ptr<Stub> new_stub =
      v1::OnlineKernelLearning::NewStub(MakeChannel(process.address(), security, true));
  EXPECT_TRUE(IsOk(GetModel(*new_stub, Ref("a", "m"), &info)));
  EXPECT_EQ(info.stats().steps(), 3u);  // the same server, models and all
  v1::ObserveResponse observed;
  EXPECT_TRUE(IsOk(Observe(*new_stub, Ref("a", "m"), MakeStream(Config(), 2, 5), &observed)));
  EXPECT_TRUE(process.Running());
  EXPECT_EQ(process.pid(), pid);
}

TEST(TokenRotationTest, ABrokenOrMissingFileOnSighupKeepsThePreviousTokens) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = (*server)->process();
  ASSERT_TRUE(MakeModel((*server)->admin(), "a", "m", 3, 1));
  std::unique_ptr<Stub> reader = (*server)->StubFor(Who::kReadA);
  const std::string hash = Sha256Hex((*server)->token(Who::kReadA));

  absl::StatusOr<std::string> fresh = NewToken();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::vector<std::pair<std::string, std::string>> broken_files = {
      // A good line for a new token, then a line with a role that does not exist (for the
      // reader's own hash): the whole file is refused, the new token too.
      {"bad role", absl::StrCat(TokenLine(*fresh, "admin", "*"), hash, " superuser a\n")},
      {"not a hash", "0123 read a\n"},
      {"no role", absl::StrCat(hash, "\n")},
  };
  int refusals = 0;
  for (const auto& [what, contents] : broken_files) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(WriteFile((*server)->tokens_file(), contents).ok());
    ASSERT_TRUE(process.Signal(SIGHUP).ok());
    ASSERT_TRUE(LogEventually(process, "the previous tokens stay in force", ++refusals));
    v1::ModelInfo info;
    EXPECT_TRUE(IsOk(GetModel(*reader, Ref("a", "m"), &info)));
    EXPECT_TRUE(IsOk(GetModel((*server)->admin(), Ref("a", "m"), &info)));
    ChannelSecurity security = (*server)->SecurityFor(Who::kNoToken);
    security.bearer_token = *fresh;
    std::unique_ptr<Stub> fresh_stub =
        v1::OnlineKernelLearning::NewStub(MakeChannel(process.address(), security, true));
    EXPECT_TRUE(HasCode(GetModel(*fresh_stub, Ref("a", "m"), &info), Code::UNAUTHENTICATED));
  }
  // Missing altogether.
  ASSERT_EQ(std::remove((*server)->tokens_file().c_str()), 0);
  ASSERT_TRUE(process.Signal(SIGHUP).ok());
  ASSERT_TRUE(LogEventually(process, "the previous tokens stay in force", ++refusals));
  v1::ModelInfo info;
  EXPECT_TRUE(IsOk(GetModel(*reader, Ref("a", "m"), &info)));
  EXPECT_TRUE(process.Running());
  // A refusal names no token and no whole hash.
  const std::string log = process.Log();
  EXPECT_THAT(log, Not(HasSubstr(hash)));
  EXPECT_THAT(log, Not(HasSubstr(Sha256Hex(*fresh))));
  for (const std::string& token : (*server)->AllTokens())
    EXPECT_THAT(log, Not(HasSubstr(token)));
}

// A token revoked by SIGHUP stops an ObserveStream it opened before at the stream's next
// message (each message is authorized again), instead of writing until the stream ends.
TEST(TokenRotationTest, ARevokedTokenCannotGoOnWritingOnAnOpenStream) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& process = (*server)->process();
  ASSERT_TRUE(MakeModel((*server)->admin(), "a", "m", 3, 1));
  std::unique_ptr<Stub> stub = (*server)->StubFor(Who::kWriteA);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      stub->ObserveStream(&context, &response);
  v1::ObserveRequest request;
  *request.mutable_ref() = Ref("a", "m");
  for (const v1::Example& example : MakeStream(Config(), 2, 5)) {
    *request.add_examples() = example;
  }
  ASSERT_TRUE(writer->Write(request));

  absl::StatusOr<std::string> fresh = NewToken();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(WriteFile((*server)->tokens_file(), TokenLine(*fresh, "admin", "*")).ok());
  ASSERT_TRUE(process.Signal(SIGHUP).ok());
  ASSERT_TRUE(LogEventually(process, "SIGHUP: re-read --auth_tokens_file"));
  v1::ModelInfo info;
  ASSERT_TRUE(HasCode(GetModel(*stub, Ref("a", "m"), &info), Code::UNAUTHENTICATED));

  for (int i = 0; i < 5 && writer->Write(request); ++i) {
  }
  writer->WritesDone();
  EXPECT_TRUE(HasCode(writer->Finish(), Code::UNAUTHENTICATED));
  EXPECT_LE(response.steps(), 5u) << "messages after the revocation were applied";
}

// A Restore takes one of the --max_concurrent_restores slots only once its first chunk is
// authorized, so a token that may not write cannot hold the slots and keep every other
// tenant's Restore out.
TEST(AuthorizationTest, ATokenWithoutWriteCannotHoldTheRestoreSlots) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(MakeModel((*server)->admin(), "b", "m", 3, 1));
  std::string snapshot;
  ASSERT_TRUE(IsOk(Snapshot((*server)->admin(), Ref("b", "m"), &snapshot)));
  std::unique_ptr<Stub> reader = (*server)->StubFor(Who::kReadA);
  constexpr int kSlots = 2;  // okl_server's default --max_concurrent_restores
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ModelInfo> infos(kSlots);
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::RestoreChunk>>> idle;
  for (int i = 0; i < kSlots; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    SetDeadline(contexts.back().get());
    idle.push_back(reader->Restore(contexts.back().get(), &infos[i]));
  }
  absl::SleepFor(absl::Milliseconds(500));  // the idle streams reach the server
  EXPECT_TRUE(IsOk(Restore((*server)->admin(), Ref("b", "copy"), snapshot)));
  for (const std::unique_ptr<grpc::ClientContext>& context : contexts) context->TryCancel();
}

// --- Secure by default -----------------------------------------------------------------

TEST(SecureByDefaultTest, NonLoopbackListenWithoutTokensExits1NamingTheFlags) {
  for (const char* listen : {"0.0.0.0:0", "[::]:0", ":0"}) {
    SCOPED_TRACE(listen);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.listen = listen, .wait_until_serving = false});
    ASSERT_TRUE(server.ok()) << server.status();
    absl::StatusOr<int> exit = (*server)->WaitForExit(kWait);
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << "wait status " << *exit;
    EXPECT_THAT((*server)->Log(),
                AllOf(HasSubstr("--auth_tokens_file"), HasSubstr("--allow_unauthenticated")));
  }
}

TEST(SecureByDefaultTest, NonLoopbackListenServesWithAllowUnauthenticated) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({.flags = {"--allow_unauthenticated"}, .listen = "0.0.0.0:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(IsOk(CreateModel((*server)->stub(), Ref("t", "m"), Config())));
}

TEST(SecureByDefaultTest, NonLoopbackListenServesWithATokensFile) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server =
      SecureServer::Start({.listen = "0.0.0.0:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(IsOk(CreateModel((*server)->admin(), Ref("t", "m"), Config())));
  std::unique_ptr<Stub> anonymous = (*server)->StubFor(Who::kNoToken);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(*anonymous, Ref("t", "m"), &info), Code::UNAUTHENTICATED));
}

TEST(SecureByDefaultTest, LoopbackListenServesWithoutTokens) {
  for (const char* listen : {"127.0.0.1:0", "localhost:0"}) {
    SCOPED_TRACE(listen);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.listen = listen});
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_TRUE(IsOk(CreateModel((*server)->stub(), Ref("t", "m"), Config())));
  }
}

// --- Tokens stay out of the log ----------------------------------------------------------

TEST(TokenSecrecyTest, NoTokenReachesTheServersLog) {
  absl::StatusOr<std::unique_ptr<SecureServer>> server = SecureServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(MakeModel((*server)->admin(), "a", "m", 3, 1));
  for (Who who : kEveryone) {
    std::unique_ptr<Stub> stub = (*server)->StubFor(who);
    v1::ModelInfo info;
    (void)GetModel(*stub, Ref("a", "m"), &info);
    (void)GetModel(*stub, Ref("c", "m"), &info);
    (void)CreateModel(*stub, Ref("c", absl::StrCat("m", static_cast<int>(who))), Config());
    v1::ObserveResponse response;
    (void)Observe(*stub, Ref("a", "m"), MakeStream(Config(), 2, 3), &response);
  }
  ASSERT_TRUE((*server)->process().Signal(SIGHUP).ok());
  ASSERT_TRUE(LogEventually((*server)->process(), "SIGHUP"));
  absl::StatusOr<int> exit = (*server)->process().Stop();
  ASSERT_TRUE(exit.ok()) << exit.status();
  const std::string log = (*server)->process().Log();
  for (const std::string& token : (*server)->AllTokens()) {
    EXPECT_THAT(log, Not(HasSubstr(token)));
    // Nor a recognisable part of one (the random part's first half).
    EXPECT_THAT(log, Not(HasSubstr(token.substr(4, 20))));
  }
}

// --- Metrics labels --------------------------------------------------------------------

class MetricsLabelsTest : public ::testing::Test {
 protected:
  static constexpr char kTenant[] = "tenant-secret-x7";
  static constexpr char kModel[] = "model-secret-y9";

  // /metrics of a server with `flags` that holds kTenant/kModel (10 examples).
  std::string ScrapeWith(std::vector<std::string> flags) {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.flags = std::move(flags)});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return "";
    EXPECT_TRUE(MakeModel((*server)->stub(), kTenant, kModel, 10, 1));
    EXPECT_GT((*server)->metrics_port(), 0);
    absl::StatusOr<std::string> metrics = HttpGet((*server)->metrics_port(), "/metrics");
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    return metrics.ok() ? *metrics : "";
  }

  // The series lines (not comments) of `family`.
  static std::vector<std::string> Series(const std::string& metrics, absl::string_view family) {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
      if (absl::StartsWith(line, family)) lines.emplace_back(line);
    }
    return lines;
  }
};

TEST_F(MetricsLabelsTest, NamesLabelsPerModelSeriesWithTheNames) {
  const std::string metrics = ScrapeWith({});
  const std::vector<std::string> steps = Series(metrics, "okl_model_steps_total{");
  ASSERT_EQ(steps.size(), 1u) << metrics;
  EXPECT_THAT(steps[0],
              AllOf(HasSubstr(absl::StrCat("tenant=\"", kTenant, "\"")),
                    HasSubstr(absl::StrCat("model=\"", kModel, "\"")), EndsWith(" 10")));
}

TEST_F(MetricsLabelsTest, HashedShowsSha256PrefixesAndNeverTheNames) {
  const std::string metrics = ScrapeWith({"--metrics_model_labels=hashed"});
  EXPECT_THAT(metrics, Not(HasSubstr("secret"))) << "a name reached /metrics";
  const std::vector<std::string> steps = Series(metrics, "okl_model_steps_total{");
  ASSERT_EQ(steps.size(), 1u) << metrics;
  // `printf %s tenant-secret-x7 | sha256sum | cut -c1-16`, and the same for the model.
  EXPECT_THAT(steps[0], AllOf(HasSubstr("tenant=\"bb88711c39a6b8ee\""),
                              HasSubstr("model=\"af9a0494814dbc2a\""), EndsWith(" 10")));
}

TEST_F(MetricsLabelsTest, NoneHasNoPerModelSeriesButTheAggregates) {
  const std::string metrics = ScrapeWith({"--metrics_model_labels=none"});
  EXPECT_THAT(metrics, Not(HasSubstr("secret"))) << "a name reached /metrics";
  // (okl_metrics_models_omitted's help text names okl_model_*: lines, not substrings.)
  EXPECT_THAT(Series(metrics, "okl_model_"), ElementsAre()) << "a per-model series";
  EXPECT_THAT(Series(metrics, "# TYPE okl_model_"), ElementsAre()) << "a per-model family";
  EXPECT_THAT(Series(metrics, "okl_models "), ElementsAre("okl_models 1"));
}

// --- okl::Client and the okl tool ------------------------------------------------------

class ClientOverTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SecureServer>> server =
        SecureServer::Start({.mutual_tls = true, .connect_host = "localhost"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<ModelConfig> config = FromProto(Config());
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
  }

  // Mutual TLS with the test client's certificate, and `who`'s token.
  ClientOptions GoodOptions(Who who) const {
    ClientOptions options;
    options.deadline = absl::Seconds(10);
    options.max_attempts = 1;
    options.use_tls = true;
    options.tls_root_certs = server_->certs().ca.pem;
    options.tls_cert_chain = server_->certs().client_cert.pem;
    options.tls_private_key = server_->certs().client_key.pem;
    if (HasValidToken(who)) options.bearer_token = server_->token(who);
    return options;
  }

  Client Connect(const ClientOptions& options, std::string address = "") const {
    absl::StatusOr<Client> client =
        Client::Connect(address.empty() ? server_->process().address() : address, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  std::unique_ptr<SecureServer> server_;
  ModelConfig config_;
};

TEST_F(ClientOverTlsTest, WorksEndToEndWithTheRightCredentials) {
  for (const char* host : {"localhost", "127.0.0.1"}) {
    SCOPED_TRACE(host);
    const Client client =
        Connect(GoodOptions(Who::kWriteA), absl::StrCat(host, ":", server_->process().port()));
    const ModelId id = {.tenant = "a", .model = absl::StrCat("m-", host)};
    absl::StatusOr<ModelSummary> created = client.CreateModel(id, config_);
    ASSERT_TRUE(created.ok()) << created.status();
    const std::vector<double> xs = {0.1, 0.2, 0.3, -0.4, 0.5, 0.6};
    const std::vector<double> ys = {0.5, -0.5, 1.0};
    absl::StatusOr<ObserveResult> observed = client.Observe(id, xs, ys);
    ASSERT_TRUE(observed.ok()) << observed.status();
    EXPECT_EQ(observed->steps, 3u);
    absl::StatusOr<std::unique_ptr<ObserveWriter>> writer = client.OpenObserveWriter(id);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*writer)->Add({0.1 * i, -0.1 * i}, 0.3).ok());
    ASSERT_TRUE((*writer)->Close().ok()) << (*writer)->status();
    absl::StatusOr<std::vector<double>> predictions = client.Predict(id, {0.1, 0.2}, 2);
    ASSERT_TRUE(predictions.ok()) << predictions.status();
    EXPECT_EQ(predictions->size(), 1u);
    absl::StatusOr<ModelSummary> got = client.GetModel(id);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->stats.steps, 13u);
    absl::StatusOr<std::vector<ModelSummary>> listed = client.ListModels();
    ASSERT_TRUE(listed.ok()) << listed.status();
    absl::StatusOr<std::string> snapshot = client.Snapshot(id);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    absl::StatusOr<ModelSummary> restored =
        client.Restore({.tenant = "a", .model = absl::StrCat("copy-", host)}, *snapshot);
    ASSERT_TRUE(restored.ok()) << restored.status();
    absl::StatusOr<bool> health = client.Health();
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_TRUE(*health);
    EXPECT_TRUE(client.DeleteModel(id).ok());
  }
}

TEST_F(ClientOverTlsTest, FailsWithTheRightCodeWithWrongCredentials) {
  ASSERT_TRUE(MakeModel(server_->admin(), "a", "m", 3, 1));
  const ModelId id = {.tenant = "a", .model = "m"};
  auto get = [&](const ClientOptions& options) {
    return Connect(options).GetModel(id).status();
  };
  EXPECT_TRUE(get(GoodOptions(Who::kReadA)).ok());

  EXPECT_EQ(get(GoodOptions(Who::kNoToken)).code(), absl::StatusCode::kUnauthenticated);
  ClientOptions unknown = GoodOptions(Who::kNoToken);
  unknown.bearer_token = server_->token(Who::kUnknownToken);
  EXPECT_EQ(get(unknown).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Connect(GoodOptions(Who::kReadA)).CreateModel({"a", "n"}, config_).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Connect(GoodOptions(Who::kReadA)).GetModel({"c", "m"}).status().code(),
            absl::StatusCode::kPermissionDenied);

  ClientOptions no_certificate = GoodOptions(Who::kReadA);
  no_certificate.tls_cert_chain.clear();
  no_certificate.tls_private_key.clear();
  EXPECT_EQ(get(no_certificate).code(), absl::StatusCode::kUnavailable);
  ClientOptions other_certificate = GoodOptions(Who::kReadA);
  other_certificate.tls_cert_chain = server_->certs().other_client_cert.pem;
  other_certificate.tls_private_key = server_->certs().other_client_key.pem;
  EXPECT_EQ(get(other_certificate).code(), absl::StatusCode::kUnavailable);
  ClientOptions other_ca = GoodOptions(Who::kReadA);
  other_ca.tls_root_certs = server_->certs().other_ca.pem;
  EXPECT_EQ(get(other_ca).code(), absl::StatusCode::kUnavailable);
  ClientOptions plaintext = GoodOptions(Who::kReadA);
  plaintext.use_tls = false;
  EXPECT_EQ(get(plaintext).code(), absl::StatusCode::kUnavailable);
}

// `okl` with the connection flags for this server; `extra` after them.
class OklToolOverTlsTest : public ClientOverTlsTest {
 protected:
  std::vector<std::string> Okl(const std::string& command,
                               std::vector<std::string> extra) const {
    const TestCertificates& certs = server_->certs();
    std::vector<std::string> argv = {
        OKL_BINARY,
        command,
        absl::StrCat("--server=localhost:", server_->process().port()),
        absl::StrCat("--tls_ca=", certs.ca.path),
        absl::StrCat("--tls_cert=", certs.client_cert.path),
        absl::StrCat("--tls_key=", certs.client_key.path),
        "--timeout=10s",
    };
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  CommandResult Run(const std::vector<std::string>& argv,
                    std::vector<std::string> env = {}) const {
    // No token from the environment that runs the tests, unless given here.
    if (std::none_of(env.begin(), env.end(), [](const std::string& entry) {
          return absl::StartsWith(entry, "OKL_TOKEN=");
        })) {
      env.push_back("OKL_TOKEN=");
    }
    absl::StatusOr<CommandResult> result = RunCommand(argv, env);
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok()) return *result;
    CommandResult failed;
    failed.wait_status = -1;
    return failed;
  }

  // `argv` without the arguments that start with any of `prefixes`, and with `added`.
  static std::vector<std::string> Without(std::vector<std::string> argv,
                                          const std::vector<std::string>& prefixes,
                                          const std::vector<std::string>& added = {}) {
    argv.erase(std::remove_if(argv.begin(), argv.end(),
                              [&](const std::string& arg) {
                                return std::any_of(prefixes.begin(), prefixes.end(),
                                                   [&](const std::string& prefix) {
                                                     return absl::StartsWith(arg, prefix);
                                                   });
                              }),
               argv.end());
    argv.insert(argv.end(), added.begin(), added.end());
    return argv;
  }

  // The one line `okl` prints on a failure, checked to be one line that names `code`.
  static ::testing::AssertionResult FailsWith(const CommandResult& result,
                                              absl::string_view code) {
    if (result.exit_code() != 1) {
      return ::testing::AssertionFailure()
             << "exit code " << result.exit_code() << ", stderr: " << result.err;
    }
    const std::string prefix = absl::StrCat("okl: ", code, ": ");
    if (!absl::StartsWith(result.err, prefix) || result.err.back() != '\n' ||
        result.err.find('\n') != result.err.size() - 1) {
      return ::testing::AssertionFailure()
             << "stderr is not one line starting \"" << prefix << "\":\n"
             << result.err;
    }
    return ::testing::AssertionSuccess() << result.err;
  }
};

TEST_F(OklToolOverTlsTest, WorksEndToEndWithTheRightCredentials) {
  const std::string token = absl::StrCat("--token=", server_->token(Who::kWriteA));
  const std::vector<std::string> model = {"--tenant=a", "--model=m"};
  auto with = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), model.begin(), model.end());
    flags.insert(flags.begin(), token);
    return flags;
  };

  CommandResult created = Run(Okl("create", with({"--dim=2", "--max_terms=50", "--eta0=0.3"})));
  ASSERT_EQ(created.exit_code(), 0) << created.err;
  const std::string csv = server_->certs().dir() + "/rows.csv";
  ASSERT_TRUE(WriteFile(csv, "0.1,0.2,0.5\n0.3,-0.4,-0.5\n0.5,0.6,1\n").ok());
  CommandResult observed = Run(Okl("observe", with({"--noprogress", csv})));
  ASSERT_EQ(observed.exit_code(), 0) << observed.err;
  CommandResult predicted = Run(Okl("predict", with({"--x=0.1,0.2"})));
  ASSERT_EQ(predicted.exit_code(), 0) << predicted.err;
  EXPECT_EQ(std::count(predicted.out.begin(), predicted.out.end(), '\n'), 1) << predicted.out;
  CommandResult got = Run(Okl("get", with({"--json"})));
  ASSERT_EQ(got.exit_code(), 0) << got.err;
  EXPECT_THAT(got.out, HasSubstr("\"steps\":3,"));
  // The token from $OKL_TOKEN.
  CommandResult listed = Run(Okl("list", {"--tenant=a", "--json"}),
                             {absl::StrCat("OKL_TOKEN=", server_->token(Who::kReadA))});
  ASSERT_EQ(listed.exit_code(), 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("\"model\":\"m\""));
  // Health needs no token.
  CommandResult health = Run(Okl("health", {}));
  EXPECT_EQ(health.exit_code(), 0) << health.err;
  for (const CommandResult* result : {&created, &observed, &predicted, &got, &listed}) {
    for (const std::string& t : server_->AllTokens()) {
      EXPECT_THAT(result->out + result->err, Not(HasSubstr(t)));
    }
  }
}

TEST_F(OklToolOverTlsTest, FailsWithOneClearLineWithWrongCredentials) {
  ASSERT_TRUE(MakeModel(server_->admin(), "a", "m", 3, 1));
  const std::string read_token = absl::StrCat("--token=", server_->token(Who::kReadA));
  const std::vector<std::string> model = {"--tenant=a", "--model=m"};

  EXPECT_EQ(Run(Okl("get", {read_token, "--tenant=a", "--model=m"})).exit_code(), 0);
  EXPECT_TRUE(FailsWith(Run(Okl("get", model)), "UNAUTHENTICATED"));
  EXPECT_TRUE(
      FailsWith(Run(Okl("get", {absl::StrCat("--token=", server_->token(Who::kUnknownToken)),
                                "--tenant=a", "--model=m"})),
                "UNAUTHENTICATED"));
  EXPECT_TRUE(FailsWith(Run(Okl("create", {read_token, "--tenant=a", "--model=n", "--dim=2"})),
                        "PERMISSION_DENIED"));
  EXPECT_TRUE(
      FailsWith(Run(Okl("get", {read_token, "--tenant=c", "--model=m"})), "PERMISSION_DENIED"));

  // TLS failures: the connection flags changed.
  const std::vector<std::string> get = Okl("get", {read_token, "--tenant=a", "--model=m"});
  const TestCertificates& certs = server_->certs();
  EXPECT_TRUE(FailsWith(Run(Without(get, {"--tls_cert=", "--tls_key="})), "UNAVAILABLE"));
  EXPECT_TRUE(FailsWith(Run(Without(get, {"--tls_cert=", "--tls_key="},
                                    {absl::StrCat("--tls_cert=", certs.other_client_cert.path),
                                     absl::StrCat("--tls_key=", certs.other_client_key.path)})),
                        "UNAVAILABLE"));
  EXPECT_TRUE(FailsWith(
      Run(Without(get, {"--tls_ca="}, {absl::StrCat("--tls_ca=", certs.other_ca.path)})),
      "UNAVAILABLE"));
  EXPECT_TRUE(FailsWith(Run(Without(get, {"--tls_"})), "UNAVAILABLE"));  // plaintext
}

}  // namespace
}  // namespace okl::testing
