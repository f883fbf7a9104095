// Tests of ValidateConfig: a good configuration passes, and every bad value is rejected
// with InvalidArgument and a message that names the offending field.

#include "core/config.h"

#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/non_finite.h"

namespace okl {
namespace {

using ::testing::ContainsRegex;

// A configuration that every test below starts from and breaks in exactly one place.
ModelConfig GoodConfig() {
  ModelConfig config;
  config.dim = 4;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.01;
  config.budget = {.max_terms = 128, .policy = BudgetPolicy::kOldest};
  return config;
}

// Matches a message in which `field` appears as a whole word ("c" must not match the
// "c" inside "inverse", but "kernel.c" or "c = -1" do).
::testing::Matcher<std::string> NamesField(const std::string& field) {
  return ContainsRegex("(^|[^A-Za-z0-9_])" + field + "([^A-Za-z0-9_]|$)");
}

TEST(ValidateConfigTest, AcceptsAGoodConfig) {
  EXPECT_TRUE(ValidateConfig(GoodConfig()).ok()) << ValidateConfig(GoodConfig());
}

// Every kernel, loss, schedule and policy has at least one accepted configuration,
// including the inclusive ends of every range.
TEST(ValidateConfigTest, AcceptsEveryVariantAtTheEdgesOfItsRange) {
  std::vector<std::function<void(ModelConfig&)>> edits = {
      [](ModelConfig& c) { c.dim = 1; },
      [](ModelConfig& c) { c.dim = kMaxDimension; },
      [](ModelConfig& c) { c.kernel = {.type = KernelType::kLaplacian, .gamma = 3.0}; },
      [](ModelConfig& c) { c.kernel = {.type = KernelType::kLinear, .c = 0.0}; },
      [](ModelConfig& c) { c.kernel = {.type = KernelType::kLinear, .c = 2.0}; },
      [](ModelConfig& c) {
        c.kernel = {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 0.0, .degree = 1};
      },
      [](ModelConfig& c) {
        c.kernel = {.type = KernelType::kPolynomial,
                    .gamma = 1.0,
                    .c = 1.0,
                    .degree = kMaxPolynomialDegree};
      },
      [](ModelConfig& c) { c.kernel = {.type = KernelType::kHeat, .t = 0.25}; },
      [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = 0.0}; },
      [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 1.0}; },
      [](ModelConfig& c) {
        c.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.0, .nu = 0.0};
      },
      [](ModelConfig& c) {
        c.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.5, .nu = 0.5};
      },
      [](ModelConfig& c) { c.loss = {.type = LossType::kLogistic}; },
      [](ModelConfig& c) { c.loss = {.type = LossType::kHuber, .delta = 0.5}; },
      [](ModelConfig& c) { c.loss = {.type = LossType::kNovelty, .rho = 1.0, .nu = 0.2}; },
      [](ModelConfig& c) {
        c.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 10.0};
      },
      [](ModelConfig& c) {
        c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 1.0, .theta = 1.0};
      },
      [](ModelConfig& c) {
        c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 1.0, .theta = 1e-3};
      },
      [](ModelConfig& c) { c.lambda = 0.0; },
      // eta0 * lambda just below 1.
      [](ModelConfig& c) {
        c.learning_rate.eta0 = 0.99;
        c.lambda = 1.0;
      },
      [](ModelConfig& c) { c.offset = true; },
      [](ModelConfig& c) { c.averaged = true; },
      [](ModelConfig& c) { c.budget = {.max_terms = 0}; },
      [](ModelConfig& c) { c.budget.max_terms = kMaxTerms; },
      [](ModelConfig& c) {
        c.budget = {.max_terms = 1, .policy = BudgetPolicy::kSmallest, .drop_below = 1e-3};
      },
      [](ModelConfig& c) { c.regret_window = kMaxRegretWindow; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    ModelConfig config = GoodConfig();
    edits[i](config);
    EXPECT_TRUE(ValidateConfig(config).ok()) << "edit #" << i << ": " << ValidateConfig(config);
  }
}

