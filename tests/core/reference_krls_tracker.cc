#include "tests/core/reference_krls_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "tests/core/reference_norma.h"

namespace okl::testing {
namespace {

using Matrix = std::vector<std::vector<double>>;

std::vector<double> Multiply(const Matrix& a, const std::vector<double>& v) {
  std::vector<double> out(a.size(), 0.0);
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < v.size(); ++j) out[i] += a[i][j] * v[j];
  }
  return out;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

ReferenceKrlsTracker::ReferenceKrlsTracker(const ModelConfig& config)
    : config_(config),
      sn2_(config.krls_tracker.noise_variance),
      lambda_(config.krls_tracker.forgetting),
      jitter_(config.krls_tracker.jitter),
      max_basis_(config.krls_tracker.max_basis) {}

double ReferenceKrlsTracker::Kernel(absl::Span<const double> a,
                                    absl::Span<const double> b) const {
  return ReferenceKernel(config_.kernel, a, b);
}

Matrix ReferenceKrlsTracker::ForgottenSigma() const {
  Matrix sigma = sigma_;
  for (size_t i = 0; i < dict_.size(); ++i) {
    for (size_t j = 0; j < dict_.size(); ++j) {
      sigma[i][j] = lambda_ * sigma_[i][j] + (1 - lambda_) * Kernel(dict_[i], dict_[j]);
    }
  }
  return sigma;
}

std::pair<double, double> ReferenceKrlsTracker::Predict(absl::Span<const double> x) const {
  const size_t m = dict_.size();
  const double kss = Kernel(x, x) + jitter_;
  if (m == 0) return {0.0, signal_power() * (sn2_ + kss)};
  std::vector<double> k(m);
  for (size_t i = 0; i < m; ++i) k[i] = Kernel(dict_[i], x);
  const std::vector<double> q = Multiply(q_, k);
  std::vector<double> mu = mu_;
  for (double& v : mu) v *= std::sqrt(lambda_);
  const double mean = Dot(q, mu);
  const double gamma2 = std::max(0.0, kss - Dot(k, q));
  const double sf2 = std::max(0.0, gamma2 + Dot(q, Multiply(ForgottenSigma(), q)));
  return {mean, signal_power() * (sn2_ + sf2)};
}

double ReferenceKrlsTracker::Observe(absl::Span<const double> x, double y) {
  const size_t m = dict_.size();
  if (m == 0) {
    const double k = Kernel(x, x) + jitter_;
    q_ = {{1 / k}};
    mu_ = {y * k / (k + sn2_)};
    sigma_ = {{k - k * k / (k + sn2_)}};
    dict_ = {std::vector<double>(x.begin(), x.end())};
    nums_ = y * y / (k + sn2_);
    dens_ = 1;
    return 0.0;
  }
  // Forget.
  sigma_ = ForgottenSigma();
  for (double& v : mu_) v *= std::sqrt(lambda_);
  // Predict.
  std::vector<double> kt(m);
  for (size_t i = 0; i < m; ++i) kt[i] = Kernel(dict_[i], x);
  const double ktt = Kernel(x, x) + jitter_;
  const std::vector<double> q = Multiply(q_, kt);
  const double y_mean = Dot(q, mu_);
  const double gamma2 = std::max(0.0, ktt - Dot(kt, q));
  const std::vector<double> h = Multiply(sigma_, q);
  const double sf2 = std::max(0.0, gamma2 + Dot(q, h));
  const double sy2 = sn2_ + sf2;
  // Include x: the bordered inverse, the conditioned mean and covariance.
  const Matrix q_old = q_;
  std::vector<double> p = q;
  p.push_back(-1.0);
  Matrix q_new(m + 1, std::vector<double>(m + 1, 0.0));
  for (size_t i = 0; i <= m; ++i) {
    for (size_t j = 0; j <= m; ++j) {
      q_new[i][j] = (i < m && j < m ? q_[i][j] : 0.0) + p[i] * p[j] / gamma2;
    }
  }
  std::vector<double> ph = h;
  ph.push_back(sf2);
  std::vector<double> mu_new = mu_;
  mu_new.push_back(y_mean);
  for (size_t i = 0; i <= m; ++i) mu_new[i] += (y - y_mean) / sy2 * ph[i];
  Matrix sigma_new(m + 1, std::vector<double>(m + 1));
  for (size_t i = 0; i <= m; ++i) {
    for (size_t j = 0; j <= m; ++j) {
      const double bordered =
          i < m && j < m ? sigma_[i][j] : (i == m && j == m ? sf2 : (i == m ? h[j] : h[i]));
      sigma_new[i][j] = bordered - ph[i] * ph[j] / sy2;
    }
  }
  q_ = q_new;
  mu_ = mu_new;
  sigma_ = sigma_new;
  dict_.emplace_back(x.begin(), x.end());
  nums_ += lambda_ * (y - y_mean) * (y - y_mean) / sy2;
  dens_ += lambda_;
  // Prune.
  const size_t n = m + 1;
  if (n > max_basis_ || gamma2 < jitter_) {
    size_t r = 0;
    if (gamma2 < jitter_) {
      r = m;
    } else {
      const std::vector<double> errors = Multiply(q_, mu_);
      double best = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double criterion = std::abs(errors[i] / q_[i][i]);
        if (i == 0 || criterion < best) {
          best = criterion;
          r = i;
        }
      }
    }
    if (r == m) {
      q_ = q_old;
      ++inputs_not_kept_;
    } else {
      Matrix reduced;
      for (size_t i = 0; i < n; ++i) {
        if (i == r) continue;
        std::vector<double> row;
        for (size_t j = 0; j < n; ++j) {
          if (j != r) row.push_back(q_[i][j] - q_[i][r] * q_[r][j] / q_[r][r]);
        }
        reduced.push_back(row);
      }
      q_ = reduced;
    }
    auto erase = [r](Matrix& a) {
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(r));
      for (auto& row : a) row.erase(row.begin() + static_cast<std::ptrdiff_t>(r));
    };
    erase(sigma_);
    mu_.erase(mu_.begin() + static_cast<std::ptrdiff_t>(r));
    dict_.erase(dict_.begin() + static_cast<std::ptrdiff_t>(r));
    ++pruned_;
  }
  return y_mean;
}

}  // namespace okl::testing
