#include "core/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {
namespace {

// InvalidArgument naming values[i] if it is not finite.
absl::Status CheckFinite(absl::string_view name, absl::Span<const double> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "[", i, "] is ", values[i], "; values must be finite"));
    }
  }
  return absl::OkStatus();
}

// Input i of the batch as dim dense values: a dense row itself, a sparse row densified
// into `scratch`.
absl::Span<const double> DenseRowOf(const InputBatch& xs, size_t i, size_t dim,
                                    std::vector<double>& scratch) {
  if (!xs.sparse()) return xs.DenseRow(i);
  scratch.assign(dim, 0.0);
  Densify(xs.SparseRow(i), absl::MakeSpan(scratch));
  return scratch;
}

// True if `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    } else if ((byte & 0xE0) == 0xC0) {
      length = 2;
      code = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3;
      code = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4;
      code = byte & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace

Model::Model(const ModelConfig& config)
    : config_(config),
      batch_rules_(BatchRules::Of(config)),
      loss_(config.loss),
      learning_rate_(config.learning_rate),
      regret_window_(config.regret_window, config.dim),
      margin_(loss_.InitialMargin()) {}

absl::Status Model::CheckStepCounter() const {
  // (tests/fuzz/regressions/snapshot/steps_at_uint64_max.snap)
  if (steps_ == std::numeric_limits<uint64_t>::max()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model has taken ", steps_,
                     " steps, the most its step counter holds; the example was not applied"));
  }
  return absl::OkStatus();
}

Model::StepScalars Model::ComputeStepScalars(double prediction, double y) const {
  StepScalars step;
  step.t = steps_ + 1;
  step.eta = learning_rate_.At(step.t);
  step.prediction = prediction;
  step.at = loss_.At(y, prediction, margin_);
  step.offset = config_.offset ? offset_ - step.eta * step.at.derivative : offset_;
  step.margin = loss_.NextMargin(margin_, step.eta, step.at.violated);
  return step;
}

absl::Status Model::CheckStepFinite(const StepScalars& step, bool update_finite) const {
  if (!std::isfinite(step.prediction) || !std::isfinite(step.at.value) ||
      !std::isfinite(step.offset) || !std::isfinite(step.margin) ||
      !std::isfinite(cumulative_loss_ + step.at.value) || !update_finite) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model diverged at step ", step.t, " (prediction ", step.prediction, ", loss ",
        step.at.value, "); the example was not applied. ",
        config_.krls_tracker_kind()
            ? "Scale the inputs and labels, or raise krls_tracker.noise_variance or jitter"
            : "Lower learning_rate.eta0 or scale the inputs"));
  }
  return absl::OkStatus();
}

Observation Model::CommitStepScalars(const StepScalars& step, absl::Span<const double> x,
                                     double y) {
  offset_ = step.offset;
  margin_ = step.margin;
  steps_ = step.t;
  cumulative_loss_ += step.at.value;
  if (IsClassificationLoss(config_.loss.type) && !(y * step.prediction > 0)) ++mistakes_;
  regret_window_.Record(x, y, step.at.value, step.t);
  return Observation{.prediction = step.prediction, .loss = step.at.value};
}

Observation Model::CommitStepScalars(const StepScalars& step, SparseVectorView x, double y) {
  if (config_.regret_window == 0) return CommitStepScalars(step, absl::Span<const double>(), y);
  // The regret window keeps its examples dense (ValidateConfig bounds dim for it).
  dense_scratch_.resize(config_.dim);
  Densify(x, absl::MakeSpan(dense_scratch_));
  return CommitStepScalars(step, dense_scratch_, y);
}

ModelStats Model::ScalarStats() const {
  ModelStats stats;
  stats.steps = steps_;
  stats.cumulative_loss = cumulative_loss_;
  stats.mistakes = mistakes_;
  stats.offset = offset_;
  stats.margin = margin_;
  return stats;
}

