#include "tests/core/reference_random_features.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"
#include "core/random_features.h"
#include "tests/core/reference_norma.h"

namespace okl::testing {

std::vector<double> ReferenceFeatures(const std::vector<double>& frequencies,
                                      absl::Span<const double> x) {
  const size_t dim = x.size();
  const size_t count = frequencies.size() / dim;  // D / 2
  const double scale = std::sqrt(2.0 / static_cast<double>(2 * count));
  std::vector<double> z(2 * count);
  for (size_t j = 0; j < count; ++j) {
    double projection = 0.0;
    for (size_t i = 0; i < dim; ++i) projection += frequencies[j * dim + i] * x[i];
    z[2 * j] = scale * std::cos(projection);
    z[2 * j + 1] = scale * std::sin(projection);
  }
  return z;
}

ReferenceRandomFeatures::ReferenceRandomFeatures(const ModelConfig& config)
    : config_(config),
      frequencies_(RandomFeatureFrequencies(config)),
      margin_(ReferenceInitialMargin(config.loss)) {
  const size_t d = config.random_features.dimension;
  weights_.assign(d, 0.0);
  weight_sums_.assign(d, 0.0);
  weight_scales_.assign(d, 0.0);
  weight_scale_sums_.assign(d, 0.0);
}

ReferenceObservation ReferenceRandomFeatures::Observe(absl::Span<const double> x, double y) {
  // The averaged hypothesis sums f_1..f_T, the hypotheses that predict: add f_t now.
  for (size_t k = 0; k < weights_.size(); ++k) {
    weight_sums_[k] += weights_[k];
    weight_scale_sums_[k] += weight_scales_[k];
  }
  offset_sum_ += offset_;
  offset_scale_sum_ += offset_scale_;

  ++steps_;
  const double eta = ReferenceLearningRate(config_.learning_rate, steps_);
  const std::vector<double> z = ReferenceFeatures(frequencies_, x);

  ReferenceObservation observation;
  double p = offset_;
  double magnitude = offset_scale_;
  for (size_t k = 0; k < z.size(); ++k) {
    p += weights_[k] * z[k];
    magnitude += weight_scales_[k] * std::abs(z[k]);
  }
  observation.prediction = p;
  observation.magnitude = magnitude;
  const ReferenceLossPoint loss = ReferenceLoss(config_.loss, y, p, margin_);
  observation.loss = loss.value;
  cumulative_loss_ += loss.value;
  if ((config_.loss.type == LossType::kHinge || config_.loss.type == LossType::kLogistic) &&
      y * p <= 0.0) {
    ++mistakes_;
  }

  const double g = loss.derivative;
  const double shrink = 1.0 - eta * config_.lambda;
  for (size_t k = 0; k < z.size(); ++k) {
    weights_[k] = shrink * weights_[k] - eta * g * z[k];
    weight_scales_[k] = shrink * weight_scales_[k] + std::abs(eta * g * z[k]);
  }
  if (config_.offset) {
    offset_ -= eta * g;
    offset_scale_ += std::abs(eta * g);
  }

  // The nu-trick, with s_t from the margin the loss was evaluated at.
  margin_ = ReferenceNextMargin(config_.loss, margin_, eta, loss.violated);
  return observation;
}

double ReferenceRandomFeatures::Predict(absl::Span<const double> x) const {
  const std::vector<double> z = ReferenceFeatures(frequencies_, x);
  double sum = offset_;
  for (size_t k = 0; k < z.size(); ++k) sum += weights_[k] * z[k];
  return sum;
}

double ReferenceRandomFeatures::PredictAveraged(absl::Span<const double> x) const {
  if (steps_ == 0) return 0.0;
  const std::vector<double> z = ReferenceFeatures(frequencies_, x);
  double sum = offset_sum_;
  for (size_t k = 0; k < z.size(); ++k) sum += weight_sums_[k] * z[k];
  return sum / static_cast<double>(steps_);
}

double ReferenceRandomFeatures::Magnitude(absl::Span<const double> x) const {
  const std::vector<double> z = ReferenceFeatures(frequencies_, x);
  double sum = offset_scale_;
  for (size_t k = 0; k < z.size(); ++k) sum += weight_scales_[k] * std::abs(z[k]);
  return sum;
}

double ReferenceRandomFeatures::AveragedMagnitude(absl::Span<const double> x) const {
  if (steps_ == 0) return 0.0;
  const std::vector<double> z = ReferenceFeatures(frequencies_, x);
  double sum = offset_scale_sum_;
  for (size_t k = 0; k < z.size(); ++k) sum += weight_scale_sums_[k] * std::abs(z[k]);
  return sum / static_cast<double>(steps_);
}

}  // namespace okl::testing
