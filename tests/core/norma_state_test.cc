// tests/core/norma_state_test.cc
//
// Tests of what a NormaModel exposes about itself: a state exported with ExportState and
// restored with FromState continues bit-identically (for every loss, kernel, rate and
// budget policy), stays restorable at the edges of floating point, and FromState rejects
// inconsistent states; and the figures the model reports: SquaredNorm, MemoryBytes, the
// truncation error bound and the step and term counts in stats().

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/kernel.h"
#include "core/norma.h"
#include "gtest/gtest.h"
#include "tests/core/norma_test_util.h"

namespace okl {
namespace {

// --- Round trip -----------------------------------------------------------------------

std::vector<ModelConfig> RoundTripConfigs() {
  std::vector<ModelConfig> configs;
  // The configuration the brief singles out: SMALLEST budget with drop_below, averaged,
  // offset, nu-hinge; eta lambda = 0.1 so the scale is folded every ~53 steps.
  ModelConfig hinge;
  hinge.dim = 3;
  hinge.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  hinge.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.3};
  hinge.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  hinge.lambda = 0.2;
  hinge.offset = true;
  hinge.averaged = true;
  hinge.budget = {.max_terms = 40, .policy = BudgetPolicy::kSmallest, .drop_below = 1e-3};
  configs.push_back(hinge);
  // nu-epsilon-insensitive, OLDEST, inverse-sqrt rate, laplacian.
  ModelConfig epsilon;
  epsilon.dim = 2;
  epsilon.kernel = {.type = KernelType::kLaplacian, .gamma = 0.7};
  epsilon.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.2, .nu = 0.4};
  epsilon.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 0.8};
  epsilon.lambda = 0.5;
  epsilon.offset = true;
  epsilon.averaged = true;
  epsilon.budget = {.max_terms = 25, .policy = BudgetPolicy::kOldest, .drop_below = 1e-4};
  configs.push_back(epsilon);
  // nu-novelty, power rate, polynomial kernel, unbudgeted, not averaged.
  ModelConfig novelty;
  novelty.dim = 2;
  novelty.kernel = {.type = KernelType::kPolynomial, .gamma = 0.3, .c = 1.0, .degree = 2};
  novelty.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.2};
  novelty.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.2, .theta = 0.75};
  novelty.lambda = 1.0;
  configs.push_back(novelty);
  // Logistic, heat kernel, SMALLEST.
  ModelConfig logistic;
  logistic.dim = 2;
  logistic.kernel = {.type = KernelType::kHeat, .t = 0.3};
  logistic.loss = {.type = LossType::kLogistic};
  logistic.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 1.0};
  logistic.lambda = 0.05;
  logistic.averaged = true;
  logistic.budget = {.max_terms = 30, .policy = BudgetPolicy::kSmallest};
  configs.push_back(logistic);
  return configs;
}

TEST(NormaModelTest, ExportStateThenFromStateContinuesBitIdentically) {
  constexpr size_t kBefore = 300;
  constexpr size_t kAfter = 600;
  for (const ModelConfig& config : RoundTripConfigs()) {
    SCOPED_TRACE(std::string(LossTypeName(config.loss.type)));
    const std::vector<Example> stream = ExampleStream(config, kBefore + kAfter, 4242);
    auto original = Make(config);
    ASSERT_NE(original, nullptr);
    for (size_t i = 0; i < kBefore; ++i) Obs(*original, stream[i].x, stream[i].y);
    const ModelState exported = original->ExportState();
    absl::StatusOr<std::unique_ptr<NormaModel>> restored_or = NormaModel::FromState(exported);
    ASSERT_TRUE(restored_or.ok()) << restored_or.status();
    std::unique_ptr<NormaModel> restored = *std::move(restored_or);
    EXPECT_EQ(restored->ExportState(), exported);
    for (size_t i = kBefore; i < kBefore + kAfter; ++i) {
      const Observation a = Obs(*original, stream[i].x, stream[i].y);
      const Observation b = Obs(*restored, stream[i].x, stream[i].y);
      ASSERT_EQ(a.prediction, b.prediction) << "step " << i + 1;
      ASSERT_EQ(a.loss, b.loss) << "step " << i + 1;
    }
    EXPECT_EQ(original->ExportState(), restored->ExportState());
    // The budgeted runs did exercise their budget.
    if (config.budget.max_terms > 0) {
      EXPECT_GT(original->stats().terms_removed, 0u);
    }
    for (PredictionMode mode : {PredictionMode::kCurrent, PredictionMode::kConfigured}) {
      EXPECT_EQ(Pred(*original, stream[0].x, mode), Pred(*restored, stream[0].x, mode));
    }
    const ModelStats sa = original->stats(), sb = restored->stats();
    EXPECT_EQ(sa.steps, sb.steps);
    EXPECT_EQ(sa.cumulative_loss, sb.cumulative_loss);
    EXPECT_EQ(sa.mistakes, sb.mistakes);
    EXPECT_EQ(sa.margin, sb.margin);
    EXPECT_EQ(sa.terms_removed, sb.terms_removed);
  }
}

