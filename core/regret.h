// core/regret.h
//
// Windowed regret (docs/design.md, "Metrics semantics"): over the last W examples,
//   regret = sum_{t in W} loss(y_t, p_t) - sum_{t in W} loss(y_t, g*(x_t)),
// where p_t are the online (prequential) predictions and g* is the batch comparator, the
// minimiser in the kernel's RKHS of the regularised risk on the same window,
//   J(g) = (1/n) sum_i loss(y_i, g(x_i)) + (lambda/2) |g|^2,   n = |W|.
// By the representer theorem (Schölkopf, Herbrich and Smola 2001) g* = sum_i c_i k(x_i, .). The
// squared loss has the closed form (K + n lambda I) c = y, solved by Cholesky. The other losses
// are solved by stochastic dual coordinate ascent (SDCA) over the same Gram matrix, which
// certifies its accuracy: it stops once the duality gap J(g) - D(alpha) >= J(g) - J(g*) is at
// most `tolerance` * max(1, |J(g)|). The comparator has no offset (docs/design.md: g*
// ranges over the kernel's space), and the margin of hinge, novelty and epsilon-insensitive
// is the one the caller passes (the model's current, possibly learned, value).
//
// Everything here is a pure function of its arguments and safe to call from any thread.
// Cost: O(n^2 dim) for the Gram matrix and 8 n^2 bytes to hold it, then O(n^3 / 3) for
// Cholesky or O(n^2) per SDCA epoch.
//
// Example:
//   okl::RegretWindow window = model->RegretWindowCopy();
//   OKL_ASSIGN_OR_RETURN(okl::RegretResult r,
//                        okl::ComputeRegret(model->config(), model->stats().margin, window));
//   // r.regret, r.online_loss, r.comparator_loss
#ifndef OKL_CORE_REGRET_H_
#define OKL_CORE_REGRET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/kernel.h"
#include "core/loss.h"

namespace okl {

// The examples of a regret window, oldest first, with the online loss of each.
struct RegretWindow {
  std::vector<double> xs;             // size() * dim, example-major
  std::vector<double> ys;             // labels
  std::vector<double> online_losses;  // loss(y_t, p_t) when example t was observed
  uint64_t last_step = 0;             // the step of the newest example (0: empty)

  size_t size() const { return ys.size(); }
  friend bool operator==(const RegretWindow&, const RegretWindow&) = default;
};

struct ComparatorOptions {
  // SDCA stops once the duality gap is at most tolerance * max(1, |J|).
  double tolerance = 1e-6;
  // SDCA's epochs (n coordinate steps each) at most; the gap reached is reported.
  int max_epochs = 1000;
};

struct ComparatorSolution {
  std::vector<double> coefficients;  // c: g*(.) = sum_i c_i k(x_i, .)
  std::vector<double> predictions;   // g*(x_i), i.e. K c
  double objective = 0.0;            // J(g*) = (1/n) sum_i loss + (lambda/2) c' K c
  // An upper bound on objective - min J: SDCA's final duality gap; for the squared loss's
  // direct solve, the gap of the dual point it implies (rounding error only, unless
  // n lambda is itself lost in rounding next to K, when it says how far off the solve is).
  double duality_gap = 0.0;
  int epochs = 0;  // SDCA epochs run (0 for the direct solve)
};

// Minimises J over the RKHS of `kernel` for the n examples in xs (n * kernel.dim(),
// example-major) and ys. Deterministic: the same arguments give the same solution, bit for
// bit (SDCA's coordinate order comes from a fixed seed). Reaching max_epochs is not an
// error: the solution is returned with the gap it reached.
// InvalidArgument unless lambda > 0 (finite), n >= 1, xs holds n * kernel.dim() values, xs,
// ys and margin are finite, hinge and logistic labels are -1 or +1, the epsilon-insensitive
// margin is >= 0, the Gram matrix is finite (the polynomial kernel can overflow), and the
// options are in range. InternalError if the squared loss's system cannot be factored (only
// for a lambda lost in rounding next to K).
absl::StatusOr<ComparatorSolution> SolveComparator(const Kernel& kernel, const Loss& loss,
                                                   double margin, double lambda,
                                                   absl::Span<const double> xs,
                                                   absl::Span<const double> ys,
                                                   const ComparatorOptions& options = {});

struct RegretResult {
  double regret = 0.0;           // online_loss - comparator_loss
  double online_loss = 0.0;      // sum of the window's online losses
  double comparator_loss = 0.0;  // sum_i loss(y_i, g*(x_i)), unregularised
  double duality_gap = 0.0;      // the comparator's, see ComparatorSolution
  size_t window = 0;             // n
  uint64_t last_step = 0;        // window.last_step
};

// The regret of `window` for a model with `config`, whose current margin is `margin`.
// InvalidArgument for an empty window, a window whose xs, ys and online_losses disagree in
// size (xs holds size() * config.dim values), a non-finite online loss, config.lambda <= 0
// (ComparatorLambda(config, n): a KRLS tracker's comparator is the Gaussian-process
// posterior mean on the window, lambda = noise_variance / n),
// a config that fails ValidateConfig, or any of SolveComparator's reasons.
absl::StatusOr<RegretResult> ComputeRegret(const ModelConfig& config, double margin,
                                           const RegretWindow& window,
                                           const ComparatorOptions& options = {});

}  // namespace okl

#endif  // OKL_CORE_REGRET_H_