bool Model::HasTrackerFields(const ModelState& state) {
  return !state.posterior_mean.empty() || !state.posterior_covariance.empty() ||
         !state.inverse_kernel.empty() || !state.kernel_matrix.empty() ||
         state.signal_power_numerator != 0 || state.signal_power_denominator != 0;
}

absl::Status Model::ValidateStateScalars(const ModelState& state) {
  for (const auto& [name, value] :
       {std::pair<absl::string_view, double>{"offset", state.offset},
        {"margin", state.margin},
        {"average_offset_sum", state.average_offset_sum},
        {"cumulative_loss", state.cumulative_loss}}) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("inconsistent model state: ", name, " is ", value));
    }
  }
  if (state.mistakes > state.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent model state: mistakes ", state.mistakes, " exceed steps ", state.steps));
  }
  return ValidateRegretWindow(state);
}

void Model::ExportStateScalars(ModelState* state) const {
  state->offset = offset_;
  state->margin = margin_;
  state->steps = steps_;
  state->cumulative_loss = cumulative_loss_;
  state->mistakes = mistakes_;
  state->regret_window = regret_window_.Copy();
}

void Model::RestoreStateScalars(const ModelState& state) {
  offset_ = state.offset;
  margin_ = state.margin;
  steps_ = state.steps;
  cumulative_loss_ = state.cumulative_loss;
  mistakes_ = state.mistakes;
  regret_window_.Assign(state.regret_window);
}

absl::Status Model::CheckFiniteValues(absl::string_view name, absl::Span<const double> values) {
  return CheckFinite(name, values);
}

absl::Status Model::ValidateRegretWindow(const ModelState& state) {
  const RegretWindow& window = state.regret_window;
  const size_t n = window.size();
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent model state: regret window ", what));
  };
  if (n > state.config.regret_window || n > state.steps) {
    return inconsistent(absl::StrCat("holds ", n, " examples, more than regret_window ",
                                     state.config.regret_window, " or steps ", state.steps));
  }
  if (window.xs.size() != n * state.config.dim || window.online_losses.size() != n) {
    return inconsistent(absl::StrCat("has ", window.xs.size(), " input values and ",
                                     window.online_losses.size(), " losses for ", n,
                                     " labels at dim ", state.config.dim));
  }
  if (n > 0 && window.last_step != state.steps) {
    return inconsistent(absl::StrCat("ends at step ", window.last_step, ", not at steps ",
                                     state.steps));
  }
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window input", window.xs));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window label", window.ys));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window loss", window.online_losses));
  for (size_t i = 0; i < n; ++i) {
    if (window.online_losses[i] < 0) {
      return inconsistent(absl::StrCat("loss ", i, " is negative"));
    }
  }
  return absl::OkStatus();
}

BatchRules BatchRules::Of(const ModelConfig& config) {
  return BatchRules{.dim = config.dim,
                    .max_nonzeros = config.sparse_storage() ? config.sparse.max_nonzeros : 0,
                    .loss = config.loss.type};
}

absl::Status BatchRules::CheckInput(absl::Span<const double> x) const {
  if (x.size() != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("input has ", x.size(), " values but the model's dim is ", dim));
  }
  OKL_RETURN_IF_ERROR(CheckFinite("x", x));
  if (max_nonzeros > 0) {
    const auto nonzeros = static_cast<size_t>(
        std::count_if(x.begin(), x.end(), [](double v) { return v != 0; }));
    if (nonzeros > max_nonzeros) {
      return absl::InvalidArgumentError(
          absl::StrCat("input has ", nonzeros, " non-zeros, more than the model's ",
                       max_nonzeros, " (sparse.max_nonzeros)"));
    }
  }
  return absl::OkStatus();
}

absl::Status BatchRules::CheckSparseInput(SparseVectorView x) const {
  return ValidateSparseVector("x", x, dim, max_nonzeros > 0 ? max_nonzeros : dim);
}

