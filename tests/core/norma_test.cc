// tests/core/norma_test.cc
//
// Tests of NormaModel's learning step on tiny streams whose every number is worked out by
// hand: the prediction made before each update, the shrinkage of old coefficients, the
// offset, the budget policies (OLDEST, SMALLEST, drop_below), the averaged hypothesis,
// and the mistake, loss and margin counters.
//
// Elsewhere:
//   norma_state_test.cc       the bit-identical round trip through ExportState /
//                             FromState, and the figures a model reports (stats,
//                             truncation error bound, SquaredNorm, MemoryBytes);
//   norma_validation_test.cc  rejection of bad examples and inputs, the batch calls,
//                             and divergence and overflow, which change nothing;
//   norma_test_util.h         the configurations and shortcuts they share.
//
// Most tests use the linear kernel k(x, x') = <x, x'> on small dyadic inputs with
// eta * lambda = 1/2, so every coefficient, scale factor and prediction is exact in binary
// and is compared with ==. Where several terms must not see each other, the inputs are
// scaled unit vectors e_i, which are exactly orthogonal under the linear kernel: a new
// point's prediction is exactly 0 and its coefficient is exactly -eta * g.

#include "core/norma.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "gtest/gtest.h"
#include "tests/core/norma_test_util.h"

namespace okl {
namespace {

// alpha_i = scale * a_i, in slot order.
std::vector<double> Alphas(const NormaModel& model) {
  const ModelState state = model.ExportState();
  std::vector<double> alphas;
  for (double a : state.coefficients) alphas.push_back(state.scale * a);
  return alphas;
}

TEST(NormaModelTest, CreateRejectsAnInvalidConfig) {
  ModelConfig config = LinearConfig(0.5, 0.0);
  config.dim = 0;
  EXPECT_EQ(NormaModel::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NormaModelTest, PredictsBeforeUpdating) {
  auto model = Make(LinearConfig(/*eta=*/0.5, /*lambda=*/0.0));
  ASSERT_NE(model, nullptr);
  // f_1 = 0: p_1 = 0, loss 1/2 (0 - 2)^2 = 2; then alpha_1 = -0.5 (0 - 2) = 1.
  Observation first = Obs(*model, {1.0}, 2.0);
  EXPECT_EQ(first.prediction, 0.0);
  EXPECT_EQ(first.loss, 2.0);
  EXPECT_EQ(Pred(*model, {1.0}), 1.0);
  // p_2 = f_2(1) = 1, not the f_3 the step produces.
  Observation second = Obs(*model, {1.0}, 2.0);
  EXPECT_EQ(second.prediction, 1.0);
  EXPECT_EQ(second.loss, 0.5);
}

TEST(NormaModelTest, ObservationPredictionEqualsPredictBeforeTheStep) {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 0.5};
  config.lambda = 0.1;
  config.offset = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  for (int t = 0; t < 300; ++t) {
    const std::vector<double> x = {normal(rng), normal(rng), normal(rng)};
    const double y = std::sin(x[0]) + 0.1 * normal(rng);
    const double before = Pred(*model, x);
    // The same sweep on the same state: bit-identical.
    ASSERT_EQ(Obs(*model, x, y).prediction, before) << "t=" << t + 1;
  }
}

TEST(NormaModelTest, FirstSquaredLossStepAddsEtaTimesY) {
  auto model = Make(LinearConfig(/*eta=*/0.25, /*lambda=*/0.5));
  ASSERT_NE(model, nullptr);
  // alpha_1 = -eta (0 - y) = 0.25 * 3 = 0.75, whatever lambda: nothing to shrink yet.
  Obs(*model, {2.0}, 3.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{0.75}));
  // f_2(x) = 0.75 * 2 * x.
  EXPECT_EQ(Pred(*model, {2.0}), 3.0);
  EXPECT_EQ(Pred(*model, {1.0}), 1.5);
  EXPECT_EQ(model->ExportState().support, (std::vector<double>{2.0}));
}

TEST(NormaModelTest, ShrinksEveryCoefficientByOneMinusEtaLambda) {
  // eta = 0.5, lambda = 1: every step multiplies the old coefficients by 1/2.
  auto model = Make(LinearConfig(/*eta=*/0.5, /*lambda=*/1.0));
  ASSERT_NE(model, nullptr);
  // t = 1, x = 1, y = 2: p = 0, alpha_1 = 1. f_2(x) = x.
  EXPECT_EQ(Obs(*model, {1.0}, 2.0).prediction, 0.0);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{1.0}));
  // t = 2, x = 2, y = 0: p = 2, g = 2; alpha_1 -> 0.5, alpha_2 = -1.
  // f_3(x) = 0.5 x - 2 x = -1.5 x.
  EXPECT_EQ(Obs(*model, {2.0}, 0.0).prediction, 2.0);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(Pred(*model, {1.0}), -1.5);
  // t = 3, x = 1, y = 1: p = -1.5, g = -2.5; alpha_1 -> 0.25, alpha_2 -> -0.5,
  // alpha_3 = 1.25. f_4(x) = 0.25 x - x + 1.25 x = 0.5 x.
  EXPECT_EQ(Obs(*model, {1.0}, 1.0).prediction, -1.5);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{0.25, -0.5, 1.25}));
  EXPECT_EQ(Pred(*model, {2.0}), 1.0);
}

