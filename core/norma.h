// core/norma.h
//
// NormaModel is NORMA (Kivinen, Smola and Williamson 2004): stochastic gradient descent
// in a reproducing-kernel Hilbert space. On each labelled example (x_t, y_t):
//   1. p_t = f_t(x_t), the prequential prediction before the update;
//   2. g_t = d loss(y_t, p_t) / d f;
//   3. every coefficient shrinks by (1 - eta_t lambda);
//   4. if g_t != 0 the term x_t joins with alpha_t = -eta_t g_t (and b -= eta_t g_t);
//   5. terms below budget.drop_below go, then the budget policy trims to max_terms.
// Step 3 costs O(1): the coefficients are stored unscaled beside one scale factor, which
// is folded into them (O(size)) whenever it falls below 2^-8, long before it underflows.
// A step therefore costs one kernel sweep, like a prediction.
//
// The averaged hypothesis (seed 002) predicts with (1/T) sum_{t=1..T} f_t, the mean of
// the T hypotheses that made the prequential predictions. It costs O(1) per step too: a
// running sum u of the scale factor gives each term's summed coefficient as
// base_i + a_i (u - mark_i). A term removed from the expansion leaves the average too.
//
// Not thread-safe: const methods may run concurrently with each other, but not with
// Observe (ModelRegistry serialises writers).
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::NormaModel> model,
//                        okl::NormaModel::Create(config));
//   OKL_ASSIGN_OR_RETURN(okl::Observation o, model->Observe(x, y));  // o.prediction: f_t(x)
//   OKL_ASSIGN_OR_RETURN(double p, model->Predict(x));               // f_{t+1}(x)
#ifndef OKL_CORE_NORMA_H_
#define OKL_CORE_NORMA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/expansion.h"
#include "core/kernel.h"
#include "core/learning_rate.h"
#include "core/loss.h"
#include "core/merge.h"
#include "core/regret.h"
#include "core/regret_window.h"

namespace okl {

// What one Observe reports about its example.
struct Observation {
  double prediction = 0.0;  // p_t = f_t(x_t), before the update
  double loss = 0.0;        // loss(y_t, p_t)
};

struct ModelStats {
  uint64_t steps = 0;
  uint32_t expansion_size = 0;
  double cumulative_loss = 0.0;  // sum_t loss(y_t, p_t)
  uint64_t mistakes = 0;         // sign(p_t) != y_t (p_t = 0 counts); classification losses
  uint64_t terms_removed = 0;    // by the budget policy and drop_below together
  double offset = 0.0;           // b
  double margin = 0.0;           // rho or epsilon as learned by the nu-trick, else the config's
  // Seed 003's bound lambda^-1 (1 - eta lambda)^tau C X on the RKHS-norm error of
  // truncating to the newest tau = max_terms terms. Set where it applies: constant rate,
  // lambda > 0, an OLDEST budget without drop_below, a loss with bounded derivative (C)
  // and a bounded kernel (X). 0 until the budget first removes a term.
  std::optional<double> truncation_error_bound;
  // The latest windowed regret (core/regret.h), computed off the request path; unset
  // without regret tracking and until the first computation. NormaModel never sets it:
  // ModelEntry does, from its RegretScheduler's results.
  std::optional<RegretResult> regret;
};

// The complete state of a model: NormaModel::FromState(model.ExportState()) continues
// bit-identically. Terms are listed in slot order (see Expansion).
struct ModelState {
  ModelConfig config;
  std::vector<double> support;          // size * dim, term-major (term i at [i*dim, (i+1)*dim))
  std::vector<double> coefficients;     // unscaled: alpha_i = scale * coefficients[i]
  std::vector<uint64_t> added_at;       // the step each term was added at
  std::vector<double> average_base;     // per term; empty unless config.averaged
  std::vector<double> average_mark;     // per term; empty unless config.averaged
  double scale = 1.0;
  double offset = 0.0;
  double margin = 0.0;
  uint64_t steps = 0;
  double average_sum = 0.0;         // u: running sum of the scale factor since the last fold
  double average_offset_sum = 0.0;  // sum_t b_t
  double cumulative_loss = 0.0;
  uint64_t mistakes = 0;
  uint64_t terms_removed = 0;
  // The last config.regret_window examples (empty without regret tracking); when not
  // empty, its last_step equals steps.
  RegretWindow regret_window;

  friend bool operator==(const ModelState&, const ModelState&) = default;
};

enum class PredictionMode {
  kConfigured,  // averaged if config.averaged, else current
  kCurrent,     // f_{T+1}: the model after the last update
  kAveraged,    // (1/T) sum_{t=1..T} f_t; requires config.averaged
};

// The most memory a model of `config` can come to hold, in bytes: a full expansion
// (budget.max_terms terms of dim + 1 doubles, their step and slot bookkeeping, and the
// averaged sums if averaged), its regret window, and the W x W Gram matrix the regret
// comparator allocates while it runs. An unbounded budget (max_terms 0) gives SIZE_MAX.
// What the server's memory quotas count for a model, before it exists.
size_t WorstCaseMemoryBytes(const ModelConfig& config);

class NormaModel {
 public:
  // InvalidArgument if ValidateConfig(config) fails.
  static absl::StatusOr<std::unique_ptr<NormaModel>> Create(const ModelConfig& config);
  // InvalidArgument if the state is inconsistent (sizes, non-finite numbers, a term count
  // over the budget, an invalid config); DataLoss never: callers decode bytes themselves.
  static absl::StatusOr<std::unique_ptr<NormaModel>> FromState(const ModelState& state);

