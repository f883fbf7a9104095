// Tests of Loss: value, derivative and violation flag of every loss on both sides of
// and at every kink (the flat side wins), the derivative against a finite difference,
// logistic's stability for large |y f|, the nu-trick's margin step and the derivative
// bound used by the truncation bound.

#include "core/loss.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

// Every point below is a small dyadic number, so the piecewise-polynomial losses are
// computed exactly and are compared with ==.
struct Case {
  double y;
  double f;
  double margin;
  double value;
  double derivative;
  bool violated;
};

void ExpectCases(const Loss& loss, const std::vector<Case>& cases, bool check_violated) {
  for (const Case& c : cases) {
    SCOPED_TRACE("y=" + std::to_string(c.y) + " f=" + std::to_string(c.f) +
                 " margin=" + std::to_string(c.margin));
    const LossPoint at = loss.At(c.y, c.f, c.margin);
    EXPECT_EQ(at.value, c.value);
    EXPECT_EQ(at.derivative, c.derivative);
    if (check_violated) {
      EXPECT_EQ(at.violated, c.violated);
    }
  }
}

TEST(LossTest, SquaredIsHalfTheSquaredResidual) {
  Loss loss({.type = LossType::kSquared});
  ExpectCases(loss,
              {
                  {2.0, 5.0, 0.0, 4.5, 3.0, false},    // r = 3: 9/2, derivative r
                  {2.0, -1.0, 0.0, 4.5, -3.0, false},  // r = -3
                  {-1.0, -1.0, 0.0, 0.0, 0.0, false},  // r = 0
                  {0.5, 0.75, 0.0, 0.03125, 0.25, false},
              },
              /*check_violated=*/false);
}

TEST(LossTest, HingeIsFlatAtAndAboveTheMargin) {
  Loss loss({.type = LossType::kHinge, .rho = 1.0});
  ExpectCases(loss,
              {
                  // y f = 0.25 < 1: value 1 - 0.25, derivative -y.
                  {1.0, 0.25, 1.0, 0.75, -1.0, true},
                  // y f = -0.5: value 1.5, derivative -y = +1.
                  {-1.0, 0.5, 1.0, 1.5, 1.0, true},
                  // y f = rho exactly: the flat side wins, no violation.
                  {1.0, 1.0, 1.0, 0.0, 0.0, false},
                  {-1.0, -1.0, 1.0, 0.0, 0.0, false},
                  // y f > rho.
                  {1.0, 2.0, 1.0, 0.0, 0.0, false},
                  {-1.0, -3.0, 1.0, 0.0, 0.0, false},
                  // The margin argument, not the config's rho, is the kink.
                  {1.0, 1.0, 2.0, 1.0, -1.0, true},
                  {1.0, 0.0, 0.0, 0.0, 0.0, false},
                  {-1.0, 0.25, 0.0, 0.25, 1.0, true},
              },
              /*check_violated=*/true);
}

TEST(LossTest, EpsilonInsensitiveIsFlatInsideAndOnTheTube) {
  Loss loss({.type = LossType::kEpsilonInsensitive, .epsilon = 0.5});
  ExpectCases(loss,
              {
                  // |f - y| = 1 > 0.5: value 0.5, derivative sign(f - y).
                  {1.0, 2.0, 0.5, 0.5, 1.0, true},
                  {1.0, 0.0, 0.5, 0.5, -1.0, true},
                  // |f - y| = epsilon exactly, on either side: inside the tube.
                  {1.0, 1.5, 0.5, 0.0, 0.0, false},
                  {1.0, 0.5, 0.5, 0.0, 0.0, false},
                  // Strictly inside.
                  {1.0, 1.25, 0.5, 0.0, 0.0, false},
                  {-3.0, -3.0, 0.5, 0.0, 0.0, false},
                  // A zero tube: f == y is still inside.
                  {1.0, 1.0, 0.0, 0.0, 0.0, false},
                  {1.0, 1.25, 0.0, 0.25, 1.0, true},
                  // The margin argument, not the config's epsilon, is the tube.
                  {0.0, 1.0, 2.0, 0.0, 0.0, false},
              },
              /*check_violated=*/true);
}