TEST(NormaModelTest, ShrinkageKeepsPredictionsExactAcrossManyRenormalisations) {
  // Orthogonal terms shrink independently: after T more steps alpha_1 = 2^-T exactly,
  // far past the 2^-8 at which the scale is folded into the coefficients.
  auto model = Make(BasisConfig(/*eta=*/0.5, /*lambda=*/1.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);  // alpha = 1
  for (int t = 1; t <= 40; ++t) {
    // A zero-gradient step (p = y = 0 at e_1) only shrinks.
    Obs(*model, E(1), 0.0);
    ASSERT_EQ(Pred(*model, E(0)), std::ldexp(1.0, -t)) << t;
  }
  EXPECT_EQ(model->expansion_size(), 1u);
}

TEST(NormaModelTest, ZeroGradientAddsNoTermButStillShrinks) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // t = 1, x = 2, y = 1: y p = 0 < 1, g = -1, alpha_1 = 0.5. f_2(x) = x.
  Obs(*model, {2.0}, 1.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  // t = 2, x = 4, y = 1: y p = 4 >= 1, g = 0: no term; alpha_1 -> 0.25.
  Observation o = Obs(*model, {4.0}, 1.0);
  EXPECT_EQ(o.prediction, 4.0);
  EXPECT_EQ(o.loss, 0.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{0.25}));
  // f_3(x) = 0.5 x; t = 3 at x = 2: y p = 1 = rho exactly is not a violation.
  o = Obs(*model, {2.0}, 1.0);
  EXPECT_EQ(o.prediction, 1.0);
  EXPECT_EQ(o.loss, 0.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(model->stats().steps, 3u);
}

TEST(NormaModelTest, OffsetTakesTheGradientStepAndIsNotShrunk) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.offset = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // t = 1, x = 1, y = 2: p = 0, g = -2: alpha_1 = 1, b = 0 - 0.5 (-2) = 1. f_2 = x + 1.
  EXPECT_EQ(Obs(*model, {1.0}, 2.0).prediction, 0.0);
  EXPECT_EQ(model->stats().offset, 1.0);
  EXPECT_EQ(Pred(*model, {0.0}), 1.0);
  // t = 2, x = 1, y = 1: p = 2, g = 1: alpha_1 -> 0.5, alpha_2 = -0.5,
  // b = 1 - 0.5 = 0.5 (a shrunk offset would give 0.5 * 1 - 0.5 = 0).
  EXPECT_EQ(Obs(*model, {1.0}, 1.0).prediction, 2.0);
  EXPECT_EQ(model->stats().offset, 0.5);
  EXPECT_EQ(model->ExportState().offset, 0.5);
  // f_3(x) = 0.5 x - 0.5 x + 0.5.
  EXPECT_EQ(Pred(*model, {3.0}), 0.5);
}

