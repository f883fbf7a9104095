#include "core/krls_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {
namespace {

double Dot(const double* a, const double* b, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

double MaxAbs(const double* values, size_t n) {
  double largest = 0.0;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(values[i]));
  return largest;
}

bool AllFinite(const double* values, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) return false;
  }
  return true;
}

size_t PackedSize(size_t n) { return n * (n + 1) / 2; }

// The capacity of each of a step's vectors: the dictionary plus the new basis.
size_t Capacity(const ModelConfig& config) { return size_t{config.krls_tracker.max_basis} + 1; }

// The leading dimension of the matrices: the capacity rounded up to a cache line.
size_t Stride(const ModelConfig& config) {
  constexpr size_t kLine = kCacheLineBytes / sizeof(double);
  return (Capacity(config) + kLine - 1) / kLine * kLine;
}

}  // namespace

size_t KrlsTrackerModel::WorstCaseMemoryBytes(const ModelConfig& config) {
  const uint64_t capacity = Capacity(config);
  const uint64_t stride = Stride(config);
  const uint64_t matrices = config.krls_tracker.forgetting < 1 ? 3 : 2;
  const uint64_t window = config.regret_window;
  // The bases, the matrices, ten vectors (mu, the coefficients and Step's eight), and a
  // Predict's four.
  return sizeof(double) * (stride * config.dim + matrices * stride * capacity + 14 * capacity +
                           window * (config.dim + 2) + window * window);
}

KrlsTrackerModel::KrlsTrackerModel(const ModelConfig& config)
    : Model(config),
      kernel_(config.kernel, config.dim),
      noise_variance_(config.krls_tracker.noise_variance),
      forgetting_(config.krls_tracker.forgetting),
      jitter_(config.krls_tracker.jitter),
      keeps_kernel_matrix_(config.krls_tracker.forgetting < 1),
      capacity_(Capacity(config)),
      stride_(Stride(config)),
      basis_columns_(stride_ * config.dim),
      inverse_kernel_(stride_ * capacity_),
      posterior_covariance_(stride_ * capacity_),
      kernel_matrix_(keeps_kernel_matrix_ ? stride_ * capacity_ : 0),
      posterior_mean_(capacity_),
      coefficients_(capacity_),
      k_(capacity_),
      q_(capacity_),
      h_(capacity_),
      kq_(capacity_),
      scaled_h_(capacity_),
      next_mean_(capacity_),
      q_next_mean_(capacity_),
      pruned_column_(capacity_) {}

absl::StatusOr<std::unique_ptr<KrlsTrackerModel>> KrlsTrackerModel::Create(
    const ModelConfig& config) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (!config.krls_tracker_kind()) {
    return absl::InvalidArgumentError(
        "a KRLS tracker needs krls_tracker.max_basis > 0 (its dictionary size)");
  }
  return std::unique_ptr<KrlsTrackerModel>(new KrlsTrackerModel(config));
}

void KrlsTrackerModel::MultiplySymmetric(const AlignedVector& matrix, size_t n, const double* v,
                                         double* out) const {
  // Column by column (axpy), which the compiler vectorises; each out[i] sums its terms in
  // the order j = 0, 1, ..., so the result depends on nothing but the inputs.
  std::fill(out, out + n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    const double vj = v[j];
    const double* column = &matrix[j * stride_];
    for (size_t i = 0; i < n; ++i) out[i] += column[i] * vj;
  }
}

void KrlsTrackerModel::KernelRow(absl::Span<const double> x, double* out) const {
  if (size_ == 0) return;
  kernel_.EvaluateRows(basis_columns_.data(), stride_, size_, x, out);
}

double KrlsTrackerModel::signal_power() const {
  return signal_power_denominator_ > 0 ? signal_power_numerator_ / signal_power_denominator_
                                       : 1.0;
}

double KrlsTrackerModel::PredictUnchecked(absl::Span<const double> x,
                                          PredictionMode mode) const {
  // The prediction the next step would make: after its back-off to the prior.
  AlignedVector k(size_);
  KernelRow(x, k.data());
  const double mean = Dot(k.data(), coefficients_.data(), size_);
  return keeps_kernel_matrix_ ? std::sqrt(forgetting_) * mean : mean;
}

