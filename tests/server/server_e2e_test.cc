// tests/server/server_e2e_test.cc
//
// End-to-end tests of okl_server: the real binary on a loopback port, driven over gRPC.
// Its answers are compared bit for bit with an okl::NormaModel run in-process on the same
// config and stream (CoreTwin): the server must add no arithmetic of its own. Every
// error of the wire contract is provoked over the wire, its code checked, and the model
// checked unchanged afterwards (statistics and predictions at fixed probes).
//
// One server serves each suite (ServerE2ETest and ServerMatchesCoreTest with the default
// flags, ServerLimitsTest with small limits); where ctest runs every test in its own
// process, that is one server per test. Tests use their own model names, so they do not
// depend on each other. The server as a process (start-up, signals, drains) is tested in
// server_lifecycle_test.cc, in the same binary.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/io/data_reader.h"
#include "core/input_batch.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::HasSubstr;
using Code = ::grpc::StatusCode;

// --- Configs ---------------------------------------------------------------------------

constexpr char kSparseHingeConfig[] = R"pb(
  dim: 40
  kernel { laplacian { gamma: 0.5 } }
  loss { hinge { rho: 1 nu: 0.2 } }
  learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
  lambda: 0.02
  offset: true
  budget { max_terms: 30 policy: SMALLEST }
)pb";

// Sparse storage with the averaged hypothesis, whose retired terms are sparse too.
constexpr char kSparseStorageAveragedConfig[] = R"pb(
  dim: 12
  kernel { gaussian { gamma: 0.5 } }
  loss { logistic {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 16 policy: OLDEST }
  averaged: true
  averaging_window: 9
  sparse { max_nonzeros: 12 }
)pb";

constexpr char kAveragedConfig[] = R"pb(
  dim: 4
  kernel { gaussian { gamma: 1.5 } }
  loss { epsilon_insensitive { epsilon: 0.05 nu: 0.3 } }
  learning_rate { eta0: 0.3 schedule: POWER theta: 0.6 }
  lambda: 0.05
  averaged: true
  budget { max_terms: 25 policy: OLDEST }
)pb";

constexpr char kSparseLogisticConfig[] = R"pb(
  dim: 12
  kernel { polynomial { gamma: 0.5 c: 1 degree: 3 } }
  loss { logistic {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 16 policy: OLDEST drop_below: 1e-4 }
)pb";

constexpr char kHeatHuberConfig[] = R"pb(
  dim: 5
  kernel { heat { t: 0.7 } }
  loss { huber { delta: 0.3 } }
  learning_rate { eta0: 0.6 schedule: INVERSE_SQRT }
  lambda: 0.1
  offset: true
  averaged: true
  budget { max_terms: 40 policy: SMALLEST }
)pb";

// client/examples/mg30.textproto: one-step-ahead Mackey-Glass prediction with 7 lags.
constexpr char kMackeyGlassConfig[] = R"pb(
  dim: 7
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.5 schedule: CONSTANT }
  lambda: 0.001
  budget { max_terms: 512 policy: OLDEST }
)pb";

constexpr char kClassifierConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { hinge {} }
  learning_rate { eta0: 0.5 }
  lambda: 0.01
  budget { max_terms: 1000 }
)pb";

// One-class novelty detection: rho learned by the nu-trick, or fixed.
constexpr char kNoveltyConfig[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 2 } }
  loss { novelty { rho: 0.2 nu: 0.1 } }
  learning_rate { eta0: 0.2 }
  lambda: 0.05
  budget { max_terms: 60 policy: SMALLEST }
)pb";

constexpr char kFixedRhoNoveltyConfig[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 2 } }
  loss { novelty { rho: 0.2 } }
  learning_rate { eta0: 0.2 }
  lambda: 0.05
  budget { max_terms: 60 policy: OLDEST }
)pb";

// A budget small enough that MERGE runs on most steps, with an offset and a learned rho.
constexpr char kMergeHingeConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { hinge { rho: 1 nu: 0.3 } }
  learning_rate { eta0: 0.3 }
  lambda: 0.02
  offset: true
  budget { max_terms: 12 policy: MERGE }
)pb";

// The averaged hypothesis over blocks of 7 steps with MERGE: terms retired and dropped
// again many times in a 300-step stream.
constexpr char kAveragedMergeWindowConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.02
  averaged: true
  averaging_window: 7
  budget { max_terms: 10 policy: MERGE }
)pb";

// Random Fourier features: no budget, the laplacian kernel's features, averaged.
constexpr char kRandomFeaturesConfig[] = R"pb(
  dim: 6
  kernel { laplacian { gamma: 0.7 } }
  loss { hinge { rho: 1 } }
  learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
  lambda: 0.01
  offset: true
  averaged: true
  random_features { dimension: 64 seed: 9 }
)pb";

// The KRLS tracker: a dictionary small enough that it prunes on most steps, forgetting
// (so its kernel matrix is state too).
constexpr char kKrlsTrackerConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  krls_tracker { max_basis: 12 noise_variance: 0.01 forgetting: 0.995 }
)pb";

// Selections: the default set of the squared loss (built after 32 examples, from their
// median distance), and listed hinge candidates of three kinds, two of them live.
constexpr char kSelectDefaultConfig[] = R"pb(
  dim: 3
  loss { squared {} }
  select {}
)pb";
constexpr char kSelectListedConfig[] = R"pb(
  dim: 5
  loss { hinge {} }
  select {
    live: 2
    candidates {
      kernel { gaussian { gamma: 0.5 } }
      learning_rate { eta0: 0.01 }
      lambda: 0.01
      budget { max_terms: 20 }
    }
    candidates {
      kernel { laplacian { gamma: 0.5 } }
      learning_rate { eta0: 0.5 }
      lambda: 0.01
      random_features { dimension: 32 seed: 3 }
    }
    candidates {
      kernel { gaussian { gamma: 1 } }
      learning_rate { eta0: 0.5 }
      lambda: 0.01
      budget { max_terms: 20 policy: MERGE }
    }
  }
)pb";

// A squared-loss linear model with a huge rate on growing inputs: every step multiplies
// the prediction by ~eta x^2, so some step overflows (as in tests/core/norma_test.cc).
constexpr char kDivergingConfig[] = R"pb(
  dim: 1
  kernel { linear { c: 0 } }
  loss { squared {} }
  learning_rate { eta0: 1000 }
  budget { max_terms: 1000 }
)pb";

// --- Snapshot bytes, checked independently of the server's code ------------------------

// FNV-1a 64, as okl.proto documents ModelSnapshot.checksum.
uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325u;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3u;
  }
  return hash;
}

// `body` (a serialized ModelSnapshot without its checksum) with the checksum field
// appended: tag 0xA1 0x06, then FNV-1a 64 of `body`, little-endian.
std::string WithChecksum(std::string body) {
  const uint64_t checksum = Fnv1a64(body);
  body.push_back(static_cast<char>(0xA1));
  body.push_back(static_cast<char>(0x06));
  for (int i = 0; i < 8; ++i) body.push_back(static_cast<char>(checksum >> (8 * i)));
  return body;
}

// --- Fixtures --------------------------------------------------------------------------

// Owns the suite's server. Derived suites start it in SetUpTestSuite with their flags.
class ServerSuite : public ::testing::Test {
 protected:
  static void StartServer(std::vector<std::string> flags) {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.flags = std::move(flags)});
    if (server.ok()) {
      server_ = *std::move(server);
    } else {
      start_error_ = server.status().ToString();
    }
  }

  static void StopServer() {
    if (server_ == nullptr) return;
    absl::StatusOr<int> exit = server_->Stop();
    if (!exit.ok()) {
      ADD_FAILURE() << "okl_server did not stop on SIGTERM: " << exit.status();
    } else if (!WIFEXITED(*exit) || WEXITSTATUS(*exit) != 0) {
      ADD_FAILURE() << "okl_server exited with wait status " << *exit << "; its log:\n"
                    << server_->Log();
    }
    server_.reset();
  }

  void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }

  void TearDown() override {
    if (HasFailure() && server_ != nullptr) {
      const std::string log = server_->Log();
      std::cerr << "--- okl_server log (last 4 KiB) ---\n"
                << log.substr(log.size() > 4096 ? log.size() - 4096 : 0) << "\n";
    }
  }

  static Stub& stub() { return server_->stub(); }
  static ServerProcess& server() { return *server_; }

  // A model created and trained on `n` examples, with the probes and the fingerprint
  // that "nothing changed" is checked against.
  struct Trained {
    v1::ModelRef ref;
    v1::ModelConfig config;
    std::vector<v1::Example> stream;
    std::vector<v1::Vector> probes;
    ModelFingerprint fingerprint;
  };

  static Trained Train(const v1::ModelRef& ref, absl::string_view config_text, size_t n = 30,
                       uint64_t seed = 7) {
    Trained trained;
    trained.ref = ref;
    trained.config = ParseConfig(config_text);
    EXPECT_TRUE(IsOk(CreateModel(stub(), ref, trained.config))) << RefName(ref);
    trained.stream = MakeStream(trained.config, n, seed);
    if (n > 0) {
      v1::ObserveResponse response;
      EXPECT_TRUE(IsOk(Observe(stub(), ref, trained.stream, &response)));
    }
    trained.probes = MakeProbes(trained.config.dim(), 5, seed + 1000);
    absl::StatusOr<ModelFingerprint> fingerprint = Fingerprint(stub(), ref, trained.probes);
    EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
    if (fingerprint.ok()) trained.fingerprint = *fingerprint;
    return trained;
  }

  // Fails the test if the model's stats, config or predictions differ from `trained`'s.
  static void ExpectUnchanged(const Trained& trained, absl::string_view after) {
    absl::StatusOr<ModelFingerprint> now = Fingerprint(stub(), trained.ref, trained.probes);
    ASSERT_TRUE(now.ok()) << "after " << after << ": " << now.status();
    EXPECT_EQ(*now, trained.fingerprint) << "the model changed after " << after;
  }

  // A change to a valid config, and what the refusal's message must say.
  struct ConfigChange {
    std::string what;
    std::function<void(v1::ModelConfig&)> change;
    std::string message;
  };

  // Each change of `valid` makes CreateModel INVALID_ARGUMENT with its message, and creates
  // nothing.
  static void ExpectRefused(const v1::ModelRef& ref, const v1::ModelConfig& valid,
                            const std::vector<ConfigChange>& changes) {
    v1::ModelInfo info;
    for (const ConfigChange& c : changes) {
      SCOPED_TRACE(c.what);
      v1::ModelConfig config = valid;
      c.change(config);
      const grpc::Status status = CreateModel(stub(), ref, config, &info);
      EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT)) << status.error_message();
      EXPECT_THAT(status.error_message(), HasSubstr(c.message));
      ExpectAbsent(ref, c.what);
    }
  }

  static void ExpectAbsent(const v1::ModelRef& ref, absl::string_view after) {
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(stub(), ref, &info), Code::NOT_FOUND))
        << RefName(ref) << " exists after " << after;
  }

  static std::unique_ptr<ServerProcess> server_;
  static std::string start_error_;
};

std::unique_ptr<ServerProcess> ServerSuite::server_;
std::string ServerSuite::start_error_;

// The server with its default flags.
class ServerE2ETest : public ServerSuite {
 protected:
  static void SetUpTestSuite() { StartServer({}); }
  static void TearDownTestSuite() { StopServer(); }
};

// --- Lifecycle of a model --------------------------------------------------------------

TEST_F(ServerE2ETest, CreateModelReturnsTheRefTheConfigAndZeroStats) {
  const v1::ModelConfig config = ParseConfig(kSparseHingeConfig);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(CreateModel(stub(), Ref("acme", "churn"), config, &info)));
  EXPECT_EQ(info.ref().tenant(), "acme");
  EXPECT_EQ(info.ref().model(), "churn");
  // The config comes back as the server understood it: the same core config.
  absl::StatusOr<ModelConfig> sent = FromProto(config);
  absl::StatusOr<ModelConfig> got = FromProto(info.config());
  ASSERT_TRUE(sent.ok() && got.ok()) << sent.status() << got.status();
  EXPECT_TRUE(*sent == *got) << info.config().ShortDebugString();
  EXPECT_EQ(info.stats().steps(), 0u);
  EXPECT_EQ(info.stats().expansion_size(), 0u);
  EXPECT_EQ(info.stats().cumulative_loss(), 0.0);
  EXPECT_EQ(info.stats().mistakes(), 0u);

  v1::ModelInfo again;
  ASSERT_TRUE(IsOk(GetModel(stub(), Ref("acme", "churn"), &again)));
  EXPECT_TRUE(MessageDifferencer::Equals(info, again)) << again.ShortDebugString();
}

