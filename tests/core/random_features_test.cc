// Tests okl::RandomFeatureModel (core/random_features.h):
//   - the frequency generator: reproducible, seed-dependent, drawn from each kernel's
//     spectral density (moments checked within a few standard errors), and the features'
//     inner products approximating the kernel computed from its definition;
//   - the model against ReferenceRandomFeatures (tests/core/reference_random_features.h),
//     plain loops that share only the frequencies with core, on every prequential
//     prediction, loss, the final weights, the current and averaged hypotheses at probe
//     points, and the statistics, for every kernel x loss x schedule, with and without an
//     offset;
//   - snapshots (ExportState, ModelFromState) continuing bit-identically, FromState
//     rejecting every inconsistency, bad inputs and divergence changing nothing;
//   - one pass over Adult (a9a) reaching the test accuracy of a budgeted kernel learner.
//
// Tolerance of the reference comparison. Core and the reference do the same arithmetic in
// a different order and representation: core computes v_j . x over the nonzero
// coordinates with vector fused multiply-adds and sin, cos with its own polynomials (a few
// ulps from libm), and sums the dot products in vector lanes; the reference sums in plain
// order and calls std::cos and std::sin. A prediction adds up w_k z_k(x) and b, where each
// w_k and b are sums of increments -eta_t g_t z_k(x_t) shrunk by (1 - eta lambda); adding
// in any order errs by at most n * 2^-53 relative to the sum of the absolute values of
// what is added, and a feature's absolute error is ~1e-16 sqrt(2 / D). So we require
//     |p - p_ref| <= 1e-9 * M,   M = sum_k m_k |z_k(x)| + sum_t |eta_t g_t|,
// m_k the sum of |increments| of w_k (ReferenceRandomFeatures::Magnitude): ~10^5 times
// the worst case above for these short streams and ~10^6 times the worst difference
// measured over this file (1.3e-15 M), yet far below what a real disagreement gives (a
// wrong feature, shrink, step size, sign or margin shows at 1e-3 M or more). M, not |p|,
// is the right scale: p may be a small difference of large terms.

#include "core/random_features.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/reference_norma.h"
#include "tests/core/reference_random_features.h"
#include "tests/core/reference_streams.h"