struct BadCase {
  std::string description;
  std::function<void(ModelConfig&)> edit;
  std::string field;  // must appear as a word in the error message
};

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases = {
      {"dim 0", [](ModelConfig& c) { c.dim = 0; }, "dim"},
      {"dim over kMaxDimension", [](ModelConfig& c) { c.dim = kMaxDimension + 1; }, "dim"},
      {"gaussian gamma 0", [](ModelConfig& c) { c.kernel.gamma = 0.0; }, "gamma"},
      {"gaussian gamma < 0", [](ModelConfig& c) { c.kernel.gamma = -1.0; }, "gamma"},
      {"gaussian gamma NaN", [](ModelConfig& c) { c.kernel.gamma = kNaN; }, "gamma"},
      {"gaussian gamma inf", [](ModelConfig& c) { c.kernel.gamma = kInf; }, "gamma"},
      {"laplacian gamma 0",
       [](ModelConfig& c) { c.kernel = {.type = KernelType::kLaplacian, .gamma = 0.0}; },
       "gamma"},
      {"polynomial gamma < 0",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial, .gamma = -0.5, .c = 1.0, .degree = 2};
       },
       "gamma"},
      {"linear c < 0",
       [](ModelConfig& c) { c.kernel = {.type = KernelType::kLinear, .c = -1.0}; }, "c"},
      {"linear c NaN",
       [](ModelConfig& c) { c.kernel = {.type = KernelType::kLinear, .c = kNaN}; }, "c"},
      {"polynomial c < 0",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial, .gamma = 1.0, .c = -0.1, .degree = 2};
       },
       "c"},
      {"polynomial c inf",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial, .gamma = 1.0, .c = kInf, .degree = 2};
       },
       "c"},
      {"polynomial degree 0",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 0};
       },
       "degree"},
      {"polynomial degree over kMaxPolynomialDegree",
       [](ModelConfig& c) {
         c.kernel = {.type = KernelType::kPolynomial,
                     .gamma = 1.0,
                     .c = 1.0,
                     .degree = kMaxPolynomialDegree + 1};
       },
       "degree"},
      {"heat t 0", [](ModelConfig& c) { c.kernel = {.type = KernelType::kHeat, .t = 0.0}; },
       "t"},
      {"heat t < 0", [](ModelConfig& c) { c.kernel = {.type = KernelType::kHeat, .t = -1.0}; },
       "t"},
      {"heat t NaN", [](ModelConfig& c) { c.kernel = {.type = KernelType::kHeat, .t = kNaN}; },
       "t"},
      // (4 pi 1e-3)^(-500) = 10^951: overflows a double.
      {"heat normaliser overflows",
       [](ModelConfig& c) {
         c.dim = 1000;
         c.kernel = {.type = KernelType::kHeat, .t = 1e-3};
       },
       "t"},
      // (4 pi 1e3)^(-500) = 10^-2049: underflows to 0.
      {"heat normaliser underflows",
       [](ModelConfig& c) {
         c.dim = 1000;
         c.kernel = {.type = KernelType::kHeat, .t = 1e3};
       },
       "t"},
      {"eta0 0", [](ModelConfig& c) { c.learning_rate.eta0 = 0.0; }, "eta0"},
      {"eta0 < 0", [](ModelConfig& c) { c.learning_rate.eta0 = -0.1; }, "eta0"},
      {"eta0 NaN", [](ModelConfig& c) { c.learning_rate.eta0 = kNaN; }, "eta0"},
      {"eta0 inf", [](ModelConfig& c) { c.learning_rate.eta0 = kInf; }, "eta0"},
      {"lambda < 0", [](ModelConfig& c) { c.lambda = -1e-3; }, "lambda"},
      {"lambda NaN", [](ModelConfig& c) { c.lambda = kNaN; }, "lambda"},
      {"lambda inf", [](ModelConfig& c) { c.lambda = kInf; }, "lambda"},
      {"power theta 0",
       [](ModelConfig& c) {
         c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.5, .theta = 0.0};
       },
       "theta"},
      {"power theta < 0",
       [](ModelConfig& c) {
         c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.5, .theta = -0.5};
       },
       "theta"},
      {"power theta > 1",
       [](ModelConfig& c) {
         c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.5, .theta = 1.5};
       },
       "theta"},
      {"power theta NaN",
       [](ModelConfig& c) {
         c.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.5, .theta = kNaN};
       },
       "theta"},
      {"hinge rho < 0",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = -0.5}; }, "rho"},
      {"hinge rho NaN",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = kNaN}; }, "rho"},
      {"epsilon < 0",
       [](ModelConfig& c) {
         c.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = -0.1};
       },
       "epsilon"},
      {"epsilon inf",
       [](ModelConfig& c) {
         c.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = kInf};
       },
       "epsilon"},
      {"huber delta 0",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHuber, .delta = 0.0}; }, "delta"},
      {"huber delta < 0",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHuber, .delta = -1.0}; }, "delta"},
      {"huber delta NaN",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHuber, .delta = kNaN}; }, "delta"},
      {"hinge nu < 0",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = -0.1}; },
       "nu"},
      {"hinge nu > 1",
       [](ModelConfig& c) { c.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 1.1}; },
       "nu"},
      {"novelty nu > 1",
       [](ModelConfig& c) { c.loss = {.type = LossType::kNovelty, .rho = 1.0, .nu = 2.0}; },
       "nu"},
      {"epsilon-insensitive nu NaN",
       [](ModelConfig& c) {
         c.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1, .nu = kNaN};
       },
       "nu"},
      {"max_terms over kMaxTerms", [](ModelConfig& c) { c.budget.max_terms = kMaxTerms + 1; },
       "max_terms"},
      {"drop_below < 0", [](ModelConfig& c) { c.budget.drop_below = -1e-6; }, "drop_below"},
      {"drop_below NaN", [](ModelConfig& c) { c.budget.drop_below = kNaN; }, "drop_below"},
      {"regret_window over kMaxRegretWindow",
       [](ModelConfig& c) { c.regret_window = kMaxRegretWindow + 1; }, "regret_window"},
      {"kernel type out of range",
       [](ModelConfig& c) { c.kernel.type = static_cast<KernelType>(99); }, "kernel"},
      {"loss type out of range",
       [](ModelConfig& c) { c.loss.type = static_cast<LossType>(99); }, "loss"},
      {"schedule out of range",
       [](ModelConfig& c) { c.learning_rate.schedule = static_cast<Schedule>(99); },
       "schedule"},
      {"budget policy out of range",
       [](ModelConfig& c) { c.budget.policy = static_cast<BudgetPolicy>(99); }, "policy"},
  };
  // eta_1 = eta0 is the largest rate of every schedule, so eta0 * lambda > 1 makes the
  // very first shrinkage factor (1 - eta_1 lambda) negative whatever the schedule; = 1
  // makes it 0, which only a decreasing schedule may do (on its first step, Pegasos).
  cases.push_back({"eta0 * lambda == 1, CONSTANT",
                   [](ModelConfig& c) {
                     c.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 2.0};
                     c.lambda = 0.5;
                   },
                   "lambda"});
  for (Schedule schedule : {Schedule::kConstant, Schedule::kInverseSqrt, Schedule::kPower}) {
    cases.push_back({"eta0 * lambda > 1, " + std::string(ScheduleName(schedule)),
                     [schedule](ModelConfig& c) {
                       c.learning_rate = {.schedule = schedule, .eta0 = 4.0, .theta = 1.0};
                       c.lambda = 1.0;
                     },
                     "lambda"});
  }
  cases.push_back({"MERGE with a laplacian kernel",
                   [](ModelConfig& c) {
                     c.kernel = {.type = KernelType::kLaplacian, .gamma = 1.0};
                     c.budget = {.max_terms = 10, .policy = BudgetPolicy::kMerge};
                   },
                   "MERGE"});
  cases.push_back({"novelty with an offset",
                   [](ModelConfig& c) {
                     c.loss = {.type = LossType::kNovelty, .rho = 1.0};
                     c.offset = true;
                   },
                   "offset"});
  return cases;
}