TEST_F(ServerE2ETest, CreateModelTwiceIsAlreadyExistsAndKeepsTheFirstModel) {
  const Trained trained = Train(Ref("e2e", "twice"), kRegressionConfig);
  v1::ModelInfo info;
  EXPECT_TRUE(
      HasCode(CreateModel(stub(), trained.ref, trained.config, &info), Code::ALREADY_EXISTS));
  ExpectUnchanged(trained, "CreateModel with the same config");
  EXPECT_TRUE(HasCode(CreateModel(stub(), trained.ref, ParseConfig(kAveragedConfig), &info),
                      Code::ALREADY_EXISTS));
  ExpectUnchanged(trained, "CreateModel with another config");
}

TEST_F(ServerE2ETest, GetModelReportsTheConfigAndTheLiveStatsOfTheCore) {
  const v1::ModelRef ref = Ref("e2e", "get");
  const v1::ModelConfig config = ParseConfig(kClassifierConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 60, 11);
  for (const auto& batch : SplitIntoBatches(stream, std::vector<size_t>{20})) {
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(stub(), ref, batch, &response)));
    twin->Observe(batch);
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
    const v1::ModelStats expected = twin->WireStats();
    EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), expected))
        << "server: " << info.stats().ShortDebugString()
        << "\ncore:   " << expected.ShortDebugString();
    EXPECT_GT(info.stats().mistakes(), 0u);  // a classifier: mistakes are counted
  }
}

TEST_F(ServerE2ETest, ListModelsIsSortedByTenantThenModelAndFiltersByTenant) {
  const v1::ModelConfig config = ParseConfig(kRegressionConfig);
  // Created out of order, in two tenants that sort apart from every other test's.
  const std::vector<v1::ModelRef> refs = {Ref("list-b", "m2"), Ref("list-a", "z"),
                                          Ref("list-b", "m10"), Ref("list-a", "a"),
                                          Ref("list-b", "M1")};
  for (const v1::ModelRef& ref : refs) ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));

  auto names = [](const v1::ListModelsResponse& response) {
    std::vector<std::string> out;
    for (const v1::ModelInfo& info : response.models()) out.push_back(RefName(info.ref()));
    return out;
  };
  v1::ListModelsResponse response;
  ASSERT_TRUE(IsOk(ListModels(stub(), "list-b", &response)));
  // Byte order: "M1" < "m10" < "m2".
  EXPECT_THAT(names(response), ElementsAre("list-b/M1", "list-b/m10", "list-b/m2"));
  for (const v1::ModelInfo& info : response.models()) {
    EXPECT_TRUE(info.has_config() && info.has_stats()) << info.ShortDebugString();
  }

  ASSERT_TRUE(IsOk(ListModels(stub(), "list-a", &response)));
  EXPECT_THAT(names(response), ElementsAre("list-a/a", "list-a/z"));

  ASSERT_TRUE(IsOk(ListModels(stub(), "", &response)));
  std::vector<std::pair<std::string, std::string>> all;
  for (const v1::ModelInfo& info : response.models()) {
    all.emplace_back(info.ref().tenant(), info.ref().model());
  }
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  for (const v1::ModelRef& ref : refs) {
    EXPECT_THAT(all, Contains(std::make_pair(ref.tenant(), ref.model())));
  }

  ASSERT_TRUE(IsOk(ListModels(stub(), "list-nobody", &response)));
  EXPECT_EQ(response.models_size(), 0);
}

TEST_F(ServerE2ETest, DeleteModelRemovesTheModelAndFreesItsName) {
  const Trained trained = Train(Ref("e2e", "delete"), kRegressionConfig);
  ASSERT_TRUE(IsOk(DeleteModel(stub(), trained.ref)));

  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(stub(), trained.ref, &info), Code::NOT_FOUND));
  EXPECT_TRUE(HasCode(DeleteModel(stub(), trained.ref), Code::NOT_FOUND));
  v1::ObserveResponse response;
  EXPECT_TRUE(
      HasCode(Observe(stub(), trained.ref, trained.stream, &response), Code::NOT_FOUND));
  std::vector<double> predictions;
  EXPECT_TRUE(
      HasCode(Predict(stub(), trained.ref, trained.probes, &predictions), Code::NOT_FOUND));
  v1::ListModelsResponse list;
  ASSERT_TRUE(IsOk(ListModels(stub(), "e2e", &list)));
  for (const v1::ModelInfo& listed : list.models()) EXPECT_NE(listed.ref().model(), "delete");

  // The name is free again, for a fresh model.
  ASSERT_TRUE(IsOk(CreateModel(stub(), trained.ref, trained.config, &info)));
  EXPECT_EQ(info.stats().steps(), 0u);
  ASSERT_TRUE(IsOk(Predict(stub(), trained.ref, trained.probes, &predictions)));
  EXPECT_THAT(predictions, ::testing::Each(Eq(0.0)));  // f_1 = 0 with no offset learned
}

// --- Observe, ObserveStream, Predict ---------------------------------------------------

TEST_F(ServerE2ETest, ObserveReturnsPrequentialPredictionsLossesStepsAndExpansionSize) {
  const v1::ModelRef ref = Ref("e2e", "observe");
  // No offset and a budget of 4: the first prediction is f_1 = 0, every squared-loss
  // step adds a term, and the budget caps the expansion.
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 2
    kernel { gaussian { gamma: 1 } }
    loss { squared {} }
    learning_rate { eta0: 0.5 }
    lambda: 0.1
    budget { max_terms: 4 }
  )pb");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  const std::vector<v1::Example> stream = MakeStream(config, 6, 5);

  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(stub(), ref, absl::MakeConstSpan(stream).subspan(0, 1), &response)));
  ASSERT_EQ(response.predictions_size(), 1);
  ASSERT_EQ(response.losses_size(), 1);
  EXPECT_EQ(response.predictions(0), 0.0);
  EXPECT_EQ(response.losses(0), 0.5 * stream[0].y() * stream[0].y());
  EXPECT_EQ(response.steps(), 1u);
  EXPECT_EQ(response.expansion_size(), 1u);

  ASSERT_TRUE(IsOk(Observe(stub(), ref, absl::MakeConstSpan(stream).subspan(1), &response)));
  ASSERT_EQ(response.predictions_size(), 5);
  ASSERT_EQ(response.losses_size(), 5);
  for (int i = 0; i < 5; ++i) {
    const double r = response.predictions(i) - stream[i + 1].y();
    EXPECT_EQ(response.losses(i), 0.5 * r * r) << i;
    EXPECT_NE(response.predictions(i), 0.0) << i;  // the model learned from example 0
  }
  EXPECT_EQ(response.steps(), 6u);
  EXPECT_EQ(response.expansion_size(), 4u);
}

TEST_F(ServerE2ETest, ObserveStreamEqualsTheSameExamplesObservedUnary) {
  const v1::ModelConfig config = ParseConfig(kAveragedConfig);
  const v1::ModelRef unary = Ref("e2e", "stream-unary");
  const v1::ModelRef streamed = Ref("e2e", "stream-streamed");
  ASSERT_TRUE(IsOk(CreateModel(stub(), unary, config)));
  ASSERT_TRUE(IsOk(CreateModel(stub(), streamed, config)));
  const std::vector<v1::Example> stream = MakeStream(config, 90, 3);
  const auto batches = SplitIntoBatches(stream, std::vector<size_t>{1, 8, 3, 30});

  std::vector<double> predictions, losses;
  v1::ObserveResponse response;
  for (const auto& batch : batches) {
    ASSERT_TRUE(IsOk(Observe(stub(), unary, batch, &response)));
    predictions.insert(predictions.end(), response.predictions().begin(),
                       response.predictions().end());
    losses.insert(losses.end(), response.losses().begin(), response.losses().end());
  }
  v1::ObserveResponse aggregate;
  ASSERT_TRUE(IsOk(ObserveStream(stub(), streamed, batches, &aggregate)));
  EXPECT_EQ(Bits(aggregate.predictions()), Bits(predictions));
  EXPECT_EQ(Bits(aggregate.losses()), Bits(losses));
  EXPECT_EQ(aggregate.steps(), 90u);
  EXPECT_EQ(aggregate.expansion_size(), response.expansion_size());

  // A second stream continues where the first left off.
  const std::vector<v1::Example> more = MakeStream(config, 10, 4);
  ASSERT_TRUE(IsOk(Observe(stub(), unary, more, &response)));
  ASSERT_TRUE(IsOk(ObserveStream(stub(), streamed, {more}, &aggregate)));
  EXPECT_EQ(Bits(aggregate.predictions()), Bits(response.predictions()));
  EXPECT_EQ(aggregate.steps(), 100u);
  // A later message may name the model again instead of leaving the ref empty.
  std::vector<v1::ObserveRequest> requests(2);
  for (v1::ObserveRequest& request : requests) {
    *request.mutable_ref() = streamed;
    request.mutable_examples()->Add(more.begin(), more.begin() + 2);
  }
  ASSERT_TRUE(IsOk(ObserveStreamRaw(stub(), requests, &aggregate)));
  EXPECT_EQ(aggregate.predictions_size(), 4);
  EXPECT_EQ(aggregate.steps(), 104u);
}

TEST_F(ServerE2ETest, PredictReturnsOnePredictionPerInputInOrderAndChangesNothing) {
  const Trained trained = Train(Ref("e2e", "predict"), kRegressionConfig, 40);
  std::vector<v1::Vector> inputs = MakeProbes(3, 12, 99);
  std::vector<double> forward;
  ASSERT_TRUE(IsOk(Predict(stub(), trained.ref, inputs, &forward)));
  ASSERT_EQ(forward.size(), inputs.size());
  std::reverse(inputs.begin(), inputs.end());
  std::vector<double> backward;
  ASSERT_TRUE(IsOk(Predict(stub(), trained.ref, inputs, &backward)));
  std::reverse(backward.begin(), backward.end());
  EXPECT_EQ(Bits(forward), Bits(backward));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> one;
    ASSERT_TRUE(IsOk(Predict(stub(), trained.ref, {inputs[i]}, &one)));
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(Bits(one), Bits({forward[inputs.size() - 1 - i]})) << i;
  }
  // A sparse input predicts as its dense equivalent.
  const v1::Vector sparse = SparseVector({0u, 2u}, {0.25, -0.5});
  std::vector<double> from_sparse, from_dense;
  ASSERT_TRUE(IsOk(Predict(stub(), trained.ref, {sparse}, &from_sparse)));
  ASSERT_TRUE(
      IsOk(Predict(stub(), trained.ref, {DenseVector({0.25, 0.0, -0.5})}, &from_dense)));
  EXPECT_EQ(Bits(from_sparse), Bits(from_dense));
  ExpectUnchanged(trained, "Predict");
}