TEST(NormaModelTest, NoOffsetUnlessConfigured) {
  auto model = Make(LinearConfig(0.5, 0.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 2.0);
  EXPECT_EQ(model->stats().offset, 0.0);
  EXPECT_EQ(Pred(*model, {0.0}), 0.0);
}

TEST(NormaModelTest, OldestBudgetKeepsTheNewestMaxTermsTerms) {
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.budget = {.max_terms = 3, .policy = BudgetPolicy::kOldest};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // Each e_i is orthogonal to the others: p = 0 and alpha_i = 0.5 y_i = 0.5 (i + 1).
  for (size_t i = 0; i < kBasisDim; ++i) {
    Obs(*model, E(i), static_cast<double>(i + 1));
    ASSERT_LE(model->expansion_size(), 3u);
    for (size_t j = 0; j <= i; ++j) {
      const double expected = (i - j < 3) ? 0.5 * (j + 1) : 0.0;
      ASSERT_EQ(Pred(*model, E(j)), expected) << "after step " << i + 1 << ", e_" << j;
    }
  }
  EXPECT_EQ(model->stats().terms_removed, kBasisDim - 3);
  // added_at is the 1-based step: the newest three are 6, 7, 8.
  std::vector<uint64_t> added = model->ExportState().added_at;
  std::sort(added.begin(), added.end());
  EXPECT_EQ(added, (std::vector<uint64_t>{6, 7, 8}));
}

TEST(NormaModelTest, OldestBudgetDropsTheOldestEvenWhenPredictionsInteract) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.budget = {.max_terms = 2, .policy = BudgetPolicy::kOldest};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // t = 1, x = 1, y = 2: alpha_1 = 1. t = 2, x = 2, y = 0: p = 2, alpha_2 = -1.
  // t = 3, x = 3, y = 0: p = 3 - 6 = -3, alpha_3 = 1.5; x = 1 leaves.
  // f_4(x) = -2 x + 4.5 x = 2.5 x.
  Obs(*model, {1.0}, 2.0);
  Obs(*model, {2.0}, 0.0);
  EXPECT_EQ(Obs(*model, {3.0}, 0.0).prediction, -3.0);
  EXPECT_EQ(model->expansion_size(), 2u);
  EXPECT_EQ(Pred(*model, {2.0}), 5.0);
  const ModelState state = model->ExportState();
  std::vector<double> support = state.support;
  std::sort(support.begin(), support.end());
  EXPECT_EQ(support, (std::vector<double>{2.0, 3.0}));
}

TEST(NormaModelTest, SmallestBudgetRemovesTheSmallestIncludingTheNewOneOldestOnTie) {
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.budget = {.max_terms = 2, .policy = BudgetPolicy::kSmallest};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // alpha = 0.5 y at each fresh orthogonal point.
  Obs(*model, E(0), 4.0);   // e0: 2
  Obs(*model, E(1), -2.0);  // e1: -1
  Obs(*model, E(2), 6.0);   // e2: 3 -> over budget, |-1| is smallest: e1 leaves
  EXPECT_EQ(model->expansion_size(), 2u);
  EXPECT_EQ(Pred(*model, E(0)), 2.0);
  EXPECT_EQ(Pred(*model, E(1)), 0.0);
  EXPECT_EQ(Pred(*model, E(2)), 3.0);
  Obs(*model, E(3), 1.0);  // e3: 0.5, the new term is the smallest and is not kept
  EXPECT_EQ(model->expansion_size(), 2u);
  EXPECT_EQ(Pred(*model, E(3)), 0.0);
  EXPECT_EQ(Pred(*model, E(0)), 2.0);
  EXPECT_EQ(Pred(*model, E(2)), 3.0);
  Obs(*model, E(4), 4.0);  // e4: 2 ties with e0: 2, the older e0 leaves
  EXPECT_EQ(Pred(*model, E(0)), 0.0);
  EXPECT_EQ(Pred(*model, E(4)), 2.0);
  EXPECT_EQ(Pred(*model, E(2)), 3.0);
  Obs(*model, E(5), -4.0);  // e5: -2 ties with e4: 2 in |alpha|; the older e4 leaves
  EXPECT_EQ(Pred(*model, E(4)), 0.0);
  EXPECT_EQ(Pred(*model, E(5)), -2.0);
  EXPECT_EQ(Pred(*model, E(2)), 3.0);
  EXPECT_EQ(model->stats().terms_removed, 4u);
}

