// tests/server/multiclass_e2e_test.cc
//
// Multi-class models through a real okl_server: named classes on Observe and Predict,
// the classes in GetModel, the rules a class label obeys, max_classes (the config's and
// the server's --max_classes), and the classes surviving Snapshot/Restore and a restart
// bit for bit. The server's answers are checked against an in-process core model fed
// the same examples (CoreTwin) and the probabilities against a plain softmax.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"
#include "tests/server/server_suite.h"

namespace okl::testing {
namespace {

using ::grpc::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The softmax loss on a shared budget of terms, merged when full.
constexpr char kSoftmaxConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { softmax {} }
  learning_rate { eta0: 0.5 }
  lambda: 0.01
  budget { max_terms: 12 policy: MERGE }
  max_classes: 5
)pb";

// Crammer and Singer's hinge, budgeted Pegasos (POWER, theta 1, eta0 = 1 / lambda) with
// the oldest term leaving.
constexpr char kHingeConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { multiclass_hinge { rho: 1 } }
  learning_rate { eta0: 10 schedule: POWER theta: 1 }
  lambda: 0.1
  budget { max_terms: 10 policy: OLDEST }
  max_classes: 3
)pb";

// The server's --max_classes here.
constexpr int kServerMaxClasses = 8;

class MulticlassServerTest : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    StartServer({absl::StrCat("--max_classes=", kServerMaxClasses)});
  }
  static void TearDownTestSuite() { StopServer(); }
};

// softmax(scores), written out plainly.
std::vector<double> PlainSoftmax(const std::vector<double>& scores) {
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double s : scores) sum += std::exp(s - top);
  std::vector<double> p;
  for (double s : scores) p.push_back(std::exp(s - top) / sum);
  return p;
}

std::vector<double> Values(const v1::ClassScores& row) {
  return {row.values().begin(), row.values().end()};
}