TEST_F(ServerE2ETest, NoveltyPredictFlagsTheInputsBelowTheRhoOfTheModelThatPredicted) {
  for (const char* text : {kNoveltyConfig, kFixedRhoNoveltyConfig}) {
    const v1::ModelConfig config = ParseConfig(text);
    SCOPED_TRACE(config.loss().ShortDebugString());
    const v1::ModelRef ref =
        Ref("e2e-novelty", config.loss().novelty().nu() > 0 ? "learned-rho" : "fixed-rho");
    ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
    std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
    ASSERT_NE(twin, nullptr);
    const std::vector<v1::Example> stream = MakeStream(config, 200, 31);
    v1::ObserveResponse observed;
    ASSERT_TRUE(IsOk(Observe(stub(), ref, stream, &observed)));
    twin->Observe(stream);

    // More inputs than the server predicts under one read of the model (256): inside the
    // data's square [-1, 1]^2, on a ray out of it (where f falls through rho), and far
    // away, where f is 0 to many digits.
    std::vector<v1::Vector> inputs = MakeProbes(2, 300, 32);
    for (double r = 0.0; r <= 3.0; r += 0.25) inputs.push_back(DenseVector({r, r / 2}));
    for (const double far : {5.0, -6.0, 10.0}) inputs.push_back(DenseVector({far, -far}));
    v1::PredictResponse response;
    ASSERT_TRUE(IsOk(Predict(stub(), ref, inputs, &response)));
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
    EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), twin->WireStats()))
        << "server: " << info.stats().ShortDebugString()
        << "\ncore:   " << twin->WireStats().ShortDebugString();
    const double rho = info.stats().rho();
    EXPECT_EQ(rho, twin->model().stats().margin);
    EXPECT_GT(rho, 0.0);  // so that the far inputs are novel

    ASSERT_EQ(static_cast<size_t>(response.predictions_size()), inputs.size());
    ASSERT_EQ(static_cast<size_t>(response.novel_size()), inputs.size());
    EXPECT_EQ(Bits(response.predictions()), Bits(twin->Predict(inputs)));
    size_t novel = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_EQ(response.novel(i), response.predictions(i) < rho)
          << "input " << i << ": f = " << response.predictions(i) << ", rho = " << rho;
      if (response.novel(i)) ++novel;
    }
    for (size_t i = inputs.size() - 3; i < inputs.size(); ++i) EXPECT_TRUE(response.novel(i));
    EXPECT_GT(novel, 3u);                 // on the ray too
    EXPECT_LT(novel, inputs.size() / 2);  // but most inputs are near the data
  }

  // Every other loss answers predictions only.
  const Trained hinge = Train(Ref("e2e-novelty", "hinge"), kClassifierConfig);
  v1::PredictResponse response;
  ASSERT_TRUE(IsOk(Predict(stub(), hinge.ref, hinge.probes, &response)));
  EXPECT_EQ(static_cast<size_t>(response.predictions_size()), hinge.probes.size());
  EXPECT_EQ(response.novel_size(), 0);
}

TEST_F(ServerE2ETest, NoveltyWithAnOffsetAndMergeWithoutTheGaussianKernelAreInvalidArgument) {
  const v1::ModelRef ref = Ref("e2e-rejected", "m");
  v1::ModelInfo info;

  v1::ModelConfig novelty = ParseConfig(kNoveltyConfig);
  novelty.set_offset(true);
  grpc::Status status = CreateModel(stub(), ref, novelty, &info);
  EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("offset"));
  ExpectAbsent(ref, "novelty with an offset");

  v1::ModelConfig merge = ParseConfig(kMergeHingeConfig);
  merge.mutable_kernel()->mutable_laplacian()->set_gamma(1);
  status = CreateModel(stub(), ref, merge, &info);
  EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("MERGE"));
  ExpectAbsent(ref, "MERGE with a laplacian kernel");

  // Either is fine without the other half.
  novelty.set_offset(false);
  EXPECT_TRUE(IsOk(CreateModel(stub(), Ref("e2e-rejected", "novelty"), novelty)));
  merge.mutable_kernel()->mutable_gaussian()->set_gamma(1);
  EXPECT_TRUE(IsOk(CreateModel(stub(), Ref("e2e-rejected", "merge"), merge)));
}

TEST_F(ServerE2ETest, StatsCarryTheTermsRemovedTheOffsetAndTheMarginOfTheCore) {
  const v1::ModelRef ref = Ref("e2e", "merge-stats");
  const v1::ModelConfig config = ParseConfig(kMergeHingeConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 120, 41);
  v1::ModelInfo info;
  for (const auto& batch : SplitIntoBatches(stream, std::vector<size_t>{30})) {
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(stub(), ref, batch, &response)));
    twin->Observe(batch);
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
    EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), twin->WireStats()))
        << "server: " << info.stats().ShortDebugString()
        << "\ncore:   " << twin->WireStats().ShortDebugString();
  }
  const ModelStats core = twin->model().stats();
  EXPECT_EQ(info.stats().expansion_size(), 12u);
  EXPECT_EQ(info.stats().terms_removed(), core.terms_removed);
  EXPECT_GT(info.stats().terms_removed(), 0u);
  EXPECT_EQ(info.stats().offset(), core.offset);
  EXPECT_NE(info.stats().offset(), 0.0);
  EXPECT_EQ(info.stats().rho(), core.margin);
  EXPECT_NE(info.stats().rho(), 1.0);  // learned by the nu-trick
  EXPECT_EQ(info.stats().epsilon(), 0.0);
  EXPECT_EQ(info.stats().regret_duality_gap(), 0.0);  // no regret tracking

  // Epsilon-insensitive: the tube, learned here, is epsilon, and rho stays 0.
  const Trained tube = Train(Ref("e2e", "tube-stats"), kAveragedConfig, 60);
  std::unique_ptr<CoreTwin> tube_twin = CoreTwin::Create(tube.config);
  ASSERT_NE(tube_twin, nullptr);
  tube_twin->Observe(tube.stream);
  ASSERT_TRUE(IsOk(GetModel(stub(), tube.ref, &info)));
  EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), tube_twin->WireStats()))
      << info.stats().ShortDebugString();
  EXPECT_EQ(info.stats().epsilon(), tube_twin->model().stats().margin);
  EXPECT_NE(info.stats().epsilon(), 0.05);
  EXPECT_EQ(info.stats().rho(), 0.0);
}

// --- The server computes exactly what core computes ------------------------------------

struct EquivalenceCase {
  std::string name;
  const char* config;
  bool sparse;                // sparse inputs
  uint32_t max_nonzeros = 0;  // > 0: the config with sparse storage
};

void PrintTo(const EquivalenceCase& c, std::ostream* out) {
  *out << c.name << (c.sparse ? " (sparse inputs)" : " (dense inputs)");
}

class ServerMatchesCoreTest : public ServerSuite,
                              public ::testing::WithParamInterface<EquivalenceCase> {
 protected:
  static void SetUpTestSuite() { StartServer({}); }
  static void TearDownTestSuite() { StopServer(); }
};

TEST_P(ServerMatchesCoreTest, PredictionsLossesStatsAndStateEqualTheCoreBitForBit) {
  const EquivalenceCase& param = GetParam();
  const v1::ModelRef ref = Ref("equivalence", param.name);
  v1::ModelConfig config = ParseConfig(param.config);
  if (param.max_nonzeros > 0) config.mutable_sparse()->set_max_nonzeros(param.max_nonzeros);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 300, 2024, param.sparse);
  const std::vector<v1::Vector> probes = MakeProbes(config.dim(), 7, 2025, param.sparse);

  auto expect_same_predictions = [&](absl::string_view when) {
    std::vector<double> predictions;
    ASSERT_TRUE(IsOk(Predict(stub(), ref, probes, &predictions))) << when;
    EXPECT_EQ(Bits(predictions), Bits(twin->Predict(probes))) << "Predict " << when;
  };

  // The first half unary, in batches of varying size.
  const auto batches = SplitIntoBatches(absl::MakeConstSpan(stream).subspan(0, 150),
                                        std::vector<size_t>{1, 7, 3, 16, 2});
  size_t done = 0;
  for (const auto& batch : batches) {
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(stub(), ref, batch, &response)));
    const std::vector<Observation> expected = twin->Observe(batch);
    done += batch.size();
    ASSERT_EQ(response.predictions_size(), static_cast<int>(batch.size()));
    ASSERT_EQ(Bits(response.predictions()), Bits(PredictionsOf(expected))) << "after " << done;
    ASSERT_EQ(Bits(response.losses()), Bits(LossesOf(expected))) << "after " << done;
    EXPECT_EQ(response.steps(), twin->model().steps());
    EXPECT_EQ(response.expansion_size(), twin->model().expansion_size());
    expect_same_predictions(absl::StrCat("after ", done, " examples"));
  }

  // The second half on one stream.
  const auto stream_batches =
      SplitIntoBatches(absl::MakeConstSpan(stream).subspan(150), std::vector<size_t>{5, 1, 9});
  v1::ObserveResponse aggregate;
  ASSERT_TRUE(IsOk(ObserveStream(stub(), ref, stream_batches, &aggregate)));
  const std::vector<Observation> expected =
      twin->Observe(absl::MakeConstSpan(stream).subspan(150));
  ASSERT_EQ(aggregate.predictions_size(), 150);
  EXPECT_EQ(Bits(aggregate.predictions()), Bits(PredictionsOf(expected)));
  EXPECT_EQ(Bits(aggregate.losses()), Bits(LossesOf(expected)));
  EXPECT_EQ(aggregate.steps(), 300u);
  EXPECT_EQ(aggregate.expansion_size(), twin->model().expansion_size());
  expect_same_predictions("after the stream");

  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  const v1::ModelStats stats = twin->WireStats();
  EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), stats))
      << "server: " << info.stats().ShortDebugString()
      << "\ncore:   " << stats.ShortDebugString();

  // The snapshot is the core's state, exactly.
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), ref, &bytes)));
  v1::ModelSnapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(bytes));
  absl::StatusOr<ModelState> state = FromProto(snapshot);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(*state == twin->model().ExportState());
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ServerMatchesCoreTest,
    ::testing::Values(
        EquivalenceCase{"GaussianSquaredOffset", kRegressionConfig, false},
        EquivalenceCase{"SparseLaplacianNuHingeSmallest", kSparseHingeConfig, true},
        EquivalenceCase{"AveragedEpsilonPowerOldest", kAveragedConfig, false},
        EquivalenceCase{"SparsePolynomialLogisticDropBelow", kSparseLogisticConfig, true},
        EquivalenceCase{"AveragedHeatHuberSparse", kHeatHuberConfig, true},
        EquivalenceCase{"GaussianNuHingeOffsetMerge", kMergeHingeConfig, false},
        EquivalenceCase{"GaussianNuNoveltySmallest", kNoveltyConfig, false},
        EquivalenceCase{"AveragedMergeWindow7", kAveragedMergeWindowConfig, false},
        EquivalenceCase{"SparseLaplacianRandomFeaturesAveraged", kRandomFeaturesConfig, true},
        EquivalenceCase{"SparseStorageLaplacianNuHinge", kSparseHingeConfig, true, 40},
        EquivalenceCase{"SparseStorageDenseInputs", kSparseHingeConfig, false, 40},
        EquivalenceCase{"SparseStorageAveragedLogistic", kSparseStorageAveragedConfig, true},
        EquivalenceCase{"KrlsTrackerForgetting", kKrlsTrackerConfig, false},
        EquivalenceCase{"KrlsTrackerSparseInputs", kKrlsTrackerConfig, true},
        EquivalenceCase{"SelectDefaultSet", kSelectDefaultConfig, false},
        EquivalenceCase{"SelectListedSparseInputs", kSelectListedConfig, true}),
    [](const ::testing::TestParamInfo<EquivalenceCase>& info) { return info.param.name; });

TEST_F(ServerE2ETest, MackeyGlassReplayOverGrpcEqualsTheCoreBitForBit) {
  absl::StatusOr<Dataset> data = ReadSeries(OKL_DATA_DIR "/mg30.dat", 7);
  ASSERT_TRUE(data.ok()) << data.status();
  const size_t n = std::min<size_t>(data->size(), 1500);
  std::vector<v1::Example> stream;
  for (size_t i = 0; i < n; ++i)
    stream.push_back(MakeExample(DenseVector(data->row(i)), data->y[i]));

  const v1::ModelRef ref = Ref("e2e", "mg30");
  const v1::ModelConfig config = ParseConfig(kMackeyGlassConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(ObserveStream(
      stub(), ref, SplitIntoBatches(stream, std::vector<size_t>{100}), &response)));
  const std::vector<Observation> expected = twin->Observe(stream);
  EXPECT_EQ(Bits(response.predictions()), Bits(PredictionsOf(expected)));
  EXPECT_EQ(response.expansion_size(), 512u);  // the budget is full
  // And it learns: the last 200 squared errors are far below the first 200.
  auto mean_loss = [&](size_t from, size_t to) {
    double sum = 0.0;
    for (size_t i = from; i < to; ++i) sum += response.losses(i);
    return sum / static_cast<double>(to - from);
  };
  EXPECT_LT(mean_loss(n - 200, n), 0.2 * mean_loss(0, 200));
}