void KrlsTrackerModel::PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                                    double* variance) const {
  // A step's steps 1-2 (PredictForgotten) into vectors of its own: the same prediction
  // the next Observe of x would make, and its variance.
  const size_t m = size_;
  AlignedVector k(m), q(m), h(m), kq(keeps_kernel_matrix_ ? m : 0);
  const double root_lambda = keeps_kernel_matrix_ ? std::sqrt(forgetting_) : 1.0;
  const StepPrediction at_x =
      PredictInto(x, root_lambda, {.k = k.data(), .q = q.data(), .h = h.data(), .kq = kq.data()});
  *mean = at_x.prediction;
  *variance = signal_power() * (noise_variance_ + at_x.function_variance);
}

absl::StatusOr<Observation> KrlsTrackerModel::FirstStep(absl::Span<const double> x, double y) {
  const double kxx = kernel_.Evaluate(x, x);
  const double k = kxx + jitter_;
  const StepScalars step = ComputeStepScalars(0.0, y);
  const double evidence = k + noise_variance_;  // the prior variance of y
  const double inverse = 1 / k;
  const double mean = y * k / evidence;
  // k - k^2 / (k + sigma_n^2), in the form that cannot cancel below 0.
  const double covariance = k * (noise_variance_ / evidence);
  const double numerator = y * y / evidence;
  OKL_RETURN_IF_ERROR(
      CheckStepFinite(step, std::isfinite(kxx) && std::isfinite(inverse) && inverse > 0 &&
                                std::isfinite(mean) && std::isfinite(covariance) &&
                                std::isfinite(numerator) && std::isfinite(inverse * mean)));
  at(inverse_kernel_, 0, 0) = inverse;
  at(posterior_covariance_, 0, 0) = covariance;
  if (keeps_kernel_matrix_) at(kernel_matrix_, 0, 0) = kxx;
  posterior_mean_[0] = mean;
  coefficients_[0] = inverse * mean;
  for (size_t j = 0; j < config_.dim; ++j) basis_columns_[j * stride_] = x[j];
  signal_power_numerator_ = numerator;
  signal_power_denominator_ = 1;
  size_ = 1;
  return CommitStepScalars(step, x, y);
}

KrlsTrackerModel::StepPrediction KrlsTrackerModel::PredictForgotten(absl::Span<const double> x,
                                                                    double root_lambda) {
  return PredictInto(x, root_lambda,
                     {.k = k_.data(), .q = q_.data(), .h = h_.data(), .kq = kq_.data()});
}

KrlsTrackerModel::StepPrediction KrlsTrackerModel::PredictInto(
    absl::Span<const double> x, double root_lambda, const StepVectors& v) const {
  const size_t m = size_;
  const double lambda = forgetting_;
  const bool forget = keeps_kernel_matrix_;
  KernelRow(x, v.k);
  const double kxx = kernel_.Evaluate(x, x);
  const double kc = Dot(v.k, coefficients_.data(), m);
  const double prediction = forget ? root_lambda * kc : kc;
  MultiplySymmetric(inverse_kernel_, m, v.k, v.q);
  const double gamma2 = std::max(0.0, kxx + jitter_ - Dot(v.k, v.q, m));
  MultiplySymmetric(posterior_covariance_, m, v.q, v.h);
  if (forget) {
    MultiplySymmetric(kernel_matrix_, m, v.q, v.kq);
    for (size_t i = 0; i < m; ++i) v.h[i] = lambda * v.h[i] + (1 - lambda) * v.kq[i];
  }
  const double function_variance = std::max(0.0, gamma2 + Dot(v.q, v.h, m));
  return {.kxx = kxx,
          .prediction = prediction,
          .gamma2 = gamma2,
          .function_variance = function_variance};
}

void KrlsTrackerModel::ConditionMean(size_t m, double root_lambda, double gain,
                                     double prediction, double function_variance) {
  for (size_t i = 0; i < m; ++i)
    next_mean_[i] = root_lambda * posterior_mean_[i] + gain * h_[i];
  next_mean_[m] = prediction + gain * function_variance;
  MultiplySymmetric(inverse_kernel_, m, next_mean_.data(), q_next_mean_.data());
}

