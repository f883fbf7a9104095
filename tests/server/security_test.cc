// tests/server/security_test.cc
//
// okl_server's security, against the real binary over real TLS (certificates made with
// openssl by TestCertificates) and a real tokens file:
//   - the authorization matrix: every kind of caller (no token, malformed headers, an
//     unknown token, and five grants) x every RPC x its own tenant and another one, each
//     cell with the exact status code, and a rejected call checked to have changed
//     nothing (every model's fingerprint and the list of models);
//   - ListModels' visibility per token, and health open to everyone;
//   - token rotation on SIGHUP, and a broken tokens file keeping the old tokens;
//   - secure by default: a non-loopback --listen without tokens refuses to start;
//   - no token in the server's log or in a status message;
//   - --metrics_model_labels=names|hashed|none on /metrics;
//
// TLS itself (who completes a handshake, and okl::Client and the okl tool over mutual TLS)
// is tls_test.cc, in the same binary; the helpers both use are security_util.h.
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
#include "server/auth/tokens.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/security_util.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"

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
  v1::LabelResponse labelled;
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
    case Rpc::kLabel:
      status = Label(*caller, target, {{"no-such-event", 1.0}}, &labelled);
      break;
    case Rpc::kRememberingPredict: {
      v1::PredictResponse response;
      status = PredictRemembering(*caller, target, Probes(), v1::Remember(), &response);
      predictions.assign(response.predictions().begin(), response.predictions().end());
      break;
    }
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
    case Rpc::kLabel:
      EXPECT_THAT(labelled.outcomes(), ElementsAre(v1::LABEL_UNKNOWN));
      EXPECT_EQ(*after, *before);
      break;
    case Rpc::kRememberingPredict: {
      // The model is unchanged; its events hold the inputs.
      EXPECT_EQ(Bits(predictions), before->at(target_name).probe_bits);
      EXPECT_EQ(after->at(target_name).probe_bits, before->at(target_name).probe_bits);
      v1::ModelStats stats;
      stats.ParseFromString(after->at(target_name).stats);
      EXPECT_EQ(stats.steps(), Steps(before->at(target_name)));
      EXPECT_EQ(stats.events_pending(), Probes().size());
      break;
    }
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

}  // namespace
}  // namespace okl::testing