absl::Status BatchRules::CheckLabel(double y) const {
  if (IsMulticlassLoss(loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a multi-class model (", LossTypeName(loss),
        " loss) learns from class labels, not from y: give each example its class_label"));
  }
  if (!std::isfinite(y)) {
    return absl::InvalidArgumentError(absl::StrCat("label y is ", y, "; it must be finite"));
  }
  if (IsClassificationLoss(loss) && y != 1.0 && y != -1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label y must be -1 or +1 for the ", LossTypeName(loss), " loss, got ", y));
  }
  return absl::OkStatus();
}

absl::Status BatchRules::CheckClassLabel(absl::string_view class_label) const {
  if (!IsMulticlassLoss(loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "class_label is for the multi-class losses; a model of the ", LossTypeName(loss),
        " loss learns from y: leave class_label empty"));
  }
  if (class_label.empty() || class_label.size() > kMaxClassLabelBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "class_label must be 1 to ", kMaxClassLabelBytes, " bytes, got ", class_label.size()));
  }
  if (!IsValidUtf8(class_label)) {
    return absl::InvalidArgumentError("class_label is not valid UTF-8");
  }
  return absl::OkStatus();
}

absl::Status BatchRules::CheckExampleLabels(double y, absl::string_view class_label) const {
  if (!IsMulticlassLoss(loss)) {
    // A class label says the caller took the model for a multi-class one: said first.
    if (!class_label.empty()) return CheckClassLabel(class_label);
    return CheckLabel(y);
  }
  if (class_label.empty()) return CheckLabel(y);  // says to give a class label
  OKL_RETURN_IF_ERROR(CheckClassLabel(class_label));
  if (y != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label y is ", y, "; a multi-class example leaves y 0 (its class is its class_label)"));
  }
  return absl::OkStatus();
}

absl::Status BatchRules::Check(const InputBatch& xs, absl::Span<const double> ys,
                               absl::Span<const std::string> class_labels) const {
  if (!xs.sparse() && xs.dense_values().size() != ys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.dense_values().size(),
                                                   " input values for ", ys.size(),
                                                   " labels at dim ", dim));
  }
  if (xs.sparse() && xs.size() != ys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.size(), " inputs for ",
                                                   ys.size(), " labels"));
  }
  if (!class_labels.empty() && class_labels.size() != ys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", class_labels.size(),
                                                   " class labels for ", ys.size(),
                                                   " examples"));
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    absl::Status status =
        xs.sparse() ? CheckSparseInput(xs.SparseRow(i)) : CheckInput(xs.DenseRow(i));
    if (status.ok()) {
      status = CheckExampleLabels(ys[i], class_labels.empty() ? "" : class_labels[i]);
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, ": ", status.message(), " (no example applied)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ValidatedBatch> ValidatedBatch::Make(const BatchRules& rules,
                                                    const InputBatch& xs,
                                                    absl::Span<const double> ys,
                                                    absl::Span<const std::string> class_labels) {
  OKL_RETURN_IF_ERROR(rules.Check(xs, ys, class_labels));
  return ValidatedBatch(rules, xs, ys, class_labels);
}

absl::Status Model::ValidateInput(absl::Span<const double> x) const {
  return batch_rules_.CheckInput(x);
}

absl::Status Model::ValidateSparseInput(SparseVectorView x) const {
  return batch_rules_.CheckSparseInput(x);
}

absl::Status Model::ValidateExample(absl::Span<const double> x, double y) const {
  OKL_RETURN_IF_ERROR(batch_rules_.CheckInput(x));
  return batch_rules_.CheckLabel(y);
}

absl::StatusOr<Observation> Model::Observe(absl::Span<const double> x, double y) {
  OKL_RETURN_IF_ERROR(ValidateExample(x, y));
  return Step(x, y);
}

absl::Status Model::ValidateClassExample(absl::Span<const double> x,
                                         absl::string_view class_label) const {
  OKL_RETURN_IF_ERROR(batch_rules_.CheckInput(x));
  return batch_rules_.CheckClassLabel(class_label);
}

