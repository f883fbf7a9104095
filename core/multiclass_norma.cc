#include "core/multiclass_norma.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/merge.h"
#include "core/status_macros.h"

namespace okl {
namespace {

// The scale is folded into the coefficients below this, long before it underflows.
constexpr double kMinScale = 0x1p-8;
// SMALLEST and MERGE take the oldest of the terms within this relative distance of the
// least |alpha|: with Pegasos steps every unmerged hinge term has |alpha| = sqrt(2) /
// lambda in exact arithmetic, and rounding must not choose among them.
constexpr double kTieTolerance = 1e-9;

absl::Status Inconsistent(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
}

// The buffers of a step and a prediction: one set per thread, so that an idle model costs
// none of them.
struct Buffers {
  std::vector<double> kernel_values;
  std::vector<double> scores;
  std::vector<double> gradient;
  std::vector<double> row;
  std::vector<double> merge_support;
  std::vector<double> merge_point;
};

Buffers& ThreadBuffers() {
  thread_local Buffers buffers;
  return buffers;
}

}  // namespace

MulticlassNormaModel::MulticlassNormaModel(const ModelConfig& config)
    : Model(config),
      kernel_(config.kernel, config.dim),
      // One slot more than the budget: a step appends its term, then the budget decides
      // which leaves.
      terms_(config.dim, /*track_average=*/false,
             config.budget.max_terms == 0 ? 0 : size_t{config.budget.max_terms} + 1) {}

size_t MulticlassNormaModel::WorstCaseMemoryBytes(const ModelConfig& config) {
  if (config.budget.max_terms == 0) return SIZE_MAX;
  const uint64_t terms =
      uint64_t{config.budget.max_terms} + 1 + Expansion::kSlotAlignment;
  const uint64_t classes = config.max_classes;
  // A class label: its bytes, the string and its index entry.
  const uint64_t label_bytes = kMaxClassLabelBytes + 2 * sizeof(std::string) + sizeof(uint32_t);
  return terms * (Expansion::BytesPerSlot(config.dim, false) + classes * sizeof(double)) +
         classes * label_bytes;
}

absl::StatusOr<std::unique_ptr<MulticlassNormaModel>> MulticlassNormaModel::Create(
    const ModelConfig& config) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (!config.multiclass()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a multi-class model needs a multi-class loss (multiclass_hinge or softmax), got ",
        LossTypeName(config.loss.type)));
  }
  return std::unique_ptr<MulticlassNormaModel>(new MulticlassNormaModel(config));
}

absl::StatusOr<std::unique_ptr<MulticlassNormaModel>> MulticlassNormaModel::FromState(
    const ModelState& state) {
  const ModelConfig& config = state.config;
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (!config.multiclass()) {
    return Inconsistent("a multi-class model's state has a loss that is not multi-class");
  }
  OKL_RETURN_IF_ERROR(ValidateClasses(state));
  OKL_RETURN_IF_ERROR(ValidateStateScalars(state));
  const size_t n = state.added_at.size();
  const size_t columns = state.classes.size();
  if (state.support.size() != n * config.dim || state.coefficients.size() != n * columns) {
    return Inconsistent(absl::StrCat("holds ", state.support.size(), " support values and ",
                                     state.coefficients.size(), " coefficients for ", n,
                                     " terms of dim ", config.dim, " and ", columns,
                                     " classes"));
  }
  if (config.budget.max_terms > 0 && n > config.budget.max_terms) {
    return Inconsistent(absl::StrCat(n, " terms, over budget.max_terms ",
                                     config.budget.max_terms));
  }
  OKL_RETURN_IF_ERROR(CheckFiniteValues("support", state.support));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("coefficients", state.coefficients));
  if (!(state.scale >= kMinScale && state.scale <= 1)) {
    return Inconsistent(absl::StrCat("scale must be in [2^-8, 1], got ", state.scale));
  }
  for (size_t i = 0; i < n; ++i) {
    if (state.added_at[i] < 1 || state.added_at[i] > state.steps) {
      return Inconsistent(absl::StrCat("added_at[", i, "] = ", state.added_at[i],
                                       " is outside [1, steps = ", state.steps, "]"));
    }
    const auto row = absl::MakeConstSpan(state.coefficients).subspan(i * columns, columns);
    if (std::all_of(row.begin(), row.end(), [](double a) { return a == 0; })) {
      return Inconsistent(absl::StrCat("term ", i, " has no non-zero coefficient"));
    }
  }
  if (state.terms_removed > state.steps) {
    return Inconsistent(absl::StrCat("terms_removed ", state.terms_removed, " exceeds steps ",
                                     state.steps));
  }
  if (!state.weights.empty() || !state.weight_sums.empty() || HasTrackerFields(state) ||
      !state.average_base.empty() || !state.average_mark.empty() ||
      !state.average_previous.empty() || !state.retired_support.empty() ||
      !state.retired_at.empty() || !state.sparse_support.empty() ||
      !state.candidate_states.empty() || !state.candidates.empty()) {
    return Inconsistent(
        "a multi-class kernel model holds only its terms, coefficients and classes");
  }

  std::unique_ptr<MulticlassNormaModel> model(new MulticlassNormaModel(config));
  model->RestoreClasses(state);
  model->RestoreStateScalars(state);
  model->columns_ = columns;
  model->terms_.Reserve(n);
  model->coefficients_.reserve(n * columns);
  for (size_t i = 0; i < n; ++i) {
    model->AppendTerm(absl::MakeConstSpan(state.support).subspan(i * config.dim, config.dim),
                      absl::MakeConstSpan(state.coefficients).subspan(i * columns, columns),
                      state.added_at[i]);
  }
  model->scale_ = state.scale;
  model->terms_removed_ = state.terms_removed;
  return model;
}