size_t KrlsTrackerModel::ChoosePruned(size_t m, double gamma2, double t, bool* reduced) const {
  if (m + 1 <= config_.krls_tracker.max_basis) return kNoBasis;
  size_t best = kNoBasis;
  double best_error = 0.0;
  for (size_t i = 0; i < m; ++i) {
    const double diagonal = at(inverse_kernel_, i, i) + q_[i] * q_[i] / gamma2;
    const double cost = std::abs(q_next_mean_[i] + q_[i] * t) / diagonal;
    if (best == kNoBasis || cost < best_error) {
      best = i;
      best_error = cost;
    }
  }
  const double new_cost = std::abs(t) * gamma2;
  if (new_cost < best_error) {
    *reduced = true;
    return kNoBasis;
  }
  return best;
}

absl::StatusOr<Observation> KrlsTrackerModel::Step(absl::Span<const double> x, double y) {
  OKL_RETURN_IF_ERROR(CheckStepCounter());
  if (size_ == 0) return FirstStep(x, y);
  const size_t m = size_;
  const double lambda = forgetting_;
  const bool forget = keeps_kernel_matrix_;
  const double root_lambda = forget ? std::sqrt(lambda) : 1.0;

  // 1-2. Predict with the forgotten posterior, which is not written until the step is
  // known to succeed: its mean is sqrt(lambda) mu and Sigma' q = lambda Sigma q +
  // (1 - lambda) K q.
  const auto [kxx, prediction, gamma2, function_variance] = PredictForgotten(x, root_lambda);
  const double y_variance = noise_variance_ + function_variance;
  const StepScalars step = ComputeStepScalars(prediction, y);
  const double error = y - prediction;
  const double gain = error / y_variance;
  const double numerator = signal_power_numerator_ + lambda * error * error / y_variance;

  // 3. The posterior mean with y, over the dictionary and x.
  ConditionMean(m, root_lambda, gain, prediction, function_variance);

  // 4. Keep x, or not, and which basis to prune. With x kept, Q' = [Q 0; 0 0] + p p' /
  // gamma^2 for p = [q; -1], so Q' mu' = [Q mu'_B + q t; -t] with t = p' mu' / gamma^2,
  // and diag(Q') = [Q_ii + q_i^2 / gamma^2; 1 / gamma^2]: the criterion needs no Q'.
  bool reduced = gamma2 < jitter_;
  const double t =
      reduced ? 0.0 : (Dot(q_.data(), next_mean_.data(), m) - next_mean_[m]) / gamma2;
  const size_t pruned = reduced ? kNoBasis : ChoosePruned(m, gamma2, t, &reduced);
  const double inverse_y_variance = 1 / y_variance;
  const double inverse_gamma2 = 1 / gamma2;
  const bool update_valid =
      std::isfinite(kxx) && std::isfinite(gamma2) && std::isfinite(function_variance) &&
      std::isfinite(gain) && std::isfinite(numerator) && std::isfinite(t) &&
      AllFinite(k_.data(), m) && AllFinite(q_.data(), m) && AllFinite(h_.data(), m) &&
      AllFinite(next_mean_.data(), m + 1) && AllFinite(q_next_mean_.data(), m) &&
      ScaleForCovariance(m, inverse_y_variance) &&
      (reduced || InverseStaysPositive(m, inverse_gamma2, pruned)) &&
      UpdateStaysFinite(m, reduced, pruned, inverse_gamma2, t,
                        std::max(MaxAbs(h_.data(), m), function_variance) *
                            (noise_variance_ * inverse_y_variance));
  OKL_RETURN_IF_ERROR(CheckStepFinite(step, update_valid));

  // Commit. Every matrix entry (i, j) is computed by the same expression as (j, i), whose
  // products p_i p_j commute exactly, so the matrices stay exactly symmetric.
  signal_power_numerator_ = numerator;
  signal_power_denominator_ += lambda;
  // Sigma' - h h' / sigma_y^2 on the old dictionary: the whole covariance update of the
  // reduced step, and the old block of the full one.
  ConditionOldCovariance(m);
  if (reduced) {
    // The reduced update: Q unchanged, x not kept.
    std::copy_n(next_mean_.begin(), m, posterior_mean_.begin());
    std::copy_n(q_next_mean_.begin(), m, coefficients_.begin());
    ++bases_pruned_;
    return CommitStepScalars(step, x, y);
  }
  GrowInverseKernel(m, inverse_gamma2, pruned);
  AppendBasis(x, kxx, function_variance, inverse_y_variance, t);
  if (pruned != kNoBasis) PruneBasis(pruned);
  return CommitStepScalars(step, x, y);
}