// --- Snapshot and Restore --------------------------------------------------------------

TEST_F(ServerE2ETest, SnapshotIsOneChecksummedModelSnapshotInChunksOfAtMostOneMiB) {
  const v1::ModelRef ref = Ref("e2e", "big");
  // 2,400 terms of 64 doubles: ~1.2 MB of support, so at least two chunks.
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 64
    kernel { gaussian { gamma: 0.05 } }
    loss { squared {} }
    learning_rate { eta0: 0.2 }
    lambda: 0.001
    budget { max_terms: 2400 }
  )pb");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 2400, 8);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(ObserveStream(
      stub(), ref, SplitIntoBatches(stream, std::vector<size_t>{400}), &response)));
  twin->Observe(stream);
  ASSERT_EQ(response.expansion_size(), 2400u);

  std::string bytes;
  std::vector<size_t> chunk_sizes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), ref, &bytes, &chunk_sizes)));
  EXPECT_GT(bytes.size(), size_t{1} << 20);
  EXPECT_GE(chunk_sizes.size(), 2u);
  for (size_t size : chunk_sizes) EXPECT_LE(size, size_t{1} << 20);

  // The last 10 bytes are the checksum field over everything before it.
  ASSERT_GT(bytes.size(), 10u);
  const std::string body = bytes.substr(0, bytes.size() - 10);
  EXPECT_EQ(bytes, WithChecksum(body));
  v1::ModelSnapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(bytes));
  EXPECT_EQ(snapshot.format_version(), kExpansionSnapshotFormatVersion);
  EXPECT_EQ(snapshot.steps(), 2400u);
  absl::StatusOr<ModelState> state = FromProto(snapshot);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(*state == twin->model().ExportState());

  // Snapshot changes nothing: a second one is byte-identical.
  std::string again;
  ASSERT_TRUE(IsOk(Snapshot(stub(), ref, &again)));
  EXPECT_TRUE(again == bytes);
}

// Observes the same examples on every model of `refs` and expects identical answers.
void ExpectContinueIdentically(Stub& stub, const std::vector<v1::ModelRef>& refs,
                               const v1::ModelConfig& config, uint64_t seed) {
  const std::vector<v1::Example> more = MakeStream(config, 60, seed);
  const std::vector<v1::Vector> probes = MakeProbes(config.dim(), 5, seed + 1);
  std::vector<v1::ObserveResponse> responses(refs.size());
  std::vector<std::vector<double>> predictions(refs.size());
  std::vector<v1::ModelInfo> infos(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    // Messages of 5 examples, within ServerLimitsTest's --max_batch.
    ASSERT_TRUE(IsOk(ObserveStream(
        stub, refs[i], SplitIntoBatches(more, std::vector<size_t>{5}), &responses[i])))
        << RefName(refs[i]);
    ASSERT_TRUE(IsOk(Predict(stub, refs[i], probes, &predictions[i])));
    ASSERT_TRUE(IsOk(GetModel(stub, refs[i], &infos[i])));
  }
  for (size_t i = 1; i < refs.size(); ++i) {
    EXPECT_EQ(Bits(responses[i].predictions()), Bits(responses[0].predictions()))
        << RefName(refs[i]) << " vs " << RefName(refs[0]);
    EXPECT_EQ(Bits(responses[i].losses()), Bits(responses[0].losses()));
    EXPECT_EQ(Bits(predictions[i]), Bits(predictions[0]));
    EXPECT_TRUE(MessageDifferencer::Equals(infos[i].stats(), infos[0].stats()))
        << infos[i].stats().ShortDebugString() << "\nvs "
        << infos[0].stats().ShortDebugString();
  }
}

TEST_F(ServerE2ETest, RestoreUnderAnotherNameContinuesBitIdentically) {
  const Trained original = Train(Ref("e2e", "snap-source"), kAveragedConfig, 150);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));

  // Small chunks: the server reassembles them.
  const v1::ModelRef copy = Ref("e2e-other-tenant", "snap-copy");
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(Restore(stub(), copy, bytes, /*chunk_bytes=*/512, &info)));
  EXPECT_EQ(RefName(info.ref()), RefName(copy));
  v1::ModelInfo source;
  ASSERT_TRUE(IsOk(GetModel(stub(), original.ref, &source)));
  EXPECT_TRUE(MessageDifferencer::Equals(info.config(), source.config()));
  EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), source.stats()))
      << info.stats().ShortDebugString() << "\nvs " << source.stats().ShortDebugString();

  // The copy's own snapshot is the same bytes: an exact round trip.
  std::string copy_bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), copy, &copy_bytes)));
  EXPECT_TRUE(copy_bytes == bytes);
  ExpectContinueIdentically(stub(), {original.ref, copy}, original.config, 61);
  ExpectContinueIdentically(stub(), {original.ref, copy}, original.config, 62);
}

TEST_F(ServerE2ETest, RestoreOverAnExistingModelReplacesItAndContinuesBitIdentically) {
  const Trained original = Train(Ref("e2e", "replace-source"), kSparseLogisticConfig, 120);
  const Trained victim = Train(Ref("e2e", "replace-victim"), kRegressionConfig, 20, 3);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));

  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(Restore(stub(), victim.ref, bytes, size_t{1} << 20, &info)));
  v1::ModelInfo source, replaced;
  ASSERT_TRUE(IsOk(GetModel(stub(), original.ref, &source)));
  ASSERT_TRUE(IsOk(GetModel(stub(), victim.ref, &replaced)));
  EXPECT_TRUE(MessageDifferencer::Equals(replaced.config(), source.config()))
      << replaced.config().ShortDebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(replaced.stats(), source.stats()));
  ExpectContinueIdentically(stub(), {original.ref, victim.ref}, original.config, 63);
  // Restoring a model onto its own name is a no-op in effect.
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));
  ASSERT_TRUE(IsOk(Restore(stub(), original.ref, bytes)));
  ExpectContinueIdentically(stub(), {original.ref, victim.ref}, original.config, 64);
}

TEST_F(ServerE2ETest, RestoreOfCorruptOrTruncatedBytesIsDataLossAndInstallsNothing) {
  const Trained original = Train(Ref("e2e", "corrupt-source"), kAveragedConfig, 80);
  const Trained existing = Train(Ref("e2e", "corrupt-existing"), kRegressionConfig, 20, 9);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));
  ASSERT_GT(bytes.size(), 100u);

  std::vector<std::pair<std::string, std::string>> cases;
  for (size_t at : {size_t{3}, bytes.size() / 2, bytes.size() - 12, bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    cases.emplace_back(absl::StrCat("a bit flipped at byte ", at), flipped);
  }
  cases.emplace_back("truncated to half", bytes.substr(0, bytes.size() / 2));
  cases.emplace_back("the last byte missing", bytes.substr(0, bytes.size() - 1));
  cases.emplace_back("the checksum field missing", bytes.substr(0, bytes.size() - 10));
  cases.emplace_back("a byte appended", bytes + "x");
  cases.emplace_back("no bytes", "");
  cases.emplace_back("not a snapshot", "this is not a ModelSnapshot, just text");

  const v1::ModelRef fresh = Ref("e2e", "corrupt-fresh");
  for (const auto& [what, data] : cases) {
    SCOPED_TRACE(what);
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(Restore(stub(), fresh, data, 256, &info), Code::DATA_LOSS));
    ExpectAbsent(fresh, what);
    EXPECT_TRUE(HasCode(Restore(stub(), existing.ref, data, 256, &info), Code::DATA_LOSS));
    ExpectUnchanged(existing, what);
  }
}

TEST_F(ServerE2ETest, RestoreOfAChecksummedButInvalidSnapshotIsDataLossAndInstallsNothing) {
  const Trained original = Train(Ref("e2e", "invalid-source"), kAveragedConfig, 80);
  const Trained existing = Train(Ref("e2e", "invalid-existing"), kRegressionConfig, 20, 9);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));
  v1::ModelSnapshot good;
  ASSERT_TRUE(good.ParseFromString(bytes));
  good.clear_checksum();
  // Re-serialized unchanged, with the checksum recomputed, it restores fine.
  const v1::ModelRef fresh = Ref("e2e", "invalid-fresh");
  ASSERT_TRUE(IsOk(Restore(stub(), fresh, WithChecksum(good.SerializeAsString()))));
  ASSERT_TRUE(IsOk(DeleteModel(stub(), fresh)));

  std::vector<std::pair<std::string, v1::ModelSnapshot>> cases;
  v1::ModelSnapshot s = good;
  s.set_format_version(kSnapshotFormatVersion + 1);
  cases.emplace_back("format_version from the future", s);
  s = good;
  s.set_format_version(0);
  cases.emplace_back("format_version 0", s);
  s = good;
  s.mutable_coefficients()->RemoveLast();
  cases.emplace_back("a coefficient missing", s);
  s = good;
  s.mutable_support()->RemoveLast();
  cases.emplace_back("a support value missing", s);
  s = good;
  s.set_scale(0.0);
  cases.emplace_back("scale 0", s);
  s = good;
  s.mutable_coefficients()->Set(0, std::numeric_limits<double>::quiet_NaN());
  cases.emplace_back("a NaN coefficient", s);
  s = good;
  s.mutable_config()->mutable_kernel()->mutable_gaussian()->set_gamma(-1.0);
  cases.emplace_back("an invalid config", s);
  s = good;
  s.clear_config();
  cases.emplace_back("no config", s);
  s = good;
  s.mutable_config()->mutable_budget()->set_max_terms(2);
  cases.emplace_back("more terms than the budget", s);

  for (const auto& [what, snapshot] : cases) {
    SCOPED_TRACE(what);
    const std::string data = WithChecksum(snapshot.SerializeAsString());
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(Restore(stub(), fresh, data, size_t{1} << 20, &info), Code::DATA_LOSS));
    ExpectAbsent(fresh, what);
    EXPECT_TRUE(
        HasCode(Restore(stub(), existing.ref, data, size_t{1} << 20, &info), Code::DATA_LOSS));
    ExpectUnchanged(existing, what);
  }
}

TEST_F(ServerE2ETest, RestoreWithoutAValidRefIsInvalidArgumentAndInstallsNothing) {
  const Trained original = Train(Ref("e2e", "ref-source"), kRegressionConfig, 30);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), original.ref, &bytes)));
  v1::ModelInfo info;

  // No ref in the first chunk (it comes only in the second).
  std::vector<v1::RestoreChunk> chunks(2);
  chunks[0].set_data(bytes.substr(0, 10));
  *chunks[1].mutable_ref() = Ref("e2e", "ref-late");
  chunks[1].set_data(bytes.substr(10));
  EXPECT_TRUE(HasCode(RestoreChunks(stub(), chunks, &info), Code::INVALID_ARGUMENT));
  ExpectAbsent(Ref("e2e", "ref-late"), "a ref in the second chunk");

  // A later chunk naming another model.
  *chunks[0].mutable_ref() = Ref("e2e", "ref-first");
  *chunks[1].mutable_ref() = Ref("e2e", "ref-second");
  EXPECT_TRUE(HasCode(RestoreChunks(stub(), chunks, &info), Code::INVALID_ARGUMENT));
  ExpectAbsent(Ref("e2e", "ref-first"), "two refs");
  ExpectAbsent(Ref("e2e", "ref-second"), "two refs");

  // No chunk at all.
  EXPECT_TRUE(HasCode(RestoreChunks(stub(), {}, &info), Code::INVALID_ARGUMENT));

  // Bad names.
  EXPECT_TRUE(HasCode(Restore(stub(), Ref("e2e", "bad name"), bytes), Code::INVALID_ARGUMENT));
  EXPECT_TRUE(HasCode(Restore(stub(), Ref("", "x"), bytes), Code::INVALID_ARGUMENT));
  ExpectUnchanged(original, "the rejected restores");
}

// --- Every error over the wire, and nothing changed ------------------------------------

std::vector<std::string> BadNames() {
  return {"", std::string(65, 'a'), "a b", "a/b", "caf\xc3\xa9", "tab\t", "a:b", "*", "a\nb"};
}