ModelState MulticlassNormaModel::ExportState() const {
  ModelState state;
  state.config = config_;
  const size_t n = terms_.size();
  state.support.resize(n * config_.dim);
  state.added_at.resize(n);
  for (size_t i = 0; i < n; ++i) {
    terms_.CopySupport(i, state.support.data() + i * config_.dim);
    state.added_at[i] = terms_.added_at(i);
  }
  // Every row as wide as the classes: a class added by a failed step is gone again, so
  // columns_ never exceeds them.
  const size_t columns = classes_.size();
  state.coefficients.assign(n * columns, 0.0);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(coefficients_.begin() + i * columns_, columns_,
                state.coefficients.begin() + i * columns);
  }
  state.classes = classes_;
  state.scale = scale_;
  state.terms_removed = terms_removed_;
  ExportStateScalars(&state);
  return state;
}

double MulticlassNormaModel::SquaredNorm() const {
  const size_t n = terms_.size();
  std::vector<double> x_i(config_.dim);
  std::vector<double> k_i(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    terms_.CopySupport(i, x_i.data());
    terms_.KernelValues(kernel_, x_i, absl::MakeSpan(k_i));
    for (size_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (size_t c = 0; c < columns_; ++c) {
        dot += coefficients_[i * columns_ + c] * coefficients_[j * columns_ + c];
      }
      sum += dot * k_i[j];
    }
  }
  return scale_ * scale_ * sum;
}

ModelStats MulticlassNormaModel::stats() const {
  ModelStats stats = ScalarStats();
  stats.expansion_size = static_cast<uint32_t>(terms_.size());
  stats.terms_removed = terms_removed_;
  stats.classes = classes();
  return stats;
}

size_t MulticlassNormaModel::MemoryBytes() const {
  size_t label_bytes = 0;
  for (const std::string& label : classes_) {
    label_bytes += label.capacity() + 2 * sizeof(std::string) + sizeof(uint32_t);
  }
  return terms_.MemoryBytes() + coefficients_.capacity() * sizeof(double) + label_bytes;
}

absl::StatusOr<Observation> MulticlassNormaModel::Step(absl::Span<const double> x, double y) {
  return absl::InvalidArgumentError(
      "a multi-class model learns from class labels, not from y: give each example its "
      "class_label");
}

double MulticlassNormaModel::PredictUnchecked(absl::Span<const double> x,
                                              PredictionMode mode) const {
  if (classes_.empty()) return 0.0;
  Buffers& buffers = ThreadBuffers();
  buffers.scores.resize(classes_.size());
  Scores(x, buffers.kernel_values, absl::MakeSpan(buffers.scores));
  return *std::max_element(buffers.scores.begin(), buffers.scores.end());
}

void MulticlassNormaModel::ScoresUnchecked(absl::Span<const double> x,
                                           absl::Span<double> scores) const {
  Scores(x, ThreadBuffers().kernel_values, scores);
}

void MulticlassNormaModel::Scores(absl::Span<const double> x,
                                  std::vector<double>& kernel_values,
                                  absl::Span<double> scores) const {
  const size_t n = terms_.size();
  kernel_values.resize(n);
  terms_.KernelValues(kernel_, x, absl::MakeSpan(kernel_values));
  std::fill(scores.begin(), scores.end(), 0.0);
  const size_t columns = std::min(columns_, scores.size());
  for (size_t i = 0; i < n; ++i) {
    const double k = kernel_values[i];
    const double* row = coefficients_.data() + i * columns_;
    for (size_t c = 0; c < columns; ++c) scores[c] += row[c] * k;
  }
  for (size_t c = 0; c < columns; ++c) scores[c] *= scale_;
}

