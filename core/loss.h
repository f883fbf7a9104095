// core/loss.h
//
// Loss gives the value and the derivative in f of each NORMA loss at a prediction f for a
// label y, and the nu-trick's margin step. Where the derivative jumps, the flat side wins:
// y f = rho is not a margin violation, |f - y| = epsilon is inside the tube.
// A Loss is immutable and safe to use from any number of threads.
//
// Example:
//   okl::Loss loss(config.loss);
//   okl::LossPoint at = loss.At(/*y=*/1.0, /*f=*/0.3, /*margin=*/1.0);
//   // at.value == 0.7, at.derivative == -1.0, at.violated == true
#ifndef OKL_CORE_LOSS_H_
#define OKL_CORE_LOSS_H_

#include <optional>

#include "core/config.h"

namespace okl {

struct LossPoint {
  double value = 0.0;       // loss(y, f), the margin's nu term not included
  double derivative = 0.0;  // d loss / d f
  bool violated = false;    // s_t of the nu-trick: outside the margin or the tube
};

class Loss {
 public:
  explicit Loss(const LossConfig& config) : config_(config) {}

  // `margin` is rho for hinge and novelty, epsilon for epsilon-insensitive, and ignored
  // by the other losses; the model passes its current (possibly learned) value.
  LossPoint At(double y, double f, double margin) const;

  // The margin the model starts with: rho, epsilon, or 0 for losses without one.
  double InitialMargin() const;

  // True when nu > 0 and the loss has a margin to learn.
  bool LearnsMargin() const;

  // The nu-trick's step on the margin after an example with violation flag `violated`:
  // rho <- rho + eta (nu - s) for hinge and novelty, epsilon <- max(0, epsilon + eta (s -
  // nu)) for epsilon-insensitive. Returns `margin` unchanged when !LearnsMargin().
  double NextMargin(double margin, double eta, bool violated) const;

  // sup |d loss / d f| over labels the loss accepts (C in NORMA's truncation bound);
  // nullopt for the squared loss, whose derivative is unbounded.
  std::optional<double> DerivativeBound() const;

  const LossConfig& config() const { return config_; }

 private:
  LossConfig config_;
};

}  // namespace okl

#endif  // OKL_CORE_LOSS_H_