TEST(NormaModelTest, SmallestBudgetComparesShrunkCoefficients) {
  // With shrinkage by 1/2 a step an older term can fall below a newer one; the budget
  // compares the current (shrunk) |alpha|.
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.budget = {.max_terms = 2, .policy = BudgetPolicy::kSmallest};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 8.0);  // e0: 4
  Obs(*model, E(1), 6.0);  // e0: 2, e1: 3
  Obs(*model, E(2), 3.0);  // e0: 1, e1: 1.5, e2: 1.5 -> e0 (1) leaves
  EXPECT_EQ(Pred(*model, E(0)), 0.0);
  EXPECT_EQ(Pred(*model, E(1)), 1.5);
  EXPECT_EQ(Pred(*model, E(2)), 1.5);
  Obs(*model, E(3), 3.0);  // e1: 0.75, e2: 0.75, e3: 1.5 -> tie, e1 (older) leaves
  EXPECT_EQ(Pred(*model, E(1)), 0.0);
  EXPECT_EQ(Pred(*model, E(2)), 0.75);
  EXPECT_EQ(Pred(*model, E(3)), 1.5);
}

TEST(NormaModelTest, DropBelowRemovesTermsThatShrinkBelowTheThreshold) {
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.budget = {.drop_below = 0.25};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);  // e0: 1
  Obs(*model, E(1), 2.0);  // e0: 0.5, e1: 1
  Obs(*model, E(2), 2.0);  // e0: 0.25 is not below 0.25: kept
  EXPECT_EQ(model->expansion_size(), 3u);
  EXPECT_EQ(Pred(*model, E(0)), 0.25);
  Obs(*model, E(3), 2.0);  // e0: 0.125 < 0.25 goes
  EXPECT_EQ(model->expansion_size(), 3u);
  EXPECT_EQ(Pred(*model, E(0)), 0.0);
  EXPECT_EQ(Pred(*model, E(1)), 0.25);
  EXPECT_EQ(Pred(*model, E(2)), 0.5);
  EXPECT_EQ(Pred(*model, E(3)), 1.0);
  EXPECT_EQ(model->stats().terms_removed, 1u);
}

TEST(NormaModelTest, DropBelowAlsoAppliesToTheNewTerm) {
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.budget = {.drop_below = 0.25};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);   // alpha 1: kept
  Obs(*model, E(1), 0.25);  // alpha 0.125 < 0.25: never stored
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(Pred(*model, E(1)), 0.0);
  EXPECT_EQ(Pred(*model, E(0)), 1.0);
}

TEST(NormaModelTest, DropBelowAndBudgetTogether) {
  // drop_below first, then the budget: e0 falls below 0.3 on the third step and goes, so
  // the budget of 2 needs no further removal.
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.budget = {.max_terms = 2, .policy = BudgetPolicy::kOldest, .drop_below = 0.3};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);  // e0: 1
  Obs(*model, E(1), 4.0);  // e0: 0.5, e1: 2
  Obs(*model, E(2), 4.0);  // e0: 0.25 (dropped), e1: 1, e2: 2
  EXPECT_EQ(model->expansion_size(), 2u);
  EXPECT_EQ(Pred(*model, E(1)), 1.0);
  EXPECT_EQ(Pred(*model, E(2)), 2.0);
  EXPECT_EQ(model->stats().terms_removed, 1u);
}

