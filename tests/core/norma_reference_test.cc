// Checks okl::NormaModel against ReferenceNorma (tests/core/reference_norma.h), an eager
// implementation of docs/design.md's equations ("The algorithm") that shares no code with
// core/: on every prequential prediction, loss and expansion size of long synthetic
// streams, on the current and the averaged hypothesis at probe points afterwards, and on
// the statistics, for every kernel x loss x learning-rate schedule x budget policy, with
// and without an offset; and on three streams built for the corner cases (many
// renormalisations, a long drop_below stream, exact kinks and ties).
//
// Tolerance. The two implementations do the same arithmetic in a different order and
// representation: core sums the expansion in slot order with unscaled coefficients times
// one scale factor (folded in now and then), the reference sums in insertion order and
// multiplies every alpha_i by (1 - eta lambda) on every step. A prediction adds up the
// terms alpha_i k(x_i, x) and b, itself a sum of increments -eta_t g_t. Each term carries
// a relative rounding error of a few ulps per multiplication it went through (< 10^4 *
// 2^-53 ~ 1e-12 after 10,000 steps), and adding in any order errs by at most n * 2^-53
// relative to the sum of the absolute values. The dynamics contract (lambda > 0 and
// eta_t k(x, x) <= 1 here), so earlier differences do not grow. So we require
//     |p - p_ref| <= 1e-9 * M,   M = sum_i |alpha_i k(x_i, x)| + sum_t |eta_t g_t|
// (M from the reference: ReferenceNorma::Magnitude). That is ~1000 times the worst case
// above and ~10^4 times the worst difference measured over this whole file (9e-14 M), yet
// far below what any real disagreement gives (a missing or extra term, a wrong shrink, a
// wrong step size or margin all show at 1e-3 M or more). M, not |p|, is the right scale:
// p may be a small difference of large terms (b, in particular, often is).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/norma.h"
#include "gtest/gtest.h"
#include "tests/core/reference_norma.h"
#include "tests/core/reference_streams.h"
#include "tests/sanitized.h"

