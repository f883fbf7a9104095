// tests/core/reference_norma.h
//
// ReferenceNorma is a plain, eager implementation of NORMA exactly as docs/design.md ("The
// algorithm") states it, written to check okl::NormaModel against. It shares no code with
// core/ beyond the config structs: kernels and losses are computed from their definitions,
// every coefficient alpha_i is stored explicitly and multiplied by (1 - eta_t lambda) on
// every step (no scale factor), and the averaged hypothesis is computed from every
// hypothesis f_t kept whole (its terms and offset), averaged over the window the
// definition names. It is O(size) per step (and O(T size) in memory) and makes no attempt
// to be fast or robust: it trusts its input (a config that passed okl::ValidateConfig,
// examples of the right dimension).
//
// Example:
//   okl::testing::ReferenceNorma reference(config);
//   double p = reference.Observe(x, y).prediction;  // f_t(x), before the update
//   double q = reference.Predict(x);                // f_{t+1}(x)
//   double a = reference.PredictAveraged(x);        // mean of f_t(x) over the window
#ifndef OKL_TESTS_CORE_REFERENCE_NORMA_H_
#define OKL_TESTS_CORE_REFERENCE_NORMA_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"

namespace okl::testing {

// k(a, b) straight from the definitions in core/config.h.
double ReferenceKernel(const KernelConfig& config, absl::Span<const double> a,
                       absl::Span<const double> b);

struct ReferenceLossPoint {
  double value = 0.0;       // loss(y, f), without the nu term
  double derivative = 0.0;  // d loss / d f; the flat side at a kink
  bool violated = false;    // s_t of the nu-trick
};

// The loss at prediction f for label y; `margin` is rho (hinge, novelty) or epsilon
// (epsilon-insensitive) and ignored otherwise.
ReferenceLossPoint ReferenceLoss(const LossConfig& config, double y, double f, double margin);

// eta_t, t >= 1.
double ReferenceLearningRate(const LearningRateConfig& config, uint64_t t);

// The margin a model starts with: rho (hinge, novelty), epsilon (epsilon-insensitive), 0.
double ReferenceInitialMargin(const LossConfig& config);
// The nu-trick's margin after a step of size eta whose loss was `violated` (s_t); the
// margin unchanged without nu.
double ReferenceNextMargin(const LossConfig& config, double margin, double eta, bool violated);

// The MERGE policy's merge of alpha_m k(x_m, .) and alpha_n k(x_n, .) (same sign) into
// alpha k(z, .), z = h x_m + (1 - h) x_n, found from the vectors themselves: h on all of
// [0, 1] maximising |alpha|, alpha = alpha_m k(x_m, z) + alpha_n k(x_n, z), and `loss`
// the squared RKHS distance between the two terms and the merged one.
struct ReferenceMerge {
  double h = 0.0;
  std::vector<double> z;
  double alpha = 0.0;
  double k_mz = 0.0;
  double k_nz = 0.0;
  double loss = 0.0;
};
ReferenceMerge ReferenceMergePair(const KernelConfig& kernel, const std::vector<double>& x_m,
                                  double alpha_m, const std::vector<double>& x_n,
                                  double alpha_n);

// What one ReferenceNorma::Observe reports.
struct ReferenceObservation {
  double prediction = 0.0;  // p_t = f_t(x_t), before the update
  double magnitude = 0.0;   // Magnitude(x_t) of f_t
  double loss = 0.0;        // loss(y_t, p_t) at the margin before the update
};

class ReferenceNorma {
 public:
  explicit ReferenceNorma(const ModelConfig& config);

  // One NORMA step on (x, y).
  ReferenceObservation Observe(absl::Span<const double> x, double y);

  // f(x) of the current hypothesis.
  double Predict(absl::Span<const double> x) const;
  // The mean of f_t(x) over the hypotheses that made the predictions of steps
  // t in (S, T]: S = 0 if the window W is 0, else max(0, (floor((T - 1) / W) - 1) W),
  // where W is config.averaging_window, or budget.max_terms if that is 0. 0 if T = 0.
  double PredictAveraged(absl::Span<const double> x) const;
  // The size of the numbers Predict(x) is added up from, so the scale of its rounding
  // error in any order of summation: sum_i |alpha_i k(x_i, x)| plus, for b, the sum of
  // the absolute values of its increments sum_t |eta_t g_t| (b itself may be a small
  // difference of large increments).
  double Magnitude(absl::Span<const double> x) const;
  // The same for PredictAveraged(x).
  double AveragedMagnitude(absl::Span<const double> x) const;

  size_t size() const { return terms_.size(); }
  uint64_t steps() const { return steps_; }
  double cumulative_loss() const { return cumulative_loss_; }
  uint64_t mistakes() const { return mistakes_; }
  uint64_t terms_removed() const { return terms_removed_; }
  double offset() const { return offset_; }
  double margin() const { return margin_; }

 private:
  struct Term {
    size_t id = 0;  // its input is points_[id]
    std::vector<double> x;
    double alpha = 0.0;
  };
  // One hypothesis f_t whole: (term id, alpha) pairs and the offset, with the offset's
  // magnitude (see Magnitude).
  struct Hypothesis {
    std::vector<std::pair<size_t, double>> terms;
    double offset = 0.0;
    double offset_scale = 0.0;
  };

  // *sum = b + sum_i alpha_i k(x_i, x) and *magnitude = sum_t |eta_t g_t| +
  // sum_i |alpha_i k(x_i, x)| for the current hypothesis.
  void Evaluate(absl::Span<const double> x, double* sum, double* magnitude) const;
  // The same summed over the averaging window's hypotheses; returns how many there are.
  uint64_t EvaluateAveraged(absl::Span<const double> x, double* sum, double* magnitude) const;
  // A new term with a fresh id.
  Term NewTerm(std::vector<double> x, double alpha);
  void EnforceBudget();
  // MERGE: merges the smallest |alpha| into the same-sign term whose merge loses least
  // (removes it if there is none).
  void MergeSmallest();

  ModelConfig config_;
  std::deque<Term> terms_;  // in the order they were added: the oldest first
  std::vector<std::vector<double>> points_;  // every term's input, by id
  std::vector<Hypothesis> history_;          // f_1 .. f_T
  double offset_ = 0.0;
  double offset_scale_ = 0.0;      // sum_t |eta_t g_t|
  double margin_ = 0.0;
  uint64_t steps_ = 0;
  double cumulative_loss_ = 0.0;
  uint64_t mistakes_ = 0;
  uint64_t terms_removed_ = 0;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_CORE_REFERENCE_NORMA_H_
