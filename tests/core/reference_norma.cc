#include "tests/core/reference_norma.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"

namespace okl::testing {
namespace {

double SquaredDistance(absl::Span<const double> a, absl::Span<const double> b) {
  double sum = 0.0;
  for (size_t j = 0; j < a.size(); ++j) sum += (a[j] - b[j]) * (a[j] - b[j]);
  return sum;
}

double InnerProduct(absl::Span<const double> a, absl::Span<const double> b) {
  double sum = 0.0;
  for (size_t j = 0; j < a.size(); ++j) sum += a[j] * b[j];
  return sum;
}

double Sign(double v) { return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0); }

}  // namespace

double ReferenceKernel(const KernelConfig& config, absl::Span<const double> a,
                       absl::Span<const double> b) {
  switch (config.type) {
    case KernelType::kGaussian:
      return std::exp(-config.gamma * SquaredDistance(a, b));
    case KernelType::kLaplacian:
      return std::exp(-config.gamma * std::sqrt(SquaredDistance(a, b)));
    case KernelType::kLinear:
      return InnerProduct(a, b) + config.c;
    case KernelType::kPolynomial: {
      // Powers by repeated multiplication rather than std::pow: as plain, and it keeps
      // the comparison suite fast.
      const double base = config.gamma * InnerProduct(a, b) + config.c;
      double k = 1.0;
      for (uint32_t i = 0; i < config.degree; ++i) k *= base;
      return k;
    }
    case KernelType::kHeat: {
      // (4 pi t)^(-d/2): divide d times by (4 pi t)^(1/2).
      const double root = std::sqrt(4.0 * std::numbers::pi * config.t);
      double k = std::exp(-SquaredDistance(a, b) / (4.0 * config.t));
      for (size_t j = 0; j < a.size(); ++j) k /= root;
      return k;
    }
  }
  return 0.0;
}

ReferenceLossPoint ReferenceLoss(const LossConfig& config, double y, double f, double margin) {
  ReferenceLossPoint point;
  switch (config.type) {
    case LossType::kSquared:
      point.value = 0.5 * (f - y) * (f - y);
      point.derivative = f - y;
      break;
    case LossType::kHinge:
      point.violated = y * f < margin;
      point.value = std::max(0.0, margin - y * f);
      point.derivative = point.violated ? -y : 0.0;
      break;
    case LossType::kEpsilonInsensitive:
      point.violated = std::abs(f - y) > margin;
      point.value = std::max(0.0, std::abs(f - y) - margin);
      point.derivative = point.violated ? Sign(f - y) : 0.0;
      break;
    case LossType::kLogistic: {
      // log(1 + exp(-m)) without overflowing exp for large |m|.
      const double m = y * f;
      point.value = m > 0.0 ? std::log1p(std::exp(-m)) : -m + std::log1p(std::exp(m));
      point.derivative = -y / (1.0 + std::exp(m));
      break;
    }
    case LossType::kHuber: {
      const double r = f - y;
      if (std::abs(r) <= config.delta) {
        point.value = 0.5 * r * r;
        point.derivative = r;
      } else {
        point.value = config.delta * (std::abs(r) - config.delta / 2.0);
        point.derivative = config.delta * Sign(r);
      }
      break;
    }
    case LossType::kNovelty:
      point.violated = f < margin;
      point.value = std::max(0.0, margin - f);
      point.derivative = point.violated ? -1.0 : 0.0;
      break;
    case LossType::kMulticlassHinge:
    case LossType::kSoftmax:
      break;  // scores per class: tests/core/reference_multiclass.h
  }
  return point;
}

double ReferenceLearningRate(const LearningRateConfig& config, uint64_t t) {
  const double td = static_cast<double>(t);
  switch (config.schedule) {
    case Schedule::kConstant:
      return config.eta0;
    case Schedule::kInverseSqrt:
      return config.eta0 / std::sqrt(td);
    case Schedule::kPower:
      return config.eta0 * std::pow(td, -config.theta);
  }
  return 0.0;
}