absl::StatusOr<Observation> Model::ObserveClass(absl::Span<const double> x,
                                                absl::string_view class_label) {
  OKL_RETURN_IF_ERROR(ValidateClassExample(x, class_label));
  return LearnClass(x, class_label);
}

absl::StatusOr<Observation> Model::LearnClass(absl::Span<const double> x,
                                              absl::string_view class_label) {
  const auto known = static_cast<uint32_t>(classes_.size());
  if (auto it = class_index_.find(class_label); it != class_index_.end()) {
    return StepClass(x, it->second, known);
  }
  if (known >= config_.max_classes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "class \"", class_label, "\" would be the model's class ", known + 1,
        ", past its max_classes ", config_.max_classes, "; the example was not applied"));
  }
  // The new class joins for the step, and leaves again if the step fails.
  classes_.emplace_back(class_label);
  class_index_.emplace(classes_.back(), known);
  absl::StatusOr<Observation> observation = StepClass(x, known, known);
  if (!observation.ok()) {
    class_index_.erase(classes_.back());
    classes_.pop_back();
  }
  return observation;
}

absl::Status Model::ObserveClassBatch(const InputBatch& xs,
                                      absl::Span<const std::string> class_labels,
                                      std::vector<Observation>* out) {
  const std::vector<double> ys(class_labels.size(), 0.0);
  OKL_ASSIGN_OR_RETURN(const ValidatedBatch batch, Validate(xs, ys, class_labels));
  return ApplyBatch(batch, out);
}

absl::Status Model::CheckClassCapacity(const ValidatedBatch& batch) const {
  absl::flat_hash_set<absl::string_view> new_classes;
  for (const std::string& label : batch.class_labels()) {
    if (!class_index_.contains(label)) new_classes.insert(label);
  }
  if (classes_.size() + new_classes.size() > config_.max_classes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the batch brings ", new_classes.size(), " new classes to the model's ",
        classes_.size(), ", past its max_classes ", config_.max_classes,
        "; no example applied"));
  }
  return absl::OkStatus();
}

absl::Status Model::PredictScores(absl::Span<const double> x,
                                  absl::Span<double> scores) const {
  OKL_RETURN_IF_ERROR(batch_rules_.CheckInput(x));
  if (!config_.multiclass()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PredictScores is for multi-class models; a model of the ",
        LossTypeName(config_.loss.type), " loss predicts one value (Predict)"));
  }
  if (scores.size() != classes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("scores has ", scores.size(),
                                                   " entries for the model's ",
                                                   classes_.size(), " classes"));
  }
  ScoresUnchecked(x, scores);
  return absl::OkStatus();
}