absl::StatusOr<Observation> MulticlassNormaModel::StepClass(absl::Span<const double> x,
                                                            uint32_t y,
                                                            uint32_t known_classes) {
  OKL_RETURN_IF_ERROR(CheckStepCounter());
  const uint64_t t = steps_ + 1;
  const size_t classes = classes_.size();
  Buffers& buffers = ThreadBuffers();
  // 1: the scores, a class no term has seen scoring 0, and the prequential prediction.
  std::vector<double>& scores = buffers.scores;
  scores.resize(classes);
  Scores(x, buffers.kernel_values, absl::MakeSpan(scores));
  uint32_t predicted = kNoClass;
  for (uint32_t c = 0; c < known_classes; ++c) {
    if (predicted == kNoClass || scores[c] > scores[predicted]) predicted = c;
  }
  const double score = predicted == kNoClass ? 0.0 : scores[predicted];
  // 2: the loss and its gradient.
  std::vector<double>& gradient = buffers.gradient;
  gradient.resize(classes);
  const ClassLossPoint at =
      loss_.AtClasses(scores, y, margin_, absl::MakeSpan(gradient));
  // 3-4: the shrink and the new term, alpha_t = -eta_t g_t, stored unscaled (after a fold
  // the scale is at least kMinScale).
  const double eta = learning_rate_.At(t);
  const double shrink = 1.0 - eta * config_.lambda;
  const double stored_scale = std::max(scale_ * shrink, kMinScale);
  std::vector<double>& row = buffers.row;
  row.resize(classes);
  bool adds_term = false;
  bool finite = std::isfinite(score) && std::isfinite(at.value) &&
                std::isfinite(cumulative_loss_ + at.value);
  for (size_t c = 0; c < classes; ++c) {
    row[c] = -eta * gradient[c] / stored_scale;
    finite = finite && std::isfinite(row[c]) && std::isfinite(scores[c]);
    adds_term = adds_term || row[c] != 0;
  }
  if (!finite) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model diverged at step ", t, " (score ", score, ", loss ", at.value,
        "); the example was not applied. Lower learning_rate.eta0 or scale the inputs"));
  }

  // Nothing has changed so far; from here the step applies.
  if (columns_ < classes) Widen(classes);
  scale_ *= shrink;
  MaybeRenormalize();
  if (adds_term) {
    // The row was divided by the scale the shrink left, or by kMinScale if that was
    // smaller: after the fold the scale is 1, and the row is rescaled to it.
    const double factor = stored_scale / scale_;
    if (factor != 1.0) {
      for (double& a : row) a *= factor;
    }
    AppendTerm(x, row, t);
    ApplyBudget();
  }
  return CommitClassStep(t, score, at.value, predicted, y);
}

void MulticlassNormaModel::Widen(size_t columns) {
  const size_t n = terms_.size();
  std::vector<double> wider;
  // A budgeted model's rows never reallocate until the next class: WorstCaseMemoryBytes
  // counts max_terms + 1 of them.
  if (config_.budget.max_terms > 0) wider.reserve((config_.budget.max_terms + size_t{1}) * columns);
  wider.assign(n * columns, 0.0);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(coefficients_.begin() + i * columns_, columns_, wider.begin() + i * columns);
  }
  coefficients_ = std::move(wider);
  columns_ = columns;
}

double MulticlassNormaModel::RowNorm(size_t slot) const {
  double sum = 0.0;
  const double* row = coefficients_.data() + slot * columns_;
  for (size_t c = 0; c < columns_; ++c) sum += row[c] * row[c];
  return std::sqrt(sum);
}

void MulticlassNormaModel::AppendTerm(absl::Span<const double> x,
                                      absl::Span<const double> row, uint64_t added_at) {
  coefficients_.insert(coefficients_.end(), row.begin(), row.end());
  terms_.Append(x, RowNorm(terms_.size()), added_at, /*average_mark=*/0.0);
}

void MulticlassNormaModel::RemoveTerm(size_t slot) {
  const size_t last = terms_.size() - 1;
  if (slot != last) {
    std::copy_n(coefficients_.begin() + last * columns_, columns_,
                coefficients_.begin() + slot * columns_);
  }
  coefficients_.resize(last * columns_);
  terms_.Remove(slot);
  ++terms_removed_;
}

