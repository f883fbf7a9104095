// core/krls_tracker.h
//
// KrlsTrackerModel is the kernel recursive least-squares tracker, KRLS-T (Van Vaerenbergh,
// Lazaro-Gredilla and Santamaria, "Kernel recursive least-squares tracker for time-varying
// regression", IEEE TNNLS 23(8), 2012). It keeps a Gaussian-process posterior over the
// function's values at a dictionary of at most M = config.krls_tracker.max_basis bases
// b_1..b_m:
//   f(B) ~ N(mu, s0^2 Sigma),  Q = (K_BB + jitter I)^-1,
// and predicts y at x with mean k' Q mu and variance s0^2 (sigma_n^2 + sigma_f^2(x)),
//   sigma_f^2(x) = k(x, x) + jitter - k' Q k + k' Q Sigma Q k,   k = k(B, x),
// where sigma_n^2 = noise_variance is the noise relative to the signal power s0^2, which
// the model estimates by maximum likelihood as it goes (1 before the first example).
//
// One step on (x, y), O(m^2) time and O(M^2) memory:
//   1. forget (lambda = forgetting < 1, "back to the prior"): Sigma <- lambda Sigma +
//      (1 - lambda) K_BB and mu <- sqrt(lambda) mu, so old information fades and the
//      model tracks a target that drifts;
//   2. predict: q = Q k, p = q' mu (the prequential prediction), gamma^2 = k(x, x) +
//      jitter - k' q (what the dictionary cannot represent of x), h = Sigma q,
//      sigma_f^2 = gamma^2 + q' h, sigma_y^2 = sigma_n^2 + sigma_f^2;
//   3. condition on y: x joins the dictionary; Q grows by the block-inverse update with
//      gamma^2, mu and Sigma by the Gaussian conditioning on y with sigma_y^2;
//   4. prune when the dictionary holds M + 1 bases: drop the basis i whose removal costs
//      the least predictive error, |(Q mu)_i| / Q_ii (the paper's criterion); when it is
//      the new one, or when gamma^2 < jitter (x is already represented), x is not kept
//      and the step is the "reduced" update on the old dictionary.
// Q, Sigma and K are kept exactly symmetric (every update of entry (i, j) computes the
// same expression as that of (j, i)), and jitter keeps Q's inverse away from singular.
// A step that would make the state non-finite, or Q's diagonal not positive, is
// FailedPrecondition and changes nothing; the covariance is updated in forms that cannot
// cancel below 0 or overflow (h_i h_j / sigma_y^2 as (h_i / sigma_y)(h_j / sigma_y)), so
// every state a step reaches is one FromState accepts.
//
// The squared loss only; the model has no learning rate, lambda, offset, budget or
// averaged hypothesis (ValidateConfig refuses them). The same state and input give the
// same bits, so a restored model continues exactly (within one build).
//
// Not thread-safe: const methods may run concurrently with each other, but not with
// Observe.
//
// Example:
//   okl::ModelConfig config;
//   config.dim = 6;
//   config.kernel = {.type = okl::KernelType::kGaussian, .gamma = 1.0 / 2048};
//   config.loss = {.type = okl::LossType::kSquared};
//   config.krls_tracker = {.max_basis = 100, .noise_variance = 1e-6};
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));
//   OKL_ASSIGN_OR_RETURN(okl::Observation o, model->Observe(x, y));  // o.prediction: p_t
#ifndef OKL_CORE_KRLS_TRACKER_H_
#define OKL_CORE_KRLS_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/aligned_allocator.h"
#include "core/config.h"
#include "core/kernel.h"
#include "core/model.h"

namespace okl {

class KrlsTrackerModel : public Model {
 public:
  // The dictionary (M + 1 bases of dim values), Q, Sigma and (forgetting < 1) K as
  // (M + 1) x (M + 1) matrices, the vectors of a step, and the regret window with the
  // W x W Gram matrix its comparator allocates. A Predict call holds 4 (M + 1) doubles
  // more while it runs.
  static size_t WorstCaseMemoryBytes(const ModelConfig& config);