  NormaModel(const NormaModel&) = delete;
  NormaModel& operator=(const NormaModel&) = delete;

  ModelState ExportState() const;

  // InvalidArgument unless x has dim entries, x and y are finite, and y is -1 or +1 for
  // the classification losses.
  absl::Status ValidateExample(absl::Span<const double> x, double y) const;
  // InvalidArgument unless x has dim finite entries.
  absl::Status ValidateInput(absl::Span<const double> x) const;

  // One NORMA step. On a bad example returns InvalidArgument and changes nothing. If the
  // step would make the model non-finite (a diverging learning rate), returns
  // FailedPrecondition and changes nothing.
  absl::StatusOr<Observation> Observe(absl::Span<const double> x, double y);

  // InvalidArgument unless xs holds ys.size() * dim values and every example passes
  // ValidateExample; the message names the first bad example. ObserveBatch runs this
  // first; a caller that logs batches runs it before logging, so that no invalid batch
  // is ever logged.
  absl::Status ValidateBatch(absl::Span<const double> xs, absl::Span<const double> ys) const;

  // Observes ys.size() examples in order; xs holds them term-major (ys.size() * dim).
  // Every example is validated (ValidateBatch) before the first is applied, so a bad
  // batch changes nothing. Appends one Observation per applied example to `out`. If an example
  // would make the model diverge, the ones before it stay applied and the error says how many.
  absl::Status ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                            std::vector<Observation>* out);

  absl::StatusOr<double> Predict(absl::Span<const double> x,
                                 PredictionMode mode = PredictionMode::kConfigured) const;
  // Predicts out.size() inputs stored term-major in xs; all validated first.
  absl::Status PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured) const;

  // |f|^2 in the RKHS (the offset excluded): sum_ij alpha_i alpha_j k(x_i, x_j). Costs
  // O(size^2 dim); meant for inspection, not for the request path.
  double SquaredNorm() const;

  ModelStats stats() const;
  // rho or epsilon as learned by the nu-trick, else the config's (ModelStats::margin).
  double margin() const { return margin_; }
  const ModelConfig& config() const { return config_; }
  size_t expansion_size() const { return expansion_.size(); }
  uint64_t steps() const { return steps_; }
  // The examples of the regret window, oldest first (empty without regret tracking).
  RegretWindow RegretWindowCopy() const { return regret_window_.Copy(); }
  // Bytes held by the expansion's arrays and the regret window.
  size_t MemoryBytes() const { return expansion_.MemoryBytes() + regret_window_.MemoryBytes(); }

 private:
  explicit NormaModel(const ModelConfig& config);
  static absl::Status ValidateRegretWindow(const ModelState& state);

  // The step without validation; FailedPrecondition (nothing changed) on divergence.
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y);
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const;
  // FailedPrecondition for kAveraged on a model that does not track the average.
  absl::Status CheckPredictionMode(PredictionMode mode) const;
  // Applies drop_below and the budget policy with the step's candidate term (empty `x` if
  // the step adds none). Writes the candidate into the expansion if it survives.
  void InsertWithinBudget(absl::Span<const double> x, double coefficient);
  void DropBelowThreshold();
  // MERGE on a full expansion: merges the smallest |a| of the expansion and the new term
  // (core/merge.h) into its best same-sign partner, or removes it if there is none.
  void MergeSmallestTerm(absl::Span<const double> x, double coefficient);
  // Removes every term whose unscaled coefficient satisfies `remove`.
  template <typename Predicate>
  void RemoveTermsWhere(Predicate remove);
  // Folds the scale (and the averaged sums) into the coefficients when needed.
  void MaybeRenormalize();

  ModelConfig config_;
  Kernel kernel_;
  Loss loss_;
  LearningRate learning_rate_;
  Expansion expansion_;
  RegretWindowBuffer regret_window_;

  double scale_ = 1.0;
  double offset_ = 0.0;
  double margin_ = 0.0;
  uint64_t steps_ = 0;
  double average_sum_ = 0.0;
  double average_offset_sum_ = 0.0;
  double cumulative_loss_ = 0.0;
  uint64_t mistakes_ = 0;
  uint64_t terms_removed_ = 0;
  // A lower bound on min_i |a_i| (unscaled), so that drop_below needs a scan only when a
  // term may really have fallen below the threshold.
  double min_abs_coefficient_bound_ = 0.0;
  // MergeSmallestTerm's buffers, kept to spare a step the allocations.
  std::vector<double> kernel_values_;
  std::vector<MergeLossEstimate> merge_estimates_;
  std::vector<double> merge_scratch_;
  std::vector<double> merge_point_;
};

}  // namespace okl

#endif  // OKL_CORE_NORMA_H_