TEST(LossTest, HuberIsQuadraticInsideDeltaAndLinearOutside) {
  Loss loss({.type = LossType::kHuber, .delta = 1.0});
  ExpectCases(loss,
              {
                  // r = f - y = 0.5: r^2 / 2, derivative r.
                  {0.0, 0.5, 0.0, 0.125, 0.5, false},
                  {0.0, -0.5, 0.0, 0.125, -0.5, false},
                  // r = delta: both pieces give 0.5, derivative delta.
                  {0.0, 1.0, 0.0, 0.5, 1.0, false},
                  {2.0, 1.0, 0.0, 0.5, -1.0, false},
                  // r = 3: delta (|r| - delta / 2) = 2.5, derivative delta sign(r).
                  {0.0, 3.0, 0.0, 2.5, 1.0, false},
                  {1.0, -2.0, 0.0, 2.5, -1.0, false},
              },
              /*check_violated=*/false);
  Loss wide({.type = LossType::kHuber, .delta = 2.0});
  // r = 3 > 2: 2 (3 - 1) = 4, derivative 2. r = 1.5 < 2: 1.125, derivative 1.5.
  ExpectCases(wide, {{0.0, 3.0, 0.0, 4.0, 2.0, false}, {0.0, 1.5, 0.0, 1.125, 1.5, false}},
              /*check_violated=*/false);
}

TEST(LossTest, NoveltyIsFlatAtAndAboveRhoAndIgnoresTheLabel) {
  Loss loss({.type = LossType::kNovelty, .rho = 1.0});
  for (double y : {1.0, -1.0, 0.0, 7.5}) {
    ExpectCases(loss,
                {
                    {y, 0.25, 1.0, 0.75, -1.0, true},
                    {y, -1.0, 1.0, 2.0, -1.0, true},
                    {y, 1.0, 1.0, 0.0, 0.0, false},  // f = rho: not a violation
                    {y, 2.0, 1.0, 0.0, 0.0, false},
                    {y, 1.0, 1.5, 0.5, -1.0, true},  // the margin argument is rho
                },
                /*check_violated=*/true);
  }
}

