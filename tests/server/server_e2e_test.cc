// tests/server/server_e2e_test.cc
//
// End-to-end tests of okl_server: the real binary on a loopback port, driven over gRPC.
// Its answers are compared bit for bit with an okl::NormaModel run in-process on the same
// config and stream (CoreTwin): the server must add no arithmetic of its own. A model's
// lifecycle, Observe, ObserveStream and Predict, and Snapshot and Restore.
//
// One server serves each suite (ServerE2ETest and ServerMatchesCoreTest with the default
// flags); where ctest runs every test in its own process, that is one server per test.
// Tests use their own model names, so they do not depend on each other. In the same
// binary: every error of the wire contract and the server's limits
// (server_errors_test.cc), and the server as a process: start-up, signals, drains
// (server_lifecycle_test.cc). The fixtures are in server_suite.h.

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
#include "tests/server/server_suite.h"
#include "tests/test_paths.h"

namespace okl::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::HasSubstr;
using Code = ::grpc::StatusCode;

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
  absl::StatusOr<Dataset> data = ReadSeries(SourcePath("data/mg30.dat"), 7);
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

}  // namespace
}  // namespace okl::testing
