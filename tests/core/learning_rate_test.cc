// Tests of LearningRate: eta_t of every schedule at t = 1, 4 and 100.

#include "core/learning_rate.h"

#include <cmath>
#include <cstdint>

#include "core/config.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

TEST(LearningRateTest, ConstantIsEta0AtEveryStep) {
  LearningRate rate({.schedule = Schedule::kConstant, .eta0 = 0.3});
  for (uint64_t t : {1u, 4u, 100u, 1000000u}) EXPECT_EQ(rate.At(t), 0.3) << t;
}

TEST(LearningRateTest, InverseSqrtIsEta0OverSqrtT) {
  LearningRate rate({.schedule = Schedule::kInverseSqrt, .eta0 = 0.8});
  // sqrt(1) = 1, sqrt(4) = 2, sqrt(100) = 10 are exact, and 0.8 / 2 = 0.4 exactly; 0.8 / 10
  // is one rounding, but pow(t, -0.5) * eta0 is another route, hence DOUBLE_EQ.
  EXPECT_DOUBLE_EQ(rate.At(1), 0.8);
  EXPECT_DOUBLE_EQ(rate.At(4), 0.4);
  EXPECT_DOUBLE_EQ(rate.At(100), 0.08);
}

TEST(LearningRateTest, PowerIsEta0TimesTToMinusTheta) {
  // theta = 1: eta0 / t.
  LearningRate harmonic({.schedule = Schedule::kPower, .eta0 = 2.0, .theta = 1.0});
  EXPECT_DOUBLE_EQ(harmonic.At(1), 2.0);
  EXPECT_DOUBLE_EQ(harmonic.At(4), 0.5);
  EXPECT_DOUBLE_EQ(harmonic.At(100), 0.02);
  // theta = 0.5 is the inverse-sqrt schedule.
  LearningRate half({.schedule = Schedule::kPower, .eta0 = 0.8, .theta = 0.5});
  EXPECT_DOUBLE_EQ(half.At(1), 0.8);
  EXPECT_DOUBLE_EQ(half.At(4), 0.4);
  EXPECT_DOUBLE_EQ(half.At(100), 0.08);
  // theta = 0.25 (within 4 ulps, whether via pow or sqrt): 4^-0.25 = 0.7071067811865476,
  // 100^-0.25 = 1/sqrt(10) = 0.31622776601683794.
  LearningRate quarter({.schedule = Schedule::kPower, .eta0 = 1.0, .theta = 0.25});
  EXPECT_DOUBLE_EQ(quarter.At(1), 1.0);
  EXPECT_DOUBLE_EQ(quarter.At(4), 0.7071067811865476);
  EXPECT_DOUBLE_EQ(quarter.At(100), 0.31622776601683794);
}

TEST(LearningRateTest, EveryScheduleIsNonIncreasingAndStartsAtEta0) {
  for (Schedule schedule : {Schedule::kConstant, Schedule::kInverseSqrt, Schedule::kPower}) {
    LearningRate rate({.schedule = schedule, .eta0 = 0.7, .theta = 0.6});
    EXPECT_EQ(rate.At(1), 0.7) << ScheduleName(schedule);
    for (uint64_t t = 1; t < 2000; ++t) {
      ASSERT_LE(rate.At(t + 1), rate.At(t)) << ScheduleName(schedule) << " t=" << t;
    }
  }
}

TEST(LearningRateTest, ExposesItsConfig) {
  const LearningRateConfig config{.schedule = Schedule::kPower, .eta0 = 0.2, .theta = 0.7};
  EXPECT_EQ(LearningRate(config).config(), config);
}

}  // namespace
}  // namespace okl