TEST(NormaModelTest, AveragedPredictionIsTheMeanOfThePastHypotheses) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.averaged = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // Before any example: the empty mean is taken as f_1 = 0.
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kAveraged), 0.0);
  // Same stream as ShrinksEveryCoefficientByOneMinusEtaLambda:
  // f_1 = 0, f_2 = x, f_3 = -1.5 x, f_4 = 0.5 x.
  Obs(*model, {1.0}, 2.0);
  // T = 1: f_1 = 0 only (f_2 is the current model, not part of the average).
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kAveraged), 0.0);
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kCurrent), 1.0);
  Obs(*model, {2.0}, 0.0);
  // T = 2: (0 + x) / 2.
  EXPECT_DOUBLE_EQ(Pred(*model, {1.0}, PredictionMode::kAveraged), 0.5);
  Obs(*model, {1.0}, 1.0);
  // T = 3: (0 + x - 1.5 x) / 3 = -x / 6.
  EXPECT_DOUBLE_EQ(Pred(*model, {1.0}, PredictionMode::kAveraged), -1.0 / 6.0);
  EXPECT_DOUBLE_EQ(Pred(*model, {3.0}, PredictionMode::kAveraged), -0.5);
  // kConfigured follows config.averaged; kCurrent is f_4.
  EXPECT_EQ(Pred(*model, {3.0}, PredictionMode::kConfigured),
            Pred(*model, {3.0}, PredictionMode::kAveraged));
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kCurrent), 0.5);
}

TEST(NormaModelTest, AveragedPredictionAveragesTheOffsetToo) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/1.0);
  config.averaged = true;
  config.offset = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // t = 1, x = 1, y = 2: alpha_1 = 1, b = 1: f_2 = x + 1.
  // t = 2, x = 2, y = 0: p = 3, g = 3: alpha_1 -> 0.5, alpha_2 = -1.5 (at 2), b = -0.5:
  //   f_3 = 0.5 x - 3 x - 0.5 = -2.5 x - 0.5.
  // t = 3, x = 1, y = 0: anything; the average over T = 3 is (f_1 + f_2 + f_3) / 3.
  Obs(*model, {1.0}, 2.0);
  Obs(*model, {2.0}, 0.0);
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kCurrent), -3.0);
  Obs(*model, {1.0}, 0.0);
  // x = 1: (0 + 2 - 3) / 3 = -1/3; x = 2: (0 + 3 - 5.5) / 3 = -2.5 / 3; x = 0: 0.5 / 3.
  EXPECT_DOUBLE_EQ(Pred(*model, {1.0}, PredictionMode::kAveraged), -1.0 / 3.0);
  EXPECT_DOUBLE_EQ(Pred(*model, {2.0}, PredictionMode::kAveraged), -2.5 / 3.0);
  EXPECT_DOUBLE_EQ(Pred(*model, {0.0}, PredictionMode::kAveraged), 0.5 / 3.0);
}

