// tests/server/tls_test.cc
//
// okl_server over real TLS (certificates made with openssl by TestCertificates): who
// completes a handshake and who does not, with TLS and with mutual TLS; and okl::Client
// and the `okl` tool (CliBinary()) end to end over mutual TLS with a token, and failing
// with the right code and one clear line with the wrong credentials. The helpers are
// security_util.h. Under ctest every test runs in its own process with its own server
// and certificates.

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
#include "server/auth/tokens.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/security_util.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"
#include "tests/test_paths.h"

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
        CliBinary(),
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
  const std::string csv = server_->dir() + "/rows.csv";
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