namespace okl {
namespace {

using ::okl::testing::Agrees;
using ::okl::testing::ExpectStepsAgree;
using ::okl::testing::KernelCase;
using ::okl::testing::kReferenceLosses;
using ::okl::testing::kSanitized;
using ::okl::testing::kStreamDim;
using ::okl::testing::Labels;
using ::okl::testing::LossCase;
using ::okl::testing::MakeStream;
using ::okl::testing::ReferenceNorma;
using ::okl::testing::ReferenceObservation;
using ::okl::testing::Stream;
using ::okl::testing::Uniform;

constexpr uint64_t kStreamSeed = 20240601;

// The step sizes and lambda of each schedule are chosen so that terms fade over some
// hundred steps; drop_below sits below the late step sizes, so that new terms still enter
// (a term is born with |alpha| = eta_t |g|; those with a small |g| are dropped at once).
struct ScheduleCase {
  const char* name;
  LearningRateConfig config;
  double lambda;
  double drop_below;
};

enum class BudgetKind { kNone, kOldest, kSmallest, kMerge, kDropBelow };

struct BudgetCase {
  const char* name;
  BudgetKind kind;
};

const KernelCase kKernels[] = {
    {"Gaussian", {.type = KernelType::kGaussian, .gamma = 2.0}},
    {"Laplacian", {.type = KernelType::kLaplacian, .gamma = 2.0}},
    {"Linear", {.type = KernelType::kLinear, .c = 0.25}},
    {"Polynomial", {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 0.25, .degree = 3}},
    {"Heat", {.type = KernelType::kHeat, .t = 0.1}},  // k(x, x) = (0.4 pi)^-1.5 = 0.71
};

const auto& kLosses = kReferenceLosses;

const ScheduleCase kSchedules[] = {
    // eta lambda = 0.01: the scale factor falls below 2^-8 every ~550 steps.
    {"Constant", {.schedule = Schedule::kConstant, .eta0 = 0.25}, 0.04, 0.1},
    // eta_t lambda = 0.5 / sqrt(t); eta_10000 = 0.01.
    {"InverseSqrt", {.schedule = Schedule::kInverseSqrt, .eta0 = 1.0}, 0.5, 0.007},
    // eta_t lambda = 0.3 t^-0.4; eta_10000 = 0.025.
    {"Power", {.schedule = Schedule::kPower, .eta0 = 1.0, .theta = 0.4}, 0.3, 0.015},
};

const BudgetCase kBudgets[] = {
    {"Unbudgeted", BudgetKind::kNone},
    {"Oldest", BudgetKind::kOldest},
    {"Smallest", BudgetKind::kSmallest},
    {"Merge", BudgetKind::kMerge},  // gaussian kernel only
    {"DropBelow", BudgetKind::kDropBelow},
};

// gtest prints parameters of failing tests with these.
void PrintTo(const ScheduleCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(const BudgetCase& c, std::ostream* os) { *os << c.name; }

// With these budgets and thresholds the expansion holds at most ~110 terms (fewer where the
// loss is mostly satisfied: novelty with an offset sits above rho after two steps).
constexpr uint32_t kMaxTerms = 50;
constexpr size_t kBudgetedSteps = 10000;
// Without a budget the squared, logistic and Huber losses add a term on every step, so a
// step costs O(t) and a stream O(T^2) kernel evaluations: 1,000 steps keep it cheap.
constexpr size_t kUnbudgetedSteps = 1000;
// The reference's merge searches every candidate pair from the vectors on a grid: ~10^4
// kernel evaluations a step, so MERGE streams are shorter (merging from step ~51 on).
constexpr size_t kMergeSteps = 1500;

using Param = std::tuple<KernelCase, LossCase, ScheduleCase, BudgetCase, bool>;

ModelConfig MakeConfig(const Param& param) {
  const auto& [kernel, loss, schedule, budget, offset] = param;
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = kernel.config;
  config.loss = loss.config;
  config.learning_rate = schedule.config;
  config.lambda = schedule.lambda;
  config.offset = offset;
  switch (budget.kind) {
    case BudgetKind::kNone:
      break;
    case BudgetKind::kOldest:
      config.budget = {.max_terms = kMaxTerms, .policy = BudgetPolicy::kOldest};
      break;
    case BudgetKind::kSmallest:
      config.budget = {.max_terms = kMaxTerms, .policy = BudgetPolicy::kSmallest};
      break;
    case BudgetKind::kMerge:
      config.budget = {.max_terms = kMaxTerms, .policy = BudgetPolicy::kMerge};
      break;
    case BudgetKind::kDropBelow:
      config.budget = {.drop_below = schedule.drop_below};
      break;
  }
  return config;
}

// Every combination of the given cases, with and without an offset, but those
// ValidateConfig rejects: MERGE with a kernel other than the gaussian, novelty with an
// offset.
std::vector<Param> Combinations(std::vector<KernelCase> kernels, std::vector<LossCase> losses,
                                std::vector<ScheduleCase> schedules,
                                std::vector<BudgetCase> budgets) {
  std::vector<Param> params;
  for (const KernelCase& kernel : kernels) {
    for (const LossCase& loss : losses) {
      for (const ScheduleCase& schedule : schedules) {
        for (const BudgetCase& budget : budgets) {
          for (const bool offset : {false, true}) {
            if (budget.kind == BudgetKind::kMerge &&
                kernel.config.type != KernelType::kGaussian) {
              continue;
            }
            if (offset && loss.config.type == LossType::kNovelty) continue;
            params.emplace_back(kernel, loss, schedule, budget, offset);
          }
        }
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [kernel, loss, schedule, budget, offset] = info.param;
  return absl::StrCat(kernel.name, "_", loss.name, "_", schedule.name, "_", budget.name,
                      offset ? "_Offset" : "_NoOffset");
}

// Runs `stream` through core and the reference, checking every prequential prediction,
// loss and expansion size, then the current (and, if config.averaged, the averaged)
// hypothesis at probe points, and the statistics. Stores the largest expansion size seen
// in *max_size if given.
void ExpectAgreement(const ModelConfig& config, const Stream& stream,
                     size_t* max_size = nullptr) {
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  ReferenceNorma reference(config);

  ASSERT_NO_FATAL_FAILURE(ExpectStepsAgree(**model, reference, stream, [&](size_t t) {
    ASSERT_EQ((*model)->expansion_size(), reference.size()) << "after step " << t;
    if (max_size != nullptr) *max_size = std::max(*max_size, reference.size());
  }));

  std::mt19937_64 rng(kStreamSeed + 1);
  for (int i = 0; i < 16; ++i) {
    std::vector<double> probe(kStreamDim);
    for (double& c : probe) c = Uniform(rng, -0.6, 0.6);
    const absl::StatusOr<double> p = (*model)->Predict(probe, PredictionMode::kCurrent);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Agrees(*p, reference.Predict(probe), reference.Magnitude(probe)))
        << "current hypothesis at probe " << i;
    if (!config.averaged) continue;
    const absl::StatusOr<double> a = (*model)->Predict(probe, PredictionMode::kAveraged);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(
        Agrees(*a, reference.PredictAveraged(probe), reference.AveragedMagnitude(probe)))
        << "averaged hypothesis at probe " << i;
  }

  const ModelStats stats = (*model)->stats();
  EXPECT_EQ(stats.steps, reference.steps());
  EXPECT_EQ(stats.expansion_size, reference.size());
  EXPECT_EQ(stats.mistakes, reference.mistakes());
  EXPECT_EQ(stats.terms_removed, reference.terms_removed());
  EXPECT_TRUE(Agrees(stats.cumulative_loss, reference.cumulative_loss(),
                     1.0 + reference.cumulative_loss()))
      << "cumulative loss";
  // b and the learned margin are sums of +-eta_t (times g_t): the same operations in the
  // same order on both sides, up to the rounding of g_t.
  EXPECT_TRUE(Agrees(stats.offset, reference.offset(), 1.0 + std::abs(reference.offset())))
      << "offset";
  EXPECT_TRUE(Agrees(stats.margin, reference.margin(), 1.0 + std::abs(reference.margin())))
      << "margin";
}

// Under a sanitizer the combinations run a fifth of each stream (2,000 budgeted steps are
// still past the budget, several renormalisations and the first merges): the sanitizer
// checks each path, and the optimised build checks the numbers at full length.
size_t StreamLength(const BudgetCase& budget) {
  constexpr size_t kShare = kSanitized ? 5 : 1;
  switch (budget.kind) {
    case BudgetKind::kNone:
      return kUnbudgetedSteps / kShare;
    case BudgetKind::kMerge:
      return kMergeSteps / kShare;
    default:
      return kBudgetedSteps / kShare;
  }
}

// Every combination, with the averaged hypothesis tracked (so that both the current and
// the averaged predictions are checked).
class NormaReferenceCombinationTest : public ::testing::TestWithParam<Param> {};

TEST_P(NormaReferenceCombinationTest, MatchesReferenceOnEveryPredictionAndStatistic) {
  const Param& param = GetParam();
  ModelConfig config = MakeConfig(param);
  config.averaged = true;
  ExpectAgreement(config, MakeStream(std::get<LossCase>(param).labels,
                                     StreamLength(std::get<BudgetCase>(param)), kStreamSeed));
}

INSTANTIATE_TEST_SUITE_P(
    AllCombinations, NormaReferenceCombinationTest,
    ::testing::ValuesIn(Combinations({std::begin(kKernels), std::end(kKernels)},
                                     {std::begin(kLosses), std::end(kLosses)},
                                     {std::begin(kSchedules), std::end(kSchedules)},
                                     {std::begin(kBudgets), std::end(kBudgets)})),
    ParamName);

// Without the averaged hypothesis core keeps no averaging state, a separate code path
// through appends, removals and renormalisation. It is independent of the kernel and the
// loss, so one kernel and two losses (one that adds a term on every step, one with a
// learned margin) cover it, with every schedule and budget.
class NormaReferenceUnaveragedTest : public ::testing::TestWithParam<Param> {};

TEST_P(NormaReferenceUnaveragedTest, MatchesReferenceOnEveryPredictionAndStatistic) {
  const Param& param = GetParam();
  ModelConfig config = MakeConfig(param);
  config.averaged = false;
  ExpectAgreement(config, MakeStream(std::get<LossCase>(param).labels,
                                     StreamLength(std::get<BudgetCase>(param)), kStreamSeed));
}

INSTANTIATE_TEST_SUITE_P(
    Unaveraged, NormaReferenceUnaveragedTest,
    ::testing::ValuesIn(Combinations({kKernels[0]}, {kLosses[0], kLosses[6]},  // Squared, NuHinge
                                     {std::begin(kSchedules), std::end(kSchedules)},
                                     {std::begin(kBudgets), std::end(kBudgets)})),
    ParamName);

// Pegasos steps (BPegasos in Wang, Crammer and Vucetic 2012): eta_t = 1 / (lambda t),
// POWER with theta 1 and eta0 = 1 / lambda, whose first shrink factor is exactly 0. Every
// term is born at |alpha| = eta_t and shrinks to 1 / (lambda T) by step T, so the budget
// policies meet near-ties on every step.
TEST(NormaReferenceTest, MatchesReferenceWithPegasosSteps) {
  for (const BudgetPolicy policy : {BudgetPolicy::kOldest, BudgetPolicy::kMerge}) {
    SCOPED_TRACE(BudgetPolicyName(policy));
    ModelConfig config;
    config.dim = kStreamDim;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.lambda = 0.1;
    config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 10.0, .theta = 1.0};
    config.budget = {.max_terms = kMaxTerms, .policy = policy};
    config.averaged = true;
    ExpectAgreement(config, MakeStream(Labels::kClassification, kMergeSteps, kStreamSeed + 5));
  }
}

// Averaging windows other than the budget's default: W = 1 (the mean of the last one or
// two hypotheses), a window shorter than the budget and one longer, with every policy, so
// that terms are retired within a block, across a block's end and dropped at the next.
TEST(NormaReferenceTest, MatchesReferenceWithExplicitAveragingWindows) {
  for (const BudgetPolicy policy :
       {BudgetPolicy::kOldest, BudgetPolicy::kSmallest, BudgetPolicy::kMerge}) {
    for (const uint32_t window : {1u, 7u, 120u}) {
      SCOPED_TRACE(absl::StrCat(BudgetPolicyName(policy), " W = ", window));
      ModelConfig config;
      config.dim = kStreamDim;
      config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
      config.loss = {.type = LossType::kSquared};
      config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.25};
      config.lambda = 0.04;
      config.offset = true;
      config.averaged = true;
      config.averaging_window = window;
      config.budget = {.max_terms = 20, .policy = policy, .drop_below = 1e-3};
      ASSERT_NO_FATAL_FAILURE(
          ExpectAgreement(config, MakeStream(Labels::kRegression, 700, kStreamSeed + 7)));
    }
  }
}

// eta lambda = 0.05 for 10,000 steps: unrenormalised, the scale factor would reach
// 0.95^10000 ~ 1e-223 (and underflow long before the averaged sums did); core must fold it
// in every ~108 steps, when it falls below 2^-8, without changing any prediction.
TEST(NormaReferenceTest, MatchesReferenceThroughManyRenormalisations) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.1;
  config.offset = true;
  config.averaged = true;
  config.budget = {.max_terms = 100, .policy = BudgetPolicy::kSmallest};
  const Stream stream = MakeStream(Labels::kRegression, 10000, kStreamSeed);

  ASSERT_NO_FATAL_FAILURE(ExpectAgreement(config, stream));

  // The renormalisation really ran: the exported scale went up (a fold) many times and
  // never fell far below 2^-8.
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  int folds = 0;
  double previous_scale = 1.0;
  double min_scale = 1.0;
  for (size_t t = 0; t < stream.y.size(); ++t) {
    ASSERT_TRUE((*model)->Observe(stream.row(t), stream.y[t]).ok());
    const double scale = (*model)->ExportState().scale;
    if (scale > previous_scale) ++folds;
    min_scale = std::min(min_scale, scale);
    previous_scale = scale;
  }
  // 10,000 steps / ~108 steps per fold = 92 folds.
  EXPECT_GE(folds, 80);
  EXPECT_GE(min_scale, 0x1.0p-8 * 0.95);
}

// No max_terms, only drop_below, over a long stream: the logistic loss adds a term on
// every step with |alpha| = eta |g| < eta = 0.25, which shrinks by 0.99 a step and so
// falls below 0.01 within ceil(log(0.01 / 0.25) / log(0.99)) = 321 steps. The expansion
// stays bounded by that although nothing else removes terms.
TEST(NormaReferenceTest, MatchesReferenceOnALongStreamBudgetedOnlyByDropBelow) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.loss = {.type = LossType::kLogistic};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.25};
  config.lambda = 0.04;
  config.offset = true;
  config.averaged = true;
  // Without a window the averaged model would keep every term it ever dropped.
  config.averaging_window = 400;
  config.budget = {.drop_below = 0.01};
  size_t max_size = 0;

