// Tests of Kernel: hand-computed values of every kernel, the block sweep against the
// pairwise evaluation across chunk boundaries and padded strides, symmetry, exact
// self-similarity, and the feature-norm bound used by the truncation bound.

#include "core/kernel.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

// Tolerance for a value that goes through exp() or pow() once: glibc's exp and pow are
// within 1 ulp, and the operands below are exact, so 1e-14 relative leaves ample room.
constexpr double kTranscendentalRelTol = 1e-14;

void ExpectRelNear(double actual, double expected, double rel_tol) {
  EXPECT_NEAR(actual, expected, rel_tol * std::abs(expected))
      << "actual " << actual << " expected " << expected;
}

TEST(KernelTest, GaussianMatchesHandComputedValue) {
  // x - x' = (1, 2): |x - x'|^2 = 5; exp(-0.5 * 5) = exp(-2.5) = 0.0820849986238988.
  Kernel kernel({.type = KernelType::kGaussian, .gamma = 0.5}, 2);
  ExpectRelNear(kernel.Evaluate({1.0, 2.0}, {0.0, 0.0}), 0.0820849986238988,
                kTranscendentalRelTol);
  // Shifting both points changes nothing: (3, -1) - (2, -3) = (1, 2).
  ExpectRelNear(kernel.Evaluate({3.0, -1.0}, {2.0, -3.0}), 0.0820849986238988,
                kTranscendentalRelTol);
}

TEST(KernelTest, LaplacianMatchesHandComputedValue) {
  // x - x' = (3, -4): |x - x'| = 5 (sqrt(25) is exact); exp(-2 * 5) = exp(-10)
  // = 4.5399929762484854e-05.
  Kernel kernel({.type = KernelType::kLaplacian, .gamma = 2.0}, 2);
  ExpectRelNear(kernel.Evaluate({3.0, 0.0}, {0.0, 4.0}), 4.5399929762484854e-05,
                kTranscendentalRelTol);
}

TEST(KernelTest, LinearMatchesHandComputedValue) {
  // <(1, 2, 3), (4, -5, 6)> = 4 - 10 + 18 = 12; + c = 13. Small integers: exact.
  Kernel kernel({.type = KernelType::kLinear, .c = 1.0}, 3);
  EXPECT_EQ(kernel.Evaluate({1.0, 2.0, 3.0}, {4.0, -5.0, 6.0}), 13.0);
  Kernel homogeneous({.type = KernelType::kLinear, .c = 0.0}, 3);
  EXPECT_EQ(homogeneous.Evaluate({1.0, 2.0, 3.0}, {4.0, -5.0, 6.0}), 12.0);
}

TEST(KernelTest, PolynomialMatchesHandComputedValue) {
  // <(1, 2), (3, 4)> = 11; 0.5 * 11 + 1 = 6.5; 6.5^3 = 274.625 (exact in binary; pow or
  // repeated multiplication may still differ by an ulp, hence DOUBLE_EQ).
  Kernel kernel({.type = KernelType::kPolynomial, .gamma = 0.5, .c = 1.0, .degree = 3}, 2);
  EXPECT_DOUBLE_EQ(kernel.Evaluate({1.0, 2.0}, {3.0, 4.0}), 274.625);
  // degree 1, c = 0 is gamma <x, x'>: 2 * 11 = 22.
  Kernel linear_like({.type = KernelType::kPolynomial, .gamma = 2.0, .c = 0.0, .degree = 1}, 2);
  EXPECT_DOUBLE_EQ(linear_like.Evaluate({1.0, 2.0}, {3.0, 4.0}), 22.0);
  // Odd degree keeps the sign: (1 * (-11) + 0)^3 = -1331.
  Kernel cubic({.type = KernelType::kPolynomial, .gamma = 1.0, .c = 0.0, .degree = 3}, 2);
  EXPECT_DOUBLE_EQ(cubic.Evaluate({-1.0, -2.0}, {3.0, 4.0}), -1331.0);
}

TEST(KernelTest, HeatMatchesHandComputedValue) {
  // d = 2, t = 0.25: (4 pi t)^(-d/2) = pi^-1; |x - x'|^2 = 1, exp(-1 / (4 t)) = e^-1;
  // k = 1 / (pi e) = 0.11709966304863834.
  Kernel two_d({.type = KernelType::kHeat, .t = 0.25}, 2);
  ExpectRelNear(two_d.Evaluate({1.0, 0.0}, {0.0, 0.0}), 0.11709966304863834,
                kTranscendentalRelTol);
  // d = 3, t = 0.5: (2 pi)^(-3/2) exp(-2 / 2) with |x - x'|^2 = 1 + 1 + 0 = 2;
  // = 0.063493635934240969 * 0.36787944117144233 = 0.023358003305431578.
  Kernel three_d({.type = KernelType::kHeat, .t = 0.5}, 3);
  ExpectRelNear(three_d.Evaluate({1.0, 1.0, 5.0}, {0.0, 2.0, 5.0}), 0.023358003305431578,
                kTranscendentalRelTol);
}

