// tests/server/server_errors_test.cc
//
// Every error of the wire contract provoked over the wire, its code and message checked,
// and the model checked unchanged afterwards (statistics and predictions at fixed probes);
// tenant fences, health and reflection; and the server's limits (ServerLimitsTest, a
// server with small ones). The fixtures are in server_suite.h.

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"
#include "tests/server/server_suite.h"

namespace okl::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::HasSubstr;
using Code = ::grpc::StatusCode;

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
  // A remembering Predict too: its events are written after the call's handler returned
  // (batched, off the queue's thread), and refused there the same, nothing remembered.
  grpc::ClientContext remembering;
  SetDeadline(&remembering);
  v1::PredictRequest remember;
  *remember.mutable_ref() = trained.ref;
  *remember.add_inputs() = trained.probes[0];
  remember.mutable_remember()->set_wait_seconds(60);
  v1::PredictResponse predicted;
  const grpc::Status not_remembered = stub().Predict(&remembering, remember, &predicted);
  EXPECT_TRUE(HasCode(not_remembered, Code::UNAVAILABLE));
  EXPECT_THAT(not_remembered.error_message(), HasSubstr("is being moved"));
  EXPECT_EQ(BatchesAppliedTrailer(remembering), "0");
  ASSERT_TRUE(IsOk(GetModel(stub(), trained.ref, &info)));
  EXPECT_EQ(info.stats().events_pending(), 0u);
  std::vector<double> predictions;
  EXPECT_TRUE(IsOk(Predict(stub(), trained.ref, trained.probes, &predictions)));
  EXPECT_TRUE(
      HasCode(CreateModel(stub(), Ref("fenced", "n"), trained.config), Code::UNAVAILABLE));
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
  ASSERT_TRUE(
      IsOk(Observe(stub(), trained.ref, absl::MakeConstSpan(stream).subspan(8), &rest)));
  EXPECT_EQ(rest.steps(), 12u);
  EXPECT_TRUE(
      HasCode(FenceTenant(stub(), "fenced", false, true, &fenced), Code::INVALID_ARGUMENT));
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