TEST(NormaModelTest, FromStateOfAFreshModelWorks) {
  ModelConfig config = RoundTripConfigs()[0];
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<std::unique_ptr<NormaModel>> restored =
      NormaModel::FromState(model->ExportState());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->ExportState(), model->ExportState());
  EXPECT_EQ((*restored)->steps(), 0u);
}

// Strong shrinkage with no budget: the oldest coefficients keep halving and, folded into
// the stored coefficients, pass 2^-1074 after ~1075 steps. FromState rejects a zero
// coefficient ("a zero coefficient is never stored": docs/design.md, "The algorithm"), so
// every state a model reaches through successful Observes must avoid one, or restoring a
// snapshot fails.
TEST(NormaModelTest, StateRemainsRestorableAfterOldCoefficientsUnderflow) {
  for (bool averaged : {false, true}) {
    SCOPED_TRACE(averaged ? "averaged" : "not averaged");
    ModelConfig config;
    config.dim = 2;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
    config.loss = {.type = LossType::kSquared};
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
    config.lambda = 1.0;  // every step halves the old coefficients
    config.averaged = averaged;
    auto model = Make(config);
    ASSERT_NE(model, nullptr);
    const std::vector<Example> stream = ExampleStream(config, 1300, 17);
    for (size_t i = 0; i < 1200; ++i) Obs(*model, stream[i].x, stream[i].y);
    const ModelState state = model->ExportState();
    if (!averaged) {
      // A term whose coefficient is 0 contributes nothing: it should be gone. (With the
      // averaged hypothesis its summed past coefficients may still matter.)
      size_t zeros = 0;
      for (double a : state.coefficients) zeros += (a == 0.0);
      EXPECT_EQ(zeros, 0u) << "of " << state.coefficients.size() << " stored coefficients";
    }
    absl::StatusOr<std::unique_ptr<NormaModel>> restored = NormaModel::FromState(state);
    if (!restored.ok()) {
      ADD_FAILURE() << restored.status();
      continue;  // still try the other variant
    }
    EXPECT_EQ((*restored)->ExportState(), state);
    for (size_t i = 1200; i < stream.size(); ++i) {
      ASSERT_EQ(Obs(*model, stream[i].x, stream[i].y).prediction,
                Obs(**restored, stream[i].x, stream[i].y).prediction);
    }
  }
}

// Two finite losses of ~1.1e308 sum to infinity. A step that makes any part of the state
// non-finite must fail (FailedPrecondition, nothing changed) rather than leave a state
// that FromState rejects.
TEST(NormaModelTest, StateRemainsRestorableWhenTheCumulativeLossWouldOverflow) {
  auto model = Make(LinearConfig(/*eta=*/1e-300, /*lambda=*/0.0));
  ASSERT_NE(model, nullptr);
  const double y = 1.5e154;  // loss 0.5 y^2 = 1.125e308 while p ~ 0
  for (int t = 0; t < 2; ++t) {
    const ModelState before = model->ExportState();
    absl::StatusOr<Observation> o = model->Observe({1.0}, y);
    if (!o.ok()) {
      EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << o.status();
      EXPECT_EQ(model->ExportState(), before);
    }
    EXPECT_TRUE(std::isfinite(model->stats().cumulative_loss));
    absl::StatusOr<std::unique_ptr<NormaModel>> restored =
        NormaModel::FromState(model->ExportState());
    EXPECT_TRUE(restored.ok()) << "after step " << t + 1 << ": " << restored.status();
  }
}