absl::Status Model::PredictClassBatch(const InputBatch& xs, std::vector<uint32_t>* predicted,
                                      std::vector<double>* scores) const {
  if (!config_.multiclass()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PredictClassBatch is for multi-class models; a model of the ",
        LossTypeName(config_.loss.type), " loss predicts one value (PredictBatch)"));
  }
  OKL_RETURN_IF_ERROR(ValidatePredictBatch(xs, xs.size(), PredictionMode::kCurrent));
  const size_t classes = classes_.size();
  const size_t first = scores->size();
  scores->resize(first + xs.size() * classes);
  predicted->reserve(predicted->size() + xs.size());
  std::vector<double> dense;
  for (size_t i = 0; i < xs.size(); ++i) {
    const absl::Span<double> row = absl::MakeSpan(*scores).subspan(first + i * classes, classes);
    ScoresUnchecked(DenseRowOf(xs, i, config_.dim, dense), row);
    predicted->push_back(classes == 0 ? kNoClass
                                      : static_cast<uint32_t>(std::max_element(row.begin(),
                                                                               row.end()) -
                                                              row.begin()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Observation> Model::StepClass(absl::Span<const double> x, uint32_t y,
                                             uint32_t known_classes) {
  return absl::InternalError("StepClass on a model that is not multi-class");
}

void Model::ScoresUnchecked(absl::Span<const double> x, absl::Span<double> scores) const {}

Observation Model::CommitClassStep(uint64_t t, double score, double loss, uint32_t predicted,
                                   uint32_t y) {
  steps_ = t;
  cumulative_loss_ += loss;
  if (predicted != y) ++mistakes_;
  return Observation{.prediction = score, .loss = loss, .predicted_class = predicted};
}

absl::Status Model::ValidateClasses(const ModelState& state) {
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
  };
  if (!state.config.multiclass()) {
    if (!state.classes.empty()) {
      return inconsistent("a model that is not multi-class lists classes");
    }
    return absl::OkStatus();
  }
  if (state.classes.size() > state.config.max_classes) {
    return inconsistent(absl::StrCat(state.classes.size(), " classes, more than max_classes ",
                                     state.config.max_classes));
  }
  const BatchRules rules = BatchRules::Of(state.config);
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t c = 0; c < state.classes.size(); ++c) {
    const absl::Status status = rules.CheckClassLabel(state.classes[c]);
    if (!status.ok()) return inconsistent(absl::StrCat("classes[", c, "]: ", status.message()));
    if (!seen.emplace(state.classes[c], c).second) {
      return inconsistent(absl::StrCat("classes[", c, "] repeats classes[",
                                       seen[state.classes[c]], "]"));
    }
  }
  return absl::OkStatus();
}

void Model::RestoreClasses(const ModelState& state) {
  classes_ = state.classes;
  class_index_.clear();
  for (size_t c = 0; c < classes_.size(); ++c) {
    class_index_.emplace(classes_[c], static_cast<uint32_t>(c));
  }
}

absl::StatusOr<Observation> Model::ObserveSparse(SparseVectorView x, double y) {
  OKL_RETURN_IF_ERROR(batch_rules_.CheckSparseInput(x));
  OKL_RETURN_IF_ERROR(batch_rules_.CheckLabel(y));
  return StepSparse(x, y);
}

absl::StatusOr<Observation> Model::StepSparse(SparseVectorView x, double y) {
  dense_scratch_.resize(config_.dim);
  Densify(x, absl::MakeSpan(dense_scratch_));
  return Step(dense_scratch_, y);
}

double Model::PredictSparseUnchecked(SparseVectorView x, PredictionMode mode) const {
  std::vector<double> dense(config_.dim);
  Densify(x, absl::MakeSpan(dense));
  return PredictUnchecked(dense, mode);
}

absl::StatusOr<double> Model::PredictSparse(SparseVectorView x, PredictionMode mode) const {
  OKL_RETURN_IF_ERROR(ValidateSparseInput(x));
  OKL_RETURN_IF_ERROR(CheckPredictionMode(mode));
  return PredictSparseUnchecked(x, mode);
}

absl::Status Model::ValidateBatch(absl::Span<const double> xs,
                                  absl::Span<const double> ys) const {
  return Validate(InputBatch::Dense(xs, config_.dim), ys).status();
}

absl::Status Model::ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                                 std::vector<Observation>* out) {
  return ObserveBatch(InputBatch::Dense(xs, config_.dim), ys, out);
}

absl::Status Model::ObserveBatch(const InputBatch& xs, absl::Span<const double> ys,
                                 std::vector<Observation>* out) {
  OKL_ASSIGN_OR_RETURN(const ValidatedBatch batch, Validate(xs, ys));
  return ApplyBatch(batch, out);
}

absl::Status Model::ObserveValidated(const ValidatedBatch& batch,
                                     std::vector<Observation>* out) {
  if (batch.rules() == batch_rules_) return ApplyBatch(batch, out);
  OKL_ASSIGN_OR_RETURN(const ValidatedBatch again,
                       Validate(batch.inputs(), batch.ys(), batch.class_labels()));
  return ApplyBatch(again, out);
}

