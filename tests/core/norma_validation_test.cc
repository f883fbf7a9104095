// tests/core/norma_validation_test.cc
//
// Tests of how NormaModel handles what it must refuse: bad examples and inputs are
// rejected with InvalidArgument and change nothing; ObserveBatch and PredictBatch agree
// with the one-at-a-time calls and validate the whole batch first; and a step whose
// numbers would overflow (a diverging model, a MERGE or averaged sum near DBL_MAX) fails
// or falls back without leaving a state that cannot be restored.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/norma_test_util.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

// --- Validation -----------------------------------------------------------------------

ModelConfig ClassifierConfig() {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.2};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.1;
  config.offset = true;
  config.averaged = true;
  config.budget = {.max_terms = 10, .policy = BudgetPolicy::kSmallest};
  return config;
}

TEST(NormaModelTest, RejectsBadExamplesWithInvalidArgumentAndChangesNothing) {
  for (LossType loss : {LossType::kHinge, LossType::kLogistic}) {
    SCOPED_TRACE(std::string(LossTypeName(loss)));
    ModelConfig config = ClassifierConfig();
    config.loss = {.type = loss, .rho = 1.0};
    auto model = Make(config);
    ASSERT_NE(model, nullptr);
    for (const Example& e : ExampleStream(config, 20, 3)) Obs(*model, e.x, e.y);
    const ModelState before = model->ExportState();
    struct Bad {
      std::string description;
      std::vector<double> x;
      double y;
      std::string mentions;  // a word the message must contain
    };
    const std::vector<Bad> bad = {
        {"too few coordinates", {1.0, 2.0}, 1.0, "3"},
        {"too many coordinates", {1.0, 2.0, 3.0, 4.0}, 1.0, "4"},
        {"no coordinates", {}, 1.0, "3"},
        {"NaN coordinate", {1.0, kNaN, 3.0}, 1.0, "finite"},
        {"infinite coordinate", {1.0, 2.0, -kInf}, 1.0, "finite"},
        {"NaN label", {1.0, 2.0, 3.0}, kNaN, "finite"},
        {"infinite label", {1.0, 2.0, 3.0}, kInf, "finite"},
        {"label 0.5", {1.0, 2.0, 3.0}, 0.5, "0.5"},
        {"label 0", {1.0, 2.0, 3.0}, 0.0, "-1"},
        {"label 2", {1.0, 2.0, 3.0}, 2.0, "-1"},
    };
    for (const Bad& b : bad) {
      SCOPED_TRACE(b.description);
      absl::Status validated = model->ValidateExample(b.x, b.y);
      EXPECT_EQ(validated.code(), absl::StatusCode::kInvalidArgument) << validated;
      absl::StatusOr<Observation> o = model->Observe(b.x, b.y);
      ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
      EXPECT_THAT(std::string(o.status().message()), HasSubstr(b.mentions));
      EXPECT_EQ(model->ExportState(), before);
    }
    // Valid labels pass validation.
    EXPECT_TRUE(model->ValidateExample({1.0, 2.0, 3.0}, 1.0).ok());
    EXPECT_TRUE(model->ValidateExample({1.0, 2.0, 3.0}, -1.0).ok());
  }
}

TEST(NormaModelTest, RegressionAcceptsAnyFiniteLabel) {
  auto model = Make(LinearConfig(0.5, 0.0));
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->ValidateExample({1.0}, 0.5).ok());
  EXPECT_TRUE(model->ValidateExample({1.0}, 0.0).ok());
  EXPECT_TRUE(model->ValidateExample({1.0}, -1e300).ok());
}

