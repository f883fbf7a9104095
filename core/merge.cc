#include "core/merge.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace okl {
namespace {

constexpr int kGridIntervals = 16;  // MergeGaussianPair's grid on [0, 1/2]
// The estimate's table: max_h g over a in [0, 1/2] x k_mn in [0, 1].
constexpr int kTableA = 64;   // intervals of a
constexpr int kTableK = 128;  // intervals of k_mn

// g(h) = a k^((1-h)^2) + (1 - a) k^(h^2), with log_k = ln k_mn < 0.
double MergedFraction(double a, double log_k, double h) {
  return a * std::exp(log_k * (1 - h) * (1 - h)) + (1 - a) * std::exp(log_k * h * h);
}

// s(h) = g'(h) / (2 ln(1/k)) = a (1 - h) k^((1-h)^2) - (1 - a) h k^(h^2) has g's sign.
// argmax of g on [0, 1/2], for a in (0, 1/2] and k in (0, 1). g rises at h = 0 and does
// not rise at h = 1/2, so every maximum is a root of s: the one beside the best point of
// the grid, found to the last bit.
double BestPosition(double a, double log_k) {
  int best = 0;
  double best_value = MergedFraction(a, log_k, 0.0);
  for (int i = 1; i <= kGridIntervals; ++i) {
    const double value = MergedFraction(a, log_k, 0.5 * i / kGridIntervals);
    if (value > best_value) {
      best = i;
      best_value = value;
    }
  }
  const double at_best = 0.5 * best / kGridIntervals;
  const double slope = a * (1 - at_best) * std::exp(log_k * (1 - at_best) * (1 - at_best)) -
                       (1 - a) * at_best * std::exp(log_k * at_best * at_best);
  if (slope == 0) return at_best;
  // Rising at the best grid point: the peak lies before the next one; else before it.
  // Newton's method on the slope, kept inside the bracket (bisecting where a step would
  // leave it), until the bracket or the step vanishes.
  double lo = slope > 0 ? at_best : 0.5 * (best - 1) / kGridIntervals;
  double hi = slope > 0 ? 0.5 * (best + 1) / kGridIntervals : at_best;
  double h = at_best;
  for (int iteration = 0; iteration < 100; ++iteration) {
    const double e1 = std::exp(log_k * (1 - h) * (1 - h));
    const double e2 = std::exp(log_k * h * h);
    const double s = a * (1 - h) * e1 - (1 - a) * h * e2;
    if (s == 0) return h;
    (s > 0 ? lo : hi) = h;
    const double ds = -a * e1 * (1 + 2 * log_k * (1 - h) * (1 - h)) -
                      (1 - a) * e2 * (1 + 2 * log_k * h * h);
    double next = ds < 0 ? h - s / ds : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (next == h || next <= lo || next >= hi) break;
    h = next;
  }
  return h;
}

// max_h g(h) for a in (0, 1/2], k in [0, 1].
double BestFraction(double a, double k) {
  if (k <= 0) return 1 - a;  // z = x_n: the term m contributes nothing there
  if (k >= 1) return 1.0;    // the points coincide
  const double log_k = std::log(k);
  return MergedFraction(a, log_k, BestPosition(a, log_k));
}

// The merge loss in units of alpha_m^2, a function of a and k alone:
//   Q(a, k) = (a^2 + (1 - a)^2 + 2 a (1 - a) k - max_h g(h)^2) / a^2, in [0, 1 - k^2].
// Tabulating Q rather than max_h g keeps the estimate's error proportional to alpha_m^2,
// the size of the loss, however small alpha_m is beside alpha_n. As a -> 0, h* -> a k and
// max_h g = 1 - a + a k + a^2 k^2 ln(1/k) + O(a^3), so Q(0, k) = 1 - k^2 (1 + 2 ln(1/k)).
double RelativeLoss(double a, double k) {
  if (a <= 0) return k <= 0 ? 1.0 : 1 - k * k * (1 - 2 * std::log(k));
  const double g = BestFraction(a, k);
  return std::max(0.0, (a * a + (1 - a) * (1 - a) + 2 * a * (1 - a) * k - g * g) / (a * a));
}

// Q on a grid, interpolated bilinearly, with a bound on the interpolation error per cell:
// Q bends sharply only in a few cells (where the best h jumps between g's two peaks), and a
// bound that is tight elsewhere rules out more candidates.
struct RelativeLossTable {
  std::array<std::array<double, kTableK + 1>, kTableA + 1> values;
  std::array<std::array<double, kTableK>, kTableA> errors;