absl::Status Model::ApplyBatch(const ValidatedBatch& batch, std::vector<Observation>* out) {
  const InputBatch& xs = batch.inputs();
  const absl::Span<const double> ys = batch.ys();
  const bool multiclass = config_.multiclass();
  if (multiclass) OKL_RETURN_IF_ERROR(CheckClassCapacity(batch));
  out->reserve(out->size() + ys.size());
  std::vector<double> dense;  // a multi-class step's row (the kinds step on dense inputs)
  for (size_t i = 0; i < ys.size(); ++i) {
    absl::StatusOr<Observation> o =
        multiclass ? LearnClass(DenseRowOf(xs, i, config_.dim, dense), batch.class_labels()[i])
        : xs.sparse() ? StepSparse(xs.SparseRow(i), ys[i])
                      : Step(xs.DenseRow(i), ys[i]);
    if (!o.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "example ", i, ": ", o.status().message(), " (", i, " of ", ys.size(),
          " examples applied)"));
    }
    out->push_back(*o);
  }
  return absl::OkStatus();
}

absl::Status Model::CheckPredictionMode(PredictionMode mode) const {
  if (mode == PredictionMode::kAveraged && !config_.averaged) {
    return absl::FailedPreconditionError(
        "the model does not track the averaged hypothesis; create it with averaged: true");
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Model::Predict(absl::Span<const double> x,
                                           PredictionMode mode) const {
  OKL_RETURN_IF_ERROR(ValidateInput(x));
  OKL_RETURN_IF_ERROR(CheckPredictionMode(mode));
  return PredictUnchecked(x, mode);
}

absl::Status Model::PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                                 PredictionMode mode) const {
  return PredictBatch(InputBatch::Dense(xs, config_.dim), out, mode);
}

absl::Status Model::ValidatePredictBatch(const InputBatch& xs, size_t outputs,
                                         PredictionMode mode) const {
  const size_t dim = config_.dim;
  if (!xs.sparse() && xs.dense_values().size() != outputs * dim) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.dense_values().size(),
                                                   " input values for ", outputs,
                                                   " outputs at dim ", dim));
  }
  if (xs.size() != outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch holds ", xs.size(), " inputs for ", outputs, " outputs"));
  }
  OKL_RETURN_IF_ERROR(CheckPredictionMode(mode));
  for (size_t i = 0; i < outputs; ++i) {
    absl::Status status = xs.sparse() ? ValidateSparseInput(xs.SparseRow(i))
                                      : ValidateInput(xs.DenseRow(i));
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::PredictBatch(const InputBatch& xs, absl::Span<double> out,
                                 PredictionMode mode) const {
  OKL_RETURN_IF_ERROR(ValidatePredictBatch(xs, out.size(), mode));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = xs.sparse() ? PredictSparseUnchecked(xs.SparseRow(i), mode)
                         : PredictUnchecked(xs.DenseRow(i), mode);
  }
  return absl::OkStatus();
}

absl::Status Model::PredictBatchWithVariance(const InputBatch& xs, absl::Span<double> out,
                                             absl::Span<double> variances) const {
  if (!has_predictive_variance()) {
    return absl::FailedPreconditionError(
        "the model has no predictive variance; only a krls_tracker model predicts one");
  }
  if (variances.size() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PredictBatchWithVariance: ", variances.size(), " variances for ",
                     out.size(), " outputs"));
  }
  OKL_RETURN_IF_ERROR(ValidatePredictBatch(xs, out.size(), PredictionMode::kCurrent));
  std::vector<double> dense;
  for (size_t i = 0; i < out.size(); ++i) {
    PredictWithVarianceUnchecked(DenseRowOf(xs, i, config_.dim, dense), &out[i],
                                 &variances[i]);
  }
  return absl::OkStatus();
}

void Model::PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                         double* variance) const {
  std::abort();  // PredictBatchWithVariance checks has_predictive_variance() first
}

}  // namespace okl