namespace okl {
namespace {

using ::okl::testing::ReferenceFeatures;
using ::okl::testing::ReferenceKernel;
using ::okl::testing::ReferenceObservation;
using ::okl::testing::ReferenceRandomFeatures;
using ::okl::testing::Agrees;
using ::okl::testing::ExpectStepsAgree;
using ::okl::testing::KernelCase;
using ::okl::testing::Labels;
using ::okl::testing::LossCase;
using ::okl::testing::MakeStream;
using ::okl::testing::Stream;
using ::okl::testing::UniformVector;
using ::okl::testing::kReferenceLosses;
using ::okl::testing::kStreamDim;

constexpr uint64_t kSeed = 20240601;
constexpr double kEpsilon = std::numeric_limits<double>::epsilon();

ModelConfig FeatureConfig(KernelType kernel, double gamma, uint32_t dim, uint32_t d,
                          uint64_t seed) {
  ModelConfig config;
  config.dim = dim;
  config.kernel = {.type = kernel, .gamma = gamma};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.01;
  config.random_features = {.dimension = d, .seed = seed};
  return config;
}

std::unique_ptr<RandomFeatureModel> MustCreateRandomFeatures(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<RandomFeatureModel>> model = RandomFeatureModel::Create(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::vector<double> CoreFeatures(const RandomFeatureModel& model, absl::Span<const double> x) {
  std::vector<double> z(model.config().random_features.dimension);
  model.Features(x, absl::MakeSpan(z));
  return z;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t k = 0; k < a.size(); ++k) sum += a[k] * b[k];
  return sum;
}

// ---------------------------------------------------------------------------------------
// The frequencies and the features.

TEST(RandomFeatureFrequenciesTest, SameConfigGivesTheSameFrequencies) {
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    const ModelConfig config = FeatureConfig(kernel, 0.5, 5, 200, 7);
    const std::vector<double> a = RandomFeatureFrequencies(config);
    const std::vector<double> b = RandomFeatureFrequencies(config);
    ASSERT_EQ(a.size(), 5u * 100u);
    EXPECT_EQ(a, b);
    for (double v : a) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(RandomFeatureFrequenciesTest, DifferentSeedsGiveDifferentFrequencies) {
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    const std::vector<double> a = RandomFeatureFrequencies(FeatureConfig(kernel, 0.5, 5, 200, 0));
    const std::vector<double> b = RandomFeatureFrequencies(FeatureConfig(kernel, 0.5, 5, 200, 1));
    ASSERT_EQ(a.size(), b.size());
    // Not merely one value apart: independent streams share no value at all.
    size_t equal = 0;
    for (size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
    EXPECT_EQ(equal, 0u);
  }
}

// N(0, 2 gamma): the sample mean is within 5 standard errors sqrt(2 gamma / N) of 0, the
// sample variance within 5 standard errors 2 gamma sqrt(2 / N) of 2 gamma (the variance
// of a gaussian sample variance is 2 sigma^4 / N), and two coordinates are uncorrelated
// (sample correlation within 5 / sqrt(n)).
TEST(RandomFeatureFrequenciesTest, GaussianFrequenciesHaveMeanZeroAndVarianceTwoGamma) {
  constexpr double kGamma = 0.3;
  constexpr uint32_t kDim = 4;
  const std::vector<double> v =
      RandomFeatureFrequencies(FeatureConfig(KernelType::kGaussian, kGamma, kDim, 20000, 3));
  const double n = static_cast<double>(v.size());  // 40,000
  double sum = 0.0;
  for (double x : v) sum += x;
  const double mean = sum / n;
  double squares = 0.0;
  for (double x : v) squares += (x - mean) * (x - mean);
  const double variance = squares / (n - 1);
  const double sigma2 = 2 * kGamma;
  EXPECT_LT(std::abs(mean), 5 * std::sqrt(sigma2 / n)) << "mean " << mean;
  EXPECT_LT(std::abs(variance - sigma2), 5 * sigma2 * std::sqrt(2 / n))
      << "variance " << variance << ", expected " << sigma2;

  const size_t rows = v.size() / kDim;
  double cross = 0.0;
  for (size_t j = 0; j < rows; ++j) cross += v[j * kDim] * v[j * kDim + 1];
  const double correlation = cross / static_cast<double>(rows) / sigma2;
  EXPECT_LT(std::abs(correlation), 5 / std::sqrt(static_cast<double>(rows)));
}

// The laplacian kernel's spectral density is the multivariate Cauchy distribution of
// scale gamma, whose every coordinate is a one-dimensional Cauchy variable of scale gamma:
// the median of |v_i| is gamma. Its sample median has standard error
// 1 / (2 f(gamma) sqrt(N)) = pi gamma / (2 sqrt(N)) (f = 1 / (pi gamma) is the density of
// |v_i| at its median); we allow 5 of them. A gaussian of the same scale would give a
// median of 0.67 gamma, a missing gamma or 1/u^2 something else again.
TEST(RandomFeatureFrequenciesTest, LaplacianFrequencyCoordinatesAreCauchyOfScaleGamma) {
  constexpr double kGamma = 0.7;
  const std::vector<double> v =
      RandomFeatureFrequencies(FeatureConfig(KernelType::kLaplacian, kGamma, 4, 20000, 5));
  std::vector<double> magnitudes(v.size());
  for (size_t i = 0; i < v.size(); ++i) magnitudes[i] = std::abs(v[i]);
  std::nth_element(magnitudes.begin(), magnitudes.begin() + magnitudes.size() / 2,
                   magnitudes.end());
  const double median = magnitudes[magnitudes.size() / 2];
  const double standard_error =
      std::numbers::pi * kGamma / (2 * std::sqrt(static_cast<double>(v.size())));
  EXPECT_LT(std::abs(median - kGamma), 5 * standard_error) << "median |v_i| " << median;
}

// Pairs at a chosen kernel value k in {0.9, 0.7, 0.5, 0.3, 0.1}. With D = 20,000 the
// estimate (2 / D) sum_j cos(v_j . (x - x')) is a mean of 10,000 terms of variance at most
// 1/2: standard error <= 0.0071, so 0.03 is over 4 of them.
TEST(RandomFeatureModelTest, FeatureInnerProductsApproximateTheKernel) {
  constexpr uint32_t kDim = 5;
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    SCOPED_TRACE(KernelTypeName(kernel));
    const ModelConfig config = FeatureConfig(kernel, 0.8, kDim, 20000, 11);
    std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
    ASSERT_NE(model, nullptr);
    std::mt19937_64 rng(kSeed);
    for (const double k : {0.9, 0.7, 0.5, 0.3, 0.1}) {
      // |d| such that k(d) = k, in a random direction from a random point.
      const double distance = kernel == KernelType::kGaussian
                                  ? std::sqrt(-std::log(k) / config.kernel.gamma)
                                  : -std::log(k) / config.kernel.gamma;
      const std::vector<double> x = UniformVector(rng, kDim, -1, 1);
      std::vector<double> direction = UniformVector(rng, kDim, -1, 1);
      const double norm = std::sqrt(Dot(direction, direction));
      std::vector<double> x2(kDim);
      for (size_t i = 0; i < kDim; ++i) x2[i] = x[i] + distance * direction[i] / norm;
      ASSERT_NEAR(ReferenceKernel(config.kernel, x, x2), k, 1e-12);

      const std::vector<double> z = CoreFeatures(*model, x);
      const std::vector<double> z2 = CoreFeatures(*model, x2);
      EXPECT_NEAR(Dot(z, z), 1.0, 1e-12);  // cos^2 + sin^2, D / 2 times 2 / D
      EXPECT_NEAR(Dot(z, z2), k, 0.03) << "pair at k = " << k;
    }
  }
}

// The mean error over 50 random pairs falls like 1 / sqrt(D): by sqrt(10) ~ 3.2 per 10x.
// Asserted: it falls at each 10x step, and by more than 4 over 100x (expected 10).
TEST(RandomFeatureModelTest, KernelApproximationErrorShrinksWithD) {
  constexpr uint32_t kDim = 3;
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    SCOPED_TRACE(KernelTypeName(kernel));
    std::vector<double> mean_errors;
    for (const uint32_t d : {200u, 2000u, 20000u}) {
      const ModelConfig config = FeatureConfig(kernel, 1.0, kDim, d, 13);
      std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
      ASSERT_NE(model, nullptr);
      std::mt19937_64 rng(kSeed + 1);
      double sum = 0.0;
      constexpr int kPairs = 50;
      for (int i = 0; i < kPairs; ++i) {
        const std::vector<double> x = UniformVector(rng, kDim, -0.7, 0.7);
        const std::vector<double> x2 = UniformVector(rng, kDim, -0.7, 0.7);
        sum += std::abs(Dot(CoreFeatures(*model, x), CoreFeatures(*model, x2)) -
                        ReferenceKernel(config.kernel, x, x2));
      }
      mean_errors.push_back(sum / kPairs);
    }
    EXPECT_LT(mean_errors[1], mean_errors[0]);
    EXPECT_LT(mean_errors[2], mean_errors[1]);
    EXPECT_LT(mean_errors[2], mean_errors[0] / 4)
        << "D = 200: " << mean_errors[0] << ", D = 20000: " << mean_errors[2];
  }
}

// Core's features against the definition (std::cos, std::sin of v_j . x summed in plain
// order), on dense, sparse and huge inputs; D / 2 = 101 is not a multiple of any vector
// width, so the last, partial vector is covered. The projections may differ by the
// rounding of their sums, eps * sum_i |v_j[i] x_i| per term, and core's sin and cos by a
// few ulps: |dz| <= sqrt(2 / D) (4 eps + dim eps sum_i |v_j[i] x_i|). The huge inputs
// (projections beyond 2^19) take core's libm path.
TEST(RandomFeatureModelTest, FeaturesMatchTheDefinition) {
  constexpr uint32_t kDim = 7;
  constexpr uint32_t kD = 202;
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    SCOPED_TRACE(KernelTypeName(kernel));
    const ModelConfig config = FeatureConfig(kernel, 0.5, kDim, kD, 17);
    std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
    ASSERT_NE(model, nullptr);
    const std::vector<double> frequencies = RandomFeatureFrequencies(config);
    std::mt19937_64 rng(kSeed + 2);
    std::vector<std::vector<double>> inputs;
    for (int i = 0; i < 20; ++i) inputs.push_back(UniformVector(rng, kDim, -2, 2));
    for (int i = 0; i < 5; ++i) {
      std::vector<double> sparse(kDim, 0.0);
      sparse[i % kDim] = 1.0;
      sparse[(3 * i + 1) % kDim] = -0.5;
      inputs.push_back(sparse);
    }
    inputs.push_back(std::vector<double>(kDim, 0.0));
    for (int i = 0; i < 5; ++i) inputs.push_back(UniformVector(rng, kDim, -1e7, 1e7));
    const double scale = std::sqrt(2.0 / kD);
    for (const std::vector<double>& x : inputs) {
      const std::vector<double> z = CoreFeatures(*model, x);
      const std::vector<double> expected = ReferenceFeatures(frequencies, x);
      EXPECT_EQ(CoreFeatures(*model, x), z);  // deterministic
      for (size_t j = 0; j < kD / 2; ++j) {
        double terms = 0.0;
        for (size_t i = 0; i < kDim; ++i) terms += std::abs(frequencies[j * kDim + i] * x[i]);
        const double bound = scale * (4 * kEpsilon + kDim * kEpsilon * terms);
        ASSERT_NEAR(z[2 * j], expected[2 * j], bound) << "cos, frequency " << j;
        ASSERT_NEAR(z[2 * j + 1], expected[2 * j + 1], bound) << "sin, frequency " << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The model against the plain reference.

// D / 2 = 51: not a multiple of the vector width.
constexpr uint32_t kStreamFeatures = 102;
constexpr size_t kStreamSteps = 400;

struct FeatureScheduleCase {
  const char* name;
  LearningRateConfig config;
  double lambda;
};

void PrintTo(const FeatureScheduleCase& c, std::ostream* os) { *os << c.name; }

const KernelCase kFeatureKernels[] = {
    {"Gaussian", {.type = KernelType::kGaussian, .gamma = 2.0}},
    {"Laplacian", {.type = KernelType::kLaplacian, .gamma = 2.0}},
};

const FeatureScheduleCase kFeatureSchedules[] = {
    {"Constant", {.schedule = Schedule::kConstant, .eta0 = 0.25}, 0.04},
    {"InverseSqrt", {.schedule = Schedule::kInverseSqrt, .eta0 = 1.0}, 0.5},
    {"Power", {.schedule = Schedule::kPower, .eta0 = 1.0, .theta = 0.4}, 0.3},
};

using FeatureParam = std::tuple<KernelCase, LossCase, FeatureScheduleCase, bool>;

ModelConfig FeatureParamConfig(const FeatureParam& param, bool averaged) {
  const auto& [kernel, loss, schedule, offset] = param;
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = kernel.config;
  config.loss = loss.config;
  config.learning_rate = schedule.config;
  config.lambda = schedule.lambda;
  config.offset = offset;
  config.averaged = averaged;
  config.random_features = {.dimension = kStreamFeatures, .seed = 42};
  return config;
}

// Every combination ValidateConfig accepts (novelty takes no offset).
std::vector<FeatureParam> FeatureCombinations(std::vector<KernelCase> kernels,
                                              std::vector<LossCase> losses,
                                              std::vector<FeatureScheduleCase> schedules) {
  std::vector<FeatureParam> params;
  for (const KernelCase& kernel : kernels) {
    for (const LossCase& loss : losses) {
      for (const FeatureScheduleCase& schedule : schedules) {
        for (const bool offset : {false, true}) {
          if (offset && loss.config.type == LossType::kNovelty) continue;
          params.emplace_back(kernel, loss, schedule, offset);
        }
      }
    }
  }
  return params;
}

std::string FeatureParamName(const ::testing::TestParamInfo<FeatureParam>& info) {
  const auto& [kernel, loss, schedule, offset] = info.param;
  return absl::StrCat(kernel.name, "_", loss.name, "_", schedule.name,
                      offset ? "_Offset" : "_NoOffset");
}

// Runs `stream` through core and the reference, checking every prequential prediction
// and loss, then the weights (and their sums), the current (and, if averaged, the
// averaged) hypothesis at probe points, and the statistics.
void ExpectFeatureAgreement(const ModelConfig& config, const Stream& stream) {
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE(dynamic_cast<RandomFeatureModel*>(model->get()), nullptr);
  ReferenceRandomFeatures reference(config);

  ASSERT_NO_FATAL_FAILURE(ExpectStepsAgree(**model, reference, stream, [](size_t) {}));

  // The weights in z(x)'s order: this also checks that ExportState interleaves the cosine
  // and sine weights as z(x) does.
  const ModelState state = (*model)->ExportState();
  ASSERT_EQ(state.weights.size(), config.random_features.dimension);
  for (size_t k = 0; k < state.weights.size(); ++k) {
    ASSERT_TRUE(Agrees(state.weights[k], reference.weights()[k],
                       reference.weight_scales()[k]))
        << "weight " << k;
  }
  if (config.averaged) {
    ASSERT_EQ(state.weight_sums.size(), config.random_features.dimension);
    for (size_t k = 0; k < state.weight_sums.size(); ++k) {
      ASSERT_TRUE(Agrees(state.weight_sums[k], reference.weight_sums()[k],
                         reference.weight_scale_sums()[k]))
          << "weight sum " << k;
    }
  } else {
    EXPECT_TRUE(state.weight_sums.empty());
  }

  std::mt19937_64 rng(kSeed + 3);
  for (int i = 0; i < 16; ++i) {
    const std::vector<double> probe = UniformVector(rng, kStreamDim, -0.6, 0.6);
    const absl::StatusOr<double> p = (*model)->Predict(probe, PredictionMode::kCurrent);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Agrees(*p, reference.Predict(probe), reference.Magnitude(probe)))
        << "current hypothesis at probe " << i;
    const absl::StatusOr<double> configured = (*model)->Predict(probe);
    ASSERT_TRUE(configured.ok()) << configured.status();
    if (!config.averaged) {
      EXPECT_EQ(*configured, *p);
      continue;
    }
    const absl::StatusOr<double> a = (*model)->Predict(probe, PredictionMode::kAveraged);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*configured, *a);
    EXPECT_TRUE(
        Agrees(*a, reference.PredictAveraged(probe), reference.AveragedMagnitude(probe)))
        << "averaged hypothesis at probe " << i;
  }

  const ModelStats stats = (*model)->stats();
  EXPECT_EQ(stats.steps, reference.steps());
  EXPECT_EQ(stats.expansion_size, config.random_features.dimension);
  EXPECT_EQ(stats.mistakes, reference.mistakes());
  EXPECT_EQ(stats.terms_removed, 0u);
  EXPECT_FALSE(stats.truncation_error_bound.has_value());
  EXPECT_TRUE(Agrees(stats.cumulative_loss, reference.cumulative_loss(),
                     1.0 + reference.cumulative_loss()))
      << "cumulative loss";
  // b and the learned margin are sums of +-eta_t (times g_t): the same operations in the
  // same order on both sides, up to the rounding of g_t.
  EXPECT_TRUE(Agrees(stats.offset, reference.offset(), 1.0 + std::abs(reference.offset())))
      << "offset";
  EXPECT_TRUE(Agrees(stats.margin, reference.margin(), 1.0 + std::abs(reference.margin())))
      << "margin";
  EXPECT_EQ((*model)->margin(), stats.margin);
  EXPECT_EQ((*model)->steps(), stats.steps);
  EXPECT_EQ((*model)->expansion_size(), config.random_features.dimension);
  double squared_norm = 0.0;
  for (double w : reference.weights()) squared_norm += w * w;
  EXPECT_NEAR((*model)->SquaredNorm(), squared_norm, 1e-9 * (1.0 + squared_norm));
}

// Every combination, with the averaged hypothesis tracked.
class RandomFeatureReferenceTest : public ::testing::TestWithParam<FeatureParam> {};

TEST_P(RandomFeatureReferenceTest, MatchesReferenceOnEveryPredictionAndStatistic) {
  const ModelConfig config = FeatureParamConfig(GetParam(), /*averaged=*/true);
  ExpectFeatureAgreement(
      config, MakeStream(std::get<LossCase>(GetParam()).labels, kStreamSteps, kSeed));
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, RandomFeatureReferenceTest,
                         ::testing::ValuesIn(FeatureCombinations(
                             {std::begin(kFeatureKernels), std::end(kFeatureKernels)},
                             {std::begin(kReferenceLosses), std::end(kReferenceLosses)},
                             {std::begin(kFeatureSchedules), std::end(kFeatureSchedules)})),
                         FeatureParamName);

// Without the averaged hypothesis core keeps no sums: a separate path through Step and
// Predict. One kernel, a loss that updates on every step and one with a learned margin.
class RandomFeatureReferenceUnaveragedTest : public ::testing::TestWithParam<FeatureParam> {};

TEST_P(RandomFeatureReferenceUnaveragedTest, MatchesReferenceOnEveryPredictionAndStatistic) {
  const ModelConfig config = FeatureParamConfig(GetParam(), /*averaged=*/false);
  ExpectFeatureAgreement(
      config, MakeStream(std::get<LossCase>(GetParam()).labels, kStreamSteps, kSeed));
}

INSTANTIATE_TEST_SUITE_P(Unaveraged, RandomFeatureReferenceUnaveragedTest,
                         ::testing::ValuesIn(FeatureCombinations(
                             {kFeatureKernels[0]},
                             {kReferenceLosses[0], kReferenceLosses[6]},  // Squared, NuHinge
                             {std::begin(kFeatureSchedules), std::end(kFeatureSchedules)})),
                         FeatureParamName);

// Pegasos steps, eta_t = 1 / (lambda t): the first shrink factor is exactly 0.
TEST(RandomFeatureReferenceTest, MatchesReferenceWithPegasosSteps) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  config.lambda = 0.1;
  config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 10.0, .theta = 1.0};
  config.averaged = true;
  config.random_features = {.dimension = kStreamFeatures, .seed = 3};
  ExpectFeatureAgreement(config, MakeStream(Labels::kClassification, 1000, kSeed + 5));
}

// ---------------------------------------------------------------------------------------
// Creation, snapshots and statistics.

ModelConfig SnapshotConfig(KernelType kernel) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = {.type = kernel, .gamma = 2.0};
  config.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.2};
  config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 1.0};
  config.lambda = 0.1;
  config.offset = true;
  config.averaged = true;
  config.regret_window = 8;
  config.random_features = {.dimension = 130, .seed = 99};
  return config;
}

