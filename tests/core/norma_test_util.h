// tests/core/norma_test_util.h
//
// What the NormaModel test files share: small model configurations (a one-dimensional
// linear kernel, and orthogonal unit vectors e_i), shortcuts that create a model, observe
// an example or predict and fail the test on an error, and a reproducible synthetic stream.
//
// Example:
//   auto model = Make(LinearConfig(/*eta=*/0.5, /*lambda=*/0.0));
//   Obs(*model, {1.0}, 2.0);
//   EXPECT_EQ(Pred(*model, {1.0}), 1.0);
#ifndef OKL_TESTS_CORE_NORMA_TEST_UTIL_H_
#define OKL_TESTS_CORE_NORMA_TEST_UTIL_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/model.h"
#include "core/norma.h"
#include "gtest/gtest.h"
#include "tests/core/non_finite.h"

namespace okl {

// dim 1, k(x, x') = x x', squared loss, constant rate.
inline ModelConfig LinearConfig(double eta, double lambda) {
  ModelConfig config;
  config.dim = 1;
  config.kernel = {.type = KernelType::kLinear, .c = 0.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = eta};
  config.lambda = lambda;
  return config;
}

// Orthogonal inputs: dim kBasisDim, linear kernel, squared loss.
inline constexpr uint32_t kBasisDim = 8;
inline ModelConfig BasisConfig(double eta, double lambda) {
  ModelConfig config = LinearConfig(eta, lambda);
  config.dim = kBasisDim;
  return config;
}
inline std::vector<double> E(size_t i) {
  std::vector<double> x(kBasisDim, 0.0);
  x[i] = 1.0;
  return x;
}

inline std::unique_ptr<NormaModel> Make(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

inline Observation Obs(NormaModel& model, const std::vector<double>& x, double y) {
  absl::StatusOr<Observation> o = model.Observe(x, y);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : Observation{kNaN, kNaN};
}

inline double Pred(const NormaModel& model, const std::vector<double>& x,
                   PredictionMode mode = PredictionMode::kCurrent) {
  absl::StatusOr<double> p = model.Predict(x, mode);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : kNaN;
}

// A labelled example: dim coordinates and y.
struct Example {
  std::vector<double> x;
  double y;
};

// n examples with standard normal coordinates, labelled sin(x_0) + 0.5 x_{dim-1} plus
// noise, or by the sign of that for a classification loss; the same arguments give the same
// stream.
inline std::vector<Example> ExampleStream(const ModelConfig& config, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<Example> stream;
  for (size_t i = 0; i < n; ++i) {
    Example e;
    for (uint32_t j = 0; j < config.dim; ++j) e.x.push_back(normal(rng));
    const double signal = std::sin(e.x[0]) + 0.5 * e.x[config.dim - 1];
    if (IsClassificationLoss(config.loss.type)) {
      e.y = (signal + 0.3 * normal(rng)) > 0 ? 1.0 : -1.0;
    } else {
      e.y = signal + 0.1 * normal(rng);
    }
    stream.push_back(std::move(e));
  }
  return stream;
}

}  // namespace okl

#endif  // OKL_TESTS_CORE_NORMA_TEST_UTIL_H_