TEST(NormaModelTest, FromStateRejectsInconsistentStates) {
  const ModelConfig config = RoundTripConfigs()[0];  // averaged, budget 40
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  for (const Example& e : ExampleStream(config, 100, 77)) Obs(*model, e.x, e.y);
  const ModelState good = model->ExportState();
  ASSERT_GT(good.coefficients.size(), 2u);
  ASSERT_TRUE(NormaModel::FromState(good).ok());

  struct Mutation {
    std::string description;
    std::function<void(ModelState&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {"support too short", [](ModelState& s) { s.support.pop_back(); }},
      {"support too long", [](ModelState& s) { s.support.push_back(0.0); }},
      {"coefficients too short", [](ModelState& s) { s.coefficients.pop_back(); }},
      {"added_at too short", [](ModelState& s) { s.added_at.pop_back(); }},
      {"average_base missing", [](ModelState& s) { s.average_base.clear(); }},
      {"average_mark missing", [](ModelState& s) { s.average_mark.clear(); }},
      {"average arrays on a non-averaged config",
       [](ModelState& s) { s.config.averaged = false; }},
      {"NaN coefficient", [](ModelState& s) { s.coefficients[1] = kNaN; }},
      {"infinite coefficient", [](ModelState& s) { s.coefficients[0] = kInf; }},
      {"NaN support", [](ModelState& s) { s.support[2] = kNaN; }},
      {"infinite average base", [](ModelState& s) { s.average_base[0] = -kInf; }},
      {"scale 0", [](ModelState& s) { s.scale = 0.0; }},
      {"negative scale", [](ModelState& s) { s.scale = -0.5; }},
      {"NaN scale", [](ModelState& s) { s.scale = kNaN; }},
      {"NaN offset", [](ModelState& s) { s.offset = kNaN; }},
      {"infinite margin", [](ModelState& s) { s.margin = kInf; }},
      {"NaN average_sum", [](ModelState& s) { s.average_sum = kNaN; }},
      {"more terms than max_terms",
       [](ModelState& s) { s.config.budget.max_terms = s.coefficients.size() - 1; }},
      {"invalid config", [](ModelState& s) { s.config.kernel.gamma = -1.0; }},
      {"dimension changed", [](ModelState& s) { s.config.dim = 2; }},
      // Sparse rows in a dense-storage state, any one of their three arrays alone.
      {"sparse_support values", [](ModelState& s) { s.sparse_support.values = {1.0}; }},
      {"sparse_support indices", [](ModelState& s) { s.sparse_support.indices = {0}; }},
      {"retired_sparse_support values",
       [](ModelState& s) { s.retired_sparse_support.values = {1.0}; }},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.description);
    ModelState bad = good;
    m.apply(bad);
    absl::StatusOr<std::unique_ptr<NormaModel>> restored = NormaModel::FromState(bad);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument)
        << restored.status();
  }
}

// --- Reported figures -----------------------------------------------------------------

TEST(NormaModelTest, SquaredNormIsTheDoubleSumOverTerms) {
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.8};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  config.lambda = 0.5;
  config.offset = true;  // excluded from the norm
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->SquaredNorm(), 0.0);
  for (const Example& e : ExampleStream(config, 60, 8)) Obs(*model, e.x, e.y);
  const ModelState state = model->ExportState();
  Kernel kernel(config.kernel, config.dim);
  const size_t n = state.coefficients.size();
  ASSERT_EQ(n, 60u);
  double norm = 0.0, magnitude = 0.0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const double term = state.scale * state.coefficients[i] * state.scale *
                          state.coefficients[j] *
                          kernel.Evaluate(absl::MakeConstSpan(state.support).subspan(i * 2, 2),
                                          absl::MakeConstSpan(state.support).subspan(j * 2, 2));
      norm += term;
      magnitude += std::abs(term);
    }
  }
  // 3600 O(1) terms summed in possibly different orders: 1e-12 of their magnitude.
  EXPECT_NEAR(model->SquaredNorm(), norm, 1e-12 * magnitude);
  EXPECT_GT(norm, 0.0);
}

TEST(NormaModelTest, SquaredNormOfOrthogonalTermsIsTheSumOfSquares) {
  auto model = Make(BasisConfig(/*eta=*/0.5, /*lambda=*/0.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);   // alpha 1
  Obs(*model, E(1), -4.0);  // alpha -2
  EXPECT_EQ(model->SquaredNorm(), 5.0);
}

TEST(NormaModelTest, MemoryBytesOfAFullBudgetIsAboutTheTermArrays) {
  ModelConfig config;
  config.dim = 8;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.1};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.01;
  config.budget = {.max_terms = 64, .policy = BudgetPolicy::kOldest};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  for (const Example& e : ExampleStream(config, 200, 9)) Obs(*model, e.x, e.y);
  ASSERT_EQ(model->expansion_size(), 64u);
  // (dim + 2) doubles per term: the coordinates, the coefficient and added_at.
  const double payload = 64.0 * (8 + 2) * 8;
  EXPECT_GE(static_cast<double>(model->MemoryBytes()), payload);
  EXPECT_LE(static_cast<double>(model->MemoryBytes()), 1.1 * payload);
}