TEST(NormaModelTest, AveragedPredictionMatchesBruteForceMeanAcrossRenormalisations) {
  // eta lambda = 0.25: the scale falls by 3/4 a step and is folded about every 20 steps,
  // so 400 steps cross ~20 folds. The reference sums Predict(q, kCurrent) before every
  // step. Both are sums of a few hundred O(1) numbers: 1e-10 relative to the sum of
  // magnitudes is well above their rounding and far below any real error.
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.5;
  config.offset = true;
  config.averaged = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  std::mt19937_64 rng(2718);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  const std::vector<std::vector<double>> probes = {{0.0, 0.0}, {1.0, -0.5}, {-1.5, 1.5}};
  std::vector<double> sums(probes.size(), 0.0), magnitudes(probes.size(), 0.0);
  for (int t = 1; t <= 400; ++t) {
    for (size_t q = 0; q < probes.size(); ++q) {
      const double f_t = Pred(*model, probes[q]);
      sums[q] += f_t;
      magnitudes[q] += std::abs(f_t);
    }
    const std::vector<double> x = {uniform(rng), uniform(rng)};
    Obs(*model, x, std::cos(x[0]) * x[1] + 0.5);
    if (t % 50 == 0) {
      for (size_t q = 0; q < probes.size(); ++q) {
        ASSERT_NEAR(Pred(*model, probes[q], PredictionMode::kAveraged), sums[q] / t,
                    1e-10 * (1.0 + magnitudes[q] / t))
            << "t=" << t << " probe " << q;
      }
    }
  }
}

