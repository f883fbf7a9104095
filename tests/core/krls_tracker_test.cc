// KrlsTrackerModel (core/krls_tracker.h) against an independent plain implementation of the
// same equations (tests/core/reference_krls_tracker.h), against the closed form it must
// equal (without pruning or forgetting, the Gaussian-process posterior on every example),
// and on its own terms: exact continuation from a snapshot, the refused configs, a
// diverging step that changes nothing, tracking a target that switches, and 10^6 steps of
// a noisy and of a noise-free series without a NaN or a drift of Q from the inverse of
// its kernel matrix.

#include "core/krls_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "Eigen/Cholesky"
#include "Eigen/Core"
#include "Eigen/Eigenvalues"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/model.h"
#include "core/regret.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/reference_krls_tracker.h"
#include "tests/core/reference_norma.h"
#include "tests/core/reference_streams.h"

namespace okl {
namespace {

using ::testing::HasSubstr;
using testing::kStreamDim;
using testing::Labels;
using testing::MakeStream;
using testing::ReferenceKernel;
using testing::ReferenceKrlsTracker;
using testing::Stream;

ModelConfig TrackerConfig(uint32_t max_basis, double forgetting = 1.0,
                          KernelConfig kernel = {.type = KernelType::kGaussian, .gamma = 2.0}) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = kernel;
  config.loss = {.type = LossType::kSquared};
  config.krls_tracker = {
      .max_basis = max_basis, .noise_variance = 1e-3, .forgetting = forgetting};
  return config;
}

std::unique_ptr<Model> MustCreateTracker(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// The mean and variance Model::PredictBatchWithVariance gives for one input.
std::pair<double, double> PredictWithVariance(const Model& model, absl::Span<const double> x) {
  double mean = 0.0;
  double variance = 0.0;
  const absl::Status status = model.PredictBatchWithVariance(
      InputBatch::Dense(x, x.size()), absl::MakeSpan(&mean, 1), absl::MakeSpan(&variance, 1));
  EXPECT_TRUE(status.ok()) << status;
  return {mean, variance};
}

// The bases of a state, sorted, so that two dictionaries in different orders compare.
std::vector<std::vector<double>> SortedBases(const ModelState& state) {
  std::vector<std::vector<double>> bases;
  const size_t dim = state.config.dim;
  for (size_t i = 0; i * dim < state.support.size(); ++i) {
    bases.emplace_back(state.support.begin() + i * dim, state.support.begin() + (i + 1) * dim);
  }
  std::sort(bases.begin(), bases.end());
  return bases;
}

struct ReferenceCase {
  const char* name;
  uint32_t max_basis;
  double forgetting;
  KernelConfig kernel;
};

void PrintTo(const ReferenceCase& c, std::ostream* os) { *os << c.name; }

class KrlsTrackerReferenceTest : public ::testing::TestWithParam<ReferenceCase> {};

// Core and the reference compute the same posterior by different routes (core reads the
// pruning criterion off the old Q; the reference forms the new one whole), so they agree
// to rounding amplified by Q's condition number (at most ~1 / jitter = 1e6): 1e-6 of the
// labels' scale (~1) leaves room for that and still fails on any wrong term, which shows
// at 1e-3 or more. Which basis is pruned, and so the dictionary, must agree exactly.
// (Measured: at most 1.4e-7 over these cases, in the unpruned and low-rank ones, whose Q
// is the worst conditioned.)
TEST_P(KrlsTrackerReferenceTest, AgreesWithThePlainReferenceStepByStep) {
  const ReferenceCase& c = GetParam();
  const ModelConfig config = TrackerConfig(c.max_basis, c.forgetting, c.kernel);
  std::unique_ptr<Model> model = MustCreateTracker(config);
  ASSERT_NE(model, nullptr);
  ReferenceKrlsTracker reference(config);
  const Stream stream = MakeStream(Labels::kRegression, 300, 20261128);
  constexpr double kTolerance = 1e-6;
  for (size_t t = 0; t < stream.y.size(); ++t) {
    const absl::Span<const double> x = stream.row(t);
    const auto [mean, variance] = PredictWithVariance(*model, x);
    const auto [expected_mean, expected_variance] = reference.Predict(x);
    ASSERT_NEAR(mean, expected_mean, kTolerance * std::max(1.0, std::abs(expected_mean)))
        << "Predict before step " << t + 1;
    ASSERT_NEAR(variance, expected_variance, kTolerance * std::max(1.0, expected_variance))
        << "variance before step " << t + 1;
    const double expected = reference.Observe(x, stream.y[t]);
    absl::StatusOr<Observation> o = model->Observe(x, stream.y[t]);
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_NEAR(o->prediction, expected, kTolerance * std::max(1.0, std::abs(expected)))
        << "step " << t + 1;
    EXPECT_EQ(o->prediction, mean) << "Observe predicts what Predict did, bit for bit";
    ASSERT_EQ(model->stats().terms_removed, reference.pruned()) << "step " << t + 1;
  }
  const ModelState state = model->ExportState();
  std::vector<std::vector<double>> expected_bases = reference.dictionary();
  std::sort(expected_bases.begin(), expected_bases.end());
  EXPECT_EQ(SortedBases(state), expected_bases);
  EXPECT_NEAR(model->stats().signal_power, reference.signal_power(),
              kTolerance * reference.signal_power());
  if (c.max_basis < 300) {
    // Both ways of pruning are exercised: an old basis, and the new input.
    EXPECT_GT(reference.inputs_not_kept(), 0u) << "the case keeps some inputs out";
    EXPECT_GT(reference.pruned(), reference.inputs_not_kept()) << "the case prunes old bases";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KrlsTrackerReferenceTest,
    ::testing::Values(
        ReferenceCase{
            "GaussianUnpruned", 400, 1.0, {.type = KernelType::kGaussian, .gamma = 2.0}},
        ReferenceCase{"GaussianPruned", 20, 1.0, {.type = KernelType::kGaussian, .gamma = 2.0}},
        ReferenceCase{
            "GaussianForgetting", 20, 0.98, {.type = KernelType::kGaussian, .gamma = 2.0}},
        ReferenceCase{
            "LaplacianPruned", 15, 0.995, {.type = KernelType::kLaplacian, .gamma = 1.0}},
        ReferenceCase{"HeatPruned", 10, 1.0, {.type = KernelType::kHeat, .t = 0.25}},
        ReferenceCase{"PolynomialPruned",
                      12,
                      1.0,
                      {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 3}},
        ReferenceCase{"OneBasis", 1, 0.99, {.type = KernelType::kGaussian, .gamma = 2.0}}),
    [](const ::testing::TestParamInfo<ReferenceCase>& info) { return info.param.name; });

// Without pruning and forgetting the tracker is exact Gaussian-process regression with
// prior covariance K + jitter I and noise sigma_n^2: at a new x the mean is
// k' (K + (jitter + sigma_n^2) I)^-1 y, the variance s0^2 (sigma_n^2 + k(x, x) + jitter -
// k' (K + (jitter + sigma_n^2) I)^-1 k), and the maximum-likelihood signal power
// s0^2 = y' (K + (jitter + sigma_n^2) I)^-1 y / n (the prequential errors' chain rule).
TEST(KrlsTrackerTest, EqualsTheGaussianProcessPosteriorWithoutPruning) {
  const ModelConfig config = TrackerConfig(/*max_basis=*/100);
  std::unique_ptr<Model> model = MustCreateTracker(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 60, 7);
  const size_t n = stream.y.size();
  for (size_t t = 0; t < n; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  ASSERT_EQ(model->expansion_size(), n);

  const double jitter = config.krls_tracker.jitter;
  const double noise = config.krls_tracker.noise_variance;
  Eigen::MatrixXd c(n, n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      c(i, j) = ReferenceKernel(config.kernel, stream.row(i), stream.row(j)) +
                (i == j ? jitter + noise : 0.0);
    }
  }
  const Eigen::LLT<Eigen::MatrixXd> llt(c);
  const Eigen::VectorXd y = Eigen::Map<const Eigen::VectorXd>(stream.y.data(), n);
  const double signal_power = y.dot(llt.solve(y)) / static_cast<double>(n);
  EXPECT_NEAR(model->stats().signal_power, signal_power, 1e-8 * signal_power);
  EXPECT_NEAR(model->stats().noise_variance, signal_power * noise, 1e-8 * signal_power);

  const Stream tests = MakeStream(Labels::kRegression, 20, 8);
  for (size_t t = 0; t < tests.y.size(); ++t) {
    Eigen::VectorXd k(n);
    for (size_t i = 0; i < n; ++i)
      k(i) = ReferenceKernel(config.kernel, stream.row(i), tests.row(t));
    const double mean = k.dot(llt.solve(y));
    const double kxx = ReferenceKernel(config.kernel, tests.row(t), tests.row(t));
    const double variance = signal_power * (noise + kxx + jitter - k.dot(llt.solve(k)));
    const auto [actual_mean, actual_variance] = PredictWithVariance(*model, tests.row(t));
    EXPECT_NEAR(actual_mean, mean, 1e-7) << "input " << t;
    EXPECT_NEAR(actual_variance, variance, 1e-7 * signal_power) << "input " << t;
    EXPECT_GT(actual_variance, 0.0);
  }
}

// A snapshot taken at any step continues bit for bit: with pruning and forgetting, the
// restored model's state (the dictionary order, Q, Sigma, K, the coefficients) and every
// later prediction and variance equal the original's.
TEST(KrlsTrackerTest, RestoredStateContinuesBitIdentically) {
  for (const double forgetting : {1.0, 0.97}) {
    SCOPED_TRACE(forgetting);
    const ModelConfig config = TrackerConfig(/*max_basis=*/25, forgetting);
    std::unique_ptr<Model> model = MustCreateTracker(config);
    ASSERT_NE(model, nullptr);
    const Stream stream = MakeStream(Labels::kRegression, 200, 11);
    for (size_t t = 0; t < 120; ++t)
      ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(model->ExportState());
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->ExportState(), model->ExportState());
    for (size_t t = 120; t < stream.y.size(); ++t) {
      const auto before = PredictWithVariance(*model, stream.row(t));
      EXPECT_EQ(PredictWithVariance(**restored, stream.row(t)), before);
      absl::StatusOr<Observation> a = model->Observe(stream.row(t), stream.y[t]);
      absl::StatusOr<Observation> b = (*restored)->Observe(stream.row(t), stream.y[t]);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->prediction, b->prediction) << "step " << t + 1;
      ASSERT_EQ(a->loss, b->loss);
    }
    EXPECT_EQ((*restored)->ExportState(), model->ExportState());
    EXPECT_EQ((*restored)->stats().terms_removed, model->stats().terms_removed);
  }
}

TEST(KrlsTrackerTest, StateOfAFreshModelRestores) {
  std::unique_ptr<Model> model = MustCreateTracker(TrackerConfig(10));
  ASSERT_NE(model, nullptr);
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(model->ExportState());
  ASSERT_TRUE(restored.ok()) << restored.status();
  const std::vector<double> x = {0.1, 0.2, 0.3};
  // No example yet: the prior, mean 0 and variance s0^2 (sigma_n^2 + k(x, x) + jitter)
  // with s0^2 = 1.
  const auto [mean, variance] = PredictWithVariance(**restored, x);
  EXPECT_EQ(mean, 0.0);
  EXPECT_DOUBLE_EQ(variance, 1e-3 + 1.0 + 1e-6);
}

TEST(KrlsTrackerTest, InconsistentStatesAreRefused) {
  std::unique_ptr<Model> model = MustCreateTracker(TrackerConfig(10, 0.99));
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 30, 3);
  for (size_t t = 0; t < 30; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  const ModelState good = model->ExportState();
  ASSERT_TRUE(ModelFromState(good).ok());
  struct Corruption {
    const char* name;
    void (*corrupt)(ModelState&);
    const char* message;
  };
  const Corruption corruptions[] = {
      {"a basis too few", [](ModelState& s) { s.support.resize(s.support.size() - 3); },
       "posterior means"},
      {"a NaN in Q", [](ModelState& s) { s.inverse_kernel[4] = std::nan(""); },
       "inverse_kernel"},
      {"Q not positive definite", [](ModelState& s) { s.inverse_kernel[0] = -1.0; },
       "not positive definite"},
      {"negative variance", [](ModelState& s) { s.posterior_covariance[2] = -1.0; },
       "negative"},
      {"no kernel matrix with forgetting", [](ModelState& s) { s.kernel_matrix.clear(); },
       "kernel matrix"},
      {"negative signal power", [](ModelState& s) { s.signal_power_numerator = -1.0; },
       "signal power"},
      {"weights of random features", [](ModelState& s) { s.weights = {1.0}; },
       "another model kind"},
      {"sparse_support values", [](ModelState& s) { s.sparse_support.values = {1.0}; },
       "another model kind"},
      {"retired_sparse_support indices",
       [](ModelState& s) { s.retired_sparse_support.indices = {0}; }, "another model kind"},
      {"more pruned than steps", [](ModelState& s) { s.terms_removed = s.steps + 1; },
       "pruned"},
      {"bases without steps",
       [](ModelState& s) {
         s.steps = 0;
         s.mistakes = 0;
       },
       "bases after 0 steps"},
      {"more bases than max_basis", [](ModelState& s) { s.config.krls_tracker.max_basis = 2; },
       "more than max_basis"},
  };
  for (const Corruption& c : corruptions) {
    ModelState bad = good;
    c.corrupt(bad);
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(bad);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(restored.status().message(), HasSubstr(c.message)) << c.name;
  }
}

// A state of another kind that carries a tracker's fields is refused, not silently
// restored without them.
TEST(KrlsTrackerTest, OtherKindsRefuseAStateWithTrackerFields) {
  ModelConfig norma = TrackerConfig(10);
  norma.krls_tracker = {};
  norma.learning_rate = {.eta0 = 0.1};
  norma.budget.max_terms = 10;
  ModelConfig features = norma;
  features.budget = {};
  features.random_features = {.dimension = 8, .seed = 1};
  for (const ModelConfig& config : {norma, features}) {
    std::unique_ptr<Model> model = MustCreateTracker(config);
    ASSERT_NE(model, nullptr);
    ASSERT_TRUE(model->Observe(std::vector<double>{0.1, 0.2, 0.3}, 0.5).ok());
    ModelState state = model->ExportState();
    ASSERT_TRUE(ModelFromState(state).ok());
    state.signal_power_denominator = 1.0;
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(restored.status().message(), HasSubstr("KRLS tracker"));
  }
}

TEST(KrlsTrackerTest, ConfigsItCannotRunAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    void (*set)(ModelConfig&);
  };
  const Case cases[] = {
      {"learning_rate", [](ModelConfig& c) { c.learning_rate.eta0 = 0.5; }},
      {"lambda", [](ModelConfig& c) { c.lambda = 0.01; }},
      {"offset", [](ModelConfig& c) { c.offset = true; }},
      {"budget", [](ModelConfig& c) { c.budget.max_terms = 100; }},
      {"averaged", [](ModelConfig& c) { c.averaged = true; }},
      {"random_features", [](ModelConfig& c) { c.random_features.dimension = 10; }},
      {"squared loss", [](ModelConfig& c) { c.loss.type = LossType::kHinge; }},
      {"krls_tracker.noise_variance",
       [](ModelConfig& c) { c.krls_tracker.noise_variance = 0; }},
      {"krls_tracker.noise_variance",
       [](ModelConfig& c) { c.krls_tracker.noise_variance = std::nan(""); }},
      {"krls_tracker.forgetting", [](ModelConfig& c) { c.krls_tracker.forgetting = 0; }},
      {"krls_tracker.forgetting", [](ModelConfig& c) { c.krls_tracker.forgetting = 1.5; }},
      {"krls_tracker.jitter", [](ModelConfig& c) { c.krls_tracker.jitter = -1; }},
      {"krls_tracker.max_basis",
       [](ModelConfig& c) { c.krls_tracker.max_basis = kMaxBasis + 1; }},
  };
  for (const Case& c : cases) {
    ModelConfig config = TrackerConfig(10);
    c.set(config);
    const absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
  ModelConfig fields_without_max_basis = TrackerConfig(10);
  fields_without_max_basis.krls_tracker.max_basis = 0;
  EXPECT_THAT(ValidateConfig(fields_without_max_basis).message(),
              HasSubstr("krls_tracker.max_basis is 0"));
  // Every kernel is accepted, and a regret window (its comparator's lambda comes from the
  // noise variance).
  ModelConfig with_regret = TrackerConfig(10, 1.0, {.type = KernelType::kLinear, .c = 1.0});
  with_regret.regret_window = 50;
  EXPECT_TRUE(ValidateConfig(with_regret).ok()) << ValidateConfig(with_regret);
  EXPECT_DOUBLE_EQ(ComparatorLambda(with_regret, 50), 1e-3 / 50);
}

// A kernel of rank 10 (degree-2 polynomial in three dimensions) and a dictionary of up to
// 30: once 10 bases span its features every new x lies in their span, where gamma^2 is
// jitter times (1 + a small term) and, below jitter by rounding, the reduced update keeps
// x out. (Which of the two happens is decided by rounding, so no reference can follow it
// step by step.) The tracker stays finite and positive definite and fits the target.
TEST(KrlsTrackerTest, ALowRankKernelStaysFiniteAndPositiveDefinite) {
  const ModelConfig config = TrackerConfig(
      30, 1.0, {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 2});
  std::unique_ptr<Model> model = MustCreateTracker(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 3000, 17);
  double tail_error = 0.0;
  for (size_t t = 0; t < stream.y.size(); ++t) {
    // A quadratic target, which the kernel represents exactly.
    const absl::Span<const double> x = stream.row(t);
    const double y = 1 + x[0] - 2 * x[1] * x[2] + 0.5 * x[2] * x[2];
    absl::StatusOr<Observation> o = model->Observe(x, y);
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_TRUE(std::isfinite(o->prediction));
    if (t >= 2000) tail_error += (o->prediction - y) * (o->prediction - y);
  }
  EXPECT_LT(tail_error / 1000, 1e-6);
  EXPECT_GT(model->stats().terms_removed, 0u);
  ASSERT_TRUE(ModelFromState(model->ExportState()).ok()) << "Q positive definite";
}

// A label so large that the signal power's sum overflows: the step is refused whole.
TEST(KrlsTrackerTest, ADivergingStepIsFailedPreconditionAndChangesNothing) {
  std::unique_ptr<Model> model = MustCreateTracker(TrackerConfig(10));
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 20, 5);
  for (size_t t = 0; t < 20; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  const ModelState before = model->ExportState();
  absl::StatusOr<Observation> o = model->Observe(stream.row(0), 1e300);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(model->ExportState(), before);
  // The first step too.
  std::unique_ptr<Model> fresh = MustCreateTracker(TrackerConfig(10));
  EXPECT_EQ(fresh->Observe(stream.row(0), 1e300).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fresh->steps(), 0u);
}

// The regret window works as for the other kinds; the comparator is the GP posterior mean
// on the window, which fits the window at least as well as the tracker's prequential
// predictions did, and the model's memory stays within what the quotas reserve.
TEST(KrlsTrackerTest, RegretWindowAndMemoryStayWithinTheirBounds) {
  ModelConfig config = TrackerConfig(15, 0.99);
  config.regret_window = 50;
  std::unique_ptr<Model> model = MustCreateTracker(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 200, 19);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  }
  absl::StatusOr<RegretResult> regret = ComputeRegret(config, 0.0, model->RegretWindowCopy());
  ASSERT_TRUE(regret.ok()) << regret.status();
  EXPECT_EQ(regret->window, 50u);
  EXPECT_GT(regret->regret, 0.0);
  EXPECT_LT(regret->comparator_loss, regret->online_loss);
  EXPECT_LE(model->MemoryBytes(), WorstCaseMemoryBytes(config));
  // The worst case grows as max_basis squared: 10x the bases, over 50x the bytes.
  ModelConfig small = TrackerConfig(15, 0.99);
  ModelConfig bigger = TrackerConfig(150, 0.99);
  EXPECT_GT(WorstCaseMemoryBytes(bigger), 50 * WorstCaseMemoryBytes(small));
}

