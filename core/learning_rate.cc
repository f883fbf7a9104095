#include "core/learning_rate.h"

#include <cmath>

namespace okl {

double LearningRate::At(uint64_t t) const {
  const double step = static_cast<double>(t);
  switch (config_.schedule) {
    case Schedule::kConstant:
      return config_.eta0;
    case Schedule::kInverseSqrt:
      return config_.eta0 / std::sqrt(step);
    case Schedule::kPower:
      return config_.eta0 * std::pow(step, -config_.theta);
  }
  return config_.eta0;  // unreachable for a validated config
}

}  // namespace okl