double ReferenceInitialMargin(const LossConfig& config) {
  switch (config.type) {
    case LossType::kHinge:
    case LossType::kNovelty:
      return config.rho;
    case LossType::kEpsilonInsensitive:
      return config.epsilon;
    default:
      return 0.0;
  }
}

double ReferenceNextMargin(const LossConfig& config, double margin, double eta,
                           bool violated) {
  if (config.nu <= 0.0) return margin;
  const double s = violated ? 1.0 : 0.0;
  if (config.type == LossType::kHinge || config.type == LossType::kNovelty) {
    return margin + eta * (config.nu - s);
  }
  if (config.type == LossType::kEpsilonInsensitive) {
    return std::max(0.0, margin + eta * (s - config.nu));
  }
  return margin;
}

ReferenceNorma::ReferenceNorma(const ModelConfig& config)
    : config_(config), margin_(ReferenceInitialMargin(config.loss)) {}

ReferenceObservation ReferenceNorma::Observe(absl::Span<const double> x, double y) {
  // The averaged hypothesis is made of f_1..f_T, the hypotheses that predict: keep f_t.
  Hypothesis& f_t = history_.emplace_back();
  for (const Term& term : terms_) f_t.terms.emplace_back(term.id, term.alpha);
  f_t.offset = offset_;
  f_t.offset_scale = offset_scale_;

  ++steps_;
  const double eta = ReferenceLearningRate(config_.learning_rate, steps_);

  // 1. The prequential prediction; 2. the loss and its derivative there.
  ReferenceObservation observation;
  Evaluate(x, &observation.prediction, &observation.magnitude);
  const double p = observation.prediction;
  const ReferenceLossPoint loss = ReferenceLoss(config_.loss, y, p, margin_);
  observation.loss = loss.value;
  cumulative_loss_ += loss.value;
  if ((config_.loss.type == LossType::kHinge || config_.loss.type == LossType::kLogistic) &&
      y * p <= 0.0) {
    ++mistakes_;
  }

  // 3. Every coefficient shrinks.
  for (Term& term : terms_) term.alpha *= 1.0 - eta * config_.lambda;

  // 4. The new term (never a zero coefficient) and the unregularised offset.
  const double g = loss.derivative;
  if (g != 0.0) {
    terms_.push_back(NewTerm(std::vector<double>(x.begin(), x.end()), -eta * g));
    if (config_.offset) {
      offset_ -= eta * g;
      offset_scale_ += std::abs(eta * g);
    }
  }

  // The nu-trick, with s_t from the margin the loss was evaluated at.
  margin_ = ReferenceNextMargin(config_.loss, margin_, eta, loss.violated);

  // 5. The budget.
  EnforceBudget();
  return observation;
}

void ReferenceNorma::EnforceBudget() {
  const BudgetConfig& budget = config_.budget;
  if (budget.drop_below > 0.0) {
    const auto below = [&](const Term& term) {
      return std::abs(term.alpha) < budget.drop_below;
    };
    const size_t before = terms_.size();
    terms_.erase(std::remove_if(terms_.begin(), terms_.end(), below), terms_.end());
    terms_removed_ += before - terms_.size();
  }
  while (budget.max_terms > 0 && terms_.size() > budget.max_terms) {
    // terms_ is in insertion order, so index 0 is the oldest, and the first minimum
    // found by a strict comparison is the earliest added among equals.
    size_t victim = 0;
    if (budget.policy == BudgetPolicy::kMerge) {
      MergeSmallest();
      ++terms_removed_;
      continue;
    }
    if (budget.policy == BudgetPolicy::kSmallest) {
      for (size_t i = 1; i < terms_.size(); ++i) {
        if (std::abs(terms_[i].alpha) < std::abs(terms_[victim].alpha)) victim = i;
      }
    }
    terms_.erase(terms_.begin() + static_cast<std::ptrdiff_t>(victim));
    ++terms_removed_;
  }
}