void KrlsTrackerModel::GrowInverseKernel(size_t m, double inverse_gamma2, size_t pruned) {
  const size_t n = m + 1;
  // Q' = [Q 0; 0 0] + p p' / gamma^2, p = [q; -1] (q_[m] is -1); and, pruning r,
  // Q' - a a' / a_r for a = Q'(:, r) (pruned_column_), in the same pass over Q.
  for (size_t i = 0; i < m; ++i) {
    at(inverse_kernel_, i, m) = 0.0;
    at(inverse_kernel_, m, i) = 0.0;
  }
  at(inverse_kernel_, m, m) = 0.0;
  if (pruned == kNoBasis) {
    for (size_t j = 0; j < n; ++j) {
      double* column = &inverse_kernel_[j * stride_];
      const double qj = q_[j];
      for (size_t i = 0; i < n; ++i) column[i] += (q_[i] * qj) * inverse_gamma2;
    }
  } else {
    const double inverse_pivot = 1 / pruned_column_[pruned];
    for (size_t j = 0; j < n; ++j) {
      double* column = &inverse_kernel_[j * stride_];
      const double qj = q_[j];
      const double aj = pruned_column_[j];
      for (size_t i = 0; i < n; ++i) {
        column[i] = column[i] + (q_[i] * qj) * inverse_gamma2 -
                    (pruned_column_[i] * aj) * inverse_pivot;
      }
    }
  }
}

void KrlsTrackerModel::AppendBasis(absl::Span<const double> x, double kxx,
                                   double function_variance, double inverse_y_variance,
                                   double t) {
  const size_t m = size_;
  const size_t n = m + 1;
  // Sigma' = [Sigma' h; h' sigma_f^2] - p p' / sigma_y^2, p = [h; sigma_f^2]: the old
  // block is done (ConditionOldCovariance); the border is h_i - h_i sigma_f^2 / sigma_y^2,
  // computed as h_i sigma_n^2 / sigma_y^2, which neither cancels nor overflows.
  h_[m] = function_variance;
  const double noise_share = noise_variance_ * inverse_y_variance;
  for (size_t i = 0; i < n; ++i) {
    const double value = h_[i] * noise_share;
    at(posterior_covariance_, i, m) = value;
    at(posterior_covariance_, m, i) = value;
  }
  if (keeps_kernel_matrix_) {
    for (size_t i = 0; i < m; ++i) {
      at(kernel_matrix_, i, m) = k_[i];
      at(kernel_matrix_, m, i) = k_[i];
    }
    at(kernel_matrix_, m, m) = kxx;
  }
  for (size_t j = 0; j < config_.dim; ++j) basis_columns_[j * stride_ + m] = x[j];
  std::copy_n(next_mean_.begin(), n, posterior_mean_.begin());
  for (size_t i = 0; i < m; ++i) coefficients_[i] = q_next_mean_[i] + q_[i] * t;
  coefficients_[m] = -t;
  size_ = n;
}

void KrlsTrackerModel::PruneBasis(size_t r) {
  const size_t n = size_;
  // Prune basis r: Q of the rest is Q'_ss - Q'_sr Q'_rs / Q'_rr (GrowInverseKernel did
  // it), and the coefficients Q mu of the rest follow from those with r by the same
  // identity.
  const double inverse_pivot = 1 / pruned_column_[r];
  const double coefficient_r = coefficients_[r];
  for (size_t i = 0; i < n; ++i) {
    coefficients_[i] -= pruned_column_[i] * coefficient_r * inverse_pivot;
  }
  MoveLastBasisTo(r, n);
  size_ = n - 1;
  ++bases_pruned_;
}

bool KrlsTrackerModel::ScaleForCovariance(size_t m, double inverse_y_variance) {
  const double scale = std::sqrt(inverse_y_variance);
  for (size_t i = 0; i < m; ++i) scaled_h_[i] = h_[i] * scale;
  return AllFinite(scaled_h_.data(), m);
}

