#include "core/regret.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "Eigen/Cholesky"
#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/kernel.h"
#include "core/loss.h"
#include "core/status_macros.h"

// The comparator's dual, in the notation of Shalev-Shwartz and Zhang (2013). With
// phi_i(z) = loss(y_i, z), the primal over the RKHS is
//   P(g) = (1/n) sum_i phi_i(g(x_i)) + (lambda/2) |g|^2,
// and for dual variables alpha the dual is
//   D(alpha) = (1/n) sum_i -phi_i*(-alpha_i) - (lambda/2) |g(alpha)|^2,
//   g(alpha) = (1/(lambda n)) sum_i alpha_i k(x_i, .),   i.e. c = alpha / (lambda n).
// Because c is *defined* from alpha, the gap needs no cancelling subtraction:
//   P(c) - D(alpha) = (1/n) sum_i [phi_i(z_i) + phi_i*(-alpha_i) + alpha_i z_i],  z = K c,
// a sum of Fenchel-Young terms, each >= 0 and each 0 exactly when -alpha_i is a
// (sub)gradient of phi_i at z_i. The solver reports this sum, computed term by term, so
// the certificate is as accurate as the terms themselves, not |P| * 1e-16.
//
// -phi*(-a) for each loss (b = y a for the +-1-label losses), and the box it lives in:
//   squared      a y - a^2/2                          a free
//   huber        a y - a^2/2                          |a| <= delta
//   hinge        rho b                                b in [0, 1]
//   novelty      rho a  (hinge with y = 1)            a in [0, 1]
//   eps-insens.  a y - epsilon |a|                    |a| <= 1      (epsilon >= 0)
//   logistic     -b log b - (1 - b) log(1 - b)        b in [0, 1]
// One SDCA step maximises D over alpha_i alone. Writing q_i = K_ii / (lambda n), the
// change d of alpha_i moves z by K(:, i) d / (lambda n) and n (lambda/2) |g|^2 by
// z_i d + q_i d^2 / 2, so the step maximises  -phi_i*(-(alpha_i + d)) - z_i d - q_i d^2/2:
// a 1-D concave problem whose maximiser over the box is the clip of the unconstrained one.
// For the piecewise-linear losses, whose dual has no curvature of its own, SDCA is helped
// by an occasional Newton step on the coordinates strictly inside their box (see
// NewtonStepOnFreeCoordinates); every step, SDCA's or Newton's, only increases D.