// Suffix averaging in blocks of W = max_terms = 2 steps: at step T the average is over
// f_t, t in (S, T], S = max(0, (floor((T - 1) / 2) - 1) 2). A term the budget removes
// stays in it for as long as one of its hypotheses does, and leaves with the last one.
// Every e_i is orthogonal to the others, and each step adds alpha = 1 at a new e_i.
TEST(NormaModelTest, ARemovedTermStaysInTheAverageWhileItsHypothesesDo) {
  ModelConfig config = BasisConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.budget = {.max_terms = 2, .policy = BudgetPolicy::kOldest};
  config.averaged = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, E(0), 2.0);  // f_2 = e0
  Obs(*model, E(1), 2.0);  // f_3 = e0 + e1
  // T = 2, S = 0: at e0, (f_1 + f_2) / 2 = (0 + 1) / 2.
  EXPECT_EQ(Pred(*model, E(0), PredictionMode::kAveraged), 0.5);
  Obs(*model, E(2), 2.0);  // f_4 = e1 + e2: e0 leaves the expansion, not the average
  // T = 3, S = 0: e0 is in f_2 and f_3; e1 in f_3.
  EXPECT_DOUBLE_EQ(Pred(*model, E(0), PredictionMode::kAveraged), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(Pred(*model, E(1), PredictionMode::kAveraged), 1.0 / 3.0);
  EXPECT_EQ(Pred(*model, E(0), PredictionMode::kCurrent), 0.0);
  Obs(*model, E(3), 2.0);  // f_5 = e2 + e3
  Obs(*model, E(4), 2.0);  // f_6 = e3 + e4
  // T = 5, S = 2: f_3, f_4, f_5; e0 is in f_3 only, e1 in f_3 and f_4.
  EXPECT_DOUBLE_EQ(Pred(*model, E(0), PredictionMode::kAveraged), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(Pred(*model, E(1), PredictionMode::kAveraged), 2.0 / 3.0);
  Obs(*model, E(5), 2.0);  // f_7 = e4 + e5
  // T = 6, S = 2: f_3 .. f_6.
  EXPECT_EQ(Pred(*model, E(0), PredictionMode::kAveraged), 0.25);
  EXPECT_EQ(Pred(*model, E(1), PredictionMode::kAveraged), 0.5);
  Obs(*model, E(0), 0.0);  // T = 7, S = 4: f_5 .. f_7 hold neither e0 nor e1
  EXPECT_EQ(Pred(*model, E(0), PredictionMode::kAveraged), 0.0);
  EXPECT_EQ(Pred(*model, E(1), PredictionMode::kAveraged), 0.0);
  // e2 is in f_4 and f_5, of which f_5 is averaged; e3 in f_5 and f_6.
  EXPECT_DOUBLE_EQ(Pred(*model, E(2), PredictionMode::kAveraged), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(Pred(*model, E(3), PredictionMode::kAveraged), 2.0 / 3.0);
  // e0 and e1 are no longer held; e2 and e3 are, retired at steps 5 and 6.
  const ModelState state = model->ExportState();
  EXPECT_EQ(state.retired_at, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(state.average_previous_start, 4u);
  EXPECT_EQ(state.average_block_start, 6u);
}

// The stream the averaged hypothesis once failed on (it divided a sum that the budget
// had emptied by all T steps, and predicted ~0): y = sin(x), x uniform in [0, 6], a budget
// of 100 terms, 10,000 steps. Averaged over its window it must predict at least as well as
// the current model: mean squared error against sin on a grid of [0, 6].
TEST(NormaModelTest, AveragedHypothesisOnABudgetPredictsTheSineAsWellAsTheCurrentOne) {
  ModelConfig config;
  config.dim = 1;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.01;
  config.budget = {.max_terms = 100, .policy = BudgetPolicy::kOldest};
  config.averaged = true;
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> uniform(0.0, 6.0);
  for (int t = 0; t < 10000; ++t) {
    const double x = uniform(rng);
    Obs(*model, {x}, std::sin(x));
  }
  double averaged_mse = 0, current_mse = 0;
  constexpr int kGrid = 61;
  for (int i = 0; i < kGrid; ++i) {
    const double x = 6.0 * i / (kGrid - 1);
    averaged_mse += std::pow(Pred(*model, {x}, PredictionMode::kAveraged) - std::sin(x), 2);
    current_mse += std::pow(Pred(*model, {x}, PredictionMode::kCurrent) - std::sin(x), 2);
  }
  averaged_mse /= kGrid;
  current_mse /= kGrid;
  EXPECT_LE(averaged_mse, current_mse);
  EXPECT_LT(averaged_mse, 0.01);
  // Where the old average said 0.005 and the current model says ~0.88 (truth 0.997).
  EXPECT_GT(Pred(*model, {1.5}, PredictionMode::kAveraged), 0.85);
  RecordProperty("averaged_mse", absl::StrCat(averaged_mse));
  RecordProperty("current_mse", absl::StrCat(current_mse));
}

TEST(NormaModelTest, AveragedModeOnANonAveragedModelIsAnError) {
  auto model = Make(LinearConfig(0.5, 0.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 1.0);
  absl::StatusOr<double> p = model->Predict({1.0}, PredictionMode::kAveraged);
  EXPECT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(p.status()) || absl::IsInvalidArgument(p.status()))
      << p.status();
  double out[1] = {0.0};
  const double xs[1] = {1.0};
  EXPECT_FALSE(model->PredictBatch(xs, out, PredictionMode::kAveraged).ok());
  // kConfigured is the current model here.
  EXPECT_EQ(Pred(*model, {1.0}, PredictionMode::kConfigured), 0.5);
}

TEST(NormaModelTest, CountsMistakesForHingeWithZeroPredictionAsAMistake) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 1.0);  // p = 0: a mistake. alpha_1 = 0.5.
  EXPECT_EQ(model->stats().mistakes, 1u);
  Obs(*model, {1.0}, 1.0);  // p = 0.5: right (but inside the margin): alpha_2 = 0.5
  EXPECT_EQ(model->stats().mistakes, 1u);
  Obs(*model, {1.0}, -1.0);  // p = 1, y = -1: a mistake; alpha_3 = -0.5: f = 0.5 x
  EXPECT_EQ(model->stats().mistakes, 2u);
  Obs(*model, {-1.0}, -1.0);  // p = -0.5: right
  EXPECT_EQ(model->stats().mistakes, 2u);
  Obs(*model, {0.0}, 1.0);  // k(0, .) = 0, p = 0: a mistake
  EXPECT_EQ(model->stats().mistakes, 3u);
}

TEST(NormaModelTest, CountsMistakesForLogistic) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.loss = {.type = LossType::kLogistic};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 1.0);    // p = 0: a mistake; alpha_1 = 0.5 / 2 = 0.25
  Obs(*model, {1.0}, 1.0);    // p = 0.25: right
  Obs(*model, {0.0}, -1.0);   // p = 0: a mistake
  Obs(*model, {1.0}, -1.0);   // p > 0, y = -1: a mistake
  Obs(*model, {-1.0}, -1.0);  // p < 0: right
  EXPECT_EQ(model->stats().mistakes, 3u);
}

