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
    case LossType::kMulticlassHinge:
    case LossType::kSoftmax:
      break;  // AtClasses
  }
  return {};
}

double Softmax(absl::Span<const double> scores, absl::Span<double> probabilities) {
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (size_t c = 0; c < scores.size(); ++c) {
    probabilities[c] = std::exp(scores[c] - top);
    sum += probabilities[c];
  }
  for (size_t c = 0; c < scores.size(); ++c) probabilities[c] /= sum;
  return std::log(sum) + top;
}

ClassLossPoint Loss::AtClasses(absl::Span<const double> scores, uint32_t y, double margin,
                               absl::Span<double> gradient) const {
  std::fill(gradient.begin(), gradient.end(), 0.0);
  const size_t classes = scores.size();
  if (classes < 2) return {.rival = y};
  if (config_.type == LossType::kSoftmax) {
    const double log_sum = Softmax(scores, gradient);
    gradient[y] -= 1.0;
    return {.value = log_sum - scores[y], .violated = true, .rival = y};
  }
  uint32_t rival = y == 0 ? 1 : 0;
  for (uint32_t c = rival + 1; c < classes; ++c) {
    if (c != y && scores[c] > scores[rival]) rival = c;
  }
  const double excess = margin + scores[rival] - scores[y];
  if (!(excess > 0)) return {.rival = rival};
  gradient[rival] = 1.0;
  gradient[y] = -1.0;
  return {.value = excess, .violated = true, .rival = rival};
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
    case LossType::kMulticlassHinge:
    case LossType::kSoftmax:
      return std::sqrt(2.0);
    default:
      return 1.0;  // hinge, logistic (|y| = 1), epsilon-insensitive, novelty
  }
}

}  // namespace okl