TEST_F(ServerE2ETest, BadNamesAreInvalidArgumentOnEveryRpc) {
  const Trained trained = Train(Ref("e2e", "names"), kRegressionConfig);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), trained.ref, &bytes)));
  for (const std::string& bad : BadNames()) {
    for (const v1::ModelRef& ref : {Ref(bad, "m"), Ref("e2e", bad)}) {
      SCOPED_TRACE(
          absl::StrCat("ref {tenant: \"", ref.tenant(), "\" model: \"", ref.model(), "\"}"));
      v1::ModelInfo info;
      EXPECT_TRUE(
          HasCode(CreateModel(stub(), ref, trained.config, &info), Code::INVALID_ARGUMENT));
      EXPECT_TRUE(HasCode(GetModel(stub(), ref, &info), Code::INVALID_ARGUMENT));
      EXPECT_TRUE(HasCode(DeleteModel(stub(), ref), Code::INVALID_ARGUMENT));
      v1::ObserveResponse response;
      EXPECT_TRUE(
          HasCode(Observe(stub(), ref, trained.stream, &response), Code::INVALID_ARGUMENT));
      EXPECT_TRUE(HasCode(ObserveStream(stub(), ref, {trained.stream}, &response),
                          Code::INVALID_ARGUMENT));
      std::vector<double> predictions;
      EXPECT_TRUE(
          HasCode(Predict(stub(), ref, trained.probes, &predictions), Code::INVALID_ARGUMENT));
      std::string snapshot;
      EXPECT_TRUE(HasCode(Snapshot(stub(), ref, &snapshot), Code::INVALID_ARGUMENT));
      EXPECT_TRUE(HasCode(Restore(stub(), ref, bytes), Code::INVALID_ARGUMENT));
    }
  }
  ExpectUnchanged(trained, "requests with bad names");
  v1::ListModelsResponse list;
  for (const std::string& bad : BadNames()) {
    if (bad.empty()) continue;  // the empty filter lists every tenant
    EXPECT_TRUE(HasCode(ListModels(stub(), bad, &list), Code::INVALID_ARGUMENT)) << bad;
  }
  ASSERT_TRUE(IsOk(ListModels(stub(), "", &list)));
  for (const v1::ModelInfo& info : list.models()) {
    for (const std::string& bad : BadNames()) {
      EXPECT_NE(info.ref().tenant(), bad);
      EXPECT_NE(info.ref().model(), bad);
    }
  }
}

TEST_F(ServerE2ETest, NamesOfOneTo64LettersDigitsDotsUnderscoresAndDashesAreAccepted) {
  const v1::ModelConfig config = ParseConfig(kRegressionConfig);
  for (const v1::ModelRef& ref :
       {Ref(std::string(64, 'T'), std::string(64, 'm')), Ref("a", "b"),
        Ref("Acme.Corp_2-x", "model.v1_final-3"), Ref("0", "..."), Ref("-", "_")}) {
    SCOPED_TRACE(RefName(ref));
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config, &info)));
    EXPECT_EQ(info.ref().tenant(), ref.tenant());
    EXPECT_EQ(info.ref().model(), ref.model());
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
    ASSERT_TRUE(IsOk(DeleteModel(stub(), ref)));
  }
}

TEST_F(ServerE2ETest, NonFiniteValuesAreInvalidArgumentAndChangeNothing) {
  const Trained trained = Train(Ref("e2e", "nonfinite"), kRegressionConfig);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, v1::Example>> bad = {
      {"NaN in x", MakeExample(DenseVector({0.1, nan, 0.2}), 1.0)},
      {"+Inf in x", MakeExample(DenseVector({inf, 0.0, 0.2}), 1.0)},
      {"-Inf in sparse x", MakeExample(SparseVector({1u}, {-inf}), 1.0)},
      {"NaN y", MakeExample(DenseVector({0.1, 0.2, 0.3}), nan)},
      {"Inf y", MakeExample(DenseVector({0.1, 0.2, 0.3}), inf)},
  };
  for (const auto& [what, example] : bad) {
    SCOPED_TRACE(what);
    // Valid examples first: the batch is validated whole before any is applied.
    std::vector<v1::Example> batch = MakeStream(trained.config, 4, 77);
    batch.push_back(example);
    v1::ObserveResponse response;
    EXPECT_TRUE(
        HasCode(Observe(stub(), trained.ref, batch, &response), Code::INVALID_ARGUMENT));
    ExpectUnchanged(trained, absl::StrCat("Observe with ", what));
    EXPECT_TRUE(HasCode(ObserveStream(stub(), trained.ref, {batch}, &response),
                        Code::INVALID_ARGUMENT));
    ExpectUnchanged(trained, absl::StrCat("ObserveStream with ", what));
  }
  for (const v1::Vector& input : {DenseVector({nan, 0.0, 0.0}), DenseVector({0.0, 0.0, -inf}),
                                  SparseVector({2u}, {nan})}) {
    std::vector<v1::Vector> inputs = trained.probes;
    inputs.push_back(input);
    std::vector<double> predictions;
    EXPECT_TRUE(
        HasCode(Predict(stub(), trained.ref, inputs, &predictions), Code::INVALID_ARGUMENT))
        << input.ShortDebugString();
  }
  ExpectUnchanged(trained, "Predict with non-finite inputs");
}

TEST_F(ServerE2ETest, WrongDimensionIsInvalidArgumentAndChangesNothing) {
  const Trained trained = Train(Ref("e2e", "dimension"), kRegressionConfig);  // dim 3
  for (const v1::Vector& x :
       {DenseVector({0.1, 0.2}), DenseVector({0.1, 0.2, 0.3, 0.4}), DenseVector({0.5})}) {
    SCOPED_TRACE(x.ShortDebugString());
    std::vector<v1::Example> batch = MakeStream(trained.config, 3, 78);
    batch.push_back(MakeExample(x, 0.5));
    v1::ObserveResponse response;
    EXPECT_TRUE(
        HasCode(Observe(stub(), trained.ref, batch, &response), Code::INVALID_ARGUMENT));
    std::vector<v1::Vector> inputs = trained.probes;
    inputs.push_back(x);
    std::vector<double> predictions;
    EXPECT_TRUE(
        HasCode(Predict(stub(), trained.ref, inputs, &predictions), Code::INVALID_ARGUMENT));
    ExpectUnchanged(trained, "a wrong dimension");
  }
  // An empty dense vector is the zero vector of dimension 0, not of dimension 3.
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(Observe(stub(), trained.ref, {MakeExample(v1::Vector(), 0.5)}, &response),
                      Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "an empty vector");
}

TEST_F(ServerE2ETest, BadSparseIndicesAreInvalidArgumentAndChangeNothing) {
  const Trained trained = Train(Ref("e2e", "sparse"), kRegressionConfig);  // dim 3
  const std::vector<std::pair<std::string, v1::Vector>> bad = {
      {"index == dim", SparseVector({0u, 3u}, {1.0, 1.0})},
      {"index 2^32-1", SparseVector({4294967295u}, {1.0})},
      {"1-based index", SparseVector({3u}, {1.0})},
      {"a repeated index", SparseVector({1u, 1u}, {1.0, 2.0})},
      {"decreasing indices", SparseVector({2u, 0u}, {1.0, 2.0})},
      {"more values than indices", SparseVector({0u, 1u}, {1.0, 2.0, 3.0})},
      {"fewer values than indices", SparseVector({0u, 1u, 2u}, {1.0, 2.0})},
      {"indices without values", SparseVector({0u}, {})},
  };
  for (const auto& [what, x] : bad) {
    SCOPED_TRACE(what);
    std::vector<v1::Example> batch = MakeStream(trained.config, 3, 79);
    batch.push_back(MakeExample(x, 0.5));
    v1::ObserveResponse response;
    EXPECT_TRUE(
        HasCode(Observe(stub(), trained.ref, batch, &response), Code::INVALID_ARGUMENT));
    std::vector<v1::Vector> inputs = trained.probes;
    inputs.push_back(x);
    std::vector<double> predictions;
    EXPECT_TRUE(
        HasCode(Predict(stub(), trained.ref, inputs, &predictions), Code::INVALID_ARGUMENT));
    ExpectUnchanged(trained, what);
  }
}

TEST_F(ServerE2ETest, EmptyBatchesAreInvalidArgumentAndChangeNothing) {
  const Trained trained = Train(Ref("e2e", "empty"), kRegressionConfig);
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(Observe(stub(), trained.ref, {}, &response), Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "Observe of no examples");
  std::vector<double> predictions;
  EXPECT_TRUE(HasCode(Predict(stub(), trained.ref, {}, &predictions), Code::INVALID_ARGUMENT));
  EXPECT_TRUE(
      HasCode(ObserveStream(stub(), trained.ref, {{}}, &response), Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "ObserveStream of one empty message");
  // A stream without any message names no model.
  EXPECT_TRUE(HasCode(ObserveStreamRaw(stub(), {}, &response), Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "an empty ObserveStream");
}

TEST_F(ServerE2ETest, MissingRefIsInvalidArgumentAndChangesNothing) {
  const Trained trained = Train(Ref("e2e", "noref"), kRegressionConfig);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveRequest observe;
  observe.mutable_examples()->Add(trained.stream.begin(), trained.stream.begin() + 2);
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(stub().Observe(&context, observe, &response), Code::INVALID_ARGUMENT));

  grpc::ClientContext predict_context;
  SetDeadline(&predict_context);
  v1::PredictRequest predict;
  *predict.add_inputs() = trained.probes[0];
  v1::PredictResponse predictions;
  EXPECT_TRUE(
      HasCode(stub().Predict(&predict_context, predict, &predictions), Code::INVALID_ARGUMENT));

  grpc::ClientContext create_context;
  SetDeadline(&create_context);
  v1::CreateModelRequest create;
  *create.mutable_config() = trained.config;
  v1::ModelInfo info;
  EXPECT_TRUE(
      HasCode(stub().CreateModel(&create_context, create, &info), Code::INVALID_ARGUMENT));
  EXPECT_TRUE(HasCode(GetModel(stub(), v1::ModelRef(), &info), Code::INVALID_ARGUMENT));

  // ObserveStream whose first message has no ref, though a later one has.
  std::vector<v1::ObserveRequest> requests(2, observe);
  *requests[1].mutable_ref() = trained.ref;
  EXPECT_TRUE(HasCode(ObserveStreamRaw(stub(), requests, &response), Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "requests without a ref");
}

// Each case: what is wrong, and the config.
std::vector<std::pair<std::string, v1::ModelConfig>> InvalidConfigs() {
  const v1::ModelConfig good = ParseConfig(kRegressionConfig);
  std::vector<std::pair<std::string, v1::ModelConfig>> cases;
  v1::ModelConfig c = good;
  c.clear_kernel();
  cases.emplace_back("no kernel", c);
  c = good;
  c.clear_loss();
  cases.emplace_back("no loss", c);
  c = good;
  c.mutable_kernel()->mutable_gaussian()->set_gamma(-1.0);
  cases.emplace_back("gamma -1", c);
  c = good;
  c.mutable_kernel()->mutable_gaussian()->set_gamma(std::numeric_limits<double>::quiet_NaN());
  cases.emplace_back("gamma NaN", c);
  c = good;
  c.clear_learning_rate();
  cases.emplace_back("no learning rate (eta0 0)", c);
  c = good;
  c.mutable_learning_rate()->set_eta0(2.0);
  c.set_lambda(0.5);
  cases.emplace_back("eta0 * lambda >= 1", c);
  c = good;
  c.set_lambda(-0.1);
  cases.emplace_back("negative lambda", c);
  c = good;
  c.set_dim(0);
  cases.emplace_back("dim 0", c);
  c = good;
  c.mutable_learning_rate()->set_schedule(static_cast<v1::LearningRate::Schedule>(7));
  cases.emplace_back("unknown schedule 7", c);
  c = good;
  c.mutable_budget()->set_policy(static_cast<v1::Budget::Policy>(9));
  cases.emplace_back("unknown budget policy 9", c);
  c = good;
  c.mutable_loss()->mutable_hinge()->set_nu(1.5);
  cases.emplace_back("hinge nu 1.5", c);
  c = good;
  c.mutable_kernel()->mutable_polynomial()->set_gamma(1.0);
  c.mutable_kernel()->mutable_polynomial()->set_degree(0);
  cases.emplace_back("polynomial degree 0", c);
  c = good;
  c.set_regret_window(9000);
  cases.emplace_back("regret window 9000", c);
  c = good;
  c.mutable_budget()->set_drop_below(-1.0);
  cases.emplace_back("negative drop_below", c);
  return cases;
}

TEST_F(ServerE2ETest, InvalidConfigsAreInvalidArgumentAndCreateNothing) {
  for (const auto& [what, config] : InvalidConfigs()) {
    SCOPED_TRACE(what);
    const v1::ModelRef ref = Ref("e2e-invalid", "config");
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(CreateModel(stub(), ref, config, &info), Code::INVALID_ARGUMENT));
    ExpectAbsent(ref, what);
  }
  v1::ListModelsResponse list;
  ASSERT_TRUE(IsOk(ListModels(stub(), "e2e-invalid", &list)));
  EXPECT_EQ(list.models_size(), 0);
}

TEST_F(ServerE2ETest, BudgetMissingOrAboveMaxTermsIsInvalidArgumentNamingTheFlag) {
  v1::ModelConfig config = ParseConfig(kRegressionConfig);
  const v1::ModelRef ref = Ref("e2e", "budget-limit");
  v1::ModelInfo info;
  for (const auto& [what, max_terms] :
       std::vector<std::pair<std::string, uint32_t>>{{"no budget", 0}, {"above", 1000001}}) {
    SCOPED_TRACE(what);
    config.mutable_budget()->set_max_terms(max_terms);
    const grpc::Status status = CreateModel(stub(), ref, config, &info);
    EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
    EXPECT_THAT(status.error_message(), HasSubstr("--max_terms"));
    ExpectAbsent(ref, what);
  }
  config.clear_budget();
  EXPECT_TRUE(HasCode(CreateModel(stub(), ref, config, &info), Code::INVALID_ARGUMENT));
  ExpectAbsent(ref, "an unset budget");
  // The default --max_terms itself is allowed.
  config.mutable_budget()->set_max_terms(1000000);
  EXPECT_TRUE(IsOk(CreateModel(stub(), ref, config, &info)));
}

// Random features need no budget, and take none: a budget, an odd or too large D or a
// kernel without a spectral density is INVALID_ARGUMENT naming the field.
TEST_F(ServerE2ETest, RandomFeatureConfigsAreCheckedAndNeedNoBudget) {
  const v1::ModelRef ref = Ref("e2e", "random-features-config");
  v1::ModelInfo info;
  const v1::ModelConfig valid = ParseConfig(kRandomFeaturesConfig);
  const std::vector<ConfigChange> cases = {
      {"a budget", [](v1::ModelConfig& c) { c.mutable_budget()->set_max_terms(10); },
       "budget must be unset"},
      {"odd D", [](v1::ModelConfig& c) { c.mutable_random_features()->set_dimension(63); },
       "random_features.dimension"},
      {"D too large",
       [](v1::ModelConfig& c) { c.mutable_random_features()->set_dimension(65538); },
       "random_features.dimension"},
      {"linear kernel",
       [](v1::ModelConfig& c) { c.mutable_kernel()->mutable_linear()->set_c(1); },
       "gaussian or laplacian"},
      {"an averaging window", [](v1::ModelConfig& c) { c.set_averaging_window(5); },
       "averaging_window"},
  };
  ExpectRefused(ref, valid, cases);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, valid, &info)));
  EXPECT_EQ(info.config().random_features().dimension(), 64u);
  EXPECT_EQ(info.stats().expansion_size(), 64u);
}

