// Tests of NormaModel on tiny streams whose every number is worked out by hand, plus the
// contracts around them: validation that changes nothing, divergence detection, the
// averaged hypothesis, budgets, the truncation bound and the bit-identical round trip
// through ExportState / FromState.
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
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// dim 1, k(x, x') = x x', squared loss, constant rate.
ModelConfig LinearConfig(double eta, double lambda) {
  ModelConfig config;
  config.dim = 1;
  config.kernel = {.type = KernelType::kLinear, .c = 0.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = eta};
  config.lambda = lambda;
  return config;
}

// Orthogonal inputs: dim kBasisDim, linear kernel, squared loss.
constexpr uint32_t kBasisDim = 8;
ModelConfig BasisConfig(double eta, double lambda) {
  ModelConfig config = LinearConfig(eta, lambda);
  config.dim = kBasisDim;
  return config;
}
std::vector<double> E(size_t i) {
  std::vector<double> x(kBasisDim, 0.0);
  x[i] = 1.0;
  return x;
}

std::unique_ptr<NormaModel> Make(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

Observation Obs(NormaModel& model, const std::vector<double>& x, double y) {
  absl::StatusOr<Observation> o = model.Observe(x, y);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : Observation{kNaN, kNaN};
}

double Pred(const NormaModel& model, const std::vector<double>& x,
            PredictionMode mode = PredictionMode::kCurrent) {
  absl::StatusOr<double> p = model.Predict(x, mode);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : kNaN;
}

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

// --- Round trip -----------------------------------------------------------------------

struct Example {
  std::vector<double> x;
  double y;
};

std::vector<Example> Stream(const ModelConfig& config, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<Example> stream;
  for (size_t i = 0; i < n; ++i) {
    Example e;
    for (uint32_t j = 0; j < config.dim; ++j) e.x.push_back(normal(rng));
    const double signal = std::sin(e.x[0]) + 0.5 * e.x[config.dim - 1];
    if (IsClassificationLoss(config.loss.type)) {
      e.y = (signal + 0.3 * normal(rng)) > 0 ? 1.0 : -1.0;
    } else {
      e.y = signal + 0.1 * normal(rng);
    }
    stream.push_back(std::move(e));
  }
  return stream;
}

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
    const std::vector<Example> stream = Stream(config, kBefore + kAfter, 4242);
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
// coefficient ("a zero coefficient is never stored", DESIGN.md), so every state a model
// reaches through successful Observes must avoid one, or restoring a snapshot fails.
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
    const std::vector<Example> stream = Stream(config, 1300, 17);
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
  for (const Example& e : Stream(config, 100, 77)) Obs(*model, e.x, e.y);
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
    for (const Example& e : Stream(config, 20, 3)) Obs(*model, e.x, e.y);
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
  const std::vector<Example> stream = Stream(config, 50, 11);
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
  for (const Example& e : Stream(config, 10, 1)) Obs(*model, e.x, e.y);
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
  const std::vector<Example> stream = Stream(config, 40, 21);
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
  for (const Example& e : Stream(config, 60, 8)) Obs(*model, e.x, e.y);
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
  for (const Example& e : Stream(config, 200, 9)) Obs(*model, e.x, e.y);
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
  const std::vector<Example> stream = Stream(model.config(), 500, 13);
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
    for (const Example& e : Stream(config, 30, 2)) Obs(*model, e.x, e.y);
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