namespace {

// The point h x_m + (1 - h) x_n.
std::vector<double> Between(const std::vector<double>& x_m, const std::vector<double>& x_n,
                            double h) {
  std::vector<double> z(x_m.size());
  for (size_t j = 0; j < z.size(); ++j) z[j] = h * x_m[j] + (1.0 - h) * x_n[j];
  return z;
}

}  // namespace

ReferenceMerge ReferenceMergePair(const KernelConfig& kernel, const std::vector<double>& x_m,
                                  double alpha_m, const std::vector<double>& x_n,
                                  double alpha_n) {
  // The coefficient of z that best replaces the two terms, its derivative in h, and the
  // squared RKHS distance |alpha_m phi(x_m) + alpha_n phi(x_n) - alpha_z phi(z)|^2, from
  // the vectors themselves (d/dh |x - z|^2 = -2 (x - z).(x_m - x_n)).
  const double gamma = kernel.gamma;
  auto merged = [&](double h, double* slope) {
    const std::vector<double> z = Between(x_m, x_n, h);
    const double k_mz = ReferenceKernel(kernel, x_m, z);
    const double k_nz = ReferenceKernel(kernel, x_n, z);
    double dm = 0.0, dn = 0.0;
    for (size_t j = 0; j < z.size(); ++j) {
      dm += (x_m[j] - z[j]) * (x_m[j] - x_n[j]);
      dn += (x_n[j] - z[j]) * (x_m[j] - x_n[j]);
    }
    if (slope != nullptr) *slope = 2 * gamma * (alpha_m * k_mz * dm + alpha_n * k_nz * dn);
    return alpha_m * k_mz + alpha_n * k_nz;
  };
  // |alpha_z| is what a merge maximises. Scan all of [0, 1] on a fine grid, then bisect
  // the slope of |alpha_z| in the grid cell beside the best point.
  constexpr int kSteps = 50;
  int best = 0;
  for (int i = 1; i <= kSteps; ++i) {
    if (std::abs(merged(double(i) / kSteps, nullptr)) >
        std::abs(merged(double(best) / kSteps, nullptr))) {
      best = i;
    }
  }
  const double sign = alpha_m + alpha_n > 0 ? 1.0 : -1.0;
  double h = double(best) / kSteps;
  double slope = 0.0;
  merged(h, &slope);
  if (sign * slope != 0.0) {
    double lo = sign * slope > 0 ? h : std::max(0.0, double(best - 1) / kSteps);
    double hi = sign * slope > 0 ? std::min(1.0, double(best + 1) / kSteps) : h;
    for (;;) {
      const double mid = 0.5 * (lo + hi);
      if (mid <= lo || mid >= hi) break;
      merged(mid, &slope);
      (sign * slope > 0 ? lo : hi) = mid;
    }
    h = std::abs(merged(lo, nullptr)) >= std::abs(merged(hi, nullptr)) ? lo : hi;
  }
  ReferenceMerge merge;
  merge.h = h;
  merge.z = Between(x_m, x_n, h);
  merge.k_mz = ReferenceKernel(kernel, x_m, merge.z);
  merge.k_nz = ReferenceKernel(kernel, x_n, merge.z);
  merge.alpha = alpha_m * merge.k_mz + alpha_n * merge.k_nz;
  const double k_mn = ReferenceKernel(kernel, x_m, x_n);
  merge.loss = alpha_m * alpha_m + alpha_n * alpha_n + merge.alpha * merge.alpha +
               2 * alpha_m * alpha_n * k_mn - 2 * alpha_m * merge.alpha * merge.k_mz -
               2 * alpha_n * merge.alpha * merge.k_nz;
  return merge;
}

