// core/multiclass_norma.h
//
// MulticlassNormaModel is NORMA for many classes: one kernel expansion whose terms each
// carry a coefficient per class, f_c(x) = sum_i alpha_{i,c} k(x_i, x), learnt by
// stochastic gradient descent on a multi-class loss (multiclass_hinge or softmax, core/
// loss.h). On each example (x_t, class y_t):
//   1. the scores f_c(x_t) of every class, the new class scoring 0; the prequential
//      prediction is the known class of highest score (the first learned on a tie);
//   2. g_t = d loss / d f at those scores (hinge: +1 at the highest-scoring wrong class r,
//      -1 at y_t, when the margin is violated; softmax: softmax(f)_c - [c = y_t]);
//   3. every coefficient shrinks by (1 - eta_t lambda);
//   4. if g_t != 0 the term x_t joins with alpha_t = -eta_t g_t;
//   5. past budget.max_terms a term leaves: OLDEST the oldest, SMALLEST the one of least
//      |alpha_i| (the oldest of those within a relative 1e-9 of it), MERGE that one merged
//      into the partner, searched over every term, whose merge loses the least RKHS norm
//      (core/merge.h, MergeClassPair). The budget counts terms, not terms times classes.
// Budgeted Pegasos (Wang, Crammer and Vucetic 2012) is the POWER schedule with theta 1 and
// eta0 = 1 / lambda. As in NormaModel the coefficients are stored unscaled beside one
// scale factor, so the shrink costs O(1).
//
// The classes are Model::classes(), in the order first seen; each term's coefficients are
// one row of classes().size() values. The offset, the averaged hypothesis, sparse storage,
// drop_below and the regret window are not offered (ValidateConfig refuses them).
//
// Not thread-safe: const methods may run concurrently with each other, but not with
// ObserveClass.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::MulticlassNormaModel> model,
//                        okl::MulticlassNormaModel::Create(config));
//   OKL_ASSIGN_OR_RETURN(okl::Observation o, model->ObserveClass(x, "cat"));
//   std::vector<double> scores(model->classes().size());
//   OKL_RETURN_IF_ERROR(model->PredictScores(x, absl::MakeSpan(scores)));
#ifndef OKL_CORE_MULTICLASS_NORMA_H_
#define OKL_CORE_MULTICLASS_NORMA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/expansion.h"
#include "core/kernel.h"
#include "core/model.h"

namespace okl {

class MulticlassNormaModel : public Model {
 public:
  // The most memory a model of `config` can come to hold: max_terms + 1 terms (one more
  // while a step decides which leaves) of dim inputs and max_classes coefficients, and
  // the class labels. SIZE_MAX without a budget.
  static size_t WorstCaseMemoryBytes(const ModelConfig& config);

  // InvalidArgument if ValidateConfig(config) fails or the loss is not multi-class.
  static absl::StatusOr<std::unique_ptr<MulticlassNormaModel>> Create(
      const ModelConfig& config);
  // InvalidArgument if the state is inconsistent (sizes, non-finite numbers, classes,
  // a term count over the budget, an invalid config).
  static absl::StatusOr<std::unique_ptr<MulticlassNormaModel>> FromState(
      const ModelState& state);

  ModelState ExportState() const override;

  // sum_c |f_c|^2 in the RKHS: sum_ij <alpha_i, alpha_j> k(x_i, x_j). O(size^2 dim).
  double SquaredNorm() const override;
  ModelStats stats() const override;
  size_t expansion_size() const override { return terms_.size(); }
  size_t MemoryBytes() const override;

 protected:
  // The scalar forms: Step is never reached (a multi-class model's labels are classes, and
  // validation refuses y), and PredictUnchecked is the predicted class's score.
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) override;
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const override;
  absl::StatusOr<Observation> StepClass(absl::Span<const double> x, uint32_t y,
                                        uint32_t known_classes) override;
  void ScoresUnchecked(absl::Span<const double> x, absl::Span<double> scores) const override;

 private:
  explicit MulticlassNormaModel(const ModelConfig& config);

  // scores[c] = scale * sum_i coefficients_[i][c] k(x_i, x) for c < columns_, 0 after;
  // kernel_values receives k(x_i, x) for every slot.
  void Scores(absl::Span<const double> x, std::vector<double>& kernel_values,
              absl::Span<double> scores) const;
  // Widens every row to `columns` coefficients (a new class), the new ones 0.
  void Widen(size_t columns);
  // The unscaled |alpha_i| of slot i, from its row.
  double RowNorm(size_t slot) const;
  // Appends the term x with unscaled coefficients `row` (columns_ entries).
  void AppendTerm(absl::Span<const double> x, absl::Span<const double> row, uint64_t added_at);
  // Removes the term in `slot`; the last term moves into it, as in Expansion.
  void RemoveTerm(size_t slot);
  // One term leaves by the budget policy when there are max_terms + 1.
  void ApplyBudget();
  // MERGE: the term of least |alpha| merges into its best partner.
  void MergeSmallestTerm();
  // Folds the scale into the coefficients when it falls below 2^-8.
  void MaybeRenormalize();

  Kernel kernel_;
  // The terms' inputs and the steps they were added at; each slot's coefficient there is
  // the term's unscaled |alpha_i|, which SMALLEST and MERGE look up.
  Expansion terms_;
  // Unscaled alpha_{i,c} = coefficients_[i * columns_ + c], slot-major.
  std::vector<double> coefficients_;
  size_t columns_ = 0;  // coefficients per term: the classes the terms have seen
  double scale_ = 1.0;
  uint64_t terms_removed_ = 0;
};

}  // namespace okl

#endif  // OKL_CORE_MULTICLASS_NORMA_H_