TEST_F(ServerE2ETest, KrlsTrackerConfigsAreCheckedNamingTheFieldAndNeedNoBudget) {
  const v1::ModelRef ref = Ref("e2e", "tracker-config");
  v1::ModelInfo info;
  const v1::ModelConfig valid = ParseConfig(kKrlsTrackerConfig);
  const std::vector<ConfigChange> cases = {
      {"a learning rate", [](v1::ModelConfig& c) { c.mutable_learning_rate()->set_eta0(0.5); },
       "learning_rate must be unset for krls_tracker"},
      {"a budget", [](v1::ModelConfig& c) { c.mutable_budget()->set_max_terms(10); },
       "budget must be unset for krls_tracker"},
      {"lambda", [](v1::ModelConfig& c) { c.set_lambda(0.1); }, "lambda must be unset"},
      {"an offset", [](v1::ModelConfig& c) { c.set_offset(true); }, "offset must be unset"},
      {"averaged", [](v1::ModelConfig& c) { c.set_averaged(true); }, "averaged must be unset"},
      {"the hinge loss", [](v1::ModelConfig& c) { c.mutable_loss()->mutable_hinge(); },
       "needs the squared loss"},
      {"no max_basis", [](v1::ModelConfig& c) { c.mutable_krls_tracker()->set_max_basis(0); },
       "krls_tracker.max_basis"},
      {"over --max_basis",
       [](v1::ModelConfig& c) { c.mutable_krls_tracker()->set_max_basis(1001); },
       "--max_basis"},
      {"no noise variance",
       [](v1::ModelConfig& c) { c.mutable_krls_tracker()->clear_noise_variance(); },
       "krls_tracker.noise_variance"},
      {"forgetting 0", [](v1::ModelConfig& c) { c.mutable_krls_tracker()->set_forgetting(0); },
       "krls_tracker.forgetting"},
  };
  ExpectRefused(ref, valid, cases);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, valid, &info)));
  EXPECT_EQ(info.config().krls_tracker().max_basis(), 12u);
  EXPECT_EQ(info.config().krls_tracker().forgetting(), 0.995);
  EXPECT_EQ(info.config().krls_tracker().jitter(), 1e-6) << "the unset jitter's default";
  EXPECT_FALSE(info.config().has_learning_rate());
  EXPECT_EQ(info.stats().dictionary_size(), 0u);
}

// A selection's config is checked as a whole and candidate by candidate against this
// server's limits, each error naming the candidate; the stats list the candidates.
TEST_F(ServerE2ETest, SelectConfigsAreCheckedNamingTheCandidate) {
  const v1::ModelRef ref = Ref("e2e", "select-config");
  v1::ModelInfo info;
  const v1::ModelConfig valid = ParseConfig(kSelectListedConfig);
  const std::vector<ConfigChange> cases = {
      {"a kernel beside select",
       [](v1::ModelConfig& c) { c.mutable_kernel()->mutable_gaussian()->set_gamma(1); },
       "kernel must be left unset beside select"},
      {"a candidate over --max_terms",
       [](v1::ModelConfig& c) {
         c.mutable_select()->mutable_candidates(2)->mutable_budget()->set_max_terms(100000000);
       },
       "select.candidates[2]"},
      {"a candidate without a budget",
       [](v1::ModelConfig& c) { c.mutable_select()->mutable_candidates(0)->clear_budget(); },
       "select.candidates[0]: config.budget.max_terms is 0"},
      {"a candidate of another dim",
       [](v1::ModelConfig& c) { c.mutable_select()->mutable_candidates(1)->set_dim(4); },
       "select.candidates[1].dim"},
      {"a nested selection",
       [](v1::ModelConfig& c) { c.mutable_select()->mutable_candidates(0)->mutable_select(); },
       "cannot select"},
  };
  ExpectRefused(ref, valid, cases);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, valid, &info)));
  ASSERT_EQ(info.stats().candidates_size(), 3);
  EXPECT_EQ(info.stats().candidates(0).status(), v1::LIVE);
  EXPECT_EQ(info.stats().candidates(2).status(), v1::WAITING);
  EXPECT_EQ(info.stats().candidates(0).config().dim(), 5u) << "inherited from the outer dim";
  EXPECT_TRUE(info.stats().candidates(1).config().loss().has_hinge()) << "and the loss";
}

// `response` (Predict at `probes`) holds, bit for bit, twin's predictions and predictive
// variances, one per probe, each positive.
void ExpectPredictionsAndVariancesOf(CoreTwin& twin, uint32_t dim,
                                     const std::vector<v1::Vector>& probes,
                                     const v1::PredictResponse& response) {
  ASSERT_EQ(response.variances_size(), static_cast<int>(probes.size()));
  std::vector<double> xs;
  for (const v1::Vector& probe : probes) {
    const std::vector<double> x = Densify(probe, dim);
    xs.insert(xs.end(), x.begin(), x.end());
  }
  std::vector<double> means(probes.size()), variances(probes.size());
  ASSERT_TRUE(twin.model()
                  .PredictBatchWithVariance(InputBatch::Dense(xs, dim), absl::MakeSpan(means),
                                            absl::MakeSpan(variances))
                  .ok());
  EXPECT_EQ(Bits(response.predictions()), Bits(means));
  EXPECT_EQ(Bits(response.variances()), Bits(variances));
  for (const double variance : response.variances()) EXPECT_GT(variance, 0.0);
}

// A tracker's Predict carries one variance per input, bit for bit core's, of the model
// version that made the predictions; its stats carry the dictionary, the pruned bases and
// the estimated noise; other kinds carry no variances.
TEST_F(ServerE2ETest, KrlsTrackerPredictReturnsItsPredictiveVariances) {
  const v1::ModelRef ref = Ref("e2e", "tracker-variances");
  const v1::ModelConfig config = ParseConfig(kKrlsTrackerConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> stream = MakeStream(config, 100, 77);
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub(), ref, stream, &observed)));
  twin->Observe(stream);
  // More inputs than one group of the server's (it reads the model per group): every
  // group's variances land at their inputs.
  constexpr int kProbes = 700;
  const std::vector<v1::Vector> probes = MakeProbes(config.dim(), kProbes, 78);
  v1::PredictResponse response;
  ASSERT_TRUE(IsOk(Predict(stub(), ref, probes, &response)));
  ExpectPredictionsAndVariancesOf(*twin, config.dim(), probes, response);

  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().dictionary_size(), 12u);
  EXPECT_EQ(info.stats().expansion_size(), 12u);
  EXPECT_EQ(info.stats().bases_pruned(), info.stats().terms_removed());
  EXPECT_GT(info.stats().bases_pruned(), 0u);
  EXPECT_GT(info.stats().noise_variance(), 0.0);
  EXPECT_NEAR(info.stats().noise_variance(), 0.01 * info.stats().signal_power(),
              1e-12 * info.stats().signal_power());

  // Restored under another name, it continues bit-identically.
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), ref, &bytes)));
  const v1::ModelRef copy = Ref("e2e", "tracker-copy");
  ASSERT_TRUE(IsOk(Restore(stub(), copy, bytes, /*chunk_bytes=*/700, &info)));
  ExpectContinueIdentically(stub(), {ref, copy}, config, 79);

  // A NORMA model's response has no variances.
  const Trained norma = Train(Ref("e2e", "no-variances"), kRegressionConfig, 20);
  ASSERT_TRUE(IsOk(Predict(stub(), norma.ref, norma.probes, &response)));
  EXPECT_EQ(response.variances_size(), 0);
}

// A selection predicts with its champion's variances while the champion is a tracker
// (the squared loss's default set starts with trackers), bit for bit core's, and with
// none while its default set warms up.
TEST_F(ServerE2ETest, SelectionPredictsWithItsTrackerChampionsVariances) {
  const v1::ModelRef ref = Ref("e2e", "select-variances");
  const v1::ModelConfig config = ParseConfig(kSelectDefaultConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Vector> probes = MakeProbes(config.dim(), 40, 81);
  v1::PredictResponse response;
  ASSERT_TRUE(IsOk(Predict(stub(), ref, probes, &response)));
  EXPECT_EQ(response.variances_size(), 0) << "no candidates yet";
  const std::vector<v1::Example> stream = MakeStream(config, 200, 80);
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub(), ref, stream, &observed)));
  twin->Observe(stream);
  ASSERT_TRUE(twin->model().has_predictive_variance()) << "the champion is a tracker";
  ASSERT_TRUE(IsOk(Predict(stub(), ref, probes, &response)));
  ExpectPredictionsAndVariancesOf(*twin, config.dim(), probes, response);
}