std::vector<KernelConfig> AllKernels() {
  return {
      {.type = KernelType::kGaussian, .gamma = 0.7},
      {.type = KernelType::kLaplacian, .gamma = 1.3},
      {.type = KernelType::kLinear, .c = 0.5},
      {.type = KernelType::kPolynomial, .gamma = 0.5, .c = 1.0, .degree = 3},
      {.type = KernelType::kHeat, .t = 0.4},
  };
}

std::vector<double> RandomVector(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& e : v) e = uniform(rng);
  return v;
}

// The sweep and the pairwise evaluation may accumulate the dim coordinates in a
// different order or with FMA; for dim = 5 coordinates of size <= 1 that is a few ulps,
// so 1e-12 relative (absolute below 1) is generous yet catches any layout mistake.
constexpr double kSweepTol = 1e-12;

TEST(KernelTest, EvaluateRowsAgreesWithEvaluateAcrossChunkBoundariesAndStrides) {
  constexpr size_t kDim = 5;
  const size_t kRows[] = {1,   7,   8,   31,  63,  64,  65,   127,  128,  129,
                          255, 256, 257, 511, 512, 513, 1000, 1023, 1024, 1025};
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const double kGuard = -12345.0;
  std::mt19937_64 rng(20240611);
  for (const KernelConfig& config : AllKernels()) {
    Kernel kernel(config, kDim);
    for (size_t rows : kRows) {
      for (size_t padding : {size_t{0}, size_t{13}, size_t{300}}) {
        SCOPED_TRACE("kernel " + std::string(KernelTypeName(config.type)) + " rows " +
                     std::to_string(rows) + " padding " + std::to_string(padding));
        const size_t stride = rows + padding;
        // Padding rows hold NaN: a sweep that reads them into a result shows it.
        std::vector<double> columns(kDim * stride, kNaN);
        std::vector<std::vector<double>> points(rows);
        for (size_t r = 0; r < rows; ++r) {
          points[r] = RandomVector(rng, kDim);
          for (size_t j = 0; j < kDim; ++j) columns[j * stride + r] = points[r][j];
        }
        const std::vector<double> x = RandomVector(rng, kDim);
        // Guards after out[rows - 1] catch writes past the end.
        std::vector<double> out(rows + 8, kGuard);
        kernel.EvaluateRows(columns.data(), stride, rows, x, out.data());
        for (size_t r = 0; r < rows; ++r) {
          const double expected = kernel.Evaluate(points[r], x);
          ASSERT_NEAR(out[r], expected, kSweepTol * std::max(1.0, std::abs(expected)))
              << "row " << r;
        }
        for (size_t r = rows; r < out.size(); ++r) {
          ASSERT_EQ(out[r], kGuard) << "wrote past the end at " << r;
        }
      }
    }
  }
}

TEST(KernelTest, EvaluateRowsHandlesHighDimension) {
  // Many coordinates per row (more columns than a chunk likely holds in L1).
  constexpr size_t kDim = 300;
  constexpr size_t kRows = 37;
  std::mt19937_64 rng(7);
  for (const KernelConfig& config : AllKernels()) {
    if (config.type == KernelType::kHeat) continue;  // (4 pi t)^(-150) overflows here
    SCOPED_TRACE(std::string(KernelTypeName(config.type)));
    // Small coordinates keep the distance kernels away from 0.
    Kernel kernel(config, kDim);
    std::vector<double> columns(kDim * kRows);
    std::vector<std::vector<double>> points(kRows);
    for (size_t r = 0; r < kRows; ++r) {
      points[r] = RandomVector(rng, kDim);
      for (double& e : points[r]) e *= 0.05;
      for (size_t j = 0; j < kDim; ++j) columns[j * kRows + r] = points[r][j];
    }
    std::vector<double> x = RandomVector(rng, kDim);
    for (double& e : x) e *= 0.05;
    std::vector<double> out(kRows);
    kernel.EvaluateRows(columns.data(), kRows, kRows, x, out.data());
    for (size_t r = 0; r < kRows; ++r) {
      const double expected = kernel.Evaluate(points[r], x);
      // 300 terms per sum: allow 1e-11 relative.
      EXPECT_NEAR(out[r], expected, 1e-11 * std::max(1.0, std::abs(expected))) << r;
    }
  }
}