  struct Cell {
    int i, j;
    double s, t;  // the position within the cell, in [0, 1]
  };
  static Cell Locate(double a, double k) {
    const double u = std::clamp(a, 0.0, 0.5) * (2 * kTableA);
    const double v = std::clamp(k, 0.0, 1.0) * kTableK;
    const int i = std::min(static_cast<int>(u), kTableA - 1);
    const int j = std::min(static_cast<int>(v), kTableK - 1);
    return {i, j, u - i, v - j};
  }
  double Interpolate(const Cell& c) const {
    return (1 - c.s) * ((1 - c.t) * values[c.i][c.j] + c.t * values[c.i][c.j + 1]) +
           c.s * ((1 - c.t) * values[c.i + 1][c.j] + c.t * values[c.i + 1][c.j + 1]);
  }
};

const RelativeLossTable& Table() {
  static const RelativeLossTable* const table = [] {
    auto* t = new RelativeLossTable;
    for (int i = 0; i <= kTableA; ++i) {
      for (int j = 0; j <= kTableK; ++j) {
        t->values[i][j] = RelativeLoss(0.5 * i / kTableA, static_cast<double>(j) / kTableK);
      }
    }
    // Each cell's interpolation error, measured at its centre and two edge midpoints (where
    // bilinear interpolation errs most), with a factor of 4 for what lies between the
    // samples, plus rounding.
    for (int i = 0; i < kTableA; ++i) {
      for (int j = 0; j < kTableK; ++j) {
        double error = 0;
        for (const auto& [du, dv] : {std::pair{0.5, 0.5}, {0.5, 0.0}, {0.0, 0.5}}) {
          const RelativeLossTable::Cell cell{i, j, du, dv};
          const double a = 0.5 * (i + du) / kTableA;
          const double k = (j + dv) / kTableK;
          error = std::max(error, std::abs(t->Interpolate(cell) - RelativeLoss(a, k)));
        }
        t->errors[i][j] = 4 * error + 1e-12;
      }
    }
    return t;
  }();
  return *table;
}

// alpha_m^2 + alpha_n^2 + 2 alpha_m alpha_n k - alpha_z^2, clamped at 0 (rounding).
double LostNorm(double alpha_m, double alpha_n, double k, double alpha_z) {
  return std::max(0.0, alpha_m * alpha_m + alpha_n * alpha_n + 2 * alpha_m * alpha_n * k -
                           alpha_z * alpha_z);
}

// F(h) = |alpha_m e1 + alpha_n e2|^2 with e1 = k^((1-h)^2), e2 = k^(h^2).
double MergedSquaredNorm(double a, double b, double c, double log_k, double h) {
  const double e1 = std::exp(log_k * (1 - h) * (1 - h));
  const double e2 = std::exp(log_k * h * h);
  return a * e1 * e1 + b * e2 * e2 + 2 * c * e1 * e2;
}

// s(h), which has the sign of F'(h) (see MergeClassPair).
double MergeSlope(double a, double b, double c, double log_k, double h) {
  const double e1 = std::exp(log_k * (1 - h) * (1 - h));
  const double e2 = std::exp(log_k * h * h);
  return (1 - h) * a * e1 * e1 - h * b * e2 * e2 - (2 * h - 1) * c * e1 * e2;
}

constexpr int kClassGridIntervals = 32;  // MergeClassPair's grid on [0, 1]
constexpr int kBisectionSteps = 60;      // a bracket of 1/16 to below 2^-60

}  // namespace