namespace okl {
namespace {

// Coordinates are visited in a fresh random order each epoch, from this fixed seed, so
// that a window always yields the same comparator, bit for bit.
constexpr uint64_t kPermutationSeed = 0x6f6b6c2d73646361;  // "okl-sdca"
// The piecewise-linear losses try a Newton step on their free coordinates (see
// NewtonStepOnFreeCoordinates) after every this many epochs.
constexpr int kNewtonEvery = 5;
// ... and only while the step's cost stays within this multiple of the epochs' since the
// last one, so that Newton at most quintuples the work of an unlucky run.
constexpr double kNewtonCostRatio = 4.0;

// SplitMix64: a tiny generator whose output is the same on every platform (std::shuffle's
// algorithm is the standard library's choice).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

void Shuffle(std::vector<Eigen::Index>& order, SplitMix64& rng) {
  for (size_t i = order.size(); i > 1; --i) {
    // The modulo's bias is < 2^-50 for any window size; it does not matter here.
    const size_t j = static_cast<size_t>(rng.Next() % i);
    std::swap(order[i - 1], order[j]);
  }
}

double Sigmoid(double s) {
  if (s >= 0) return 1.0 / (1.0 + std::exp(-s));
  const double e = std::exp(s);
  return e / (1.0 + e);
}

// log(1 + exp(s)) without overflow.
double Softplus(double s) {
  return s > 0 ? s + std::log1p(std::exp(-s)) : std::log1p(std::exp(s));
}

double XLogX(double x) { return x > 0 ? x * std::log(x) : 0.0; }

bool AllFinite(absl::Span<const double> values) {
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

// The label SDCA uses: novelty ignores y, which is the hinge with y = 1.
double DualLabel(LossType type, double y) { return type == LossType::kNovelty ? 1.0 : y; }

// The logistic step has no closed form. In s = logit(b') the optimality condition is
//   F(s) = -s - y z - q (sigmoid(s) - b) = 0,
// F decreasing with slope in [-1 - q/4, -1], so Newton is well behaved, and since
// sigmoid(s) - b lies in (-b, 1 - b) the root lies in [-yz - q(1 - b), -yz + q b]: a
// bracket that turns any wild Newton step into bisection. Working in s rather than b'
// keeps full relative precision when b' is as small as exp(-700).
double LogisticDualStep(double yz, double b, double q) {
  double lo = -yz - q * (1.0 - b);
  double hi = -yz + q * b;
  if (!(hi > lo)) return Sigmoid(-yz);  // q == 0: the coordinate is decoupled
  double s = b > 0 && b < 1 ? std::log(b / (1.0 - b)) : -yz;
  s = std::clamp(s, lo, hi);
  for (int iteration = 0; iteration < 100; ++iteration) {
    const double sigma = Sigmoid(s);
    const double f = -s - yz - q * (sigma - b);
    if (f == 0) break;
    if (f > 0) {
      lo = s;
    } else {
      hi = s;
    }
    double next = s - f / (-1.0 - q * sigma * (1.0 - sigma));
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (std::abs(next - s) <= 1e-15 * (1.0 + std::abs(s))) {
      s = next;
      break;
    }
    s = next;
  }
  return Sigmoid(s);
}

// The maximiser over alpha_i alone (see the top of the file). `y` is DualLabel's; `q` is
// K_ii / (lambda n), possibly 0 (a zero feature vector, e.g. the linear kernel at x = 0),
// in which case the coordinate does not touch g and the dual term alone decides.
double DualStep(LossType type, double y, double margin, double delta, double z, double alpha,
                double q) {
  const bool coupled = q > std::numeric_limits<double>::min();
  switch (type) {
    case LossType::kSquared:
    case LossType::kHuber: {
      // d/da [a y - a^2/2 - z (a - alpha) - q (a - alpha)^2 / 2] = 0.
      const double a = alpha + (y - alpha - z) / (1.0 + q);
      return type == LossType::kHuber ? std::clamp(a, -delta, delta) : a;
    }
    case LossType::kHinge:
    case LossType::kNovelty: {
      // In b = y a: maximise rho b - y z (b - b0) - q (b - b0)^2 / 2 over [0, 1].
      const double b0 = y * alpha;
      const double slope = margin - y * z;
      double b;
      if (coupled) {
        b = std::clamp(b0 + slope / q, 0.0, 1.0);
      } else {
        b = slope > 0 ? 1.0 : (slope < 0 ? 0.0 : b0);
      }
      return y * b;
    }
    case LossType::kEpsilonInsensitive: {
      // A soft threshold at epsilon, then the box: q a' = soft(q alpha + y - z, epsilon).
      const double u = (coupled ? q * alpha : 0.0) + (y - z);
      const double shrunk = u > margin ? u - margin : (u < -margin ? u + margin : 0.0);
      if (!coupled) return shrunk > 0 ? 1.0 : (shrunk < 0 ? -1.0 : 0.0);
      return std::clamp(shrunk / q, -1.0, 1.0);
    }
    case LossType::kLogistic: {
      const double b0 = std::clamp(y * alpha, 0.0, 1.0);
      return y * LogisticDualStep(y * z, b0, coupled ? q : 0.0);
    }
    case LossType::kMulticlassHinge:
    case LossType::kSoftmax:
      break;  // no regret window for multi-class models (ValidateConfig)
  }
  return alpha;
}

// phi(z) + phi*(-alpha) + alpha z >= 0, in a form free of large cancelling terms.
double FenchelYoungGap(LossType type, double y, double margin, double delta, double z,
                       double alpha) {
  double gap = 0.0;
  switch (type) {
    case LossType::kSquared: {
      const double t = z - y + alpha;
      gap = 0.5 * t * t;
      break;
    }
    case LossType::kHuber: {
      const double r = z - y;
      if (std::abs(r) <= delta) {
        const double t = r + alpha;
        gap = 0.5 * t * t;
      } else {
        gap = delta * (std::abs(r) - 0.5 * delta) + 0.5 * alpha * alpha + alpha * r;
      }
      break;
    }
    case LossType::kHinge:
    case LossType::kNovelty: {
      const double b = std::clamp(y * alpha, 0.0, 1.0);
      const double m = margin - y * z;
      gap = m > 0 ? (1.0 - b) * m : -b * m;
      break;
    }
    case LossType::kEpsilonInsensitive: {
      const double r = z - y;
      gap = std::max(0.0, std::abs(r) - margin) + alpha * r + margin * std::abs(alpha);
      break;
    }
    case LossType::kLogistic: {
      // KL(b || sigmoid(-s)) for s = y z: log sigmoid(-s) = -softplus(s).
      const double b = std::clamp(y * alpha, 0.0, 1.0);
      const double s = y * z;
      gap = XLogX(b) + b * Softplus(s) + XLogX(1.0 - b) + (1.0 - b) * Softplus(-s);
      break;
    }
    case LossType::kMulticlassHinge:
    case LossType::kSoftmax:
      break;  // no regret window for multi-class models (ValidateConfig)
  }
  return std::max(0.0, gap);
}

// The lower triangle (diagonal included) of the Gram matrix, each column by one kernel
// sweep over the inputs from that column's row down.
absl::StatusOr<Eigen::MatrixXd> LowerGramMatrix(const Kernel& kernel,
                                                absl::Span<const double> xs, size_t n) {
  const size_t dim = kernel.dim();
  // EvaluateRows wants the inputs column-major: coordinate j of example r at [j * n + r].
  std::vector<double> columns(n * dim);
  for (size_t r = 0; r < n; ++r) {
    for (size_t j = 0; j < dim; ++j) columns[j * n + r] = xs[r * dim + j];
  }
  const Eigen::Index size = static_cast<Eigen::Index>(n);
  Eigen::MatrixXd gram(size, size);
  for (size_t i = 0; i < n; ++i) {
    kernel.EvaluateRows(columns.data() + i, n, n - i, xs.subspan(i * dim, dim),
                        &gram(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(i)));
  }
  for (Eigen::Index i = 0; i < size; ++i) {
    if (!gram.col(i).tail(size - i).allFinite()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the kernel overflows on example ", i,
                       " of the window (a non-finite Gram matrix entry); lower the "
                       "polynomial kernel's degree or gamma, or scale the inputs"));
    }
  }
  return gram;
}

// Copies one strict triangle of a square matrix onto the other, in tiles so that both the
// column reads and the strided row writes stay in cache.
enum class Mirror { kLowerToUpper, kUpperToLower };
void MirrorTriangle(Eigen::MatrixXd& gram, Mirror direction) {
  constexpr Eigen::Index kTile = 64;
  const Eigen::Index n = gram.rows();
  for (Eigen::Index j0 = 0; j0 < n; j0 += kTile) {
    const Eigen::Index j1 = std::min(n, j0 + kTile);
    for (Eigen::Index i0 = j0; i0 < n; i0 += kTile) {
      const Eigen::Index i1 = std::min(n, i0 + kTile);
      for (Eigen::Index j = j0; j < j1; ++j) {
        for (Eigen::Index i = std::max(i0, j + 1); i < i1; ++i) {
          if (direction == Mirror::kLowerToUpper) {
            gram(j, i) = gram(i, j);
          } else {
            gram(i, j) = gram(j, i);
          }
        }
      }
    }
  }
}

// J(c) = (1/n) sum_i loss(y_i, z_i) + (lambda/2) c' z for z = K c.
double Objective(const Loss& loss, double margin, double lambda, absl::Span<const double> ys,
                 const Eigen::VectorXd& c, const Eigen::VectorXd& z) {
  double sum = 0.0;
  for (size_t i = 0; i < ys.size(); ++i) {
    sum += loss.At(ys[i], z(static_cast<Eigen::Index>(i)), margin).value;
  }
  return sum / static_cast<double>(ys.size()) + 0.5 * lambda * c.dot(z);
}

double DualityGap(const Loss& loss, double margin, absl::Span<const double> ys,
                  const Eigen::VectorXd& alpha, const Eigen::VectorXd& z) {
  const LossType type = loss.config().type;
  const double delta = loss.config().delta;
  double sum = 0.0;
  for (size_t i = 0; i < ys.size(); ++i) {
    const Eigen::Index k = static_cast<Eigen::Index>(i);
    sum += FenchelYoungGap(type, DualLabel(type, ys[i]), margin, delta, z(k), alpha(k));
  }
  return sum / static_cast<double>(ys.size());
}

ComparatorSolution MakeSolution(const Eigen::VectorXd& c, const Eigen::VectorXd& z,
                                double objective, double gap, int epochs) {
  ComparatorSolution solution;
  solution.coefficients.assign(c.data(), c.data() + c.size());
  solution.predictions.assign(z.data(), z.data() + z.size());
  solution.objective = objective;
  solution.duality_gap = gap;
  solution.epochs = epochs;
  return solution;
}

// The squared loss in closed form: (K + n lambda I) c = y, factored in place so that one
// n x n matrix is all the memory it takes. The Gram matrix is built in the lower triangle,
// mirrored to the upper, and Cholesky overwrites the lower; the upper and the saved diagonal
// still give K afterwards, for z = K c and the gap.
absl::StatusOr<ComparatorSolution> SolveSquared(const Kernel& kernel, const Loss& loss,
                                                double lambda, absl::Span<const double> xs,
                                                absl::Span<const double> ys) {
  const size_t n = ys.size();
  const double n_lambda = static_cast<double>(n) * lambda;
  OKL_ASSIGN_OR_RETURN(Eigen::MatrixXd a, LowerGramMatrix(kernel, xs, n));
  MirrorTriangle(a, Mirror::kLowerToUpper);
  const Eigen::VectorXd diagonal = a.diagonal();
  const Eigen::Map<const Eigen::VectorXd> y(ys.data(), static_cast<Eigen::Index>(n));
  a.diagonal().array() += n_lambda;

  Eigen::VectorXd c;
  {
    Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>, Eigen::Lower> llt(a);
    if (llt.info() == Eigen::Success) c = llt.solve(y);
  }
  if (c.size() == 0) {
    // Only when n lambda is lost in rounding next to K: rebuild the lower triangle from the
    // upper and use the pivoted LDL', which solves a (numerically) semidefinite system with
    // the pseudo-inverse of its zero pivots.
    MirrorTriangle(a, Mirror::kUpperToLower);
    a.diagonal() = diagonal.array() + n_lambda;
    Eigen::LDLT<Eigen::Ref<Eigen::MatrixXd>, Eigen::Lower> ldlt(a);
    if (ldlt.info() == Eigen::Success) c = ldlt.solve(y);
  }
  if (c.size() == 0 || !c.allFinite()) {
    return absl::InternalError(absl::StrCat(
        "the squared loss's system (K + n lambda I) c = y could not be solved for n = ", n,
        ", lambda = ", lambda, "; a larger lambda conditions it"));
  }

  a.diagonal() = diagonal;
  const auto gram = a.selfadjointView<Eigen::Upper>();
  const Eigen::VectorXd z = gram * c;
  // The dual point this c implies is alpha = -phi'(z) = y - z. Its c_hat = alpha / (lambda n)
  // differs from c by the residual r / (lambda n), r = (K + n lambda I) c - y, and the gap
  // is the Fenchel-Young sum (0 up to rounding) plus (lambda/2) |c - c_hat|_K^2.
  const Eigen::VectorXd alpha = y - z;
  const Eigen::VectorXd difference = (z + n_lambda * c - y) / n_lambda;
  const Eigen::VectorXd k_difference = gram * difference;
  const double gap = DualityGap(loss, 0.0, ys, alpha, z) +
                     std::max(0.0, 0.5 * lambda * difference.dot(k_difference));
  return MakeSolution(c, z, Objective(loss, 0.0, lambda, ys, c, z), gap, /*epochs=*/0);
}

bool IsPiecewiseLinear(LossType type) {
  return type == LossType::kHinge || type == LossType::kNovelty ||
         type == LossType::kEpsilonInsensitive;
}

// Where alpha_i sits in the dual of a piecewise-linear loss: on a bound of its box, or
// strictly inside one of the open intervals on which -phi_i*(-a) is linear. Inside, the
// dual's slope there is `linear` (rho y for hinge and novelty, y -/+ epsilon for
// epsilon-insensitive on the positive / negative side) and the interval is [lo, hi].
struct DualPiece {
  int8_t state = 0;  // a code for the bound or interval; equal codes, equal piece
  bool free = false;
  double linear = 0.0;
  double lo = 0.0;
  double hi = 0.0;
};

DualPiece PieceOf(LossType type, double y, double margin, double alpha) {
  if (type == LossType::kEpsilonInsensitive) {
    if (alpha <= -1) return {.state = -2};
    if (alpha >= 1) return {.state = 2};
    if (alpha == 0) return {.state = 0};
    if (alpha > 0) return {.state = 1, .free = true, .linear = y - margin, .lo = 0, .hi = 1};
    return {.state = -1, .free = true, .linear = y + margin, .lo = -1, .hi = 0};
  }
  const double b = y * alpha;  // hinge and novelty
  if (b <= 0) return {.state = 0};
  if (b >= 1) return {.state = 2};
  return {.state = 1,
          .free = true,
          .linear = margin * y,
          .lo = std::min(0.0, y),
          .hi = std::max(0.0, y)};
}

// Free coordinates beyond this many are left to SDCA: the Newton step holds |F|^2 doubles
// and costs |F|^3 / 3 multiply-adds.
constexpr size_t kMaxNewtonCoordinates = 2048;
// Pivots of K_FF below this fraction of the largest are treated as 0 (rank deficiency).
constexpr double kPivotCutoff = 1e-12;

// For the piecewise-linear losses SDCA finds which coordinates sit on their bounds quickly,
// but then converges slowly: on the free coordinates F the dual is the concave quadratic
//   (1/n) sum_F linear_i alpha_i - (1/(2 lambda n^2)) alpha' K alpha  (+ terms in the rest),
// whose curvature is K_FF alone, as ill-conditioned as a smooth kernel's Gram matrix. This
// takes the Newton step on F instead: delta = lambda n K_FF^-1 (linear - z)_F, which puts
// every free prediction on its kink, then an exact line search along delta cut at the
// box. The dual can only increase, so the gap certificate is unaffected; a pivoted LDL'
// truncated at tiny pivots keeps delta an ascent direction when K_FF is singular.
void NewtonStepOnFreeCoordinates(const Eigen::MatrixXd& gram, double n_lambda,
                                 const std::vector<DualPiece>& pieces, Eigen::VectorXd& alpha,
                                 Eigen::VectorXd& z) {
  std::vector<Eigen::Index> free;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].free) free.push_back(static_cast<Eigen::Index>(i));
  }
  const Eigen::Index m = static_cast<Eigen::Index>(free.size());
  if (m == 0) return;
  Eigen::MatrixXd k_ff(m, m);
  Eigen::VectorXd slope(m);  // n d D / d alpha_F = (linear - z)_F
  for (Eigen::Index b = 0; b < m; ++b) {
    for (Eigen::Index a = b; a < m; ++a) k_ff(a, b) = gram(free[a], free[b]);
    slope(b) = pieces[static_cast<size_t>(free[b])].linear - z(free[b]);
  }
  const Eigen::LDLT<Eigen::MatrixXd, Eigen::Lower> ldlt(k_ff);
  if (ldlt.info() != Eigen::Success) return;
  Eigen::VectorXd delta = ldlt.transpositionsP() * (n_lambda * slope);
  ldlt.matrixL().solveInPlace(delta);
  const Eigen::VectorXd pivots = ldlt.vectorD();
  const double cutoff = kPivotCutoff * pivots.cwiseAbs().maxCoeff();
  for (Eigen::Index a = 0; a < m; ++a)
    delta(a) = pivots(a) > cutoff ? delta(a) / pivots(a) : 0.0;
  ldlt.matrixU().solveInPlace(delta);
  delta = ldlt.transpositionsP().transpose() * delta;
  if (!delta.allFinite()) return;

  // D(alpha + t delta) - D(alpha) = (t/n) delta' slope - (t^2 / (2 lambda n^2)) delta' K delta.
  const double rise = delta.dot(slope);
  const double curvature = delta.dot(k_ff.selfadjointView<Eigen::Lower>() * delta) / n_lambda;
  if (!(rise > 0)) return;
  double step = curvature > 0 ? rise / curvature : std::numeric_limits<double>::infinity();
  for (Eigen::Index a = 0; a < m; ++a) {
    const DualPiece& piece = pieces[static_cast<size_t>(free[a])];
    const double current = alpha(free[a]);
    if (delta(a) > 0) step = std::min(step, (piece.hi - current) / delta(a));
    if (delta(a) < 0) step = std::min(step, (piece.lo - current) / delta(a));
  }
  if (!(step > 0) || !std::isfinite(step)) return;
  for (Eigen::Index a = 0; a < m; ++a) {
    const DualPiece& piece = pieces[static_cast<size_t>(free[a])];
    const double next = std::clamp(alpha(free[a]) + step * delta(a), piece.lo, piece.hi);
    const double change = next - alpha(free[a]);
    if (change == 0) continue;
    alpha(free[a]) = next;
    z.noalias() += gram.col(free[a]) * (change / n_lambda);
  }
}

