#include "tests/core/reference_multiclass.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/core/reference_norma.h"

namespace okl::testing {

double ReferenceMulticlass::Norm(const Term& term) const {
  double sum = 0.0;
  for (double a : term.alpha) sum += a * a;
  return std::sqrt(sum);
}

std::vector<double> ReferenceMulticlass::Scores(const std::vector<double>& x) const {
  std::vector<double> scores(classes_.size(), 0.0);
  for (const Term& term : terms_) {
    const double k = ReferenceKernel(config_.kernel, term.x, x);
    for (size_t c = 0; c < scores.size(); ++c) scores[c] += Alpha(term, c) * k;
  }
  return scores;
}

ReferenceClassStep ReferenceMulticlass::Observe(const std::vector<double>& x,
                                                const std::string& label) {
  ++t_;
  const size_t known = classes_.size();
  size_t y = std::find(classes_.begin(), classes_.end(), label) - classes_.begin();
  if (y == known) classes_.push_back(label);
  const size_t classes = classes_.size();
  const std::vector<double> scores = Scores(x);

  ReferenceClassStep step;
  for (size_t c = 0; c < known; ++c) {
    if (step.predicted < 0 || scores[c] > scores[step.predicted]) step.predicted = int(c);
  }
  if (step.predicted >= 0) step.score = scores[step.predicted];

  // g = d loss / d f.
  std::vector<double> g(classes, 0.0);
  if (classes >= 2) {
    if (config_.loss.type == LossType::kSoftmax) {
      double z = 0.0;
      for (double s : scores) z += std::exp(s);
      step.loss = std::log(z) - scores[y];
      for (size_t c = 0; c < classes; ++c) g[c] = std::exp(scores[c]) / z - (c == y);
    } else {
      size_t r = classes;
      for (size_t c = 0; c < classes; ++c) {
        if (c != y && (r == classes || scores[c] > scores[r])) r = c;
      }
      const double excess = config_.loss.rho + scores[r] - scores[y];
      if (excess > 0) {
        step.loss = excess;
        g[r] = 1.0;
        g[y] = -1.0;
      }
    }
  }

  double eta = config_.learning_rate.eta0;
  if (config_.learning_rate.schedule == Schedule::kInverseSqrt) eta /= std::sqrt(double(t_));
  if (config_.learning_rate.schedule == Schedule::kPower) {
    eta *= std::pow(double(t_), -config_.learning_rate.theta);
  }
  for (Term& term : terms_) {
    for (double& a : term.alpha) a *= 1.0 - eta * config_.lambda;
  }
  terms_.erase(std::remove_if(terms_.begin(), terms_.end(),
                              [&](const Term& term) { return Norm(term) == 0; }),
               terms_.end());
  Term term{.x = x, .alpha = std::vector<double>(classes), .added_at = t_};
  bool any = false;
  for (size_t c = 0; c < classes; ++c) {
    term.alpha[c] = -eta * g[c];
    any = any || term.alpha[c] != 0;
  }
  if (!any) return step;
  terms_.push_back(term);
  const size_t budget = config_.budget.max_terms;
  if (budget == 0 || terms_.size() <= budget) return step;
  switch (config_.budget.policy) {
    case BudgetPolicy::kOldest:
      terms_.erase(std::min_element(terms_.begin(), terms_.end(),
                                    [](const Term& a, const Term& b) {
                                      return a.added_at < b.added_at;
                                    }));
      break;
    case BudgetPolicy::kSmallest:
      terms_.erase(terms_.begin() + Smallest());
      break;
    case BudgetPolicy::kMerge:
      Merge();
      break;
  }
  return step;
}

size_t ReferenceMulticlass::Smallest() const {
  double least = std::numeric_limits<double>::infinity();
  for (const Term& term : terms_) least = std::min(least, Norm(term));
  size_t best = terms_.size();
  for (size_t i = 0; i < terms_.size(); ++i) {
    if (Norm(terms_[i]) <= least * (1 + 1e-9) &&
        (best == terms_.size() || terms_[i].added_at < terms_[best].added_at)) {
      best = i;
    }
  }
  return best;
}

void ReferenceMulticlass::Merge() {
  const size_t m = Smallest();
  const Term& tm = terms_[m];
  const size_t classes = classes_.size();
  // For each partner n: z(h) = h x_m + (1 - h) x_n, alpha_z = alpha_m k(x_m, z) + alpha_n
  // k(x_n, z), loss = |alpha_m phi_m + alpha_n phi_n - alpha_z phi_z|^2 expanded.
  auto point = [&](const Term& tn, double h) {
    std::vector<double> z(tm.x.size());
    for (size_t j = 0; j < z.size(); ++j) z[j] = h * tm.x[j] + (1 - h) * tn.x[j];
    return z;
  };
  auto loss_at = [&](const Term& tn, double h, std::vector<double>* alpha_z) {
    const std::vector<double> z = point(tn, h);
    const double k_mz = ReferenceKernel(config_.kernel, tm.x, z);
    const double k_nz = ReferenceKernel(config_.kernel, tn.x, z);
    const double k_mn = ReferenceKernel(config_.kernel, tm.x, tn.x);
    double loss = 0.0;
    alpha_z->assign(classes, 0.0);
    for (size_t c = 0; c < classes; ++c) {
      const double am = Alpha(tm, c), an = Alpha(tn, c);
      const double az = am * k_mz + an * k_nz;
      (*alpha_z)[c] = az;
      loss += am * am + an * an + az * az + 2 * am * an * k_mn - 2 * am * az * k_mz -
              2 * an * az * k_nz;
    }
    return loss;
  };
  size_t partner = terms_.size();
  double best_loss = std::numeric_limits<double>::infinity();
  double best_h = 0.0;
  std::vector<double> alpha_z;
  for (size_t n = 0; n < terms_.size(); ++n) {
    if (n == m) continue;
    constexpr int kSteps = 400;
    int best = 0;
    double least = loss_at(terms_[n], 0.0, &alpha_z);
    // The lowest h of the least loss, losses within 1e-12 of |alpha_m|^2 + |alpha_n|^2
    // of each other counting as equal.
    double tie = 0.0;
    for (size_t c = 0; c < classes; ++c) {
      tie += Alpha(tm, c) * Alpha(tm, c) + Alpha(terms_[n], c) * Alpha(terms_[n], c);
    }
    tie *= 1e-12;
    for (int i = 1; i <= kSteps; ++i) {
      const double loss = loss_at(terms_[n], double(i) / kSteps, &alpha_z);
      if (loss < least - tie) {
        least = loss;
        best = i;
      }
    }
    // The loss falls where d|alpha_z|^2/dh > 0: with z = h x_m + (1 - h) x_n and d2 =
    // |x_m - x_n|^2, k(x_m, z) = exp(-gamma (1-h)^2 d2) and k(x_n, z) = exp(-gamma h^2 d2),
    // so d alpha_z/dh = 2 gamma d2 (alpha_m (1-h) k_mz - alpha_n h k_nz). Bisection on its
    // sign in the cells beside the best grid point.
    const Term& tn = terms_[n];
    double d2 = 0.0;
    for (size_t j = 0; j < tm.x.size(); ++j) d2 += (tm.x[j] - tn.x[j]) * (tm.x[j] - tn.x[j]);
    auto rising = [&](double h) {
      const std::vector<double> z = point(tn, h);
      const double k_mz = ReferenceKernel(config_.kernel, tm.x, z);
      const double k_nz = ReferenceKernel(config_.kernel, tn.x, z);
      double slope = 0.0;
      for (size_t c = 0; c < classes; ++c) {
        const double az = Alpha(tm, c) * k_mz + Alpha(tn, c) * k_nz;
        slope += az * (Alpha(tm, c) * (1 - h) * k_mz - Alpha(tn, c) * h * k_nz);
      }
      return slope * d2;
    };
    double lo = std::max(0, best - 1) / double(kSteps);
    double hi = std::min(kSteps, best + 1) / double(kSteps);
    for (int i = 0; i < 200 && lo < hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      if (mid <= lo || mid >= hi) break;
      (rising(mid) > 0 ? lo : hi) = mid;
    }
    const double h = 0.5 * (lo + hi);
    const double loss = std::min(least, loss_at(terms_[n], h, &alpha_z));
    if (loss < best_loss) {
      best_loss = loss;
      partner = n;
      best_h = loss < least ? h : double(best) / kSteps;
    }
  }
  if (partner == terms_.size()) {
    terms_.erase(terms_.begin() + m);
    return;
  }
  Term merged;
  loss_at(terms_[partner], best_h, &merged.alpha);
  merged.x = point(terms_[partner], best_h);
  merged.added_at = std::max(tm.added_at, terms_[partner].added_at);
  terms_[partner] = merged;
  terms_.erase(terms_.begin() + m);
}

}  // namespace okl::testing