void ReferenceNorma::MergeSmallest() {
  // m: the oldest term (terms_ is in insertion order) whose |alpha| is within a relative
  // 1e-9 of the smallest.
  double smallest = std::abs(terms_[0].alpha);
  for (const Term& term : terms_) smallest = std::min(smallest, std::abs(term.alpha));
  size_t m = 0;
  while (std::abs(terms_[m].alpha) > smallest * (1 + 1e-9)) ++m;
  size_t partner = terms_.size();
  ReferenceMerge best;
  for (size_t n = 0; n < terms_.size(); ++n) {
    if (n == m || !(terms_[m].alpha * terms_[n].alpha > 0)) continue;
    ReferenceMerge merge = ReferenceMergePair(config_.kernel, terms_[m].x, terms_[m].alpha,
                                              terms_[n].x, terms_[n].alpha);
    if (partner == terms_.size() || merge.loss < best.loss) {
      partner = n;
      best = std::move(merge);
    }
  }
  if (partner == terms_.size()) {
    terms_.erase(terms_.begin() + static_cast<std::ptrdiff_t>(m));
    return;
  }
  // The merged term (a new one) takes the place of the newer of the two.
  terms_[std::max(m, partner)] = NewTerm(best.z, best.alpha);
  terms_.erase(terms_.begin() + static_cast<std::ptrdiff_t>(std::min(m, partner)));
}

ReferenceNorma::Term ReferenceNorma::NewTerm(std::vector<double> x, double alpha) {
  points_.push_back(x);
  return Term{.id = points_.size() - 1, .x = std::move(x), .alpha = alpha};
}

void ReferenceNorma::Evaluate(absl::Span<const double> x, double* sum,
                              double* magnitude) const {
  *sum = offset_;
  *magnitude = offset_scale_;
  for (const Term& term : terms_) {
    const double v = term.alpha * ReferenceKernel(config_.kernel, term.x, x);
    *sum += v;
    *magnitude += std::abs(v);
  }
}

uint64_t ReferenceNorma::EvaluateAveraged(absl::Span<const double> x, double* sum,
                                          double* magnitude) const {
  const uint64_t window = config_.averaging_window > 0 ? config_.averaging_window
                                                       : config_.budget.max_terms;
  const uint64_t steps = history_.size();
  uint64_t start = 0;  // the window is f_t for t in (start, steps]
  if (window > 0 && steps > 0) {
    const uint64_t blocks = (steps - 1) / window;
    start = blocks >= 1 ? (blocks - 1) * window : 0;
  }
  *sum = 0.0;
  *magnitude = 0.0;
  for (uint64_t t = start + 1; t <= steps; ++t) {
    const Hypothesis& f = history_[t - 1];
    *sum += f.offset;
    *magnitude += f.offset_scale;
    for (const auto& [id, alpha] : f.terms) {
      const double v = alpha * ReferenceKernel(config_.kernel, points_[id], x);
      *sum += v;
      *magnitude += std::abs(v);
    }
  }
  return steps - start;
}

double ReferenceNorma::Predict(absl::Span<const double> x) const {
  double sum, magnitude;
  Evaluate(x, &sum, &magnitude);
  return sum;
}

double ReferenceNorma::Magnitude(absl::Span<const double> x) const {
  double sum, magnitude;
  Evaluate(x, &sum, &magnitude);
  return magnitude;
}

double ReferenceNorma::PredictAveraged(absl::Span<const double> x) const {
  double sum, magnitude;
  const uint64_t count = EvaluateAveraged(x, &sum, &magnitude);
  return count == 0 ? 0.0 : sum / static_cast<double>(count);
}

double ReferenceNorma::AveragedMagnitude(absl::Span<const double> x) const {
  double sum, magnitude;
  const uint64_t count = EvaluateAveraged(x, &sum, &magnitude);
  return count == 0 ? 0.0 : magnitude / static_cast<double>(count);
}

}  // namespace okl::testing