// SDCA for every other loss; see the top of the file.
absl::StatusOr<ComparatorSolution> SolveSdca(const Kernel& kernel, const Loss& loss,
                                             double margin, double lambda,
                                             absl::Span<const double> xs,
                                             absl::Span<const double> ys,
                                             const ComparatorOptions& options) {
  const size_t n = ys.size();
  const Eigen::Index size = static_cast<Eigen::Index>(n);
  const double n_lambda = static_cast<double>(n) * lambda;
  OKL_ASSIGN_OR_RETURN(Eigen::MatrixXd gram, LowerGramMatrix(kernel, xs, n));
  MirrorTriangle(gram, Mirror::kLowerToUpper);

  const LossType type = loss.config().type;
  const double delta = loss.config().delta;
  std::vector<double> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = DualLabel(type, ys[i]);
  const Eigen::VectorXd q = gram.diagonal() / n_lambda;

  Eigen::VectorXd alpha = Eigen::VectorXd::Zero(size);
  Eigen::VectorXd z = Eigen::VectorXd::Zero(size);  // K alpha / (lambda n), kept up to date
  Eigen::VectorXd c = Eigen::VectorXd::Zero(size);

  // The gap is checked every epoch on the incrementally updated z (O(n)); a pass is
  // confirmed on z recomputed from scratch (O(n^2), like an epoch), so that the reported
  // certificate owes nothing to the updates' accumulated rounding.
  auto converged = [&](double gap, double objective) {
    return gap <= options.tolerance * std::max(1.0, std::abs(objective));
  };
  auto refresh = [&] {
    c = alpha / n_lambda;
    z.noalias() = gram * c;
  };

  std::vector<Eigen::Index> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<Eigen::Index>(i);
  SplitMix64 rng(kPermutationSeed);

  const bool piecewise_linear = IsPiecewiseLinear(type);
  std::vector<DualPiece> pieces(piecewise_linear ? n : 0);
  std::vector<int8_t> newton_states(piecewise_linear ? n : 0,
                                    std::numeric_limits<int8_t>::min());

  int epochs = 0;
  int epochs_since_newton = 0;
  double gap = DualityGap(loss, margin, ys, alpha, z);
  double objective = Objective(loss, margin, lambda, ys, c, z);
  bool fresh = true;  // z == K c exactly as computed from alpha
  while (!converged(gap, objective) && epochs < options.max_epochs) {
    Shuffle(order, rng);
    for (const Eigen::Index i : order) {
      const double next =
          DualStep(type, labels[static_cast<size_t>(i)], margin, delta, z(i), alpha(i), q(i));
      const double change = next - alpha(i);
      if (change == 0) continue;
      alpha(i) = next;
      z.noalias() += gram.col(i) * (change / n_lambda);
    }
    ++epochs;
    ++epochs_since_newton;
    if (piecewise_linear && epochs % kNewtonEvery == 0) {
      // Only when the partition into bounds and free intervals has changed since the last
      // Newton step (on the same partition it would land where it did before), and only
      // when its |F|^3 / 3 multiply-adds are within kNewtonCostRatio times those of the
      // epochs since (n^2 each at most): Newton never more than quintuples the work.
      bool changed = false;
      size_t free = 0;
      for (size_t i = 0; i < n; ++i) {
        pieces[i] = PieceOf(type, labels[i], margin, alpha(static_cast<Eigen::Index>(i)));
        changed = changed || pieces[i].state != newton_states[i];
        if (pieces[i].free) ++free;
      }
      const double newton_cost = std::pow(static_cast<double>(free), 3) / 3.0;
      const double epochs_cost = static_cast<double>(epochs_since_newton) *
                                 static_cast<double>(n) * static_cast<double>(n);
      if (changed && free <= kMaxNewtonCoordinates &&
          newton_cost <= kNewtonCostRatio * epochs_cost) {
        NewtonStepOnFreeCoordinates(gram, n_lambda, pieces, alpha, z);
        for (size_t i = 0; i < n; ++i) newton_states[i] = pieces[i].state;
        epochs_since_newton = 0;
      }
    }
    c = alpha / n_lambda;
    gap = DualityGap(loss, margin, ys, alpha, z);
    objective = Objective(loss, margin, lambda, ys, c, z);
    fresh = false;
    if (converged(gap, objective)) {
      refresh();
      gap = DualityGap(loss, margin, ys, alpha, z);
      objective = Objective(loss, margin, lambda, ys, c, z);
      fresh = true;
    }
  }
  if (!fresh) {
    refresh();
    gap = DualityGap(loss, margin, ys, alpha, z);
    objective = Objective(loss, margin, lambda, ys, c, z);
  }
  return MakeSolution(c, z, objective, gap, epochs);
}