TEST(KernelTest, IsSymmetric) {
  std::mt19937_64 rng(99);
  for (const KernelConfig& config : AllKernels()) {
    SCOPED_TRACE(std::string(KernelTypeName(config.type)));
    Kernel kernel(config, 6);
    for (int i = 0; i < 50; ++i) {
      const std::vector<double> a = RandomVector(rng, 6);
      const std::vector<double> b = RandomVector(rng, 6);
      // (a_j - b_j)^2 == (b_j - a_j)^2 and a_j b_j == b_j a_j exactly, summed in the same
      // order, so the two calls must agree to the bit.
      EXPECT_EQ(kernel.Evaluate(a, b), kernel.Evaluate(b, a));
    }
  }
}

TEST(KernelTest, SelfSimilarityOfDistanceKernelsIsExact) {
  // A distance computed as (x_j - x'_j)^2 is exactly 0 for a duplicate point, so
  // exp(-gamma * 0) == 1 exactly. Expanding |x|^2 - 2<x, x'> + |x'|^2 instead leaves a
  // rounding residue, which the laplacian's sqrt magnifies (sqrt(1e-16) = 1e-8).
  const std::vector<double> x = {0.1, 1.0 / 3.0, -2.7182818284590451, 1e3, 7.0};
  std::vector<double> columns(x.size() * 3);
  // The block holds x in its middle row.
  const std::vector<double> other = {1.0, 2.0, 3.0, 4.0, 5.0};
  for (size_t j = 0; j < x.size(); ++j) {
    columns[j * 3 + 0] = other[j];
    columns[j * 3 + 1] = x[j];
    columns[j * 3 + 2] = -other[j];
  }
  for (const KernelConfig& config :
       {KernelConfig{.type = KernelType::kLaplacian, .gamma = 1.0},
        KernelConfig{.type = KernelType::kLaplacian, .gamma = 1e6},
        KernelConfig{.type = KernelType::kGaussian, .gamma = 1e6}}) {
    SCOPED_TRACE(std::string(KernelTypeName(config.type)) + " gamma " +
                 std::to_string(config.gamma));
    Kernel kernel(config, x.size());
    EXPECT_EQ(kernel.Evaluate(x, x), 1.0);
    double out[3];
    kernel.EvaluateRows(columns.data(), 3, 3, x, out);
    EXPECT_EQ(out[1], 1.0);
  }
  // The heat kernel at distance 0 is its normaliser, which equals FeatureNormBound^2.
  Kernel heat({.type = KernelType::kHeat, .t = 0.5}, x.size());
  double out[3];
  heat.EvaluateRows(columns.data(), 3, 3, x, out);
  EXPECT_EQ(out[1], heat.Evaluate(x, x));
  ExpectRelNear(heat.Evaluate(x, x), std::pow(*heat.FeatureNormBound(), 2), 1e-14);
}

TEST(KernelTest, FeatureNormBoundIsOneForGaussianAndLaplacian) {
  EXPECT_EQ(Kernel({.type = KernelType::kGaussian, .gamma = 3.0}, 4).FeatureNormBound(), 1.0);
  EXPECT_EQ(Kernel({.type = KernelType::kLaplacian, .gamma = 0.1}, 4).FeatureNormBound(), 1.0);
}

TEST(KernelTest, FeatureNormBoundOfHeatIsFourPiTToMinusDOverFour) {
  // d = 3, t = 0.5: (4 pi 0.5)^(-3/4) = (2 pi)^(-0.75) = 0.25197943553838076.
  std::optional<double> bound =
      Kernel({.type = KernelType::kHeat, .t = 0.5}, 3).FeatureNormBound();
  ASSERT_TRUE(bound.has_value());
  ExpectRelNear(*bound, 0.25197943553838076, kTranscendentalRelTol);
  // d = 2, t = 0.25: pi^(-1/2) = 0.5641895835477563.
  bound = Kernel({.type = KernelType::kHeat, .t = 0.25}, 2).FeatureNormBound();
  ASSERT_TRUE(bound.has_value());
  ExpectRelNear(*bound, 0.5641895835477563, kTranscendentalRelTol);
}

TEST(KernelTest, FeatureNormBoundIsAbsentForUnboundedKernels) {
  EXPECT_FALSE(Kernel({.type = KernelType::kLinear, .c = 1.0}, 2).FeatureNormBound());
  EXPECT_FALSE(Kernel({.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 2}, 2)
                   .FeatureNormBound());
}

TEST(KernelTest, ExposesItsConfigAndDimension) {
  const KernelConfig config{.type = KernelType::kLaplacian, .gamma = 0.25};
  Kernel kernel(config, 9);
  EXPECT_EQ(kernel.dim(), 9u);
  EXPECT_EQ(kernel.config(), config);
}

}  // namespace
}  // namespace okl