TEST(ValidateConfigTest, RejectsEachBadValueWithInvalidArgumentNamingTheField) {
  for (const BadCase& bad : BadCases()) {
    SCOPED_TRACE(bad.description);
    ModelConfig config = GoodConfig();
    bad.edit(config);
    absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), NamesField(bad.field));
  }
}

// Pegasos: eta_t = 1 / (lambda t), POWER with theta 1 and eta0 = 1 / lambda, whose first
// shrink factor is exactly 0; and MERGE with the gaussian kernel.
TEST(ValidateConfigTest, AcceptsPegasosStepsAndMerge) {
  for (Schedule schedule : {Schedule::kInverseSqrt, Schedule::kPower}) {
    ModelConfig config = GoodConfig();
    config.lambda = 1e-4;
    config.learning_rate = {.schedule = schedule, .eta0 = 1e4, .theta = 1.0};
    config.budget = {.max_terms = 100, .policy = BudgetPolicy::kMerge};
    EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  }
}

// The eta0 * lambda check must name both parts of the product, not only one.
TEST(ValidateConfigTest, EtaLambdaMessageNamesBothFactors) {
  ModelConfig config = GoodConfig();
  config.learning_rate.eta0 = 2.0;
  config.lambda = 0.5;
  absl::Status status = ValidateConfig(config);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), NamesField("eta0"));
  EXPECT_THAT(std::string(status.message()), NamesField("lambda"));
}