TEST(RandomFeatureModelTest, CreateModelBuildsARandomFeatureModelOnlyForDimensionAboveZero) {
  ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE(dynamic_cast<RandomFeatureModel*>(model->get()), nullptr);

  config.random_features.dimension = 0;
  absl::StatusOr<std::unique_ptr<RandomFeatureModel>> direct = RandomFeatureModel::Create(config);
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kInvalidArgument) << direct.status();
  config.random_features.dimension = 131;  // odd: ValidateConfig rejects it
  direct = RandomFeatureModel::Create(config);
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kInvalidArgument) << direct.status();
}

// A seed without a dimension is no model the wire can carry (ToProto writes random_features
// only with a dimension): rejected, not silently read as the exact kernel expansion.
TEST(RandomFeatureModelTest, ASeedWithoutADimensionIsRejected) {
  ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  config.random_features = {.dimension = 0, .seed = 1};
  const absl::Status status = ValidateConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), ::testing::HasSubstr("random_features.dimension is 0"));
  config.random_features.seed = 0;
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
}

// gamma = 1e308 passes ValidateConfig, but 2 gamma (gaussian) and gamma / |u| (laplacian)
// overflow: every prediction would be NaN.
TEST(RandomFeatureModelTest, CreateRejectsAGammaWhoseFrequenciesOverflow) {
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    SCOPED_TRACE(KernelTypeName(kernel));
    ModelConfig config = FeatureConfig(kernel, 1e308, 3, 64, 1);
    ASSERT_TRUE(ValidateConfig(config).ok());
    EXPECT_EQ(RandomFeatureModel::Create(config).status().code(),
              absl::StatusCode::kInvalidArgument);
    ModelState state;
    state.config = config;
    state.weights.assign(64, 0.0);
    EXPECT_EQ(RandomFeatureModel::FromState(state).status().code(),
              absl::StatusCode::kInvalidArgument);
    config.kernel.gamma = 1e10;  // huge, but every frequency finite
    EXPECT_TRUE(RandomFeatureModel::Create(config).ok());
  }
}

