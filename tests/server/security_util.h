// tests/server/security_util.h
//
// What the security suites (security_test.cc, tls_test.cc) share: the callers (tokens
// and their grants), the RPCs each may make, a real okl_server with TLS and a tokens
// file, and the models' fingerprints a refused call is checked against.
#ifndef OKL_TESTS_SERVER_SECURITY_UTIL_H_
#define OKL_TESTS_SERVER_SECURITY_UTIL_H_

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
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"

namespace okl::testing {

inline constexpr char kConfigText[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.01
  budget { max_terms: 64 }
)pb";

inline constexpr absl::Duration kWait = absl::Seconds(20);

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

inline constexpr Who kEveryone[] = {Who::kNoToken,      Who::kWrongScheme, Who::kBareToken,
                                    Who::kUnknownToken, Who::kReadA,       Who::kWriteA,
                                    Who::kWriteAB,      Who::kReadAll,     Who::kAdmin};

// The tokens file's grants: role and tenants column.
struct TokenSpec {
  Who who;
  const char* role;
  const char* tenants;
};
inline constexpr TokenSpec kTokenSpecs[] = {
    {Who::kReadA, "read", "a"},   {Who::kWriteA, "write", "a"}, {Who::kWriteAB, "write", "a,b"},
    {Who::kReadAll, "read", "*"}, {Who::kAdmin, "admin", "*"},
};

inline std::string WhoName(Who who) {
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
inline void PrintTo(Who who, std::ostream* out) { *out << WhoName(who); }

inline bool HasValidToken(Who who) {
  return who != Who::kNoToken && who != Who::kWrongScheme && who != Who::kBareToken &&
         who != Who::kUnknownToken;
}

inline bool Covers(Who who, absl::string_view tenant) {
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

inline bool CanWrite(Who who) {
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
  kLabel,
  kRememberingPredict,  // a Predict with `remember`: it stores its inputs
};

inline constexpr Rpc kEveryRpc[] = {
    Rpc::kCreateModel, Rpc::kGetModel,      Rpc::kListModels, Rpc::kDeleteModel,
    Rpc::kObserve,     Rpc::kObserveStream, Rpc::kPredict,    Rpc::kSnapshot,
    Rpc::kRestore,     Rpc::kFenceTenant,   Rpc::kLabel,      Rpc::kRememberingPredict};

inline std::string RpcName(Rpc rpc) {
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
    case Rpc::kLabel:
      return "Label";
    case Rpc::kRememberingPredict:
      return "RememberingPredict";
  }
  return "?";
}

inline void PrintTo(Rpc rpc, std::ostream* out) { *out << RpcName(rpc); }

inline bool IsWrite(Rpc rpc) {
  return rpc == Rpc::kCreateModel || rpc == Rpc::kDeleteModel || rpc == Rpc::kObserve ||
         rpc == Rpc::kObserveStream || rpc == Rpc::kRestore || rpc == Rpc::kLabel ||
         rpc == Rpc::kRememberingPredict;
}

// The contract: no valid token, UNAUTHENTICATED; a tenant or a method the grant does not
// cover, PERMISSION_DENIED; otherwise the RPC's own outcome (OK in the matrix's calls).
inline ::grpc::StatusCode Expected(Who who, Rpc rpc, absl::string_view tenant) {
  if (!HasValidToken(who)) return ::grpc::StatusCode::UNAUTHENTICATED;
  if (!Covers(who, tenant)) return ::grpc::StatusCode::PERMISSION_DENIED;
  if (IsWrite(rpc) && !CanWrite(who)) return ::grpc::StatusCode::PERMISSION_DENIED;
  if (rpc == Rpc::kFenceTenant && who != Who::kAdmin)
    return ::grpc::StatusCode::PERMISSION_DENIED;
  return ::grpc::StatusCode::OK;
}

// --- A server with TLS and tokens ------------------------------------------------------

inline absl::Status WriteFile(const std::string& path, absl::string_view contents) {
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
inline std::string TokenLine(absl::string_view token, absl::string_view role,
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
    absl::StatusOr<std::shared_ptr<const TestCertificates>> certs = TestCertificates::Shared();
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
    server->tokens_file_ = server->files_.path() + "/tokens";
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
  // A directory of this server's own (the certificates are shared by the process): it
  // holds the tokens file, and a test may write files beside it.
  const std::string& dir() const { return files_.path(); }
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
  std::shared_ptr<const TestCertificates> certs_;
  TempDir files_{"okl_secure_server"};
  std::map<Who, std::string> tokens_;
  std::string unknown_token_;
  std::string tokens_file_;
  std::unique_ptr<ServerProcess> process_;
};

// Waits until the server's log holds `text` at least `count` times.
inline ::testing::AssertionResult LogEventually(ServerProcess& server, const std::string& text,
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

inline const v1::ModelConfig& Config() {
  static const v1::ModelConfig* const config = new v1::ModelConfig(ParseConfig(kConfigText));
  return *config;
}

inline const std::vector<v1::Vector>& Probes() {
  static const auto* const probes = new std::vector<v1::Vector>(MakeProbes(2, 5, /*seed=*/7));
  return *probes;
}

// Creates tenant/model and observes `n` examples from `seed`.
inline ::testing::AssertionResult MakeModel(Stub& stub, absl::string_view tenant,
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

inline absl::StatusOr<World> SeeWorld(Stub& admin) {
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

inline uint64_t Steps(const ModelFingerprint& fingerprint) {
  v1::ModelStats stats;
  stats.ParseFromString(fingerprint.stats);
  return stats.steps();
}

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_SECURITY_UTIL_H_