// Each response of Observe and Predict, the classes and the stats are the core twin's, bit
// for bit, and the probabilities are the scores' softmax.
TEST_F(MulticlassServerTest, NamedClassesFlowThroughObservePredictAndGetModelAsInTheCore) {
  for (const char* text : {kSoftmaxConfig, kHingeConfig}) {
    const v1::ModelConfig config = ParseConfig(text);
    const bool softmax = config.loss().has_softmax();
    SCOPED_TRACE(softmax ? "softmax" : "multiclass_hinge");
    const v1::ModelRef ref = Ref("zoo", softmax ? "softmax" : "hinge");
    ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
    std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
    ASSERT_NE(twin, nullptr);
    const std::vector<v1::Example> stream = MakeStream(config, 60, /*seed=*/3);
    for (const std::vector<v1::Example>& batch :
         SplitIntoBatches(stream, std::vector<size_t>{1, 7, 13})) {
      v1::ObserveResponse response;
      ASSERT_TRUE(IsOk(Observe(stub(), ref, batch, &response)));
      const std::vector<Observation> expected = twin->Observe(batch);
      EXPECT_EQ(Bits(response.predictions()), Bits(PredictionsOf(expected)));
      EXPECT_EQ(Bits(response.losses()), Bits(LossesOf(expected)));
      ASSERT_EQ(response.predicted_classes_size(), static_cast<int>(expected.size()));
      for (size_t i = 0; i < expected.size(); ++i) {
        const uint32_t c = expected[i].predicted_class;
        EXPECT_EQ(response.predicted_classes(i),
                  c == kNoClass ? "" : twin->model().classes()[c]);
      }
    }
    // The classes in the order the stream first named them.
    std::vector<std::string> first_seen;
    for (const v1::Example& e : stream) {
      if (std::find(first_seen.begin(), first_seen.end(), e.class_label()) == first_seen.end()) {
        first_seen.push_back(e.class_label());
      }
    }
    ASSERT_EQ(first_seen.size(), 3u);
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
    EXPECT_THAT(info.stats().classes(), ::testing::ElementsAreArray(first_seen));
    EXPECT_EQ(info.config().max_classes(), config.max_classes());
    EXPECT_EQ(info.stats().mistakes(), twin->model().stats().mistakes);
    EXPECT_GT(info.stats().mistakes(), 0u);
    EXPECT_LT(info.stats().mistakes(), stream.size());
    EXPECT_TRUE(::google::protobuf::util::MessageDifferencer::Equals(info.stats(),
                                                                     twin->WireStats()))
        << info.stats().ShortDebugString() << "\nvs " << twin->WireStats().ShortDebugString();

    const std::vector<v1::Vector> probes = MakeProbes(config.dim(), 9, /*seed=*/5);
    v1::PredictResponse predicted;
    ASSERT_TRUE(IsOk(Predict(stub(), ref, probes, &predicted)));
    ASSERT_EQ(predicted.predicted_classes_size(), 9);
    ASSERT_EQ(predicted.class_scores_size(), 9);
    EXPECT_EQ(predicted.probabilities_size(), softmax ? 9 : 0);
    EXPECT_EQ(predicted.novel_size(), 0);
    EXPECT_EQ(predicted.variances_size(), 0);
    for (int i = 0; i < 9; ++i) {
      std::vector<double> scores(3);
      ASSERT_TRUE(twin->model().PredictScores(Densify(probes[i], 3), absl::MakeSpan(scores)).ok());
      EXPECT_EQ(Bits(Values(predicted.class_scores(i))), Bits(scores)) << "probe " << i;
      const size_t best = std::max_element(scores.begin(), scores.end()) - scores.begin();
      EXPECT_EQ(predicted.predicted_classes(i), first_seen[best]);
      EXPECT_EQ(predicted.predictions(i), scores[best]);
      if (!softmax) continue;
      const std::vector<double> p = Values(predicted.probabilities(i));
      const std::vector<double> plain = PlainSoftmax(scores);
      ASSERT_EQ(p.size(), 3u);
      double sum = 0;
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(p[c], plain[c], 1e-15);
        sum += p[c];
      }
      EXPECT_NEAR(sum, 1.0, 1e-15);
    }
  }
}

TEST_F(MulticlassServerTest, BeforeAnyClassPredictAnswersNoClassAndNoScores) {
  const v1::ModelRef ref = Ref("zoo", "empty");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kSoftmaxConfig))));
  v1::PredictResponse response;
  ASSERT_TRUE(IsOk(Predict(stub(), ref, MakeProbes(3, 2, 1), &response)));
  EXPECT_THAT(response.predicted_classes(), ElementsAre("", ""));
  EXPECT_THAT(response.predictions(), ElementsAre(0.0, 0.0));
  ASSERT_EQ(response.class_scores_size(), 2);
  EXPECT_EQ(response.class_scores(0).values_size(), 0);
  ASSERT_EQ(response.probabilities_size(), 2);
  EXPECT_EQ(response.probabilities(1).values_size(), 0);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().classes_size(), 0);
  // The first example's prequential prediction is no class, and counts as a mistake.
  v1::Example first = MakeExample(DenseVector({0.1, 0.2, 0.3}), 0);
  first.set_class_label("owl");
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub(), ref, {first}, &observed)));
  EXPECT_THAT(observed.predicted_classes(), ElementsAre(""));
  EXPECT_THAT(observed.predictions(), ElementsAre(0.0));
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_THAT(info.stats().classes(), ElementsAre("owl"));
  EXPECT_EQ(info.stats().mistakes(), 1u);
}