ClassMerge MergeClassPair(double a, double b, double c, double k_mn) {
  ClassMerge merge;
  if (k_mn <= 0) {
    merge = {.h = 0.0, .k_mz = 0.0, .k_nz = 1.0};  // z = x_n
  } else if (k_mn >= 1) {
    merge = {.h = 0.0, .k_mz = 1.0, .k_nz = 1.0};  // the points coincide
  } else {
    const double log_k = std::log(k_mn);
    // The lowest h of the best, values within rounding (1e-12 of a + b) of each other
    // counting as equal: two terms of equal |alpha| in different classes tie exactly
    // between h = 0 and h = 1, and rounding must not choose.
    int best = 0;
    double best_value = MergedSquaredNorm(a, b, c, log_k, 0.0);
    const double tie = 1e-12 * (a + b);
    for (int i = 1; i <= kClassGridIntervals; ++i) {
      const double value =
          MergedSquaredNorm(a, b, c, log_k, static_cast<double>(i) / kClassGridIntervals);
      if (value > best_value + tie) {
        best = i;
        best_value = value;
      }
    }
    // F's slope has the sign of s(h) = (1-h) a e1^2 - h b e2^2 - (2h-1) c e1 e2 (F' =
    // 4 ln(1/k) s): the maximum is the root of s beside the best grid point, found to the
    // last bit by bisection (a search on F's values alone stops at sqrt(epsilon), where F
    // is flat).
    const double at_best = static_cast<double>(best) / kClassGridIntervals;
    const double rising = MergeSlope(a, b, c, log_k, at_best);
    double h = at_best;
    if (rising != 0 && !(best == 0 && rising < 0) &&
        !(best == kClassGridIntervals && rising > 0)) {
      double lo = rising > 0 ? at_best : static_cast<double>(best - 1) / kClassGridIntervals;
      double hi = rising > 0 ? static_cast<double>(best + 1) / kClassGridIntervals : at_best;
      for (int step = 0; step < kBisectionSteps; ++step) {
        const double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        const double slope = MergeSlope(a, b, c, log_k, mid);
        if (slope == 0) {
          lo = hi = mid;
          break;
        }
        (slope > 0 ? lo : hi) = mid;
      }
      h = 0.5 * (lo + hi);
      // (Only a bracket holding several roots could leave a worse point.)
      if (MergedSquaredNorm(a, b, c, log_k, h) < best_value * (1 - 1e-12)) h = at_best;
    }
    merge.h = h;
    merge.k_mz = std::exp(log_k * (1 - h) * (1 - h));
    merge.k_nz = std::exp(log_k * h * h);
  }
  const double merged = a * merge.k_mz * merge.k_mz + b * merge.k_nz * merge.k_nz +
                        2 * c * merge.k_mz * merge.k_nz;
  merge.loss = std::max(0.0, a + b + 2 * c * k_mn - merged);
  return merge;
}

double ClassMergeLossLowerBound(double a, double b, double c, double k_mn) {
  const double norm_m = std::sqrt(a);
  const double norm_n = std::sqrt(b);
  // Cauchy-Schwarz: |alpha_z| <= |alpha_m| e1 + |alpha_n| e2, whose best is the scalar
  // merge of |alpha_m| <= |alpha_n|; its loss counts 2 |alpha_m| |alpha_n| k where the
  // vectors give 2c k.
  const MergeLossEstimate aligned = EstimateGaussianMergeLoss(norm_m, norm_n, k_mn);
  double bound = aligned.loss - aligned.error - 2 * k_mn * (norm_m * norm_n - c);
  // The component along alpha_m, beta = c / |alpha_m|: the scalar pair (|alpha_m|, beta)
  // loses no more than the vectors do (the rest of alpha_n only adds loss).
  const double beta = c / norm_m;
  if (beta > 0) {
    const MergeLossEstimate along =
        EstimateGaussianMergeLoss(std::min(norm_m, beta), std::max(norm_m, beta), k_mn);
    bound = std::max(bound, along.loss - along.error);
  } else {
    // Opposite directions: (|alpha_m| e1 - |beta| e2)^2 <= max(a, beta^2).
    const double abs_beta = -beta;
    bound = std::max(bound, std::min(a, abs_beta * abs_beta) - 2 * norm_m * abs_beta * k_mn);
  }
  return std::max(0.0, bound);
}

GaussianMerge MergeGaussianPair(double alpha_m, double alpha_n, double k_mn) {
  GaussianMerge merge;
  if (k_mn <= 0) {
    merge = {.h = 0.0, .k_mz = 0.0, .k_nz = 1.0};  // z = x_n
  } else if (k_mn >= 1) {
    merge = {.h = 0.0, .k_mz = 1.0, .k_nz = 1.0};  // the points coincide
  } else {
    const double log_k = std::log(k_mn);
    merge.h = BestPosition(alpha_m / (alpha_m + alpha_n), log_k);
    merge.k_mz = std::exp(log_k * (1 - merge.h) * (1 - merge.h));
    merge.k_nz = std::exp(log_k * merge.h * merge.h);
  }
  merge.coefficient = alpha_m * merge.k_mz + alpha_n * merge.k_nz;
  merge.loss = LostNorm(alpha_m, alpha_n, k_mn, merge.coefficient);
  return merge;
}

MergeLossEstimate EstimateGaussianMergeLoss(double alpha_m, double alpha_n, double k_mn) {
  const RelativeLossTable& table = Table();
  const RelativeLossTable::Cell cell =
      RelativeLossTable::Locate(alpha_m / (alpha_m + alpha_n), k_mn);
  const double scale = alpha_m * alpha_m;
  return {.loss = scale * table.Interpolate(cell), .error = scale * table.errors[cell.i][cell.j]};
}

}  // namespace okl