absl::Status ValidateComparatorInputs(const Kernel& kernel, const Loss& loss, double margin,
                                      double lambda, absl::Span<const double> xs,
                                      absl::Span<const double> ys,
                                      const ComparatorOptions& options) {
  if (!(lambda > 0) || !std::isfinite(lambda)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the comparator needs a finite lambda > 0 (the regularised risk has no unique "
        "minimiser otherwise), got ",
        lambda));
  }
  const size_t n = ys.size();
  if (n == 0) {
    return absl::InvalidArgumentError("the comparator needs at least one example, got none");
  }
  if (xs.size() != n * kernel.dim()) {
    return absl::InvalidArgumentError(absl::StrCat("xs must hold ys.size() * dim = ", n, " * ",
                                                   kernel.dim(), " = ", n * kernel.dim(),
                                                   " values (example-major), got ", xs.size()));
  }
  if (!AllFinite(xs)) return absl::InvalidArgumentError("xs has a non-finite value");
  if (!AllFinite(ys)) return absl::InvalidArgumentError("ys has a non-finite value");
  if (!std::isfinite(margin)) {
    return absl::InvalidArgumentError(absl::StrCat("the margin must be finite, got ", margin));
  }
  const LossType type = loss.config().type;
  if (type == LossType::kEpsilonInsensitive && margin < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the epsilon-insensitive loss's margin (epsilon) must be >= 0, got ", margin));
  }
  if (type == LossType::kHuber && !(loss.config().delta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Huber loss's delta must be > 0, got ", loss.config().delta));
  }
  if (type == LossType::kHinge || type == LossType::kLogistic) {
    for (size_t i = 0; i < n; ++i) {
      if (ys[i] != 1.0 && ys[i] != -1.0) {
        return absl::InvalidArgumentError(absl::StrCat(
            LossTypeName(type), " labels must be -1 or +1; example ", i, " has ", ys[i]));
      }
    }
  }
  if (!(options.tolerance >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComparatorOptions.tolerance must be >= 0, got ", options.tolerance));
  }
  if (options.max_epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComparatorOptions.max_epochs must be >= 0, got ", options.max_epochs));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ComparatorSolution> SolveComparator(const Kernel& kernel, const Loss& loss,
                                                   double margin, double lambda,
                                                   absl::Span<const double> xs,
                                                   absl::Span<const double> ys,
                                                   const ComparatorOptions& options) {
  OKL_RETURN_IF_ERROR(ValidateComparatorInputs(kernel, loss, margin, lambda, xs, ys, options));
  if (loss.config().type == LossType::kSquared)
    return SolveSquared(kernel, loss, lambda, xs, ys);
  return SolveSdca(kernel, loss, margin, lambda, xs, ys, options);
}

absl::StatusOr<RegretResult> ComputeRegret(const ModelConfig& config, double margin,
                                           const RegretWindow& window,
                                           const ComparatorOptions& options) {
  const size_t n = window.size();
  if (n == 0) {
    return absl::InvalidArgumentError(
        "the regret window is empty: observe at least one example before computing regret");
  }
  if (window.online_losses.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("the regret window has ", n, " labels but ", window.online_losses.size(),
                     " online losses; it needs one online loss per example"));
  }
  if (window.xs.size() != n * config.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the regret window has ", n, " labels, so its xs must hold ", n, " * dim ", config.dim,
        " = ", n * config.dim, " values, but it holds ", window.xs.size()));
  }
  const double lambda = ComparatorLambda(config, n);
  if (!(lambda > 0) || !std::isfinite(lambda)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "regret needs config.lambda > 0: its comparator minimises the regularised risk, "
        "which has no unique minimiser at lambda = 0; got lambda = ",
        lambda));
  }
  if (!AllFinite(window.online_losses)) {
    return absl::InvalidArgumentError("the regret window has a non-finite online loss");
  }
  OKL_RETURN_IF_ERROR(ValidateConfig(config));

  const Kernel kernel(config.kernel, config.dim);
  const Loss loss(config.loss);
  OKL_ASSIGN_OR_RETURN(
      ComparatorSolution solution,
      SolveComparator(kernel, loss, margin, lambda, window.xs, window.ys, options));

  RegretResult result;
  for (size_t i = 0; i < n; ++i) {
    result.online_loss += window.online_losses[i];
    result.comparator_loss += loss.At(window.ys[i], solution.predictions[i], margin).value;
  }
  result.regret = result.online_loss - result.comparator_loss;
  result.duality_gap = solution.duality_gap;
  result.window = n;
  result.last_step = window.last_step;
  return result;
}

}  // namespace okl
