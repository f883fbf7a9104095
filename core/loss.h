// core/loss.h
//
// Loss gives the value and the derivative in f of each NORMA loss at a prediction f for a
// label y, and the nu-trick's margin step. Where the derivative jumps, the flat side wins:
// y f = rho is not a margin violation, |f - y| = epsilon is inside the tube. The
// multi-class losses take a score per class and the true class instead (AtClasses).
// A Loss is immutable and safe to use from any number of threads.
//
// Example:
//   okl::Loss loss(config.loss);
//   okl::LossPoint at = loss.At(/*y=*/1.0, /*f=*/0.3, /*margin=*/1.0);
//   // at.value == 0.7, at.derivative == -1.0, at.violated == true
#ifndef OKL_CORE_LOSS_H_
#define OKL_CORE_LOSS_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "core/config.h"

namespace okl {

struct LossPoint {
  double value = 0.0;       // loss(y, f), the margin's nu term not included
  double derivative = 0.0;  // d loss / d f
  bool violated = false;    // s_t of the nu-trick: outside the margin or the tube
};

// What a multi-class loss reports at the scores of an example of class y.
struct ClassLossPoint {
  double value = 0.0;
  // multiclass_hinge: rho + f_rival - f_y > 0, so the gradient is not 0. softmax: always.
  bool violated = false;
  // multiclass_hinge: the highest-scoring class other than y (the first learned on a tie);
  // y itself when it is the only class.
  uint32_t rival = 0;
};

// The softmax of scores (K >= 1 entries) into probabilities (K entries):
// exp(f_c - top) / sum_c' exp(f_c' - top), top the largest score, so nothing overflows.
// Returns log sum_c exp(f_c).
double Softmax(absl::Span<const double> scores, absl::Span<double> probabilities);

class Loss {
 public:
  explicit Loss(const LossConfig& config) : config_(config) {}

  // `margin` is rho for hinge and novelty, epsilon for epsilon-insensitive, and ignored
  // by the other losses; the model passes its current (possibly learned) value.
  LossPoint At(double y, double f, double margin) const;

  // A multi-class loss at scores f_0 .. f_{K-1} (K = scores.size() >= 1) and true class
  // y < K: the value, and d loss / d f_c in gradient[c] (K entries). With one class there
  // is nothing to tell apart: the value and the gradient are 0. multiclass_hinge:
  // max(0, margin + f_r - f_y), r the rival (gradient +1 at r and -1 at y when violated;
  // the flat side wins at 0); softmax: log sum_c exp(f_c) - f_y, gradient
  // softmax(f)_c - [c = y], computed from the largest score so that nothing overflows.
  ClassLossPoint AtClasses(absl::Span<const double> scores, uint32_t y, double margin,
                           absl::Span<double> gradient) const;

  // The margin the model starts with: rho, epsilon, or 0 for losses without one.
  double InitialMargin() const;

  // True when nu > 0 and the loss has a margin to learn.
  bool LearnsMargin() const;

  // The nu-trick's step on the margin after an example with violation flag `violated`:
  // rho <- rho + eta (nu - s) for hinge and novelty, epsilon <- max(0, epsilon + eta (s -
  // nu)) for epsilon-insensitive. Returns `margin` unchanged when !LearnsMargin().
  double NextMargin(double margin, double eta, bool violated) const;

  // sup |d loss / d f| over labels the loss accepts (C in NORMA's truncation bound; for
  // the multi-class losses the gradient's Euclidean norm, at most sqrt(2)); nullopt for the
  // squared loss, whose derivative is unbounded.
  std::optional<double> DerivativeBound() const;

  const LossConfig& config() const { return config_; }

 private:
  LossConfig config_;
};

}  // namespace okl

#endif  // OKL_CORE_LOSS_H_