TEST_F(ServerE2ETest, DimensionAboveMaxDimIsRejectedAndCreatesNothing) {
  v1::ModelConfig config = ParseConfig(kRegressionConfig);
  config.set_dim(65537);
  const v1::ModelRef ref = Ref("e2e", "dim-limit");
  v1::ModelInfo info;
  // The contract calls a config over the server's limits invalid (see Restore's doc).
  EXPECT_TRUE(HasCode(CreateModel(stub(), ref, config, &info), Code::INVALID_ARGUMENT));
  ExpectAbsent(ref, "dim 65537");
}

TEST_F(ServerE2ETest, LabelsOtherThanPlusMinusOneAreInvalidArgumentForClassification) {
  const Trained trained = Train(Ref("e2e", "labels"), kClassifierConfig);
  for (double y : {0.0, 0.5, 2.0, -1.5}) {
    std::vector<v1::Example> batch = MakeStream(trained.config, 3, 80);
    batch.push_back(MakeExample(DenseVector({0.1, 0.2, 0.3}), y));
    v1::ObserveResponse response;
    EXPECT_TRUE(HasCode(Observe(stub(), trained.ref, batch, &response), Code::INVALID_ARGUMENT))
        << "y = " << y;
    ExpectUnchanged(trained, absl::StrCat("label ", y));
  }
}

TEST_F(ServerE2ETest, UnknownModelsAreNotFoundOnEveryRpc) {
  const Trained trained = Train(Ref("e2e", "known"), kRegressionConfig);
  for (const v1::ModelRef& ref : {Ref("e2e", "unknown"), Ref("nobody", "known")}) {
    SCOPED_TRACE(RefName(ref));
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(stub(), ref, &info), Code::NOT_FOUND));
    EXPECT_TRUE(HasCode(DeleteModel(stub(), ref), Code::NOT_FOUND));
    v1::ObserveResponse response;
    EXPECT_TRUE(HasCode(Observe(stub(), ref, trained.stream, &response), Code::NOT_FOUND));
    EXPECT_TRUE(
        HasCode(ObserveStream(stub(), ref, {trained.stream}, &response), Code::NOT_FOUND));
    std::vector<double> predictions;
    EXPECT_TRUE(HasCode(Predict(stub(), ref, trained.probes, &predictions), Code::NOT_FOUND));
    std::string bytes;
    EXPECT_TRUE(HasCode(Snapshot(stub(), ref, &bytes), Code::NOT_FOUND));
    ExpectAbsent(ref, "the calls above");
  }
  ExpectUnchanged(trained, "calls on unknown models");
}

TEST_F(ServerE2ETest, DivergingExampleIsFailedPreconditionAndChangesNothing) {
  Trained trained = Train(Ref("e2e", "diverge"), kDivergingConfig, 0);
  trained.probes = {DenseVector({1.0}), DenseVector({-2.0})};
  bool diverged = false;
  for (int t = 1; t <= 300 && !diverged; ++t) {
    absl::StatusOr<ModelFingerprint> before = Fingerprint(stub(), trained.ref, trained.probes);
    ASSERT_TRUE(before.ok()) << before.status();
    trained.fingerprint = *before;
    v1::ObserveResponse response;
    const grpc::Status status = Observe(
        stub(), trained.ref, {MakeExample(DenseVector({std::pow(10.0, t)}), 1.0)}, &response);
    if (status.ok()) continue;
    diverged = true;
    EXPECT_TRUE(HasCode(status, Code::FAILED_PRECONDITION)) << "at step " << t;
    ExpectUnchanged(trained, "the diverging example");
    // The model still learns from a harmless example.
    EXPECT_TRUE(
        IsOk(Observe(stub(), trained.ref, {MakeExample(DenseVector({0.0}), 0.0)}, &response)));
  }
  EXPECT_TRUE(diverged);
}

TEST_F(ServerE2ETest, DivergingBatchKeepsTheExamplesBeforeTheDivergingOne) {
  const v1::ModelRef ref = Ref("e2e", "diverge-batch");
  const v1::ModelConfig config = ParseConfig(kDivergingConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  std::vector<v1::Example> batch;
  std::vector<double> xs, ys;
  for (int t = 1; t <= 300; ++t) {
    batch.push_back(MakeExample(DenseVector({std::pow(10.0, t)}), 1.0));
    xs.push_back(std::pow(10.0, t));
    ys.push_back(1.0);
  }
  std::vector<Observation> applied;
  ASSERT_FALSE(twin->model().ObserveBatch(xs, ys, &applied).ok());
  ASSERT_GT(applied.size(), 0u);

  v1::ObserveResponse response;
  const grpc::Status status = Observe(stub(), ref, batch, &response);
  EXPECT_TRUE(HasCode(status, Code::FAILED_PRECONDITION));
  EXPECT_THAT(status.error_message(), HasSubstr(std::to_string(applied.size())));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), applied.size());
  EXPECT_TRUE(MessageDifferencer::Equals(info.stats(), twin->WireStats()))
      << info.stats().ShortDebugString();
}

TEST_F(ServerE2ETest, ObserveStreamWithAnInvalidFirstMessageChangesNothing) {
  const Trained trained = Train(Ref("e2e", "stream-invalid"), kRegressionConfig);
  std::vector<v1::Example> bad = MakeStream(trained.config, 3, 81);
  bad.push_back(MakeExample(DenseVector({1.0}), 0.0));  // wrong dimension, last
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(
      ObserveStream(stub(), trained.ref, {bad, MakeStream(trained.config, 3, 82)}, &response),
      Code::INVALID_ARGUMENT));
  ExpectUnchanged(trained, "a stream whose first message is invalid");
}

TEST_F(ServerE2ETest, ObserveStreamKeepsTheMessagesBeforeARejectedOne) {
  const Trained trained = Train(Ref("e2e", "stream-partial"), kRegressionConfig);
  const std::vector<v1::Example> good = MakeStream(trained.config, 4, 83);
  std::vector<v1::Example> bad = MakeStream(trained.config, 2, 84);
  bad.push_back(
      MakeExample(DenseVector({0.0, std::numeric_limits<double>::quiet_NaN(), 0.0}), 1.0));
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(ObserveStream(stub(), trained.ref, {good, bad, good}, &response),
                      Code::INVALID_ARGUMENT));
  // As okl.proto documents: the first message stays applied, the rejected one and what
  // followed do not. The same 4 examples observed on a fresh twin give the same model.
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), trained.ref, &info)));
  EXPECT_EQ(info.stats().steps(), trained.stream.size() + good.size());
  const v1::ModelRef twin = Ref("e2e", "stream-partial-twin");
  ASSERT_TRUE(IsOk(CreateModel(stub(), twin, trained.config)));
  ASSERT_TRUE(IsOk(Observe(stub(), twin, trained.stream, &response)));
  ASSERT_TRUE(IsOk(Observe(stub(), twin, good, &response)));
  absl::StatusOr<ModelFingerprint> a = Fingerprint(stub(), trained.ref, trained.probes);
  absl::StatusOr<ModelFingerprint> b = Fingerprint(stub(), twin, trained.probes);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(ServerE2ETest, ObserveStreamNamingAnotherModelLaterIsInvalidArgument) {
  const Trained first = Train(Ref("e2e", "stream-first"), kRegressionConfig);
  const Trained other = Train(Ref("e2e", "stream-other"), kRegressionConfig, 30, 8);
  std::vector<v1::ObserveRequest> requests(2);
  *requests[0].mutable_ref() = first.ref;
  *requests[1].mutable_ref() = other.ref;
  for (v1::ObserveRequest& request : requests) {
    const std::vector<v1::Example> examples = MakeStream(first.config, 2, 85);
    request.mutable_examples()->Add(examples.begin(), examples.end());
  }
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(ObserveStreamRaw(stub(), requests, &response), Code::INVALID_ARGUMENT));
  ExpectUnchanged(other, "a stream that named it second");
}

// --- Tenant fences (moves) -------------------------------------------------------------

grpc::Status FenceTenant(Stub& stub, absl::string_view tenant, bool fenced, bool delete_models,
                         v1::FenceTenantResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::FenceTenantRequest request;
  request.set_tenant(std::string(tenant));
  request.set_fenced(fenced);
  request.set_delete_models(delete_models);
  return stub.FenceTenant(&context, request, response);
}