// Every malformed class label is INVALID_ARGUMENT naming class_label or y, and the batch
// it is in changes nothing, wherever in the batch it is.
TEST_F(MulticlassServerTest, ClassLabelRulesAreInvalidArgumentAndABadBatchChangesNothing) {
  const Trained multi = Train(Ref("zoo", "rules"), kSoftmaxConfig, 20);
  const Trained binary = Train(Ref("zoo", "binary"), kSparseHingeConfig, 10);
  struct Case {
    std::string what;
    std::string class_label;
    double y;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no class label", "", 0, "class_label"},
      {"y beside the class", "mid band", 1, "leaves y 0"},
      {"a label too long", std::string(129, 'x'), 0, "class_label must be 1 to 128 bytes"},
      // Refused by protobuf's parse, before okl sees the request.
      {"not UTF-8", "\xC3(", 0, "must be valid UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<v1::Example> batch = MakeStream(multi.config, 4, /*seed=*/11);
    batch.back().set_class_label(c.class_label);
    batch.back().set_y(c.y);
    v1::ObserveResponse response;
    const grpc::Status status = Observe(stub(), multi.ref, batch, &response);
    EXPECT_TRUE(HasCode(status, StatusCode::INVALID_ARGUMENT));
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    ExpectUnchanged(multi, c.what);
  }
  std::vector<v1::Example> batch = MakeStream(binary.config, 3, /*seed=*/12);
  batch[1].set_class_label("cat");
  v1::ObserveResponse response;
  const grpc::Status status = Observe(stub(), binary.ref, batch, &response);
  EXPECT_TRUE(HasCode(status, StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("leave class_label empty"));
  ExpectUnchanged(binary, "a class label to a binary model");
}

TEST_F(MulticlassServerTest, ABatchPastMaxClassesIsRefusedWholeAndChangesNothing) {
  const Trained trained = Train(Ref("zoo", "three"), kHingeConfig, 0);
  v1::ObserveResponse response;
  std::vector<v1::Example> two = MakeStream(trained.config, 2, 1);
  two[0].set_class_label("a");
  two[1].set_class_label("b");
  ASSERT_TRUE(IsOk(Observe(stub(), trained.ref, two, &response)));
  absl::StatusOr<ModelFingerprint> before =
      Fingerprint(stub(), trained.ref, trained.probes);
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<v1::Example> more = MakeStream(trained.config, 3, 2);
  more[0].set_class_label("a");
  more[1].set_class_label("c");
  more[2].set_class_label("d");  // a fourth class, past max_classes 3
  const grpc::Status status = Observe(stub(), trained.ref, more, &response);
  EXPECT_TRUE(HasCode(status, StatusCode::FAILED_PRECONDITION));
  EXPECT_THAT(status.error_message(), HasSubstr("past its max_classes 3"));
  absl::StatusOr<ModelFingerprint> after = Fingerprint(stub(), trained.ref, trained.probes);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *before);
  more[2].set_class_label("b");
  ASSERT_TRUE(IsOk(Observe(stub(), trained.ref, more, &response)));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), trained.ref, &info)));
  EXPECT_THAT(info.stats().classes(), ElementsAre("a", "b", "c"));
}

TEST_F(MulticlassServerTest, MaxClassesIsCheckedAgainstTheLossAndTheServersFlag) {
  const v1::ModelConfig valid = ParseConfig(kSoftmaxConfig);
  ExpectRefused(Ref("zoo", "refused"), valid,
                {{"over --max_classes",
                  [](v1::ModelConfig& c) { c.set_max_classes(kServerMaxClasses + 1); },
                  "over this server's limit of 8 (--max_classes)"},
                 {"no max_classes", [](v1::ModelConfig& c) { c.set_max_classes(0); },
                  "max_classes must be in [2, "},
                 {"max_classes with a binary loss",
                  [](v1::ModelConfig& c) { c.mutable_loss()->mutable_logistic(); },
                  "max_classes is for the multi-class losses"},
                 {"offset", [](v1::ModelConfig& c) { c.set_offset(true); },
                  "offset is not offered for a multi-class model"},
                 {"regret_window", [](v1::ModelConfig& c) { c.set_regret_window(16); },
                  "regret_window is not offered for a multi-class model"}});
  v1::ModelConfig largest = valid;
  largest.set_max_classes(kServerMaxClasses);
  EXPECT_TRUE(IsOk(CreateModel(stub(), Ref("zoo", "largest"), largest)));
}