TEST(LossTest, LogisticMatchesHandComputedValues) {
  Loss loss({.type = LossType::kLogistic});
  // log(1 + exp(-y f)) and derivative -y / (1 + exp(y f)); a few roundings each, so
  // 1e-14 relative.
  struct {
    double y, f, value, derivative;
  } cases[] = {
      // y f = 0: log 2, -y / 2.
      {1.0, 0.0, 0.6931471805599453, -0.5},
      {-1.0, 0.0, 0.6931471805599453, 0.5},
      // y f = 1.5: log1p(e^-1.5) = 0.2014132779827524; -1 / (1 + e^1.5).
      {1.0, 1.5, 0.2014132779827524, -1.0 / (1.0 + std::exp(1.5))},
      // y f = -0.5: log1p(e^0.5) = 0.9740769841801067; +1 / (1 + e^-0.5).
      {-1.0, 0.5, 0.9740769841801067, 1.0 / (1.0 + std::exp(-0.5))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("y=" + std::to_string(c.y) + " f=" + std::to_string(c.f));
    const LossPoint at = loss.At(c.y, c.f, 0.0);
    EXPECT_NEAR(at.value, c.value, 1e-14 * c.value);
    EXPECT_NEAR(at.derivative, c.derivative, 1e-14 * std::abs(c.derivative));
  }
}

TEST(LossTest, LogisticIsStableForLargeMargins) {
  Loss loss({.type = LossType::kLogistic});
  for (double y : {1.0, -1.0}) {
    SCOPED_TRACE("y=" + std::to_string(y));
    // y f = 800: exp(800) overflows a naive log(1 + exp(-y f)) evaluated the other way,
    // and exp(-800) underflows to 0; the loss is ~e^-800, i.e. 0 or a tiny positive.
    LossPoint good = loss.At(y, 800.0 * y, 0.0);
    EXPECT_TRUE(std::isfinite(good.value));
    EXPECT_GE(good.value, 0.0);
    EXPECT_LE(good.value, 1e-300);
    EXPECT_TRUE(std::isfinite(good.derivative));
    EXPECT_LE(std::abs(good.derivative), 1e-300);
    // y f = -800: loss -y f + log1p(e^-800) = 800 exactly in double, derivative -y.
    LossPoint bad = loss.At(y, -800.0 * y, 0.0);
    EXPECT_EQ(bad.value, 800.0);
    EXPECT_DOUBLE_EQ(bad.derivative, -y);
    // y f = 40: log1p(e^-40) = 4.248354255291589e-18, derivative -y e^-40 / (1 + e^-40):
    // a naive log(1 + e^-40) would return 0 here.
    LossPoint small = loss.At(y, 40.0 * y, 0.0);
    EXPECT_NEAR(small.value, 4.248354255291589e-18, 1e-12 * 4.248354255291589e-18);
    EXPECT_NEAR(small.derivative, -y * 4.248354255291589e-18, 1e-12 * 4.248354255291589e-18);
    // y f = -40: 40 + 4.2e-18 rounds to 40.
    EXPECT_EQ(loss.At(y, -40.0 * y, 0.0).value, 40.0);
  }
}

// The derivative agrees with a central difference (L(f + h) - L(f - h)) / 2h wherever
// the loss is smooth. With h = 1e-5 the truncation error is O(h^2 L''') <= 1e-10 and the
// rounding error O(eps L / h) <= 1e-10 for |L| <= 10, so 1e-7 is a safe tolerance.
TEST(LossTest, DerivativeMatchesCentralFiniteDifferenceAwayFromKinks) {
  constexpr double kH = 1e-5;
  constexpr double kTol = 1e-7;
  constexpr double kKinkClearance = 1e-3;
  const std::vector<LossConfig> configs = {
      {.type = LossType::kSquared},
      {.type = LossType::kHinge, .rho = 1.0},
      {.type = LossType::kEpsilonInsensitive, .epsilon = 0.3},
      {.type = LossType::kLogistic},
      {.type = LossType::kHuber, .delta = 0.7},
      {.type = LossType::kNovelty, .rho = 0.5},
  };
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> uniform(-3.0, 3.0);
  for (const LossConfig& config : configs) {
    SCOPED_TRACE(std::string(LossTypeName(config.type)));
    Loss loss(config);
    const double margin = loss.InitialMargin();
    int checked = 0;
    for (int i = 0; i < 2000; ++i) {
      const double f = uniform(rng);
      double y = uniform(rng);
      if (IsClassificationLoss(config.type)) y = y < 0 ? -1.0 : 1.0;
      // Distance to the kink of each loss.
      double kink_distance = std::numeric_limits<double>::infinity();
      switch (config.type) {
        case LossType::kHinge:
          kink_distance = std::abs(y * f - margin);
          break;
        case LossType::kEpsilonInsensitive:
          kink_distance = std::abs(std::abs(f - y) - margin);
          break;
        case LossType::kNovelty:
          kink_distance = std::abs(f - margin);
          break;
        default:  // squared, logistic and Huber have a continuous derivative
          break;
      }
      if (kink_distance < kKinkClearance) continue;
      const double numeric =
          (loss.At(y, f + kH, margin).value - loss.At(y, f - kH, margin).value) / (2 * kH);
      ASSERT_NEAR(loss.At(y, f, margin).derivative, numeric, kTol) << "y=" << y << " f=" << f;
      ++checked;
    }
    EXPECT_GT(checked, 1500);
  }
}

TEST(LossTest, InitialMarginIsRhoEpsilonOrZero) {
  EXPECT_EQ(Loss({.type = LossType::kHinge, .rho = 0.75}).InitialMargin(), 0.75);
  EXPECT_EQ(Loss({.type = LossType::kNovelty, .rho = 2.5}).InitialMargin(), 2.5);
  EXPECT_EQ(Loss({.type = LossType::kEpsilonInsensitive, .epsilon = 0.125}).InitialMargin(),
            0.125);
  EXPECT_EQ(Loss({.type = LossType::kSquared, .rho = 3.0}).InitialMargin(), 0.0);
  EXPECT_EQ(Loss({.type = LossType::kLogistic, .rho = 3.0}).InitialMargin(), 0.0);
  EXPECT_EQ(Loss({.type = LossType::kHuber, .rho = 3.0}).InitialMargin(), 0.0);
}

TEST(LossTest, LearnsMarginOnlyWithNuForLossesThatHaveOne) {
  EXPECT_TRUE(Loss({.type = LossType::kHinge, .nu = 0.5}).LearnsMargin());
  EXPECT_TRUE(Loss({.type = LossType::kNovelty, .nu = 0.5}).LearnsMargin());
  EXPECT_TRUE(Loss({.type = LossType::kEpsilonInsensitive, .nu = 0.5}).LearnsMargin());
  EXPECT_FALSE(Loss({.type = LossType::kHinge, .nu = 0.0}).LearnsMargin());
  EXPECT_FALSE(Loss({.type = LossType::kEpsilonInsensitive, .nu = 0.0}).LearnsMargin());
  EXPECT_FALSE(Loss({.type = LossType::kSquared, .nu = 0.5}).LearnsMargin());
  EXPECT_FALSE(Loss({.type = LossType::kLogistic, .nu = 0.5}).LearnsMargin());
  EXPECT_FALSE(Loss({.type = LossType::kHuber, .nu = 0.5}).LearnsMargin());
}

TEST(LossTest, NuTrickMovesRhoByEtaTimesNuMinusViolation) {
  // rho + eta (nu - s) with eta = 0.5, nu = 0.25: violated 1 - 0.375 = 0.625, satisfied
  // 1 + 0.125 = 1.125 (dyadic: exact).
  for (LossType type : {LossType::kHinge, LossType::kNovelty}) {
    SCOPED_TRACE(std::string(LossTypeName(type)));
    Loss loss({.type = type, .rho = 1.0, .nu = 0.25});
    EXPECT_EQ(loss.NextMargin(1.0, 0.5, /*violated=*/true), 0.625);
    EXPECT_EQ(loss.NextMargin(1.0, 0.5, /*violated=*/false), 1.125);
  }
}

TEST(LossTest, NuTrickMovesEpsilonByEtaTimesViolationMinusNuAndClampsAtZero) {
  Loss loss({.type = LossType::kEpsilonInsensitive, .epsilon = 0.5, .nu = 0.25});
  // eps + eta (s - nu): violated 0.5 + 0.375 = 0.875, inside 0.5 - 0.125 = 0.375.
  EXPECT_EQ(loss.NextMargin(0.5, 0.5, /*violated=*/true), 0.875);
  EXPECT_EQ(loss.NextMargin(0.5, 0.5, /*violated=*/false), 0.375);
  // 0.125 - 0.5 * 1 < 0 clamps to 0.
  Loss greedy({.type = LossType::kEpsilonInsensitive, .epsilon = 0.125, .nu = 1.0});
  EXPECT_EQ(greedy.NextMargin(0.125, 0.5, /*violated=*/false), 0.0);
  EXPECT_EQ(greedy.NextMargin(0.0, 0.5, /*violated=*/false), 0.0);
}

TEST(LossTest, NextMarginIsIdentityWithoutNu) {
  for (LossType type : {LossType::kHinge, LossType::kNovelty, LossType::kEpsilonInsensitive,
                        LossType::kSquared, LossType::kLogistic, LossType::kHuber}) {
    SCOPED_TRACE(std::string(LossTypeName(type)));
    Loss loss({.type = type, .nu = 0.0});
    EXPECT_EQ(loss.NextMargin(0.75, 0.5, true), 0.75);
    EXPECT_EQ(loss.NextMargin(0.75, 0.5, false), 0.75);
  }
}

TEST(LossTest, DerivativeBoundIsOneDeltaOrAbsent) {
  EXPECT_FALSE(Loss({.type = LossType::kSquared}).DerivativeBound().has_value());
  EXPECT_EQ(Loss({.type = LossType::kHinge}).DerivativeBound(), 1.0);
  EXPECT_EQ(Loss({.type = LossType::kEpsilonInsensitive}).DerivativeBound(), 1.0);
  EXPECT_EQ(Loss({.type = LossType::kLogistic}).DerivativeBound(), 1.0);
  EXPECT_EQ(Loss({.type = LossType::kNovelty}).DerivativeBound(), 1.0);
  EXPECT_EQ(Loss({.type = LossType::kHuber, .delta = 2.5}).DerivativeBound(), 2.5);
}

}  // namespace
}  // namespace okl