// Fields that a variant does not read are not validated: a linear kernel ignores gamma,
// the squared loss ignores rho, a constant schedule ignores theta.
TEST(ValidateConfigTest, IgnoresFieldsTheVariantDoesNotRead) {
  ModelConfig config = GoodConfig();
  config.kernel = {.type = KernelType::kLinear, .gamma = -1.0, .c = 1.0};
  config.loss = {.type = LossType::kSquared, .rho = -1.0, .epsilon = -1.0, .delta = -1.0};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5, .theta = 7.0};
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
}

// ...but every number must be finite whatever the variant: a NaN in an unread field
// made a stored config unequal to itself, and the server refused to start.
TEST(ValidateConfigTest, RejectsNonFiniteNumbersInFieldsTheVariantDoesNotRead) {
  const double bad[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (const double value : bad) {
    ModelConfig config = GoodConfig();
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5, .theta = value};
    absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("learning_rate.theta"));
    config = GoodConfig();
    config.kernel = {.type = KernelType::kLinear, .gamma = value, .c = 1.0};
    EXPECT_THAT(std::string(ValidateConfig(config).message()),
                ::testing::HasSubstr("kernel.gamma"));
    config = GoodConfig();
    config.loss = {.type = LossType::kSquared, .delta = value};
    EXPECT_THAT(std::string(ValidateConfig(config).message()),
                ::testing::HasSubstr("loss.delta"));
  }
}

TEST(ValidateConfigTest, ClassificationLossesAreHingeAndLogistic) {
  EXPECT_TRUE(IsClassificationLoss(LossType::kHinge));
  EXPECT_TRUE(IsClassificationLoss(LossType::kLogistic));
  EXPECT_FALSE(IsClassificationLoss(LossType::kSquared));
  EXPECT_FALSE(IsClassificationLoss(LossType::kEpsilonInsensitive));
  EXPECT_FALSE(IsClassificationLoss(LossType::kHuber));
  EXPECT_FALSE(IsClassificationLoss(LossType::kNovelty));
}

}  // namespace
}  // namespace okl