// Inputs and noise at the edges of what doubles hold: a linear kernel on inputs up to
// 1e150 (k(x, x) overflows, sigma_f^2 squared would), and a noise variance far below
// rounding of k(x, x) (1 - sigma_f^2 / sigma_y^2 cancels). Every step either succeeds,
// leaving a finite state that restores, or is refused whole.
TEST(KrlsTrackerTest, EveryStateAStepReachesRestoresOrTheStepChangesNothing) {
  const double inputs[] = {1, 1e80, -3, 1e150, 2.5, 1e-300, 7, 1e5, -1e5, 1e5, 4e4};
  for (const double noise : {1e-6, 1e-17}) {
    for (const double forgetting : {1.0, 0.9}) {
      SCOPED_TRACE(absl::StrCat("noise ", noise, ", forgetting ", forgetting));
      ModelConfig config;
      config.dim = 1;
      config.kernel = {.type = KernelType::kLinear, .c = 1.0};
      config.loss = {.type = LossType::kSquared};
      config.krls_tracker = {.max_basis = 3, .noise_variance = noise, .forgetting = forgetting};
      std::unique_ptr<Model> model = MustCreateTracker(config);
      ASSERT_NE(model, nullptr);
      size_t applied = 0;
      for (int round = 0; round < 3; ++round) {
        for (const double x : inputs) {
          const ModelState before = model->ExportState();
          absl::StatusOr<Observation> o = model->Observe(absl::MakeConstSpan(&x, 1), 0.5 * x);
          if (!o.ok()) {
            EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << x;
            ASSERT_EQ(model->ExportState(), before) << "a refused step changed the model";
            continue;
          }
          ++applied;
          ASSERT_TRUE(std::isfinite(o->prediction)) << x;
          absl::StatusOr<std::unique_ptr<Model>> restored =
              ModelFromState(model->ExportState());
          ASSERT_TRUE(restored.ok()) << "after x = " << x << ": " << restored.status();
        }
      }
      EXPECT_GT(applied, 10u);
    }
  }
}