TEST_F(MulticlassServerTest, RememberIsRefusedForAMultiClassModel) {
  const Trained trained = Train(Ref("zoo", "remember"), kSoftmaxConfig, 10);
  v1::PredictResponse response;
  const grpc::Status status =
      PredictRemembering(stub(), trained.ref, trained.probes, v1::Remember(), &response);
  EXPECT_TRUE(HasCode(status, StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("remember is not offered for a multi-class"));
  ExpectUnchanged(trained, "a remembering Predict");
}

// A snapshot carries the classes (format version 5), and the restored model, the
// original and a restarted server's copy continue identically.
TEST_F(MulticlassServerTest, SnapshotRestoreAndRestartKeepTheClassesBitForBit) {
  const Trained trained = Train(Ref("zoo", "moved"), kSoftmaxConfig, 40);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub(), trained.ref, &bytes)));
  v1::ModelSnapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(bytes));
  EXPECT_EQ(snapshot.format_version(), 5u);
  EXPECT_EQ(snapshot.classes_size(), 3);
  const v1::ModelRef copy = Ref("zoo", "copy");
  ASSERT_TRUE(IsOk(Restore(stub(), copy, bytes)));
  ExpectContinueIdentically(stub(), {trained.ref, copy}, trained.config, /*seed=*/21);

  // A server on its own store: some examples checkpointed, the rest replayed from its log.
  const std::string data_dir = ::testing::TempDir() + "/okl_multiclass_restart";
  std::filesystem::remove_all(data_dir);
  std::vector<v1::Example> stream = MakeStream(trained.config, 50, /*seed=*/31);
  v1::ModelInfo before;
  std::vector<double> predictions_before;
  const std::vector<std::string> flags = {"--checkpoint_every_examples=20"};
  {
    absl::StatusOr<std::unique_ptr<ServerProcess>> first =
        ServerProcess::Start({.flags = flags, .data_dir = data_dir});
    ASSERT_TRUE(first.ok()) << first.status();
    Stub& s = (*first)->stub();
    ASSERT_TRUE(IsOk(CreateModel(s, trained.ref, trained.config)));
    for (const std::vector<v1::Example>& batch :
         SplitIntoBatches(stream, std::vector<size_t>{9})) {
      v1::ObserveResponse response;
      ASSERT_TRUE(IsOk(Observe(s, trained.ref, batch, &response)));
    }
    ASSERT_TRUE(IsOk(GetModel(s, trained.ref, &before)));
    ASSERT_TRUE(IsOk(Predict(s, trained.ref, trained.probes, &predictions_before)));
    ASSERT_TRUE((*first)->Kill().ok());
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> second =
      ServerProcess::Start({.flags = flags, .data_dir = data_dir});
  ASSERT_TRUE(second.ok()) << second.status();
  v1::ModelInfo after;
  ASSERT_TRUE(IsOk(GetModel((*second)->stub(), trained.ref, &after)));
  EXPECT_TRUE(::google::protobuf::util::MessageDifferencer::Equals(after.stats(), before.stats()))
      << after.stats().ShortDebugString() << "\nvs " << before.stats().ShortDebugString();
  EXPECT_EQ(after.stats().classes_size(), 3);
  std::vector<double> predictions_after;
  ASSERT_TRUE(IsOk(Predict((*second)->stub(), trained.ref, trained.probes, &predictions_after)));
  EXPECT_EQ(Bits(predictions_after), Bits(predictions_before));
  ASSERT_TRUE((*second)->Stop().ok());
  std::filesystem::remove_all(data_dir);
}

}  // namespace
}  // namespace okl::testing