// The trailer okl-batches-applied of a finished call, or "" if it has none.
std::string BatchesAppliedTrailer(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(kBatchesAppliedMetadataKey);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A fence part-way through a stream: the messages before it stay applied, the rest are
// refused with UNAVAILABLE, and the trailer says how many were applied, so that a client
// can send the rest again; a unary Observe says 0; reads go on; lifting it lets writes in.
TEST_F(ServerE2ETest, AFenceRefusesTheRestOfAStreamAndTellsHowManyMessagesWereApplied) {
  const Trained trained = Train(Ref("fenced", "m"), kRegressionConfig, /*n=*/0);
  const Trained other = Train(Ref("unfenced", "m"), kRegressionConfig, /*n=*/10);
  const std::vector<v1::Example> stream = MakeStream(trained.config, 12, 5);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      stub().ObserveStream(&context, &response);
  v1::ObserveRequest request;
  *request.mutable_ref() = trained.ref;
  request.mutable_examples()->Add(stream.begin(), stream.begin() + 4);
  ASSERT_TRUE(writer->Write(request));
  request.clear_ref();
  request.clear_examples();
  request.mutable_examples()->Add(stream.begin() + 4, stream.begin() + 8);
  ASSERT_TRUE(writer->Write(request));
  // Both messages applied (the model's steps say so) before the fence goes up.
  v1::ModelInfo info;
  for (int i = 0; i < 2000 && info.stats().steps() < 8; ++i) {
    ASSERT_TRUE(IsOk(GetModel(stub(), trained.ref, &info)));
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(info.stats().steps(), 8u);
  v1::FenceTenantResponse fenced;
  ASSERT_TRUE(IsOk(FenceTenant(stub(), "fenced", true, false, &fenced)));
  EXPECT_THAT(fenced.models(), ElementsAre("m"));
  request.clear_examples();
  request.mutable_examples()->Add(stream.begin() + 8, stream.end());
  writer->Write(request);  // may fail already: the server ends the stream at once
  writer->WritesDone();
  const grpc::Status finished = writer->Finish();
  EXPECT_TRUE(HasCode(finished, Code::UNAVAILABLE));
  EXPECT_THAT(finished.error_message(), HasSubstr("is being moved"));
  EXPECT_EQ(BatchesAppliedTrailer(context), "2");
  ASSERT_TRUE(IsOk(GetModel(stub(), trained.ref, &info)));
  EXPECT_EQ(info.stats().steps(), 8u);

  // A unary Observe: refused, nothing applied; reads are served; another tenant writes.
  grpc::ClientContext unary;
  SetDeadline(&unary);
  request.Clear();
  *request.mutable_ref() = trained.ref;
  request.mutable_examples()->Add(stream.begin() + 8, stream.end());
  const grpc::Status refused = stub().Observe(&unary, request, &response);
  EXPECT_TRUE(HasCode(refused, Code::UNAVAILABLE));
  EXPECT_EQ(BatchesAppliedTrailer(unary), "0");
  std::vector<double> predictions;
  EXPECT_TRUE(IsOk(Predict(stub(), trained.ref, trained.probes, &predictions)));
  EXPECT_TRUE(HasCode(CreateModel(stub(), Ref("fenced", "n"), trained.config), Code::UNAVAILABLE));
  EXPECT_TRUE(HasCode(DeleteModel(stub(), trained.ref), Code::UNAVAILABLE));
  EXPECT_TRUE(IsOk(Observe(stub(), other.ref, stream, &response)));
  // Errors that are not refusals carry no trailer: nothing tells a client to resend them.
  grpc::ClientContext missing;
  SetDeadline(&missing);
  *request.mutable_ref() = Ref("unfenced", "absent");
  EXPECT_TRUE(HasCode(stub().Observe(&missing, request, &response), Code::NOT_FOUND));
  EXPECT_EQ(BatchesAppliedTrailer(missing), "");

  ASSERT_TRUE(IsOk(FenceTenant(stub(), "fenced", false, false, &fenced)));
  v1::ObserveResponse rest;
  ASSERT_TRUE(IsOk(Observe(stub(), trained.ref, absl::MakeConstSpan(stream).subspan(8), &rest)));
  EXPECT_EQ(rest.steps(), 12u);
  EXPECT_TRUE(HasCode(FenceTenant(stub(), "fenced", false, true, &fenced),
                      Code::INVALID_ARGUMENT));
  EXPECT_TRUE(HasCode(FenceTenant(stub(), "bad tenant!", true, false, &fenced),
                      Code::INVALID_ARGUMENT));
}

// After a move, the source deletes the tenant's models behind its fence: every call of the
// tenant that still reaches it gets UNAVAILABLE ("moved"), never NOT_FOUND or an empty
// list, until the fence is lifted.
TEST_F(ServerE2ETest, AMovedTenantsCallsAreUnavailableOnTheSource) {
  const Trained a = Train(Ref("moved", "a"), kRegressionConfig);
  const Trained b = Train(Ref("moved", "b"), kRegressionConfig);
  v1::FenceTenantResponse dropped;
  ASSERT_TRUE(IsOk(FenceTenant(stub(), "moved", true, true, &dropped)));
  EXPECT_THAT(dropped.models(), ElementsAre("a", "b"));
  v1::ModelInfo info;
  const grpc::Status get = GetModel(stub(), a.ref, &info);
  EXPECT_TRUE(HasCode(get, Code::UNAVAILABLE));
  EXPECT_THAT(get.error_message(), HasSubstr("has moved to another replica"));
  std::vector<double> predictions;
  EXPECT_TRUE(HasCode(Predict(stub(), b.ref, b.probes, &predictions), Code::UNAVAILABLE));
  v1::ListModelsResponse list;
  EXPECT_TRUE(HasCode(ListModels(stub(), "moved", &list), Code::UNAVAILABLE));
  std::string bytes;
  EXPECT_TRUE(HasCode(Snapshot(stub(), a.ref, &bytes), Code::UNAVAILABLE));
  // Lifted (a move back here does that first): the tenant is an ordinary empty one.
  ASSERT_TRUE(IsOk(FenceTenant(stub(), "moved", false, false, &dropped)));
  EXPECT_TRUE(HasCode(GetModel(stub(), a.ref, &info), Code::NOT_FOUND));
  EXPECT_TRUE(IsOk(ListModels(stub(), "moved", &list)));
  EXPECT_EQ(list.models_size(), 0);
}

// --- Health and reflection -------------------------------------------------------------

TEST_F(ServerE2ETest, HealthIsServingForTheServerAndTheService) {
  for (const char* service : {"", "okl.v1.OnlineKernelLearning"}) {
    absl::StatusOr<ServingStatus> health = CheckHealth(server().channel(), service);
    ASSERT_TRUE(health.ok()) << "\"" << service << "\": " << health.status();
    EXPECT_EQ(*health, ServingStatus::kServing) << "\"" << service << "\"";
  }
  absl::StatusOr<ServingStatus> unknown = CheckHealth(server().channel(), "no.such.Service");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
}

TEST_F(ServerE2ETest, ReflectionListsTheOklHealthAndReflectionServices) {
  absl::StatusOr<std::vector<std::string>> services =
      ListServicesByReflection(server().channel());
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_THAT(*services, Contains("okl.v1.OnlineKernelLearning"));
  EXPECT_THAT(*services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(*services, Contains("grpc.reflection.v1alpha.ServerReflection"));
}

// --- Limits ----------------------------------------------------------------------------

// Small limits, so that each is reached with a few requests.
class ServerLimitsTest : public ServerSuite {
 protected:
  static constexpr int kMaxMessageBytes = 16384;

  static void SetUpTestSuite() {
    StartServer({"--max_models=2", "--max_batch=5", "--max_dim=8", "--max_terms=300",
                 absl::StrCat("--max_message_bytes=", kMaxMessageBytes)});
  }
  static void TearDownTestSuite() { StopServer(); }

  // --max_models=2 is shared by the suite's tests: each leaves no model behind.
  void TearDown() override {
    ServerSuite::TearDown();
    if (server_ == nullptr) return;
    v1::ListModelsResponse list;
    ASSERT_TRUE(IsOk(ListModels(stub(), "", &list)));
    for (const v1::ModelInfo& info : list.models()) {
      EXPECT_TRUE(IsOk(DeleteModel(stub(), info.ref())));
    }
  }
};

constexpr char kSmallConfig[] = R"pb(
  dim: 8
  kernel { gaussian { gamma: 0.5 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.01
  budget { max_terms: 300 }
)pb";

TEST_F(ServerLimitsTest, CreateBeyondMaxModelsIsResourceExhaustedUntilOneIsDeleted) {
  const Trained a = Train(Ref("limits", "a"), kSmallConfig, 5);
  const Trained b = Train(Ref("limits", "b"), kSmallConfig, 5, 8);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(CreateModel(stub(), Ref("limits", "c"), a.config, &info),
                      Code::RESOURCE_EXHAUSTED));
  ExpectAbsent(Ref("limits", "c"), "CreateModel at --max_models");

  // Restore: a new name is refused, replacing an existing model is not a new one.
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), a.ref, &bytes)));
  EXPECT_TRUE(HasCode(Restore(stub(), Ref("limits", "c"), bytes), Code::RESOURCE_EXHAUSTED));
  ExpectAbsent(Ref("limits", "c"), "Restore at --max_models");
  ExpectUnchanged(b, "the refused requests");
  EXPECT_TRUE(IsOk(Restore(stub(), b.ref, bytes)));

  ASSERT_TRUE(IsOk(DeleteModel(stub(), a.ref)));
  EXPECT_TRUE(IsOk(CreateModel(stub(), Ref("limits", "c"), a.config, &info)));
  EXPECT_TRUE(HasCode(CreateModel(stub(), a.ref, a.config, &info), Code::RESOURCE_EXHAUSTED));
}

TEST_F(ServerLimitsTest, BatchesAboveMaxBatchAreResourceExhaustedAndChangeNothing) {
  const Trained trained = Train(Ref("limits", "batch"), kSmallConfig, 5);
  const std::vector<v1::Example> six = MakeStream(trained.config, 6, 90);
  v1::ObserveResponse response;
  grpc::Status status = Observe(stub(), trained.ref, six, &response);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), HasSubstr("--max_batch"));
  ExpectUnchanged(trained, "Observe of 6 examples");

  status = ObserveStream(stub(), trained.ref, {six}, &response);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  ExpectUnchanged(trained, "ObserveStream with a message of 6 examples");

  std::vector<double> predictions;
  status = Predict(stub(), trained.ref, MakeProbes(8, 6, 91), &predictions);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), HasSubstr("--max_batch"));

  // At the limit everything works, and a stream may carry more than --max_batch in all.
  EXPECT_TRUE(IsOk(Predict(stub(), trained.ref, MakeProbes(8, 5, 91), &predictions)));
  EXPECT_TRUE(
      IsOk(Observe(stub(), trained.ref, absl::MakeConstSpan(six).subspan(0, 5), &response)));
  const std::vector<v1::Example> fifteen = MakeStream(trained.config, 15, 92);
  ASSERT_TRUE(IsOk(ObserveStream(
      stub(), trained.ref, SplitIntoBatches(fifteen, std::vector<size_t>{5}), &response)));
  EXPECT_EQ(response.predictions_size(), 15);
  EXPECT_EQ(response.steps(), 25u);
}

TEST_F(ServerLimitsTest, ConfigsOverMaxDimOrMaxTermsAreInvalidArgumentAndCreateNothing) {
  const v1::ModelRef ref = Ref("limits", "config");
  v1::ModelInfo info;
  v1::ModelConfig config = ParseConfig(kSmallConfig);
  config.set_dim(9);
  EXPECT_TRUE(HasCode(CreateModel(stub(), ref, config, &info), Code::INVALID_ARGUMENT));
  ExpectAbsent(ref, "dim 9 with --max_dim=8");

  config = ParseConfig(kSmallConfig);
  config.mutable_budget()->set_max_terms(301);
  const grpc::Status status = CreateModel(stub(), ref, config, &info);
  EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("--max_terms"));
  ExpectAbsent(ref, "max_terms 301 with --max_terms=300");

  config.mutable_budget()->set_max_terms(300);
  EXPECT_TRUE(IsOk(CreateModel(stub(), ref, config, &info)));
}

TEST_F(ServerLimitsTest, RestoreOfASnapshotOverTheLimitsIsInvalidArgumentAndInstallsNothing) {
  // Snapshots from a server with the default limits.
  absl::StatusOr<std::unique_ptr<ServerProcess>> roomy = ServerProcess::Start();
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  Stub& other = (*roomy)->stub();
  std::vector<std::pair<std::string, std::string>> snapshots;
  v1::ModelConfig wide = ParseConfig(kSmallConfig);
  wide.set_dim(9);
  v1::ModelConfig long_budget = ParseConfig(kSmallConfig);
  long_budget.mutable_budget()->set_max_terms(301);
  for (const auto& [what, config] : std::vector<std::pair<std::string, v1::ModelConfig>>{
           {"dim 9", wide}, {"max_terms 301", long_budget}}) {
    const v1::ModelRef ref = Ref("roomy", what == "dim 9" ? "wide" : "long");
    ASSERT_TRUE(IsOk(CreateModel(other, ref, config)));
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(other, ref, MakeStream(config, 10, 93), &response)));
    std::string bytes;
    ASSERT_TRUE(IsOk(Snapshot(other, ref, &bytes)));
    snapshots.emplace_back(what, bytes);
  }
  absl::StatusOr<int> exit = (*roomy)->Stop();
  EXPECT_TRUE(exit.ok() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);

  const Trained existing = Train(Ref("limits", "existing"), kSmallConfig, 5);
  for (const auto& [what, bytes] : snapshots) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(
        HasCode(Restore(stub(), Ref("limits", "fresh"), bytes, 4096), Code::INVALID_ARGUMENT));
    ExpectAbsent(Ref("limits", "fresh"), what);
    EXPECT_TRUE(HasCode(Restore(stub(), existing.ref, bytes, 4096), Code::INVALID_ARGUMENT));
    ExpectUnchanged(existing, what);
  }
}

TEST_F(ServerLimitsTest, MessagesAboveMaxMessageBytesAreResourceExhaustedAndChangeNothing) {
  const Trained trained = Train(Ref("limits", "bytes"), kSmallConfig, 5);
  // One input of 4,000 values (32 KB): the transport refuses it before the service sees
  // it, or the wrong dimension would make it INVALID_ARGUMENT.
  const v1::Vector huge = DenseVector(std::vector<double>(4000, 0.5));
  std::vector<double> predictions;
  EXPECT_TRUE(
      HasCode(Predict(stub(), trained.ref, {huge}, &predictions), Code::RESOURCE_EXHAUSTED));
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(Observe(stub(), trained.ref, {MakeExample(huge, 1.0)}, &response),
                      Code::RESOURCE_EXHAUSTED));
  EXPECT_TRUE(HasCode(ObserveStream(stub(), trained.ref, {{MakeExample(huge, 1.0)}}, &response),
                      Code::RESOURCE_EXHAUSTED));
  ExpectUnchanged(trained, "oversized messages");
  // The connection is still good for a normal request.
  EXPECT_TRUE(IsOk(Observe(stub(), trained.ref, MakeStream(trained.config, 5, 94), &response)));
}

TEST_F(ServerLimitsTest, SnapshotOfAModelLargerThanMaxMessageBytesRoundTrips) {
  const v1::ModelRef ref = Ref("limits", "large");
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  // 300 terms of 8 doubles: ~21 KB of snapshot, more than --max_message_bytes.
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(ObserveStream(
      stub(), ref, SplitIntoBatches(MakeStream(config, 300, 95), std::vector<size_t>{5}),
      &response)));
  ASSERT_EQ(response.expansion_size(), 300u);
  std::string bytes;
  std::vector<size_t> chunks;
  ASSERT_TRUE(IsOk(Snapshot(stub(), ref, &bytes, &chunks)));
  EXPECT_GT(bytes.size(), static_cast<size_t>(kMaxMessageBytes));
  // The client sends it back in chunks under the limit.
  ASSERT_TRUE(IsOk(Restore(stub(), Ref("limits", "large-copy"), bytes, 4096)));
  ExpectContinueIdentically(stub(), {ref, Ref("limits", "large-copy")}, config, 96);
}

}  // namespace
}  // namespace okl::testing
