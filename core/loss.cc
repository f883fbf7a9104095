#include "core/loss.h"

#include <algorithm>
#include <cmath>

namespace okl {
namespace {

double Sign(double v) { return v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0); }

}  // namespace

LossPoint Loss::At(double y, double f, double margin) const {
  switch (config_.type) {
    case LossType::kSquared: {
      const double r = f - y;
      return {.value = 0.5 * r * r, .derivative = r, .violated = false};
    }
    case LossType::kHinge: {
      const double m = y * f;
      if (m < margin) return {.value = margin - m, .derivative = -y, .violated = true};
      return {};
    }
    case LossType::kEpsilonInsensitive: {
      const double r = f - y;
      const double excess = std::abs(r) - margin;
      if (excess > 0) return {.value = excess, .derivative = Sign(r), .violated = true};
      return {};
    }
    case LossType::kLogistic: {
      // log(1 + exp(-z)) and its derivative -y sigma(-z), written so that neither
      // overflows for large |z|.
      const double z = y * f;
      if (z >= 0) {
        const double e = std::exp(-z);
        return {.value = std::log1p(e), .derivative = -y * e / (1 + e), .violated = false};
      }
      const double e = std::exp(z);
      return {.value = -z + std::log1p(e), .derivative = -y / (1 + e), .violated = false};
    }
    case LossType::kHuber: {
      const double r = f - y;
      const double delta = config_.delta;
      if (std::abs(r) <= delta) return {.value = 0.5 * r * r, .derivative = r};
      return {.value = delta * (std::abs(r) - 0.5 * delta), .derivative = delta * Sign(r)};
    }
    case LossType::kNovelty: {
      if (f < margin) return {.value = margin - f, .derivative = -1.0, .violated = true};
      return {};
    }
  }
  return {};
}

double Loss::InitialMargin() const {
  switch (MarginKindOf(config_.type)) {
    case MarginKind::kRho:
      return config_.rho;
    case MarginKind::kEpsilon:
      return config_.epsilon;
    case MarginKind::kNone:
      break;
  }
  return 0.0;
}

bool Loss::LearnsMargin() const {
  return config_.nu > 0 &&
         (config_.type == LossType::kHinge || config_.type == LossType::kNovelty ||
          config_.type == LossType::kEpsilonInsensitive);
}

double Loss::NextMargin(double margin, double eta, bool violated) const {
  if (!LearnsMargin()) return margin;
  const double s = violated ? 1.0 : 0.0;
  if (config_.type == LossType::kEpsilonInsensitive) {
    return std::max(0.0, margin + eta * (s - config_.nu));
  }
  return margin + eta * (config_.nu - s);
}

std::optional<double> Loss::DerivativeBound() const {
  switch (config_.type) {
    case LossType::kSquared:
      return std::nullopt;
    case LossType::kHuber:
      return config_.delta;
    default:
      return 1.0;  // hinge, logistic (|y| = 1), epsilon-insensitive, novelty
  }
}

}  // namespace okl
