// tests/core/reference_random_features.h
//
// ReferenceRandomFeatures is a plain implementation of the random-feature model exactly
// as core/random_features.h states it, written to check okl::RandomFeatureModel against.
// It shares only the frequencies with core (okl::RandomFeatureFrequencies, checked on its
// own by statistics and by the kernel it approximates) and the losses and learning rates
// with the NORMA reference (tests/core/reference_norma.h). Everything else is the
// formulas in plain loops: v_j . x over every coordinate, std::cos and std::sin, z(x) in
// its interleaved order, w <- (1 - eta lambda) w - eta g z(x) entry by entry, and the
// averaged hypothesis as the plain sums of w_t and b_t. It trusts its input (a config that
// passed okl::ValidateConfig, examples of the right dimension).
//
// Example:
//   okl::testing::ReferenceRandomFeatures reference(config);
//   double p = reference.Observe(x, y).prediction;  // f_t(x), before the update
//   double q = reference.Predict(x);                // f_{t+1}(x)
//   double a = reference.PredictAveraged(x);        // (1/T) sum_{t=1..T} f_t(x)
#ifndef OKL_TESTS_CORE_REFERENCE_RANDOM_FEATURES_H_
#define OKL_TESTS_CORE_REFERENCE_RANDOM_FEATURES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"
#include "tests/core/reference_norma.h"

namespace okl::testing {

// z(x) = sqrt(2 / D) [cos(v_1 . x), sin(v_1 . x), ...] for the frequency-major
// `frequencies` of okl::RandomFeatureFrequencies (D / 2 rows of x.size()).
std::vector<double> ReferenceFeatures(const std::vector<double>& frequencies,
                                      absl::Span<const double> x);

class ReferenceRandomFeatures {
 public:
  explicit ReferenceRandomFeatures(const ModelConfig& config);

  // One step on (x, y). ReferenceObservation::magnitude is Magnitude(x) of f_t.
  ReferenceObservation Observe(absl::Span<const double> x, double y);

  // f(x) = <w, z(x)> + b of the current hypothesis.
  double Predict(absl::Span<const double> x) const;
  // (1/T) sum_{t=1..T} f_t(x) over the hypotheses that made the T predictions; 0 if T = 0.
  double PredictAveraged(absl::Span<const double> x) const;
  // The size of the numbers Predict(x) is added up from, so the scale of its rounding
  // error in any order of summation: sum_k m_k |z_k(x)| plus sum_t |eta_t g_t| for b,
  // where m_k = sum_t (prod of later shrink factors) |eta_t g_t z_k(x_t)| is the same
  // sum of absolute increments for w_k (w_k itself may be a small difference of large
  // increments).
  double Magnitude(absl::Span<const double> x) const;
  // The same for PredictAveraged(x).
  double AveragedMagnitude(absl::Span<const double> x) const;

  // w and sum_t w_t in z(x)'s order.
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<double>& weight_sums() const { return weight_sums_; }
  // m_k (see Magnitude) and its sum over the hypotheses so far: the scales of the
  // rounding errors of w_k and of its sum.
  const std::vector<double>& weight_scales() const { return weight_scales_; }
  const std::vector<double>& weight_scale_sums() const { return weight_scale_sums_; }
  uint64_t steps() const { return steps_; }
  double cumulative_loss() const { return cumulative_loss_; }
  uint64_t mistakes() const { return mistakes_; }
  double offset() const { return offset_; }
  double offset_sum() const { return offset_sum_; }
  double margin() const { return margin_; }

 private:
  ModelConfig config_;
  std::vector<double> frequencies_;  // frequency-major, as RandomFeatureFrequencies gives
  std::vector<double> weights_;
  std::vector<double> weight_sums_;       // sum of w over the hypotheses so far
  std::vector<double> weight_scales_;     // m_k (see Magnitude)
  std::vector<double> weight_scale_sums_;  // sum of m_k over the hypotheses so far
  double offset_ = 0.0;
  double offset_sum_ = 0.0;
  double offset_scale_ = 0.0;      // sum_t |eta_t g_t|
  double offset_scale_sum_ = 0.0;  // sum of offset_scale_ over the hypotheses so far
  double margin_ = 0.0;
  uint64_t steps_ = 0;
  double cumulative_loss_ = 0.0;
  uint64_t mistakes_ = 0;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_CORE_REFERENCE_RANDOM_FEATURES_H_