  // InvalidArgument if ValidateConfig(config) fails or config.krls_tracker.max_basis is 0.
  static absl::StatusOr<std::unique_ptr<KrlsTrackerModel>> Create(const ModelConfig& config);
  // InvalidArgument if the state is inconsistent: a config Create rejects, more bases than
  // max_basis, arrays whose sizes disagree with the bases (kernel_matrix empty unless
  // forgetting < 1), any field of the other kinds set, non-finite numbers, a negative
  // signal-power sum, Q not positive or Sigma negative on its diagonal, more
  // pruned bases or mistakes than steps, a regret window that does not fit.
  static absl::StatusOr<std::unique_ptr<KrlsTrackerModel>> FromState(const ModelState& state);

  ModelState ExportState() const override;

  // mu' Q mu, the squared RKHS norm of the posterior mean k(., B) Q mu.
  double SquaredNorm() const override;
  ModelStats stats() const override;
  // m, the bases in the dictionary.
  size_t expansion_size() const override { return size_; }
  size_t MemoryBytes() const override;
  bool has_predictive_variance() const override { return true; }

  // s0^2: the maximum-likelihood signal power (1 before the first example).
  double signal_power() const;

 protected:
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) override;
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const override;
  void PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                    double* variance) const override;

 private:
  // 64-byte aligned, and every column of a matrix too (stride_ is a multiple of 8
  // doubles): the vectorised loops then never peel a varying number of elements into
  // scalar code, where exp() may round differently, so the same state and input give the
  // same bits wherever the heap put them (a restored model continues bit-identically).
  using AlignedVector = std::vector<double, CacheAlignedAllocator<double>>;

  // The index of no basis: a step's `pruned` when it prunes none.
  static constexpr size_t kNoBasis = std::numeric_limits<size_t>::max();

  explicit KrlsTrackerModel(const ModelConfig& config);

  // Entry (i, j) of a matrix, column-major with leading dimension stride_.
  double& at(AlignedVector& matrix, size_t i, size_t j) const {
    return matrix[j * stride_ + i];
  }
  double at(const AlignedVector& matrix, size_t i, size_t j) const {
    return matrix[j * stride_ + i];
  }
  // out = A v over the leading n x n block of A.
  void MultiplySymmetric(const AlignedVector& matrix, size_t n, const double* v,
                         double* out) const;
  // k(b_i, x) for the m bases into out.
  void KernelRow(absl::Span<const double> x, double* out) const;
  // The first step: the dictionary becomes {x}.
  absl::StatusOr<Observation> FirstStep(absl::Span<const double> x, double y);
  // What steps 1-2 find at x with the forgotten posterior.
  struct StepPrediction {
    double kxx;                // k(x, x)
    double prediction;         // p = sqrt(lambda) k' Q mu, the prequential prediction
    double gamma2;             // gamma^2 = k(x, x) + jitter - k' q
    double function_variance;  // sigma_f^2 = gamma^2 + q' h
  };
  // Steps 1-2: k_, q_ = Q k and h_ = Sigma' q (and kq_ = K q when forgetting) for x, with
  // what they predict. Writes none of the state, only the step's vectors.
  StepPrediction PredictForgotten(absl::Span<const double> x, double root_lambda);
  // Where steps 1-2 write k, q, h and kq (kq only when forgetting): size_ entries each.
  struct StepVectors {
    double* k;
    double* q;
    double* h;
    double* kq;
  };
  // Steps 1-2 into `v`: PredictForgotten into the step's vectors, a Predict into its own.
  StepPrediction PredictInto(absl::Span<const double> x, double root_lambda,
                             const StepVectors& v) const;
  // Step 3: next_mean_, the posterior mean with y over the m bases and x, and
  // q_next_mean_ = Q times its first m entries.
  void ConditionMean(size_t m, double root_lambda, double gain, double prediction,
                     double function_variance);
  // Step 4 for an x the dictionary does not represent (gamma^2 >= jitter): the basis to
  // prune, kNoBasis while the dictionary has room; or kNoBasis with *reduced set when
  // dropping x costs less than any basis (then x is not kept).
  size_t ChoosePruned(size_t m, double gamma2, double t, bool* reduced) const;
  // Q' = [Q 0; 0 0] + p p' / gamma^2 for the new basis m, downdated by basis `pruned`
  // unless it is kNoBasis (InverseStaysPositive left its column in pruned_column_).
  void GrowInverseKernel(size_t m, double inverse_gamma2, size_t pruned);
  // x joins the dictionary as basis m = size_: the covariance's and the kernel matrix's
  // borders, the mean and the coefficients (t as in Step).
  void AppendBasis(absl::Span<const double> x, double kxx, double function_variance,
                   double inverse_y_variance, double t);
  // Drops basis r from the size_ in the dictionary once GrowInverseKernel downdated Q.
  void PruneBasis(size_t r);
  // scaled_h_ = h / sigma_y; false if it is not finite.
  bool ScaleForCovariance(size_t m, double inverse_y_variance);
  // True if Q's update keeps a finite, positive diagonal: [Q 0; 0 0] + p p' / gamma^2 and,
  // if `pruned` names a basis, its downdate by that basis's column, which it leaves in
  // pruned_column_ for the update. Sets q_[m] = -1 (p's last entry).
  bool InverseStaysPositive(size_t m, double inverse_gamma2, size_t pruned);
  // The largest |entry| of the leading n x n block of a matrix.
  double MatrixMaxAbs(const AlignedVector& matrix, size_t n) const;
  // True if every entry the step writes stays finite, by bounds from the largest entries
  // of the matrices and vectors it combines (`border_bound`: the new covariance border's).
  // Needed for a restored state, which may hold any finite values.
  bool UpdateStaysFinite(size_t m, bool reduced, size_t pruned, double inverse_gamma2, double t,
                         double border_bound) const;
  // Sigma <- (lambda Sigma + (1 - lambda) K) - h h' / sigma_y^2 over the first m bases:
  // the back-off to the prior and the conditioning on y, in one pass.
  void ConditionOldCovariance(size_t m);
  // Removes basis r of the n in the dictionary by moving basis n - 1 into its place.
  void MoveLastBasisTo(size_t r, size_t n);

  const Kernel kernel_;
  const double noise_variance_;  // sigma_n^2
  const double forgetting_;      // lambda
  const double jitter_;
  const bool keeps_kernel_matrix_;  // forgetting < 1: back-off needs K_BB
  const size_t capacity_;           // M + 1: a step holds the new basis before pruning
  const size_t stride_;             // capacity_ rounded up to a cache line of doubles

  size_t size_ = 0;  // m
  // The bases coordinate-major, as Kernel::EvaluateRows reads them: coordinate j of
  // basis i at [j * stride_ + i].
  AlignedVector basis_columns_;
  AlignedVector inverse_kernel_;        // Q
  AlignedVector posterior_covariance_;  // Sigma
  AlignedVector kernel_matrix_;         // K_BB without jitter; empty unless forgetting < 1
  AlignedVector posterior_mean_;        // mu
  // Q mu: the mean's expansion coefficients, f(x) = k(x, B) . coefficients_, computed in
  // each step from the step's own quantities (and kept in the state), so a prediction
  // costs O(m dim), not O(m^2).
  AlignedVector coefficients_;
  double signal_power_numerator_ = 0.0;
  double signal_power_denominator_ = 0.0;
  uint64_t bases_pruned_ = 0;

  // Step's vectors (capacity_ entries each): k, q = Q k, h = Sigma q (and K q), h /
  // sigma_y, the candidate mean, Q times it, and the new Q's column of the pruned basis.
  AlignedVector k_;
  AlignedVector q_;
  AlignedVector h_;
  AlignedVector kq_;
  AlignedVector scaled_h_;
  AlignedVector next_mean_;
  AlignedVector q_next_mean_;
  AlignedVector pruned_column_;
};

}  // namespace okl

#endif  // OKL_CORE_KRLS_TRACKER_H_
