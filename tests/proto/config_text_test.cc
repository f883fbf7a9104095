// tests/proto/config_text_test.cc

#include "proto/config_text.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

TEST(ParseModelConfigTextTest, ParsesTheDocumentedExample) {
  absl::StatusOr<ModelConfig> config = ParseModelConfigText(R"pb(
    dim: 7
    kernel { gaussian { gamma: 1 } }
    loss { squared {} }
    learning_rate { eta0: 0.5 }
    lambda: 0.01
    budget { max_terms: 512 }
  )pb");
  ASSERT_TRUE(config.ok()) << config.status();
  ModelConfig expected;
  expected.dim = 7;
  expected.kernel = {.type = KernelType::kGaussian, .gamma = 1};
  expected.loss = {.type = LossType::kSquared};
  expected.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  expected.lambda = 0.01;
  expected.budget = {.max_terms = 512, .policy = BudgetPolicy::kOldest};
  EXPECT_EQ(*config, expected);
}

TEST(ParseModelConfigTextTest, SyntaxErrorNamesSourceLineAndColumn) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfigText("dim: 7\nkernel { gaussian { gamma: } }\n", "my.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  // The parser reports the position of the unexpected '}', 1-based.
  EXPECT_THAT(config.status().message(), HasSubstr("my.textproto:2:28: "));
  EXPECT_THAT(config.status().message(), HasSubstr("Expected double"));
}

TEST(ParseModelConfigTextTest, UnknownFieldAndEnumNameAreErrorsWithPositions) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfigText("dim: 7\nkernel {\n  gausian { gamma: 1 }\n}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("<config>:3:"));
  EXPECT_THAT(config.status().message(), HasSubstr("gausian"));

  config = ParseModelConfigText("dim: 7\nlearning_rate { schedule: FAST }");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("<config>:2:"));
  EXPECT_THAT(config.status().message(), HasSubstr("FAST"));
}

TEST(ParseModelConfigTextTest, ConversionErrorNamesSource) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfigText("dim: 7\nkernel { gaussian { gamma: 1 } }\n", "a.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("a.textproto: loss must set one of"));
}

}  // namespace
}  // namespace okl