TEST(NormaModelTest, DoesNotCountMistakesForRegression) {
  auto model = Make(LinearConfig(0.5, 0.0));
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 1.0);
  Obs(*model, {1.0}, -3.0);
  EXPECT_EQ(model->stats().mistakes, 0u);
}

TEST(NormaModelTest, AccumulatesThePrequentialLoss) {
  auto model = Make(LinearConfig(/*eta=*/0.5, /*lambda=*/1.0));
  ASSERT_NE(model, nullptr);
  // The stream of ShrinksEveryCoefficientByOneMinusEtaLambda: p = 0, 2, -1.5 for
  // y = 2, 0, 1: losses 2, 2, 3.125.
  EXPECT_EQ(Obs(*model, {1.0}, 2.0).loss, 2.0);
  EXPECT_EQ(Obs(*model, {2.0}, 0.0).loss, 2.0);
  EXPECT_EQ(Obs(*model, {1.0}, 1.0).loss, 3.125);
  EXPECT_EQ(model->stats().cumulative_loss, 7.125);
  EXPECT_EQ(model->ExportState().cumulative_loss, 7.125);
}

TEST(NormaModelTest, NuHingeLearnsRho) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.5};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->stats().margin, 1.0);
  // t = 1, x = 1, y = 1: y p = 0 < rho: violated; rho -> 1 + 0.5 (0.5 - 1) = 0.75;
  // loss max(0, 1 - 0) = 1 against the rho in force; alpha_1 = 0.5.
  EXPECT_EQ(Obs(*model, {1.0}, 1.0).loss, 1.0);
  EXPECT_EQ(model->stats().margin, 0.75);
  EXPECT_EQ(model->ExportState().margin, 0.75);
  // t = 2, x = 2, y = 1: y p = 1 >= 0.75: satisfied, no term; rho -> 0.75 + 0.25 = 1.
  Observation o = Obs(*model, {2.0}, 1.0);
  EXPECT_EQ(o.prediction, 1.0);
  EXPECT_EQ(o.loss, 0.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(model->stats().margin, 1.0);
  // t = 3, x = 2, y = 1: y p = 1 = rho: still satisfied (the flat side wins).
  Obs(*model, {2.0}, 1.0);
  EXPECT_EQ(model->expansion_size(), 1u);
  EXPECT_EQ(model->stats().margin, 1.25);
}

TEST(NormaModelTest, NuEpsilonInsensitiveClampsEpsilonAtZero) {
  ModelConfig config = LinearConfig(/*eta=*/0.5, /*lambda=*/0.0);
  config.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.125, .nu = 1.0};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  // p = 0, y = 0: inside the tube; eps -> max(0, 0.125 + 0.5 (0 - 1)) = 0.
  Obs(*model, {1.0}, 0.0);
  EXPECT_EQ(model->stats().margin, 0.0);
  EXPECT_EQ(model->expansion_size(), 0u);
  // p = 0, y = 1: |r| = 1 > 0: violated; eps -> 0 + 0.5 (1 - 1) = 0; alpha = 0.5.
  Obs(*model, {1.0}, 1.0);
  EXPECT_EQ(model->stats().margin, 0.0);
  EXPECT_EQ(Alphas(*model), (std::vector<double>{0.5}));
}

TEST(NormaModelTest, MarginIsTheConfiguredOneWithoutNu) {
  ModelConfig config = LinearConfig(0.5, 0.0);
  config.loss = {.type = LossType::kHinge, .rho = 0.75};
  auto model = Make(config);
  ASSERT_NE(model, nullptr);
  Obs(*model, {1.0}, 1.0);
  Obs(*model, {3.0}, 1.0);
  EXPECT_EQ(model->stats().margin, 0.75);
}

}  // namespace
}  // namespace okl
