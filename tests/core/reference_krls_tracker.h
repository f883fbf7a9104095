// tests/core/reference_krls_tracker.h
//
// ReferenceKrlsTracker is a plain, literal implementation of the KRLS tracker (Van
// Vaerenbergh, Lazaro-Gredilla and Santamaria 2012) as its paper and KAFBOX's krlst.m
// state it, written to check okl::KrlsTrackerModel against. It shares no code with core/
// beyond the config structs and the reference kernel: the matrices are vectors of rows,
// K_BB is recomputed from the dictionary on every step, the new Q is formed whole before
// the pruning criterion (Q mu) ./ diag(Q) is read off it, and a pruned basis is erased
// in place (core moves the last basis into its slot instead, so the dictionaries hold the
// same bases in another order). O(m^2 dim) per step; it trusts its input.
//
// Example:
//   okl::testing::ReferenceKrlsTracker reference(config);
//   double p = reference.Observe(x, y);            // the prediction before the update
//   auto [mean, variance] = reference.Predict(x);  // what the next step would predict
#ifndef OKL_TESTS_CORE_REFERENCE_KRLS_TRACKER_H_
#define OKL_TESTS_CORE_REFERENCE_KRLS_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"

namespace okl::testing {

class ReferenceKrlsTracker {
 public:
  explicit ReferenceKrlsTracker(const ModelConfig& config);

  // One step; returns the prediction made before it.
  double Observe(absl::Span<const double> x, double y);
  // The predictive mean and variance of y at x for the next step.
  std::pair<double, double> Predict(absl::Span<const double> x) const;

  const std::vector<std::vector<double>>& dictionary() const { return dict_; }
  // Bases dropped: all of them, and of those the new inputs not kept (the reduced update,
  // by the criterion or because the dictionary already represents them).
  uint64_t pruned() const { return pruned_; }
  uint64_t inputs_not_kept() const { return inputs_not_kept_; }
  double signal_power() const { return dens_ > 0 ? nums_ / dens_ : 1.0; }

 private:
  double Kernel(absl::Span<const double> a, absl::Span<const double> b) const;
  // The posterior after back-off to the prior (lambda), as the next step sees it.
  std::vector<std::vector<double>> ForgottenSigma() const;

  ModelConfig config_;
  double sn2_, lambda_, jitter_;
  size_t max_basis_;
  std::vector<std::vector<double>> dict_;
  std::vector<std::vector<double>> q_;
  std::vector<std::vector<double>> sigma_;
  std::vector<double> mu_;
  double nums_ = 0.0;
  double dens_ = 0.0;
  uint64_t pruned_ = 0;
  uint64_t inputs_not_kept_ = 0;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_CORE_REFERENCE_KRLS_TRACKER_H_