TEST(RandomFeatureModelTest, NewModelPredictsZeroAndReportsItsSize) {
  const ModelConfig config = SnapshotConfig(KernelType::kLaplacian);
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  const std::vector<double> x = {0.1, -0.2, 0.3};
  for (const PredictionMode mode :
       {PredictionMode::kConfigured, PredictionMode::kCurrent, PredictionMode::kAveraged}) {
    absl::StatusOr<double> p = model->Predict(x, mode);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, 0.0);
  }
  const ModelStats stats = model->stats();
  EXPECT_EQ(stats.steps, 0u);
  EXPECT_EQ(stats.expansion_size, 130u);
  EXPECT_EQ(stats.margin, 1.0);  // rho before the nu-trick moves it
  EXPECT_EQ(model->SquaredNorm(), 0.0);
  EXPECT_TRUE(model->RegretWindowCopy().xs.empty());
}

// The averaged hypothesis is only there when the config asks for it.
TEST(RandomFeatureModelTest, AveragedPredictionNeedsAnAveragedModel) {
  ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  config.averaged = false;
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->Predict({0.1, 0.2, 0.3}, PredictionMode::kAveraged).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// MemoryBytes counts what the model holds: at least the frequencies, the weights and
// their sums, and the regret window once it is full; never more than the worst case the
// server's quotas reserve.
TEST(RandomFeatureModelTest, MemoryBytesIsWithinTheWorstCase) {
  for (const bool averaged : {false, true}) {
    ModelConfig config = SnapshotConfig(KernelType::kGaussian);
    config.averaged = averaged;
    config.dim = 40;
    config.random_features.dimension = 600;
    std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
    ASSERT_NE(model, nullptr);
    std::mt19937_64 rng(kSeed);
    for (int t = 0; t < 20; ++t) {
      ASSERT_TRUE(model->Observe(UniformVector(rng, 40, -1, 1), t % 2 ? 1.0 : -1.0).ok());
    }
    const size_t held = (40 * 300 + 600 * (averaged ? 2 : 1) + 8 * (40 + 2)) * sizeof(double);
    EXPECT_GE(model->MemoryBytes(), held);
    EXPECT_LE(model->MemoryBytes(), RandomFeatureModel::WorstCaseMemoryBytes(config));
    EXPECT_EQ(WorstCaseMemoryBytes(config), RandomFeatureModel::WorstCaseMemoryBytes(config));
    // The regret comparator's W x W Gram matrix is reserved too.
    EXPECT_GE(RandomFeatureModel::WorstCaseMemoryBytes(config), held + 8 * 8 * sizeof(double));
  }
}

// A prediction is f_{t+1}: exactly the prediction the next step makes for the same input.
TEST(RandomFeatureModelTest, PredictIsBitIdenticalToTheNextStepsPrediction) {
  const ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kClassification, 200, kSeed);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    const absl::StatusOr<double> p = model->Predict(stream.row(t), PredictionMode::kCurrent);
    ASSERT_TRUE(p.ok()) << p.status();
    const absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_EQ(o->prediction, *p) << "step " << t + 1;
  }
}