bool KrlsTrackerModel::InverseStaysPositive(size_t m, double inverse_gamma2, size_t pruned) {
  // A positive-definite matrix's entries are bounded by its diagonal, so a finite,
  // positive new diagonal bounds the whole update.
  q_[m] = -1.0;
  if (!(std::isfinite(inverse_gamma2) && inverse_gamma2 > 0)) return false;
  if (pruned != kNoBasis) {
    const double qr = q_[pruned];
    for (size_t i = 0; i <= m; ++i) {
      pruned_column_[i] =
          (i < m ? at(inverse_kernel_, i, pruned) : 0.0) + (q_[i] * qr) * inverse_gamma2;
    }
    if (!AllFinite(pruned_column_.data(), m + 1) || !(pruned_column_[pruned] > 0)) return false;
  }
  // The new diagonal entries, computed exactly as Step computes them.
  const double inverse_pivot = pruned != kNoBasis ? 1 / pruned_column_[pruned] : 0.0;
  for (size_t i = 0; i <= m; ++i) {
    double diagonal =
        (i < m ? at(inverse_kernel_, i, i) : 0.0) + (q_[i] * q_[i]) * inverse_gamma2;
    if (pruned != kNoBasis) {
      if (i == pruned) continue;
      diagonal = diagonal - (pruned_column_[i] * pruned_column_[i]) * inverse_pivot;
    }
    if (!std::isfinite(diagonal) || !(diagonal > 0)) return false;
  }
  return true;
}

double KrlsTrackerModel::MatrixMaxAbs(const AlignedVector& matrix, size_t n) const {
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Map<const Matrix, 0, Eigen::OuterStride<>> block(
      matrix.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n),
      Eigen::OuterStride<>(static_cast<Eigen::Index>(stride_)));
  return block.cwiseAbs().maxCoeff();
}

bool KrlsTrackerModel::UpdateStaysFinite(size_t m, bool reduced, size_t pruned,
                                         double inverse_gamma2, double t,
                                         double border_bound) const {
  // Each bound adds the largest magnitudes of the terms an entry is made of; under
  // DBL_MAX / 16 no sum of them can overflow. States a step reaches are far inside them;
  // a restored state with extreme (finite) values is what they are for.
  constexpr double kLimit = std::numeric_limits<double>::max() / 16;
  const double g = MaxAbs(scaled_h_.data(), m);
  double covariance = MatrixMaxAbs(posterior_covariance_, m) + g * g;
  if (keeps_kernel_matrix_) covariance += MatrixMaxAbs(kernel_matrix_, m);
  if (!(covariance <= kLimit)) return false;
  if (reduced) return true;  // Q is unchanged; the coefficients are Q mu', checked finite
  if (!(border_bound <= kLimit)) return false;
  const double q = std::max(1.0, MaxAbs(q_.data(), m));  // p = [q; -1]
  double inverse = MatrixMaxAbs(inverse_kernel_, m) + q * q * inverse_gamma2;
  double coefficients = MaxAbs(q_next_mean_.data(), m) + q * std::abs(t);
  if (pruned != kNoBasis) {
    const double a = MaxAbs(pruned_column_.data(), m + 1);
    const double inverse_pivot = 1 / pruned_column_[pruned];
    inverse += a * a * inverse_pivot;
    coefficients += a * coefficients * inverse_pivot;
  }
  return inverse <= kLimit && coefficients <= kLimit;
}

void KrlsTrackerModel::ConditionOldCovariance(size_t m) {
  // Sigma_ij -= g_i g_j for g = h / sigma_y (scaled_h_): bounded by Sigma's diagonal, so it
  // cannot overflow as h_i h_j could; a diagonal entry that rounds below 0 is clamped.
  const double* g = scaled_h_.data();
  if (!keeps_kernel_matrix_) {
    for (size_t j = 0; j < m; ++j) {
      double* sigma = &posterior_covariance_[j * stride_];
      const double gj = g[j];
      for (size_t i = 0; i < m; ++i) sigma[i] -= g[i] * gj;
    }
  } else {
    const double lambda = forgetting_;
    for (size_t j = 0; j < m; ++j) {
      double* sigma = &posterior_covariance_[j * stride_];
      const double* kernel = &kernel_matrix_[j * stride_];
      const double gj = g[j];
      for (size_t i = 0; i < m; ++i) {
        sigma[i] = (lambda * sigma[i] + (1 - lambda) * kernel[i]) - g[i] * gj;
      }
    }
  }
  for (size_t i = 0; i < m; ++i) {
    double& diagonal = at(posterior_covariance_, i, i);
    diagonal = std::max(0.0, diagonal);
  }
}

