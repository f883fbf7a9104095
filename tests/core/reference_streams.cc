#include "tests/core/reference_streams.h"

#include <cmath>

namespace okl::testing {

::testing::AssertionResult Agrees(double actual, double expected, double magnitude) {
  const double bound = kRelativeTolerance * magnitude;
  if (std::abs(actual - expected) <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "core " << actual << " vs reference " << expected << ": difference "
         << std::abs(actual - expected) << " > " << bound << " (1e-9 * " << magnitude << ")";
}

double Uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

std::vector<double> UniformVector(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::vector<double> v(n);
  for (double& c : v) c = Uniform(rng, lo, hi);
  return v;
}

Stream MakeStream(Labels labels, size_t steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Stream stream;
  for (size_t i = 0; i < steps; ++i) {
    const std::vector<double> v = UniformVector(rng, kStreamDim, -0.5, 0.5);
    stream.x.insert(stream.x.end(), v.begin(), v.end());
    const double h = 0.7 * std::sin(6.0 * v[0]) + v[1] - 2.0 * v[1] * v[2];
    const double noise = Uniform(rng, -0.05, 0.05);
    switch (labels) {
      case Labels::kRegression:
        stream.y.push_back(h + noise);
        break;
      case Labels::kClassification: {
        const double sign = h >= 0.0 ? 1.0 : -1.0;
        stream.y.push_back(Uniform(rng, 0.0, 1.0) < 0.05 ? -sign : sign);
        break;
      }
      case Labels::kOneClass:
        stream.y.push_back(1.0);
        break;
    }
  }
  return stream;
}

const LossCase kReferenceLosses[9] = {
    {"Squared", {.type = LossType::kSquared}, Labels::kRegression},
    {"Hinge", {.type = LossType::kHinge, .rho = 1.0}, Labels::kClassification},
    {"EpsilonInsensitive",
     {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1},
     Labels::kRegression},
    {"Logistic", {.type = LossType::kLogistic}, Labels::kClassification},
    {"Huber", {.type = LossType::kHuber, .delta = 0.3}, Labels::kRegression},
    {"Novelty", {.type = LossType::kNovelty, .rho = 0.5}, Labels::kOneClass},
    {"NuHinge", {.type = LossType::kHinge, .rho = 1.0, .nu = 0.2}, Labels::kClassification},
    {"NuEpsilonInsensitive",
     {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1, .nu = 0.3},
     Labels::kRegression},
    {"NuNovelty", {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.2}, Labels::kOneClass},
};

}  // namespace okl::testing