// A restored model is the same model: its state, and every prediction and loss after it,
// are bit-identical to the original's.
TEST(RandomFeatureModelTest, RestoredModelContinuesBitIdentically) {
  for (const KernelType kernel : {KernelType::kGaussian, KernelType::kLaplacian}) {
    SCOPED_TRACE(KernelTypeName(kernel));
    const ModelConfig config = SnapshotConfig(kernel);
    absl::StatusOr<std::unique_ptr<Model>> original = CreateModel(config);
    ASSERT_TRUE(original.ok()) << original.status();
    const Stream stream = MakeStream(Labels::kClassification, 600, kSeed + 7);
    for (size_t t = 0; t < 300; ++t) {
      ASSERT_TRUE((*original)->Observe(stream.row(t), stream.y[t]).ok());
    }
    const ModelState state = (*original)->ExportState();
    EXPECT_EQ(state.weights.size(), 130u);
    EXPECT_EQ(state.weight_sums.size(), 130u);
    EXPECT_EQ(state.regret_window.size(), 8u);
    EXPECT_EQ(state.scale, 1.0);
    EXPECT_TRUE(state.support.empty() && state.coefficients.empty());

    absl::StatusOr<std::unique_ptr<Model>> copy = ModelFromState(state);
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_NE(dynamic_cast<RandomFeatureModel*>(copy->get()), nullptr);
    EXPECT_EQ((*copy)->ExportState(), state);

    std::mt19937_64 rng(kSeed + 8);
    for (size_t t = 300; t < 600; ++t) {
      const absl::StatusOr<Observation> a = (*original)->Observe(stream.row(t), stream.y[t]);
      const absl::StatusOr<Observation> b = (*copy)->Observe(stream.row(t), stream.y[t]);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->prediction, b->prediction) << "step " << t + 1;
      ASSERT_EQ(a->loss, b->loss) << "step " << t + 1;
      const std::vector<double> probe = UniformVector(rng, kStreamDim, -0.6, 0.6);
      for (const PredictionMode mode : {PredictionMode::kCurrent, PredictionMode::kAveraged}) {
        ASSERT_EQ(*(*original)->Predict(probe, mode), *(*copy)->Predict(probe, mode));
      }
    }
    EXPECT_EQ((*original)->ExportState(), (*copy)->ExportState());
    EXPECT_EQ((*original)->stats().cumulative_loss, (*copy)->stats().cumulative_loss);
  }
}