  ASSERT_NO_FATAL_FAILURE(ExpectAgreement(
      config, MakeStream(Labels::kClassification, 50000, kStreamSeed), &max_size));

  EXPECT_LE(max_size, 322u);
  EXPECT_GE(max_size, 100u);  // drop_below is what bounds it, not a small stream
}

// Exact arithmetic, to check the rules for the boundary cases that a continuous stream
// never hits. Four inputs 20 apart: with gamma = 1/2 the kernel between two of them is
// exp(-200) or exp(-400), which vanishes when added to 0.5 or 1, so each input's prediction
// is exactly the sum of its own terms' coefficients (k(x, x) = 1). (Not exp(-900): that
// underflows, and a vectorised exp may then return ~2e-308 rather than 0.) With lambda = 0 and
// eta = 0.5 every coefficient is exactly +-0.5, so an input's predictions step through 0, 0.5,
// 1 and land exactly on the kink (y f = rho = 1, |f - y| = epsilon = 0.25, f = rho = 1), where
// the flat side wins; every |alpha| ties, so SMALLEST must remove the oldest; and drop_below =
// 0.5 equals every |alpha|, which is therefore not below it. The first three inputs come round
// until they sit at the kink (6 terms, the budget), then the fourth one joins and pushes the
// oldest terms out.
TEST(NormaReferenceTest, MatchesReferenceOnExactKinksTiesAndThresholds) {
  struct Case {
    LossConfig loss;
    double y;
  };
  const Case cases[] = {
      {{.type = LossType::kHinge, .rho = 1.0}, 1.0},
      {{.type = LossType::kEpsilonInsensitive, .epsilon = 0.25}, 1.25},
      {{.type = LossType::kNovelty, .rho = 1.0}, 1.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(LossTypeName(c.loss.type));
    Stream stream;
    for (int t = 0; t < 60; ++t) {
      const int input = t < 12 ? t % 3 : t % 4;
      std::vector<double> x(kStreamDim, 0.0);
      if (input > 0) x[input - 1] = 20.0;
      stream.x.insert(stream.x.end(), x.begin(), x.end());
      stream.y.push_back(c.y);
    }
    ModelConfig config;
    config.dim = kStreamDim;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
    config.loss = c.loss;
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
    config.lambda = 0.0;
    config.averaged = true;
    config.budget = {.max_terms = 6, .policy = BudgetPolicy::kSmallest, .drop_below = 0.5};

    ASSERT_NO_FATAL_FAILURE(ExpectAgreement(config, stream));

    // The stream does reach the boundaries: predictions exactly at the kink (zero loss,
    // no new term), and a full budget of 6 terms (none dropped by drop_below) that has to
    // remove terms.
    absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
    ASSERT_TRUE(model.ok()) << model.status();
    int at_kink = 0;
    for (size_t t = 0; t < stream.y.size(); ++t) {
      const absl::StatusOr<Observation> o = (*model)->Observe(stream.row(t), stream.y[t]);
      ASSERT_TRUE(o.ok()) << o.status();
      if (o->prediction == 1.0) {
        EXPECT_EQ(o->loss, 0.0);
        ++at_kink;
      }
    }
    EXPECT_GT(at_kink, 0);
    EXPECT_EQ((*model)->expansion_size(), 6u);
    EXPECT_GT((*model)->stats().terms_removed, 0u);
  }
}

}  // namespace
}  // namespace okl