// --- Truncation bound -----------------------------------------------------------------

ModelConfig TruncationConfig() {
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.1;
  config.budget = {.max_terms = 3, .policy = BudgetPolicy::kOldest};
  return config;
}

// Runs until the budget first removes a term, checking the bound is 0 before.
void RunUntilFirstRemoval(NormaModel& model) {
  const std::vector<Example> stream = ExampleStream(model.config(), 500, 13);
  for (const Example& e : stream) {
    ASSERT_EQ(model.stats().truncation_error_bound, 0.0);
    Obs(model, e.x, e.y);
    if (model.stats().terms_removed > 0) return;
  }
  FAIL() << "the budget never removed a term";
}

TEST(NormaModelTest, TruncationErrorBoundIsZeroUntilTheFirstRemovalThenNormasBound) {
  auto model = Make(TruncationConfig());
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->stats().truncation_error_bound.has_value());
  EXPECT_EQ(*model->stats().truncation_error_bound, 0.0);
  RunUntilFirstRemoval(*model);
  // lambda^-1 (1 - eta lambda)^tau C X = 10 * 0.95^3 * 1 * 1 = 8.57375 (pow: 4 ulps).
  ASSERT_TRUE(model->stats().truncation_error_bound.has_value());
  EXPECT_DOUBLE_EQ(*model->stats().truncation_error_bound, 8.57375);
}

TEST(NormaModelTest, TruncationErrorBoundUsesTheLossAndKernelBounds) {
  // Huber C = delta = 2; heat X = (4 pi t)^(-d/4) = (2 pi)^(-1/2) for t = 0.5, d = 2.
  ModelConfig config = TruncationConfig();
  config.loss = {.type = LossType::kHuber, .delta = 2.0};
  config.kernel = {.type = KernelType::kHeat, .t = 0.5};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  RunUntilFirstRemoval(*model);
  ASSERT_TRUE(model->stats().truncation_error_bound.has_value());
  const double x_bound = 1.0 / std::sqrt(2.0 * 3.14159265358979323846);
  EXPECT_NEAR(*model->stats().truncation_error_bound, 10.0 * 0.857375 * 2.0 * x_bound, 1e-13);
}

TEST(NormaModelTest, TruncationErrorBoundIsAbsentWhereItDoesNotApply) {
  const std::vector<std::pair<std::string, std::function<void(ModelConfig&)>>> cases = {
      {"squared loss", [](ModelConfig& c) { c.loss = {.type = LossType::kSquared}; }},
      {"linear kernel", [](ModelConfig& c) { c.kernel = {.type = KernelType::kLinear}; }},
      {"polynomial kernel",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 2};
       }},
      {"inverse-sqrt rate",
       [](ModelConfig& c) { c.learning_rate.schedule = Schedule::kInverseSqrt; }},
      {"power rate", [](ModelConfig& c) { c.learning_rate.schedule = Schedule::kPower; }},
      {"lambda 0", [](ModelConfig& c) { c.lambda = 0.0; }},
      {"SMALLEST policy", [](ModelConfig& c) { c.budget.policy = BudgetPolicy::kSmallest; }},
      {"drop_below", [](ModelConfig& c) { c.budget.drop_below = 1e-3; }},
      {"no budget", [](ModelConfig& c) { c.budget.max_terms = 0; }},
  };
  for (const auto& [description, edit] : cases) {
    SCOPED_TRACE(description);
    ModelConfig config = TruncationConfig();
    edit(config);
    auto model = Make(config);
    ASSERT_NE(model, nullptr);
    EXPECT_FALSE(model->stats().truncation_error_bound.has_value());
    for (const Example& e : ExampleStream(config, 30, 2)) Obs(*model, e.x, e.y);
    EXPECT_FALSE(model->stats().truncation_error_bound.has_value());
  }
}

TEST(NormaModelTest, StatsReportStepsAndExpansionSize) {
  auto model = Make(BasisConfig(0.5, 0.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 1.0);
  Obs(*model, E(1), 0.0);  // p = y = 0: no term
  Obs(*model, E(2), 1.0);
  const ModelStats stats = model->stats();
  EXPECT_EQ(stats.steps, 3u);
  EXPECT_EQ(model->steps(), 3u);
  EXPECT_EQ(stats.expansion_size, 2u);
  EXPECT_EQ(model->expansion_size(), 2u);
  EXPECT_EQ(model->ExportState().added_at, (std::vector<uint64_t>{1, 3}));
}

}  // namespace
}  // namespace okl