TEST(NormaModelTest, PredictRejectsBadInputs) {
  auto model = Make(ClassifierConfig());
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0, 2.0, 3.0}, 1.0);
  for (const std::vector<double>& x :
       {std::vector<double>{1.0, 2.0}, std::vector<double>{1.0, kNaN, 3.0},
        std::vector<double>{kInf, 0.0, 0.0}}) {
    EXPECT_EQ(model->ValidateInput(x).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->Predict(x).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(NormaModelTest, ObserveBatchMatchesSequentialObserves) {
  const ModelConfig config = ClassifierConfig();
  const std::vector<Example> stream = ExampleStream(config, 50, 11);
  auto sequential = Make(config);
  auto batched = Make(config);
  ASSERT_NE(sequential, nullptr);
  ASSERT_NE(batched, nullptr);
  std::vector<double> xs, ys;
  std::vector<Observation> expected;
  for (const Example& e : stream) {
    xs.insert(xs.end(), e.x.begin(), e.x.end());
    ys.push_back(e.y);
    expected.push_back(Obs(*sequential, e.x, e.y));
  }
  // `out` is appended to, not overwritten.
  std::vector<Observation> out = {Observation{42.0, 42.0}};
  ASSERT_TRUE(batched->ObserveBatch(xs, ys, &out).ok());
  ASSERT_EQ(out.size(), stream.size() + 1);
  EXPECT_EQ(out[0].prediction, 42.0);
  for (size_t i = 0; i < stream.size(); ++i) {
    EXPECT_EQ(out[i + 1].prediction, expected[i].prediction) << i;
    EXPECT_EQ(out[i + 1].loss, expected[i].loss) << i;
  }
  EXPECT_EQ(batched->ExportState(), sequential->ExportState());
}

TEST(NormaModelTest, ObserveBatchValidatesTheWholeBatchFirst) {
  const ModelConfig config = ClassifierConfig();
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  for (const Example& e : ExampleStream(config, 10, 1)) Obs(*model, e.x, e.y);
  const ModelState before = model->ExportState();
  // Three good examples and a bad label at the end.
  std::vector<double> xs = {0.1, 0.2, 0.3, 1.0, 0.0, -1.0, 2.0, 2.0, 2.0, 0.5, 0.5, 0.5};
  std::vector<double> ys = {1.0, -1.0, 1.0, 0.5};
  std::vector<Observation> out;
  absl::Status status = model->ObserveBatch(xs, ys, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(model->ExportState(), before);
  // A NaN coordinate in the last example.
  ys.back() = 1.0;
  xs.back() = kNaN;
  status = model->ObserveBatch(xs, ys, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(model->ExportState(), before);
  // xs must hold exactly ys.size() * dim values.
  xs.back() = 0.5;
  for (size_t n : {xs.size() - 1, xs.size() + 1, xs.size() + 3}) {
    std::vector<double> resized = xs;
    resized.resize(n, 0.0);
    status = model->ObserveBatch(resized, ys, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "n=" << n;
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(model->ExportState(), before);
  }
  // The same batch, corrected, is applied.
  ASSERT_TRUE(model->ObserveBatch(xs, ys, &out).ok());
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(model->steps(), before.steps + 4);
}

// A squared-loss model with a huge rate on growing inputs: every step multiplies the
// prediction by ~eta x^2, so some step overflows.
ModelConfig DivergingConfig() {
  ModelConfig config = LinearConfig(/*eta=*/1e3, /*lambda=*/0.0);
  return config;
}

// MERGE of two coefficients near DBL_MAX would overflow (|a_z| can reach |a_m| + |a_n|);
// a restored state can hold such coefficients. The smallest term is removed instead, and
// the model stays finite and exportable.
TEST(NormaModelTest, MergeThatWouldOverflowRemovesTheSmallestTermInstead) {
  ModelState state;
  state.config.dim = 1;
  state.config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
  state.config.loss = {.type = LossType::kHinge, .rho = 1.0};
  state.config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 1e308};
  state.config.budget = {.max_terms = 2, .policy = BudgetPolicy::kMerge};
  state.support = {0.0, 0.5};
  state.coefficients = {1e308, 1e308};
  state.added_at = {1, 2};
  state.steps = 2;
  state.margin = 1.0;  // rho
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::FromState(state);
  ASSERT_TRUE(model.ok()) << model.status();
  // Far from both terms: f = 0 < rho, so a term of alpha = 1e308 joins, and the three tie.
  const std::vector<double> far = {100.0};
  ASSERT_TRUE((*model)->Observe(far, 1.0).ok());
  const ModelState after = (*model)->ExportState();
  EXPECT_EQ(after.coefficients.size(), 2u);
  for (double c : after.coefficients) EXPECT_TRUE(std::isfinite(c)) << c;
  EXPECT_EQ(after.terms_removed, 1u);
  // The oldest of the tied terms (at 0) went; the new one took its place.
  EXPECT_THAT(after.support, ::testing::UnorderedElementsAre(0.5, 100.0));
  EXPECT_TRUE(NormaModel::FromState(after).ok());
}

// MERGE with no partner: a new term whose sign no stored term shares is dropped. That
// step once merged the new term with itself, writing it past the end of the expansion
// and leaving the age order short of a stored term; a later step then took the wrong
// term as the smallest, and a restored copy (whose age order is rebuilt) disagreed with
// the model it was copied from (found by the durability test's selection).
TEST(NormaModelTest, MergeDropsANewTermWithoutAPartnerAndKeepsTheAgeOrder) {
  ModelState state;
  state.config.dim = 1;
  state.config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
  state.config.loss = {.type = LossType::kSquared};
  state.config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  state.config.budget = {.max_terms = 2, .policy = BudgetPolicy::kMerge};
  state.support = {0.0, 1.0};
  state.coefficients = {1.0, 0.5};
  state.added_at = {1, 2};
  state.steps = 2;
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::FromState(state);
  ASSERT_TRUE(model.ok()) << model.status();
  // Far from both terms (f ~ 0): alpha = 0.5 (-0.1 - f) < 0, the smallest, and alone in
  // its sign.
  ASSERT_TRUE((*model)->Observe(std::vector<double>{5.0}, -0.1).ok());
  const ModelState after_drop = (*model)->ExportState();
  EXPECT_EQ(after_drop.support, state.support);
  EXPECT_EQ(after_drop.coefficients, state.coefficients);
  EXPECT_EQ(after_drop.terms_removed, 1u);
  absl::StatusOr<std::unique_ptr<NormaModel>> copy = NormaModel::FromState(after_drop);
  ASSERT_TRUE(copy.ok()) << copy.status();
  // A large positive term: the smallest is now the stored 0.5 at x = 1, which merges into
  // a partner of its sign, exactly as in the restored copy.
  for (NormaModel* m : {model->get(), copy->get()}) {
    ASSERT_TRUE(m->Observe(std::vector<double>{10.0}, 6.0).ok());
  }
  const ModelState after_merge = (*model)->ExportState();
  EXPECT_EQ(after_merge, (*copy)->ExportState());
  EXPECT_THAT(after_merge.support, ::testing::Not(::testing::Contains(1.0)));
  EXPECT_EQ(after_merge.terms_removed, 2u);
}

// An averaged state whose one term's coefficient and summed coefficient are near DBL_MAX
// (a restored state can hold them). A step that would sum them past DBL_MAX, at a block
// start (previous = base + a (u - mark)) or at a fold (u over its limit), fails as a
// divergence and changes nothing; before, it stored an inf that no snapshot could carry.
TEST(NormaModelTest, AveragedSumsThatWouldOverflowFailTheStepAndChangeNothing) {
  struct Case {
    const char* what;
    uint32_t window;
    double average_sum;
  };
  for (const Case& c : {Case{"block start", 2, 1.0}, Case{"fold", 4, 256.0}}) {
    SCOPED_TRACE(c.what);
    ModelState state;
    state.config.dim = 1;
    state.config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
    state.config.loss = {.type = LossType::kHinge, .rho = 1.0};
    state.config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 1.0};
    state.config.budget = {.max_terms = 4, .policy = BudgetPolicy::kOldest};
    state.config.averaged = true;
    state.config.averaging_window = c.window;
    state.support = {0.0};
    state.coefficients = {1e308};
    state.added_at = {1};
    state.average_base = {1e308};
    state.average_mark = {0.0};
    state.average_sum = c.average_sum;
    state.steps = 2;
    state.margin = 1.0;  // rho
    absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::FromState(state);
    ASSERT_TRUE(model.ok()) << model.status();
    const ModelState before = (*model)->ExportState();
    // Far from the term: f = 0, an ordinary step but for the sums.
    absl::StatusOr<Observation> o = (*model)->Observe({100.0}, 1.0);
    EXPECT_TRUE(absl::IsFailedPrecondition(o.status())) << o.status();
    EXPECT_THAT(o.status().message(), HasSubstr("diverged"));
    EXPECT_EQ((*model)->ExportState(), before);
    EXPECT_TRUE(NormaModel::FromState((*model)->ExportState()).ok());
  }
}

TEST(NormaModelTest, DivergenceIsFailedPreconditionAndChangesNothing) {
  auto model = Make(DivergingConfig());
  ASSERT_NE(model, nullptr);
  bool diverged = false;
  for (int t = 1; t <= 300 && !diverged; ++t) {
    const ModelState before = model->ExportState();
    const ModelStats stats_before = model->stats();
    absl::StatusOr<Observation> o = model->Observe({std::pow(10.0, t)}, 1.0);
    if (o.ok()) {
      ASSERT_TRUE(std::isfinite(o->prediction));
      ASSERT_TRUE(std::isfinite(o->loss));
      continue;
    }
    diverged = true;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << o.status();
    EXPECT_EQ(model->ExportState(), before);
    EXPECT_EQ(model->stats().steps, stats_before.steps);
    EXPECT_EQ(model->stats().cumulative_loss, stats_before.cumulative_loss);
    // The model still answers.
    absl::StatusOr<double> p = model->Predict({1.0});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(std::isfinite(*p));
  }
  EXPECT_TRUE(diverged);
}

TEST(NormaModelTest, ObserveBatchKeepsTheStepsBeforeADivergingOne) {
  auto model = Make(DivergingConfig());
  ASSERT_NE(model, nullptr);
  std::vector<double> xs, ys;
  for (int t = 1; t <= 300; ++t) {
    xs.push_back(std::pow(10.0, t));
    ys.push_back(1.0);
  }
  std::vector<Observation> out;
  absl::Status status = model->ObserveBatch(xs, ys, &out);
  ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  ASSERT_GT(out.size(), 0u);
  ASSERT_LT(out.size(), ys.size());
  EXPECT_EQ(model->steps(), out.size());
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::to_string(out.size())));
  // Replaying the applied prefix one by one reaches the same state.
  auto replay = Make(DivergingConfig());
  ASSERT_NE(replay, nullptr);
  for (size_t i = 0; i < out.size(); ++i) Obs(*replay, {xs[i]}, ys[i]);
  EXPECT_EQ(replay->ExportState(), model->ExportState());
}

TEST(NormaModelTest, PredictBatchMatchesPredict) {
  const ModelConfig config = ClassifierConfig();
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  const std::vector<Example> stream = ExampleStream(config, 40, 21);
  for (const Example& e : stream) Obs(*model, e.x, e.y);
  std::vector<double> xs;
  for (size_t i = 0; i < 7; ++i) xs.insert(xs.end(), stream[i].x.begin(), stream[i].x.end());
  for (PredictionMode mode :
       {PredictionMode::kConfigured, PredictionMode::kCurrent, PredictionMode::kAveraged}) {
    std::vector<double> out(7, kNaN);
    ASSERT_TRUE(model->PredictBatch(xs, absl::MakeSpan(out), mode).ok());
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(out[i], Pred(*model, stream[i].x, mode)) << i;
  }
}

TEST(NormaModelTest, PredictBatchValidatesEveryInput) {
  auto model = Make(ClassifierConfig());
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0, 2.0, 3.0}, 1.0);
  std::vector<double> xs = {1.0, 2.0, 3.0, 4.0, 5.0, kNaN};
  std::vector<double> out(2, -7.0);
  EXPECT_EQ(model->PredictBatch(xs, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  // xs must hold out.size() * dim values.
  xs.back() = 6.0;
  std::vector<double> three(3, -7.0);
  EXPECT_EQ(model->PredictBatch(xs, absl::MakeSpan(three)).code(),
            absl::StatusCode::kInvalidArgument);
  xs.push_back(7.0);
  EXPECT_EQ(model->PredictBatch(xs, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace okl