void KrlsTrackerModel::MoveLastBasisTo(size_t r, size_t n) {
  const size_t last = n - 1;
  if (r == last) return;
  auto move_in = [&](AlignedVector& matrix) {
    for (size_t i = 0; i < n; ++i) at(matrix, i, r) = at(matrix, i, last);
    for (size_t j = 0; j < n; ++j) at(matrix, r, j) = at(matrix, last, j);
  };
  move_in(inverse_kernel_);
  move_in(posterior_covariance_);
  if (keeps_kernel_matrix_) move_in(kernel_matrix_);
  posterior_mean_[r] = posterior_mean_[last];
  coefficients_[r] = coefficients_[last];
  for (size_t j = 0; j < config_.dim; ++j) {
    basis_columns_[j * stride_ + r] = basis_columns_[j * stride_ + last];
  }
}

double KrlsTrackerModel::SquaredNorm() const {
  // |f|^2 = a' K a for a = Q mu, and K = Q^-1 - jitter I.
  const double a_mu = Dot(coefficients_.data(), posterior_mean_.data(), size_);
  const double a_a = Dot(coefficients_.data(), coefficients_.data(), size_);
  return std::max(0.0, a_mu - jitter_ * a_a);
}

ModelStats KrlsTrackerModel::stats() const {
  ModelStats stats = ScalarStats();
  stats.expansion_size = static_cast<uint32_t>(size_);
  stats.terms_removed = bases_pruned_;
  stats.signal_power = signal_power();
  stats.noise_variance = signal_power() * noise_variance_;
  return stats;
}

size_t KrlsTrackerModel::MemoryBytes() const {
  const size_t doubles = basis_columns_.capacity() + inverse_kernel_.capacity() +
                         posterior_covariance_.capacity() + kernel_matrix_.capacity() +
                         posterior_mean_.capacity() + coefficients_.capacity() + k_.capacity() +
                         q_.capacity() + h_.capacity() + kq_.capacity() + scaled_h_.capacity() +
                         next_mean_.capacity() + q_next_mean_.capacity() +
                         pruned_column_.capacity();
  return doubles * sizeof(double) + regret_window_.MemoryBytes();
}

ModelState KrlsTrackerModel::ExportState() const {
  ModelState state;
  state.config = config_;
  const size_t m = size_;
  const size_t dim = config_.dim;
  state.support.resize(m * dim);
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < dim; ++j)
      state.support[i * dim + j] = basis_columns_[j * stride_ + i];
  }
  auto packed = [&](const AlignedVector& matrix) {
    std::vector<double> out;
    out.reserve(PackedSize(m));
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j <= i; ++j) out.push_back(at(matrix, i, j));
    }
    return out;
  };
  state.posterior_mean.assign(posterior_mean_.begin(), posterior_mean_.begin() + m);
  state.coefficients.assign(coefficients_.begin(), coefficients_.begin() + m);
  state.posterior_covariance = packed(posterior_covariance_);
  state.inverse_kernel = packed(inverse_kernel_);
  if (keeps_kernel_matrix_) state.kernel_matrix = packed(kernel_matrix_);
  state.signal_power_numerator = signal_power_numerator_;
  state.signal_power_denominator = signal_power_denominator_;
  state.terms_removed = bases_pruned_;
  ExportStateScalars(&state);
  return state;
}