// The state of a model that never stepped restores too (weights all 0, an empty window).
TEST(RandomFeatureModelTest, FreshModelRoundTrips) {
  ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  config.averaged = false;
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  const ModelState state = model->ExportState();
  EXPECT_TRUE(state.weight_sums.empty());
  absl::StatusOr<std::unique_ptr<RandomFeatureModel>> copy = RandomFeatureModel::FromState(state);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->ExportState(), state);
}

// A valid state after 20 steps, and each way of breaking it.
TEST(RandomFeatureModelTest, FromStateRejectsEveryInconsistency) {
  const ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kClassification, 20, kSeed);
  for (size_t t = 0; t < 20; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  const ModelState valid = model->ExportState();
  ASSERT_TRUE(RandomFeatureModel::FromState(valid).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  const std::vector<std::pair<std::string, std::function<void(ModelState&)>>> breaks = {
      {"weights too short", [](ModelState& s) { s.weights.pop_back(); }},
      {"weights too long", [](ModelState& s) { s.weights.push_back(0.0); }},
      {"weights empty", [](ModelState& s) { s.weights.clear(); }},
      {"weight_sums too short", [](ModelState& s) { s.weight_sums.pop_back(); }},
      {"weight_sums empty when averaged", [](ModelState& s) { s.weight_sums.clear(); }},
      {"weight_sums in an unaveraged model", [](ModelState& s) { s.config.averaged = false; }},
      {"NaN weight", [&](ModelState& s) { s.weights[3] = nan; }},
      {"infinite weight", [&](ModelState& s) { s.weights[0] = -inf; }},
      {"NaN weight sum", [&](ModelState& s) { s.weight_sums[7] = nan; }},
      {"support",
       [](ModelState& s) {
         s.support = {0.1, 0.2, 0.3};
       }},
      {"coefficients", [](ModelState& s) { s.coefficients = {1.0}; }},
      {"added_at", [](ModelState& s) { s.added_at = {1}; }},
      {"average_base", [](ModelState& s) { s.average_base = {0.0}; }},
      {"average_mark", [](ModelState& s) { s.average_mark = {0.0}; }},
      {"average_previous", [](ModelState& s) { s.average_previous = {0.0}; }},
      {"retired_support",
       [](ModelState& s) {
         s.retired_support = {0.1, 0.2, 0.3};
       }},
      {"retired_sums", [](ModelState& s) { s.retired_sums = {0.0}; }},
      {"retired_previous_sums", [](ModelState& s) { s.retired_previous_sums = {0.0}; }},
      {"retired_at", [](ModelState& s) { s.retired_at = {1}; }},
      {"sparse_support ends", [](ModelState& s) { s.sparse_support.ends = {0}; }},
      {"sparse_support values", [](ModelState& s) { s.sparse_support.values = {1.0}; }},
      {"retired_sparse_support indices",
       [](ModelState& s) { s.retired_sparse_support.indices = {0}; }},
      {"scale below 1", [](ModelState& s) { s.scale = 0.5; }},
      {"average_sum", [](ModelState& s) { s.average_sum = 1.0; }},
      {"average_block_start", [](ModelState& s) { s.average_block_start = 1; }},
      {"average_previous_start", [](ModelState& s) { s.average_previous_start = 1; }},
      {"average_previous_offset_sum", [](ModelState& s) { s.average_previous_offset_sum = 1; }},
      {"terms_removed", [](ModelState& s) { s.terms_removed = 1; }},
      {"NaN offset", [&](ModelState& s) { s.offset = nan; }},
      {"infinite margin", [&](ModelState& s) { s.margin = inf; }},
      {"NaN average_offset_sum", [&](ModelState& s) { s.average_offset_sum = nan; }},
      {"infinite cumulative_loss", [&](ModelState& s) { s.cumulative_loss = inf; }},
      {"mistakes above steps", [](ModelState& s) { s.mistakes = s.steps + 1; }},
      {"window beyond regret_window", [](ModelState& s) { s.config.regret_window = 4; }},
      {"window not ending at steps", [](ModelState& s) { s.regret_window.last_step = 5; }},
      {"window inputs of the wrong size", [](ModelState& s) { s.regret_window.xs.pop_back(); }},
      {"NaN window label", [&](ModelState& s) { s.regret_window.ys[0] = nan; }},
      {"odd dimension", [](ModelState& s) { s.config.random_features.dimension = 129; }},
      {"invalid config", [](ModelState& s) { s.config.kernel.type = KernelType::kLinear; }},
      {"dimension 0", [](ModelState& s) { s.config.random_features.dimension = 0; }},
  };
  for (const auto& [name, mutate] : breaks) {
    ModelState state = valid;
    mutate(state);
    const absl::StatusOr<std::unique_ptr<RandomFeatureModel>> restored =
        RandomFeatureModel::FromState(state);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument)
        << name << ": " << restored.status();
  }
}

