// core/learning_rate.h
//
// LearningRate maps the step number t (1 for the first example) to eta_t: constant eta0,
// eta0 / sqrt(t), or eta0 * t^(-theta). Every schedule is non-increasing in t, so the
// largest rate is eta_1 = eta0; ValidateConfig uses that to check eta_t lambda < 1.
// Immutable and safe to use from any number of threads.
//
// Example:
//   okl::LearningRate rate(config.learning_rate);
//   double eta = rate.At(/*t=*/10);
#ifndef OKL_CORE_LEARNING_RATE_H_
#define OKL_CORE_LEARNING_RATE_H_

#include <cstdint>

#include "core/config.h"

namespace okl {

class LearningRate {
 public:
  explicit LearningRate(const LearningRateConfig& config) : config_(config) {}

  // eta_t for t >= 1.
  double At(uint64_t t) const;

  const LearningRateConfig& config() const { return config_; }

 private:
  LearningRateConfig config_;
};

}  // namespace okl

#endif  // OKL_CORE_LEARNING_RATE_H_