TEST(KrlsTrackerTest, OtherKindsHaveNoPredictiveVariance) {
  ModelConfig config = TrackerConfig(10);
  config.krls_tracker = {};
  config.learning_rate = {.eta0 = 0.1};
  config.budget.max_terms = 10;
  std::unique_ptr<Model> model = MustCreateTracker(config);
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->has_predictive_variance());
  const std::vector<double> x = {0.1, 0.2, 0.3};
  double mean = 0, variance = 0;
  EXPECT_EQ(model
                ->PredictBatchWithVariance(InputBatch::Dense(x, 3), absl::MakeSpan(&mean, 1),
                                           absl::MakeSpan(&variance, 1))
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// A target that switches sign every 2,000 steps: with forgetting the tracker backs off to
// the prior and relearns, so its error in the 500 steps after each switch is far below
// the stationary model's, which averages the two regimes.
TEST(KrlsTrackerTest, ForgettingTracksATargetThatSwitches) {
  const Stream stream = MakeStream(Labels::kRegression, 8000, 13);
  double recovery_error[2] = {0, 0};
  const double forgettings[2] = {1.0, 0.99};
  for (int kind = 0; kind < 2; ++kind) {
    std::unique_ptr<Model> model = MustCreateTracker(TrackerConfig(40, forgettings[kind]));
    ASSERT_NE(model, nullptr);
    for (size_t t = 0; t < stream.y.size(); ++t) {
      const double y = (t / 2000) % 2 == 0 ? stream.y[t] : -stream.y[t];
      absl::StatusOr<Observation> o = model->Observe(stream.row(t), y);
      ASSERT_TRUE(o.ok()) << o.status();
      if (t >= 2000 && t % 2000 >= 200 && t % 2000 < 700) {
        recovery_error[kind] += (o->prediction - y) * (o->prediction - y);
      }
    }
  }
  EXPECT_LT(recovery_error[1], 0.2 * recovery_error[0])
      << "stationary " << recovery_error[0] << ", forgetting " << recovery_error[1];
}

// How far Q is from the inverse it stands for: the largest entry of |Q (K + jitter I) - I|,
// with K recomputed from the dictionary, relative to max|Q| (K's entries are at most 1),
// the scale of the product's rounding. Also whether Q is positive definite and the least
// eigenvalue of Sigma relative to its largest.
struct Conditioning {
  double inverse_residual = 0.0;
  bool inverse_positive_definite = false;
  double covariance_least_eigenvalue = 0.0;
};

Conditioning Check(const ModelState& state) {
  const size_t m = state.posterior_mean.size();
  const size_t dim = state.config.dim;
  Eigen::MatrixXd q(m, m), sigma(m, m), k(m, m);
  for (size_t i = 0, e = 0; i < m; ++i) {
    for (size_t j = 0; j <= i; ++j, ++e) {
      q(i, j) = q(j, i) = state.inverse_kernel[e];
      sigma(i, j) = sigma(j, i) = state.posterior_covariance[e];
    }
  }
  const absl::Span<const double> support(state.support);
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < m; ++j) {
      k(i, j) = ReferenceKernel(state.config.kernel, support.subspan(i * dim, dim),
                                support.subspan(j * dim, dim)) +
                (i == j ? state.config.krls_tracker.jitter : 0.0);
    }
  }
  Conditioning c;
  c.inverse_residual =
      (q * k - Eigen::MatrixXd::Identity(m, m)).cwiseAbs().maxCoeff() / q.cwiseAbs().maxCoeff();
  c.inverse_positive_definite = Eigen::LLT<Eigen::MatrixXd>(q).info() == Eigen::Success;
  const Eigen::VectorXd eigenvalues =
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(sigma).eigenvalues();
  c.covariance_least_eigenvalue = eigenvalues.minCoeff() / eigenvalues.cwiseAbs().maxCoeff();
  return c;
}