// ---------------------------------------------------------------------------------------
// Bad input and divergence change nothing.

TEST(RandomFeatureModelTest, BadExamplesAreRejectedAndChangeNothing) {
  const ModelConfig config = SnapshotConfig(KernelType::kGaussian);
  std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kClassification, 30, kSeed);
  for (size_t t = 0; t < 30; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  const ModelState before = model->ExportState();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  const std::vector<std::pair<std::vector<double>, double>> bad = {
      {{nan, 0.1, 0.2}, 1.0},   {{0.1, inf, 0.2}, 1.0},  {{0.1, 0.2, -inf}, -1.0},
      {{0.1, 0.2, 0.3}, nan},   {{0.1, 0.2, 0.3}, inf},  {{0.1, 0.2}, 1.0},
      {{0.1, 0.2, 0.3, 0.4}, 1.0}, {{}, 1.0},           {{0.1, 0.2, 0.3}, 0.5},
      {{0.1, 0.2, 0.3}, 0.0},   {{0.1, 0.2, 0.3}, 2.0},
  };
  for (const auto& [x, y] : bad) {
    const absl::StatusOr<Observation> o = model->Observe(x, y);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
    EXPECT_EQ(model->ExportState(), before);
  }
  // A batch with one bad example applies none.
  std::vector<double> xs(stream.x.begin(), stream.x.begin() + 3 * kStreamDim);
  xs[4] = nan;
  std::vector<Observation> out;
  EXPECT_EQ(model->ObserveBatch(xs, {1.0, -1.0, 1.0}, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(model->ExportState(), before);
  EXPECT_EQ(model->Predict({nan, 0.0, 0.0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Predict({0.0, 0.0}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A learning rate of 1e300 makes the weights overflow within a few steps: that step fails
// with FailedPrecondition and leaves the model as it was; the model still works after.
TEST(RandomFeatureModelTest, DivergingStepIsRejectedAndChangesNothing) {
  for (const bool averaged : {false, true}) {
    SCOPED_TRACE(averaged ? "averaged" : "current");
    ModelConfig config;
    config.dim = kStreamDim;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
    config.loss = {.type = LossType::kSquared};
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 1e300};
    config.offset = true;
    config.averaged = averaged;
    config.regret_window = 0;
    config.random_features = {.dimension = 64, .seed = 1};
    std::unique_ptr<RandomFeatureModel> model = MustCreateRandomFeatures(config);
    ASSERT_NE(model, nullptr);
    const Stream stream = MakeStream(Labels::kRegression, 20, kSeed);
    bool diverged = false;
    for (size_t t = 0; t < stream.y.size() && !diverged; ++t) {
      const ModelState before = model->ExportState();
      const absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
      if (o.ok()) continue;
      diverged = true;
      EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << o.status();
      EXPECT_EQ(model->ExportState(), before);
      EXPECT_GE(t, 1u);  // the first step, from w = 0, is finite
      // Still usable: predictions are those of the state before.
      EXPECT_TRUE(model->Predict(stream.row(0)).ok());
    }
    EXPECT_TRUE(diverged);
  }
}

// States built so that one step overflows a single weight, or a single weight sum, while
// the prediction, the loss, the offset and the margin stay finite: each check must hold
// on its own. Weight k = DBL_MAX with z_k(x) > 0 and an offset that cancels it, so that
// p = 0 and the hinge step adds eta z_k(x) ~ 1e299 to it; or, averaged, a sum of DBL_MAX
// to which the step adds w_k = 1e300.
TEST(RandomFeatureModelTest, OverflowOfOneWeightOrOneSumIsRejected) {
  constexpr double kMax = std::numeric_limits<double>::max();
  for (const bool averaged : {false, true}) {
    SCOPED_TRACE(averaged ? "weight sum" : "weight");
    ModelConfig config;
    config.dim = kStreamDim;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 1e300};
    config.offset = true;
    config.averaged = averaged;
    config.random_features = {.dimension = 64, .seed = 1};
    std::unique_ptr<RandomFeatureModel> fresh = MustCreateRandomFeatures(config);
    ASSERT_NE(fresh, nullptr);
    const std::vector<double> x = {0.1, -0.2, 0.3};
    const std::vector<double> z = CoreFeatures(*fresh, x);
    const size_t k = std::max_element(z.begin(), z.end()) - z.begin();
    ASSERT_GT(z[k], 0.0);

    ModelState state = fresh->ExportState();
    state.steps = 1;
    if (averaged) {
      state.weights[k] = 1e300;  // p = 1e300 z_k: no margin violation, g = 0
      state.weight_sums[k] = kMax;
    } else {
      state.weights[k] = kMax;
      state.offset = -(kMax * z[k]);  // p = 0: a violation, g = -1
    }
    absl::StatusOr<std::unique_ptr<RandomFeatureModel>> model =
        RandomFeatureModel::FromState(state);
    ASSERT_TRUE(model.ok()) << model.status();
    const absl::StatusOr<Observation> o = (*model)->Observe(x, 1.0);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << o.status();
    EXPECT_EQ((*model)->ExportState(), state);
  }
}

}  // namespace
}  // namespace okl
