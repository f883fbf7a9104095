// Checks core/merge.h against ReferenceMergePair (tests/core/reference_norma.h), which
// finds the merged point from the vectors themselves on all of [0, 1], against known
// answers at the ends of k_mn's range, and the table's estimate against its error bound.

#include "core/merge.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/config.h"
#include "gtest/gtest.h"
#include "tests/core/reference_norma.h"
#include "tests/core/reference_streams.h"

namespace okl {
namespace {

using ::okl::testing::ReferenceMerge;
using ::okl::testing::ReferenceMergePair;
using ::okl::testing::Uniform;

TEST(MergeGaussianPairTest, MatchesTheReferenceOnRandomPairs) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const KernelConfig kernel{.type = KernelType::kGaussian, .gamma = Uniform(rng, 0.05, 4)};
    std::vector<double> x_m(4), x_n(4);
    for (double& v : x_m) v = Uniform(rng, -1, 1);
    for (double& v : x_n) v = Uniform(rng, -1, 1);
    const double sign = trial % 2 == 0 ? 1.0 : -1.0;
    const double alpha_n = sign * Uniform(rng, 0.01, 2);
    const double alpha_m = alpha_n * Uniform(rng, 0.01, 1);  // |alpha_m| <= |alpha_n|
    double d2 = 0;
    for (int j = 0; j < 4; ++j) d2 += (x_m[j] - x_n[j]) * (x_m[j] - x_n[j]);
    const double k_mn = std::exp(-kernel.gamma * d2);

    const GaussianMerge merge = MergeGaussianPair(std::abs(alpha_m), std::abs(alpha_n), k_mn);
    const ReferenceMerge expected = ReferenceMergePair(kernel, x_m, alpha_m, x_n, alpha_n);
    const double scale = (alpha_m + alpha_n) * (alpha_m + alpha_n);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " a_m " << alpha_m << " a_n "
                                      << alpha_n << " k_mn " << k_mn);
    EXPECT_NEAR(merge.h, expected.h, 1e-6);
    EXPECT_NEAR(sign * merge.coefficient, expected.alpha, 1e-12 * std::abs(expected.alpha));
    EXPECT_NEAR(merge.k_mz, expected.k_mz, 1e-12);
    EXPECT_NEAR(merge.k_nz, expected.k_nz, 1e-12);
    EXPECT_NEAR(merge.loss, expected.loss, 1e-12 * scale);
    // Never worse than removing m, alpha_m^2, nor than z = x_n, alpha_m^2 (1 - k_mn^2).
    EXPECT_LE(merge.loss, alpha_m * alpha_m * (1 - k_mn * k_mn) + 1e-15 * scale);
  }
}

TEST(MergeGaussianPairTest, KnownAnswers) {
  // Coinciding points merge without loss into the sum.
  GaussianMerge merge = MergeGaussianPair(0.25, 0.5, 1.0);
  EXPECT_EQ(merge.coefficient, 0.75);
  EXPECT_EQ(merge.loss, 0.0);
  // Infinitely far apart: z = x_n keeps alpha_n and loses alpha_m^2, removal's loss.
  merge = MergeGaussianPair(0.25, 0.5, 0.0);
  EXPECT_EQ(merge.h, 0.0);
  EXPECT_EQ(merge.coefficient, 0.5);
  EXPECT_DOUBLE_EQ(merge.loss, 0.0625);
  // Equal coefficients, close points (gamma |x_m - x_n|^2 = 1 < 2): the midpoint, where
  // each kernel is exp(-1/4), so alpha_z = 2 alpha exp(-1/4).
  merge = MergeGaussianPair(0.5, 0.5, std::exp(-1.0));
  EXPECT_EQ(merge.h, 0.5);
  EXPECT_DOUBLE_EQ(merge.coefficient, std::exp(-0.25));
  EXPECT_DOUBLE_EQ(merge.loss, 0.5 + 0.5 * std::exp(-1.0) - std::exp(-0.5));
  // Equal coefficients far apart (gamma |x_m - x_n|^2 = 9): the midpoint is a minimum;
  // the peaks sit near the ends.
  merge = MergeGaussianPair(0.5, 0.5, std::exp(-9.0));
  EXPECT_LT(merge.h, 0.01);
  EXPECT_GT(merge.coefficient, 0.5);
}

TEST(EstimateGaussianMergeLossTest, StaysWithinItsErrorBound) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20000; ++trial) {
    const double alpha_n = Uniform(rng, 1e-3, 10);
    const double alpha_m = alpha_n * (trial % 7 == 0 ? 1.0 : Uniform(rng, 0, 1));
    // Half the trials near the ends of k's range, where the table's cells bend most.
    const double u = Uniform(rng, 0, 1);
    const double k = trial % 2 == 0 ? u : (trial % 4 == 1 ? u * 0.02 : 1 - u * 0.02);
    const double exact = MergeGaussianPair(alpha_m, alpha_n, k).loss;
    const MergeLossEstimate estimate = EstimateGaussianMergeLoss(alpha_m, alpha_n, k);
    ASSERT_LE(std::abs(estimate.loss - exact), estimate.error)
        << "alpha_m " << alpha_m << " alpha_n " << alpha_n << " k " << k;
    // The bound is small enough to rank candidates: under 1% of removal's loss.
    ASSERT_LT(estimate.error, 1e-2 * alpha_m * alpha_m);
  }
}

}  // namespace
}  // namespace okl
