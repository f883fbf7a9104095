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
// The averaged hypothesis (Kivinen, Smola and Williamson 2004) predicts with the mean of recent
// hypotheses f_t, the ones that made the prequential predictions. With W =
// EffectiveAveragingWindow(config):
//   W = 0 (no budget and no averaging_window): the mean of f_1 .. f_T, every hypothesis
//     so far;
//   W > 0: suffix averaging in blocks of W steps: the mean of f_t for t in (S, T], where
//     S = max(0, (floor((T - 1) / W) - 1) W), between W and 2W hypotheses once T > W.
// The mean over a window is a proper average however many terms the budget removed: a
// term that leaves the expansion is *retired*, kept (its input and its coefficient summed
// over the window's hypotheses) until the window no longer holds a hypothesis it was part
// of. So an averaged model holds up to budget.max_terms + 4W retired terms beside its
// budget (each step retires at most two, MERGE's pair, and at most max_terms terms
// outlive a block), and its memory counts them (WorstCaseMemoryBytes).
// It costs O(1) per step: a running sum u of the scale factor gives each term's summed
// coefficient over the current block as base_i + a_i (u - mark_i); at a block's end
// (O(size), every W steps) that becomes the term's previous-block sum.
//
// With sparse storage (config.sparse, core/config.h) the expansion keeps each term's
// non-zeros, and every step and prediction runs on the input's non-zeros; a dense input is
// reduced to its non-zeros first. The arithmetic is the dense model's: a sparse-storage
// model makes the same predictions and steps as a dense one on the same examples.
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
#include "core/model.h"
#include "core/regret.h"
#include "core/regret_window.h"

namespace okl {

class NormaModel : public Model {
 public:
  // The most memory a model of `config` can come to hold, in bytes: a full expansion
  // (budget.max_terms terms of dim + 1 doubles, their step and slot bookkeeping, and the
  // averaged sums if averaged) plus the terms the averaged hypothesis may keep after the
  // budget removed them (two averaging windows' worth), its regret window, and the W x W
  // Gram matrix the regret comparator allocates while it runs. An unbounded budget
  // (max_terms 0) gives SIZE_MAX.
  static size_t WorstCaseMemoryBytes(const ModelConfig& config);
  // The most terms an averaged model of `config` keeps retired (see above); 0 without the
  // averaged hypothesis or without a budget (then there is no bound).
  static uint64_t MaxRetiredTerms(const ModelConfig& config);

  // InvalidArgument if ValidateConfig(config) fails.
  static absl::StatusOr<std::unique_ptr<NormaModel>> Create(const ModelConfig& config);
  // InvalidArgument if the state is inconsistent (sizes, non-finite numbers, a term count
  // over the budget, an invalid config); DataLoss never: callers decode bytes themselves.
  static absl::StatusOr<std::unique_ptr<NormaModel>> FromState(const ModelState& state);

  ModelState ExportState() const override;

  // |f|^2 in the RKHS (the offset excluded): sum_ij alpha_i alpha_j k(x_i, x_j). Costs
  // O(size^2 dim); meant for inspection, not for the request path.
  double SquaredNorm() const override;

  ModelStats stats() const override;
  size_t expansion_size() const override { return expansion_.size(); }
  // Bytes held by the expansion's arrays (the retired terms' included) and the regret
  // window.
  size_t MemoryBytes() const override {
    return expansion_.MemoryBytes() + (retired_ != nullptr ? retired_->MemoryBytes() : 0) +
           regret_window_.MemoryBytes();
  }

 protected:
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) override;
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const override;
  absl::StatusOr<Observation> StepSparse(SparseVectorView x, double y) override;
  double PredictSparseUnchecked(SparseVectorView x, PredictionMode mode) const override;

 private:
  explicit NormaModel(const ModelConfig& config);
  // FromState's checks, InvalidArgument unless: the term arrays' sizes fit each other,
  // the storage and the budget (ValidateTermLayout); the terms' numbers, the scale and
  // the scale sum are finite (CheckFiniteTerms); the scale, the averaged sums' marks, the
  // coefficients and the steps the terms were added at are in range (ValidateTermRanges);
  // the state's averaging-window fields fit its config (ValidateAverageWindowState).
  static absl::Status ValidateTermLayout(const ModelState& state);
  static absl::Status CheckFiniteTerms(const ModelState& state);
  static absl::Status ValidateTermRanges(const ModelState& state);
  static absl::Status ValidateAverageWindowState(const ModelState& state);
  // FromState's restoring of a validated state's terms into expansion_, and of the
  // retired terms the averaged hypothesis keeps into retired_.
  void RestoreTerms(const ModelState& state);
  void RestoreRetiredTerms(const ModelState& state);
  // The step and the prediction on an input of the expansion's storage: a span (dense) or
  // a SparseVectorView (sparse).
  template <typename Input>
  absl::StatusOr<Observation> StepOn(const Input& x, double y);
  template <typename Input>
  double PredictOn(const Input& x, PredictionMode mode) const;
  // Applies drop_below and the budget policy with the step's candidate term. Writes the
  // candidate into the expansion if it survives.
  template <typename Input>
  void InsertWithinBudget(const Input& x, double coefficient);
  void DropBelowThreshold();
  // MERGE on a full expansion: merges the smallest |a| of the expansion and the new term
  // (core/merge.h) into its best same-sign partner, or removes it if there is none.
  void MergeSmallestTerm(absl::Span<const double> x, double coefficient);
  // Removes every term whose unscaled coefficient satisfies `remove`.
  template <typename Predicate>
  void RemoveTermsWhere(Predicate remove);
  // Folds the scale (and the averaged sums) into the coefficients when needed.
  void MaybeRenormalize();
  // The averaged hypothesis: keeps the term in `slot`, about to leave the expansion, for
  // as long as the averaging window holds a hypothesis it was part of. No-op unless
  // config.averaged.
  void RetireTerm(size_t slot);
  // Ends the current averaging block (see the top of this file).
  void StartAverageBlock();
  // Whether the averaged sums a step leaves are finite (true when not averaged).
  bool AverageSumsStayFinite(bool starts_block) const;

  Kernel kernel_;
  Expansion expansion_;
  // Terms removed from expansion_ that the averaged hypothesis still needs: coefficient
  // 0, their summed coefficients in average_base (current block) and average_previous,
  // and the step they were removed at as added_at. Null unless config.averaged (an empty
  // Expansion object is 328 bytes, a tenth of a small model's fixed overhead).
  std::unique_ptr<Expansion> retired_;
  const uint64_t average_window_;  // EffectiveAveragingWindow(config)

  double scale_ = 1.0;
  double average_sum_ = 0.0;
  double average_offset_sum_ = 0.0;
  // The averaged hypotheses are f_t for t in (average_previous_start_, steps_], the
  // current block starting after average_block_start_.
  uint64_t average_block_start_ = 0;
  uint64_t average_previous_start_ = 0;
  double average_previous_offset_sum_ = 0.0;
  uint64_t terms_removed_ = 0;
  // A lower bound on min_i |a_i| (unscaled), so that drop_below needs a scan only when a
  // term may really have fallen below the threshold.
  double min_abs_coefficient_bound_ = 0.0;
};

}  // namespace okl

#endif  // OKL_CORE_NORMA_H_