absl::StatusOr<std::unique_ptr<KrlsTrackerModel>> KrlsTrackerModel::FromState(
    const ModelState& state) {
  const ModelConfig& config = state.config;
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<KrlsTrackerModel> model, Create(config));
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
  };
  const size_t dim = config.dim;
  if (state.support.size() % dim != 0) {
    return inconsistent(absl::StrCat("support holds ", state.support.size(),
                                     " values, not a multiple of dim ", dim));
  }
  const size_t m = state.support.size() / dim;
  if (m > config.krls_tracker.max_basis) {
    return inconsistent(absl::StrCat("the dictionary holds ", m, " bases, more than max_basis ",
                                     config.krls_tracker.max_basis));
  }
  if ((m == 0) != (state.steps == 0)) {
    return inconsistent(absl::StrCat(m, " bases after ", state.steps,
                                     " steps (a tracker has bases exactly once it has steps)"));
  }
  const size_t packed = PackedSize(m);
  const size_t kernel_entries = model->keeps_kernel_matrix_ ? packed : 0;
  if (state.posterior_mean.size() != m || state.coefficients.size() != m ||
      state.posterior_covariance.size() != packed || state.inverse_kernel.size() != packed ||
      state.kernel_matrix.size() != kernel_entries) {
    return inconsistent(absl::StrCat(
        "for ", m, " bases the tracker needs ", m, " posterior means and coefficients, ",
        packed, " entries of the covariance and the inverse kernel and ", kernel_entries,
        " of the kernel matrix; got ", state.posterior_mean.size(), ", ",
        state.coefficients.size(), ", ", state.posterior_covariance.size(), ", ",
        state.inverse_kernel.size(), " and ", state.kernel_matrix.size()));
  }
  if (!state.added_at.empty() || !state.average_base.empty() || !state.average_mark.empty() ||
      !state.average_previous.empty() || !state.retired_support.empty() ||
      !state.retired_sums.empty() || !state.retired_previous_sums.empty() ||
      !state.retired_at.empty() || !state.weights.empty() || !state.weight_sums.empty() ||
      !state.sparse_support.empty() || !state.retired_sparse_support.empty() ||
      state.scale != 1.0 || state.average_sum != 0 || state.average_offset_sum != 0 ||
      state.average_block_start != 0 || state.average_previous_start != 0 ||
      state.average_previous_offset_sum != 0 || state.offset != 0) {
    return inconsistent("a KRLS tracker's state sets fields of another model kind");
  }
  OKL_RETURN_IF_ERROR(ValidateStateScalars(state));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("support", state.support));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("posterior_mean", state.posterior_mean));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("coefficients", state.coefficients));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("posterior_covariance", state.posterior_covariance));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("inverse_kernel", state.inverse_kernel));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("kernel_matrix", state.kernel_matrix));
  const double numerator = state.signal_power_numerator;
  const double denominator = state.signal_power_denominator;
  if (!std::isfinite(numerator) || !std::isfinite(denominator) || numerator < 0 ||
      denominator < 0 || (m > 0 && !(denominator > 0))) {
    return inconsistent(absl::StrCat("signal power sums ", numerator, " / ", denominator,
                                     " (both finite and non-negative, the second positive "
                                     "once the tracker has steps)"));
  }
  if (state.terms_removed > state.steps) {
    return inconsistent(
        absl::StrCat("bases pruned ", state.terms_removed, " exceed steps ", state.steps));
  }
  auto unpack = [&](const std::vector<double>& in, AlignedVector& matrix) {
    for (size_t i = 0, e = 0; i < m; ++i) {
      for (size_t j = 0; j <= i; ++j, ++e) {
        model->at(matrix, i, j) = in[e];
        model->at(matrix, j, i) = in[e];
      }
    }
  };
  unpack(state.inverse_kernel, model->inverse_kernel_);
  unpack(state.posterior_covariance, model->posterior_covariance_);
  if (model->keeps_kernel_matrix_) unpack(state.kernel_matrix, model->kernel_matrix_);
  // Q is the inverse of a positive-definite matrix and Sigma a covariance: Q's diagonal
  // is positive and Sigma's never negative, as every step keeps them. (Not a full
  // definiteness test, which rounding may fail on a legitimate, ill-conditioned Q.)
  for (size_t i = 0; i < m; ++i) {
    if (!(model->at(model->inverse_kernel_, i, i) > 0)) {
      return inconsistent(absl::StrCat("inverse_kernel's diagonal entry ", i,
                                       " is not positive (not positive definite)"));
    }
    if (model->at(model->posterior_covariance_, i, i) < 0) {
      return inconsistent(
          absl::StrCat("posterior_covariance's diagonal entry ", i, " is negative"));
    }
  }
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < dim; ++j) {
      model->basis_columns_[j * model->stride_ + i] = state.support[i * dim + j];
    }
  }
  std::copy(state.posterior_mean.begin(), state.posterior_mean.end(),
            model->posterior_mean_.begin());
  std::copy(state.coefficients.begin(), state.coefficients.end(), model->coefficients_.begin());
  model->signal_power_numerator_ = numerator;
  model->signal_power_denominator_ = denominator;
  model->bases_pruned_ = state.terms_removed;
  model->size_ = m;
  model->RestoreStateScalars(state);
  return model;
}

}  // namespace okl