void MulticlassNormaModel::ApplyBudget() {
  const size_t max_terms = config_.budget.max_terms;
  if (max_terms == 0 || terms_.size() <= max_terms) return;
  switch (config_.budget.policy) {
    case BudgetPolicy::kOldest:
      RemoveTerm(terms_.OldestSlot());
      return;
    case BudgetPolicy::kSmallest:
      RemoveTerm(terms_.OldestSlotAtMost(terms_.MinAbsCoefficient() * (1 + kTieTolerance)));
      return;
    case BudgetPolicy::kMerge:
      MergeSmallestTerm();
      return;
  }
}

void MulticlassNormaModel::MergeSmallestTerm() {
  const size_t n = terms_.size();
  const size_t m = terms_.OldestSlotAtMost(terms_.MinAbsCoefficient() * (1 + kTieTolerance));
  Buffers& buffers = ThreadBuffers();
  std::vector<double>& x_m = buffers.merge_support;
  x_m.resize(config_.dim);
  terms_.CopySupport(m, x_m.data());
  std::vector<double>& k_m = buffers.kernel_values;
  k_m.resize(n);
  terms_.KernelValues(kernel_, x_m, absl::MakeSpan(k_m));
  const double* alpha_m = coefficients_.data() + m * columns_;
  const double a = terms_.coefficient(m) * terms_.coefficient(m);

  // The partner of least merge loss. Each candidate's loss is bounded below for the price
  // of two table lookups, and above by removing m into it (h = 0 loses a (1 - k_mn^2));
  // only the candidates whose bound is below the best upper bound are merged exactly. The
  // least loss wins, the lowest slot on a tie.
  auto dot_with_m = [&](size_t slot) {
    const double* alpha = coefficients_.data() + slot * columns_;
    double dot = 0.0;
    for (size_t c = 0; c < columns_; ++c) dot += alpha_m[c] * alpha[c];
    return dot;
  };
  double best_bound = std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < n; ++j) {
    if (j != m) best_bound = std::min(best_bound, a * (1 - k_m[j] * k_m[j]));
  }
  size_t partner = n;
  ClassMerge best;
  for (size_t j = 0; j < n; ++j) {
    if (j == m) continue;
    const double b = terms_.coefficient(j) * terms_.coefficient(j);
    const double c = dot_with_m(j);
    if (ClassMergeLossLowerBound(a, b, c, k_m[j]) > best_bound) continue;
    const ClassMerge merge = MergeClassPair(a, b, c, k_m[j]);
    if (partner == n || merge.loss < best.loss) {
      partner = j;
      best = merge;
    }
  }
  if (partner == n) {
    RemoveTerm(m);  // m is the only term (a budget of one)
    return;
  }
  // z = h x_m + (1 - h) x_n with alpha_z = alpha_m k_mz + alpha_n k_nz takes the partner's
  // slot; then m leaves.
  std::vector<double>& z = buffers.merge_point;
  z.resize(config_.dim);
  for (size_t j = 0; j < config_.dim; ++j) {
    z[j] = best.h * x_m[j] + (1 - best.h) * terms_.support(partner, j);
  }
  std::vector<double>& row = buffers.row;
  row.resize(columns_);
  const double* alpha_n = coefficients_.data() + partner * columns_;
  bool nonzero = false;
  for (size_t c = 0; c < columns_; ++c) {
    row[c] = alpha_m[c] * best.k_mz + alpha_n[c] * best.k_nz;
    nonzero = nonzero || row[c] != 0;
  }
  if (!nonzero) {
    // The pair cancelled out: both leave.
    RemoveTerm(std::max(m, partner));
    RemoveTerm(std::min(m, partner));
    return;
  }
  const uint64_t added_at = std::max(terms_.added_at(m), terms_.added_at(partner));
  std::copy(row.begin(), row.end(), coefficients_.begin() + partner * columns_);
  terms_.Replace(partner, z, RowNorm(partner), added_at, /*average_mark=*/0.0);
  RemoveTerm(m);
}

void MulticlassNormaModel::MaybeRenormalize() {
  if (scale_ >= kMinScale) return;
  for (double& a : coefficients_) a *= scale_;
  scale_ = 1.0;
  // The norms are recomputed from the rows, as FromState computes them; a row that
  // underflowed to 0 leaves.
  for (size_t i = terms_.size(); i-- > 0;) {
    const double norm = RowNorm(i);
    if (norm == 0) {
      RemoveTerm(i);
    } else {
      std::vector<double>& x = ThreadBuffers().merge_point;
      x.resize(config_.dim);
      terms_.CopySupport(i, x.data());
      terms_.Replace(i, x, norm, terms_.added_at(i), /*average_mark=*/0.0);
    }
  }
}

}  // namespace okl