// 10^6 steps of a two-tone series, noise-free and with noise, on a dictionary of 24
// bases (pruning on nearly every step): every prediction is finite; Q stays positive
// definite and the inverse of its kernel matrix to a residual that stays bounded at every
// 10^5th step (no drift: measured, it wanders between 1e-9 and 3e-8 of max|Q| with the
// dictionary's conditioning, and does not grow);
// Sigma stays a covariance; and the steady-state error is what the noise allows.
TEST(KrlsTrackerTest, AMillionStepsNeitherDivergeNorDrift) {
  for (const double noise : {0.0, 0.1}) {
    SCOPED_TRACE(noise);
    ModelConfig config;
    config.dim = 2;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0};
    config.loss = {.type = LossType::kSquared};
    config.krls_tracker = {
        .max_basis = 24, .noise_variance = noise > 0 ? 1e-2 : 1e-6, .forgetting = 1.0};
    std::unique_ptr<Model> model = MustCreateTracker(config);
    ASSERT_NE(model, nullptr);
    std::mt19937_64 rng(42);
    constexpr size_t kSteps = 1000000;
    double previous = 0.0, current = 0.0;
    double tail_error = 0.0;
    double worst_residual = 0.0;
    for (size_t t = 1; t <= kSteps; ++t) {
      const double clean = std::sin(0.05 * static_cast<double>(t)) +
                           0.5 * std::sin(0.011 * static_cast<double>(t));
      const double next = clean + noise * testing::Uniform(rng, -1.0, 1.0) * std::sqrt(3.0);
      const double x[2] = {current, previous};
      absl::StatusOr<Observation> o = model->Observe(x, next);
      ASSERT_TRUE(o.ok()) << "step " << t << ": " << o.status();
      ASSERT_TRUE(std::isfinite(o->prediction)) << "step " << t;
      if (t > kSteps - 1000) tail_error += (o->prediction - next) * (o->prediction - next);
      if (t % 100000 == 0) {
        const Conditioning c = Check(model->ExportState());
        ASSERT_TRUE(c.inverse_positive_definite) << "step " << t;
        ASSERT_GT(c.covariance_least_eigenvalue, -1e-9) << "step " << t;
        worst_residual = std::max(worst_residual, c.inverse_residual);
      }
      previous = current;
      current = next;
    }
    const ModelState state = model->ExportState();
    EXPECT_GT(state.terms_removed, kSteps / 2);
    EXPECT_LT(worst_residual, 1e-7);
    // The noise has variance noise^2 and is in the inputs too, so the best one-step
    // predictor errs by more than noise^2; a noise-free series is learnt far below it.
    const double steady_mse = tail_error / 1000;
    EXPECT_LT(steady_mse, noise > 0 ? 2.5 * noise * noise : 1e-4) << "steady-state MSE";
    const auto [mean, variance] = PredictWithVariance(*model, std::vector<double>{0.1, 0.2});
    EXPECT_TRUE(std::isfinite(mean));
    EXPECT_GT(variance, 0.0);
    ASSERT_TRUE(ModelFromState(state).ok());
  }
}

}  // namespace
}  // namespace okl
