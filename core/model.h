// core/model.h
//
// Model is what every model kind offers the registry, the service and the tools: a
// learner that takes labelled examples one at a time (Observe), predicts (Predict), and
// exports its complete state (ExportState) so that ModelFromState continues it exactly.
// The kinds, and CreateModel and ModelFromState that make them, are in
// core/create_model.h; this file knows none of them. NormaModel (a kernel expansion) and
// RandomFeatureModel take the same NORMA step (predict, loss derivative, shrink by
// 1 - eta_t lambda, add -eta_t g_t times the example's feature) with the same losses,
// learning rates and statistics; KrlsTrackerModel takes the exact second-order step of its
// posterior instead, and also predicts with a variance; SelectModel runs candidates of
// the others and serves the best.
//
// Not thread-safe: const methods may run concurrently with each other, but not with
// Observe (ModelEntry serialises writers).
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));
//   OKL_ASSIGN_OR_RETURN(okl::Observation o, model->Observe(x, y));  // o.prediction: f_t(x)
//   OKL_ASSIGN_OR_RETURN(double p, model->Predict(x));               // f_{t+1}(x)
#ifndef OKL_CORE_MODEL_H_
#define OKL_CORE_MODEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/input_batch.h"
#include "core/learning_rate.h"
#include "core/loss.h"
#include "core/regret.h"
#include "core/regret_window.h"
#include "core/sparse_vector.h"

namespace okl {

// A multi-class model's classes are strings, each 1 to kMaxClassLabelBytes bytes of UTF-8,
// numbered in the order the model first saw them (Model::classes()).
inline constexpr size_t kMaxClassLabelBytes = 128;
inline constexpr uint32_t kNoClass = std::numeric_limits<uint32_t>::max();

// What one Observe reports about its example.
struct Observation {
  // p_t = f_t(x_t), before the update. A multi-class model: the predicted class's score
  // (0 while it knows no class).
  double prediction = 0.0;
  double loss = 0.0;  // loss(y_t, p_t)
  // A multi-class model's prequential prediction: the index in classes() of the class of
  // highest score before the update (the first learned on a tie), kNoClass while it knew
  // no class. kNoClass for the other kinds.
  uint32_t predicted_class = kNoClass;
};

// What a batch is validated against, from a model's config: the dim, the storage's cap
// on non-zeros, and whether labels must be -1 or +1 or be classes. Two models with equal
// rules accept exactly the same batches. The checks are Model's (ValidateInput,
// ValidateSparseInput and the labels'), so messages read the same wherever a batch is
// checked.
struct BatchRules {
  static BatchRules Of(const ModelConfig& config);

  // InvalidArgument unless xs holds ys.size() inputs (ys.size() * dim values if dense)
  // and each input and label is valid; the message names the first bad example.
  // class_labels is empty or holds one label per example, "" for none. A multi-class
  // model's example has a class label (CheckClassLabel) and leaves y 0; any other
  // model's has none. Whether the batch's new classes fit max_classes depends on the
  // model's classes, not on the rules: Model::CheckClassCapacity.
  absl::Status Check(const InputBatch& xs, absl::Span<const double> ys,
                     absl::Span<const std::string> class_labels = {}) const;
  absl::Status CheckInput(absl::Span<const double> x) const;
  absl::Status CheckSparseInput(SparseVectorView x) const;
  absl::Status CheckLabel(double y) const;
  // InvalidArgument unless the model is multi-class and the label is 1 to
  // kMaxClassLabelBytes bytes of UTF-8.
  absl::Status CheckClassLabel(absl::string_view class_label) const;
  // One example's labels: y (CheckLabel) and its class label ("" for none), as Check
  // takes them.
  absl::Status CheckExampleLabels(double y, absl::string_view class_label) const;

  uint32_t dim = 0;
  uint32_t max_nonzeros = 0;  // per input under sparse storage; 0: dense storage
  LossType loss = LossType::kSquared;

  friend bool operator==(const BatchRules&, const BatchRules&) = default;
};

// A batch that passed its model's checks (Model::Validate, ModelEntry::Validate): views
// of the caller's inputs and labels, which must outlive it, and the rules they passed.
// Only validation makes one, so that the paths that take it (ObserveValidated, a journal)
// are never reached unvalidated; a model whose rules differ from the batch's (a Restore
// installed another config meanwhile) checks it again before applying it.
class ValidatedBatch {
 public:
  // Validates: BatchRules::Check.
  static absl::StatusOr<ValidatedBatch> Make(const BatchRules& rules, const InputBatch& xs,
                                             absl::Span<const double> ys,
                                             absl::Span<const std::string> class_labels = {});

  const InputBatch& inputs() const { return inputs_; }
  absl::Span<const double> ys() const { return ys_; }
  // One per example, or empty (a batch without class labels).
  absl::Span<const std::string> class_labels() const { return class_labels_; }
  size_t size() const { return ys_.size(); }
  const BatchRules& rules() const { return rules_; }
  // Examples [first, first + count), valid as the whole is.
  ValidatedBatch Subrange(size_t first, size_t count) const {
    return ValidatedBatch(
        rules_, inputs_.Subrange(first, count), ys_.subspan(first, count),
        class_labels_.empty() ? class_labels_ : class_labels_.subspan(first, count));
  }

 private:
  ValidatedBatch(const BatchRules& rules, const InputBatch& xs, absl::Span<const double> ys,
                 absl::Span<const std::string> class_labels)
      : rules_(rules), inputs_(xs), ys_(ys), class_labels_(class_labels) {}

  BatchRules rules_;
  InputBatch inputs_;
  absl::Span<const double> ys_;
  absl::Span<const std::string> class_labels_;
};

// Where a candidate of a selection (core/select.h) stands.
enum class CandidateStatus {
  kWaiting,  // not started: waits for a live candidate to be retired
  kLive,     // learning from every example
  kRetired,  // stopped for good (significantly worse than the champion, or diverged)
};
inline constexpr std::array<EnumName<CandidateStatus>, 3> kCandidateStatusNames = {{
    {CandidateStatus::kWaiting, "waiting"},
    {CandidateStatus::kLive, "live"},
    {CandidateStatus::kRetired, "retired"},
}};
inline absl::string_view CandidateStatusName(CandidateStatus status) {
  return NameOf(kCandidateStatusNames, status);
}

// What a selection keeps about each candidate (in its state and its stats).
struct CandidateRecord {
  CandidateStatus status = CandidateStatus::kWaiting;
  uint64_t steps = 0;            // examples it learned
  double cumulative_loss = 0.0;  // the sum of its progressive losses
  uint64_t started_at = 0;       // the selection's step it became live at (0: never)
  // Sums over its progressive losses l_t, discounted by beta = 1 - 1/1000 per step:
  // weight = sum beta^(T-t), loss_sum = sum beta^(T-t) l_t (recent_loss = ratio).
  double weight = 0.0;
  double loss_sum = 0.0;
  // The paired comparison with the champion, since the later of its start and the
  // champion's promotion: the same discounted sums of s_t = sign(l_t - l_t(champion))
  // (core/select.h).
  double paired_weight = 0.0;
  double difference_sum = 0.0;
  double difference_square_sum = 0.0;

  double recent_loss() const { return weight > 0 ? loss_sum / weight : 0.0; }
  void ResetComparison() { paired_weight = difference_sum = difference_square_sum = 0.0; }
  friend bool operator==(const CandidateRecord&, const CandidateRecord&) = default;
};

// One candidate of a selection as its stats show it: its config (a default set's as
// scaled to the data) and its record.
struct CandidateStats {
  ModelConfig config;
  CandidateStatus status = CandidateStatus::kWaiting;
  uint64_t steps = 0;
  double cumulative_loss = 0.0;
  double recent_loss = 0.0;  // CandidateRecord::recent_loss()
  uint64_t started_at = 0;
  // The selection serves its predictions: the champion, and with leaders' predictions
  // (SelectPrediction::kLeaders) each leader.
  bool serving = false;
};

struct ModelStats {
  uint64_t steps = 0;
  uint32_t expansion_size = 0;  // terms; a random-feature model's D
  double cumulative_loss = 0.0;  // sum_t loss(y_t, p_t)
  uint64_t mistakes = 0;         // sign(p_t) != y_t (p_t = 0 counts); classification losses
  uint64_t terms_removed = 0;    // by the budget policy and drop_below together
  double offset = 0.0;           // b
  double margin = 0.0;           // rho or epsilon as learned by the nu-trick, else the config's
  // NORMA's bound (Kivinen, Smola and Williamson 2004) lambda^-1 (1 - eta lambda)^tau C X on
  // the RKHS-norm error of truncating to the newest tau = max_terms terms. Set where it
  // applies: constant rate, lambda > 0, an OLDEST budget without drop_below, a loss with
  // bounded derivative (C) and a bounded kernel (X). 0 until the budget first removes a term.
  std::optional<double> truncation_error_bound;
  // A KRLS tracker's estimates (0 for the other kinds): s0^2, the signal power its
  // maximum-likelihood estimate scales the posterior by, and the noise variance in the
  // labels' units, s0^2 sigma_n^2. (Its dictionary size is expansion_size, and the bases
  // it pruned are terms_removed.)
  double signal_power = 0.0;
  double noise_variance = 0.0;
  // The latest windowed regret (core/regret.h), computed off the request path; unset
  // without regret tracking and until the first computation. No model sets it: ModelEntry
  // does, from its RegretScheduler's results.
  std::optional<RegretResult> regret;
  // A selection (config.select): every candidate, in order (empty while a default set
  // waits for the examples it is scaled by), the champion's index, and how many times a
  // challenger replaced the champion. expansion_size is then the champion's.
  std::vector<CandidateStats> candidates;
  uint32_t champion = 0;
  uint64_t champion_changes = 0;
  // A multi-class model's classes in the order learned (Model::classes()); empty for the
  // other kinds.
  std::vector<std::string> classes;
};

// A model's configuration and statistics at one moment, under its tenant's name (what
// ListModels and GetModel answer).
struct ModelSummary {
  std::string tenant;
  std::string model;
  ModelConfig config;
  ModelStats stats;
  size_t memory_bytes = 0;
};

// The complete state of a model: ModelFromState(model.ExportState()) continues
// bit-identically. A kernel expansion (NormaModel) lists its terms in slot order (see
// Expansion); a random-feature model (RandomFeatureModel) holds weights instead and no
// terms.
struct ModelState {
  ModelConfig config;
  std::vector<double> support;          // size * dim, term-major (term i at [i*dim, (i+1)*dim))
  // Under sparse storage (config.sparse_storage()) the terms' inputs are here instead, one
  // row per term, and `support` and `retired_support` are empty.
  SparseRows sparse_support;
  SparseRows retired_sparse_support;
  std::vector<double> coefficients;     // unscaled: alpha_i = scale * coefficients[i]
  std::vector<uint64_t> added_at;       // the step each term was added at
  // The averaged hypothesis, per term (each empty unless config.averaged): the term's
  // coefficient summed over the current block's hypotheses is
  // average_base[i] + coefficients[i] * (average_sum - average_mark[i]), and
  // average_previous[i] is its sum over the previous block's (see NormaModel).
  std::vector<double> average_base;
  std::vector<double> average_mark;
  std::vector<double> average_previous;
  // Terms the budget removed while a hypothesis they were part of is still averaged:
  // retired_support (term-major, dim per term), their coefficient summed over the current
  // block's and the previous block's hypotheses, and the step each was removed at.
  std::vector<double> retired_support;
  std::vector<double> retired_sums;
  std::vector<double> retired_previous_sums;
  std::vector<uint64_t> retired_at;
  // A random-feature model's weights w (config.random_features.dimension entries) and,
  // if config.averaged, sum_t w_t over the hypotheses so far; both empty otherwise.
  std::vector<double> weights;
  std::vector<double> weight_sums;
  double scale = 1.0;
  double offset = 0.0;
  double margin = 0.0;
  uint64_t steps = 0;
  double average_sum = 0.0;         // u: running sum of the scale factor since the last fold
  double average_offset_sum = 0.0;  // sum_t b_t over the current block's hypotheses
  // The averaged hypotheses are f_t for t in (average_previous_start, steps]: the previous
  // block (average_previous_start, average_block_start] and the current block after it.
  uint64_t average_block_start = 0;
  uint64_t average_previous_start = 0;
  double average_previous_offset_sum = 0.0;  // sum_t b_t over the previous block
  double cumulative_loss = 0.0;
  uint64_t mistakes = 0;
  uint64_t terms_removed = 0;
  // The last config.regret_window examples (empty without regret tracking); when not
  // empty, its last_step equals steps.
  RegretWindow regret_window;
  // A KRLS tracker (config.krls_tracker): its m bases are the terms of `support` (in
  // dictionary order), `coefficients` holds Q mu (its mean is sum_i coefficients[i]
  // k(b_i, .)) and terms_removed counts the bases it pruned. The posterior over
  // f at the bases is N(posterior_mean, signal_power * posterior_covariance); with
  // inverse_kernel Q = (K + jitter I)^-1 and, only when forgetting < 1, kernel_matrix K
  // (for back-off to the prior). The m x m symmetric matrices are stored as their lower
  // triangles, row-major: entry (i, j <= i) at i (i + 1) / 2 + j. The signal power is
  // the ratio of its maximum-likelihood sums.
  std::vector<double> posterior_mean;
  std::vector<double> posterior_covariance;
  std::vector<double> inverse_kernel;
  std::vector<double> kernel_matrix;
  double signal_power_numerator = 0.0;
  double signal_power_denominator = 0.0;
  // A selection (config.select; core/select.h): the states of its live candidates in
  // candidate order, every candidate's record, the champion's index and its changes.
  // A default set (no config.select.candidates) is scaled by input_scale, the median
  // squared distance between the first examples (0 until they are in): warmup_inputs
  // (dim per example) and warmup_labels hold those examples until then.
  std::vector<ModelState> candidate_states;
  std::vector<CandidateRecord> candidates;
  uint32_t champion = 0;
  uint64_t champion_changes = 0;
  double input_scale = 0.0;
  std::vector<double> warmup_inputs;
  std::vector<double> warmup_labels;
  // A multi-class model (a multi-class loss; core/multiclass_norma.h): its classes in the
  // order learned; `coefficients` then holds classes.size() per term, term-major.
  std::vector<std::string> classes;

  friend bool operator==(const ModelState&, const ModelState&) = default;
};

enum class PredictionMode {
  kConfigured,  // averaged if config.averaged, else current
  kCurrent,     // f_{T+1}: the model after the last update
  kAveraged,    // the mean of the recent hypotheses f_t (see NormaModel); requires
                // config.averaged
};

// The validation, the batching and the scalar half of a step (t, eta_t, the loss, the
// offset, the margin, the statistics, the regret window) every kind shares live here; a
// kind implements its representation of f: the prediction, the update and its state.
class Model {
 public:
  virtual ~Model() = default;

  virtual ModelState ExportState() const = 0;

  // InvalidArgument unless x has dim entries, x and y are finite, and y is -1 or +1 for
  // the classification losses.
  absl::Status ValidateExample(absl::Span<const double> x, double y) const;
  // InvalidArgument unless x has dim finite entries (and, under sparse storage, at most
  // config.sparse.max_nonzeros non-zeros).
  absl::Status ValidateInput(absl::Span<const double> x) const;

  // One step. On a bad example returns InvalidArgument and changes nothing. If the step
  // would make the model non-finite (a diverging learning rate), returns
  // FailedPrecondition and changes nothing.
  absl::StatusOr<Observation> Observe(absl::Span<const double> x, double y);

  // The rules its batches are checked against (BatchRules::Of(config())).
  const BatchRules& batch_rules() const { return batch_rules_; }
  // The batch, validated: InvalidArgument unless xs holds ys.size() inputs (ys.size() *
  // dim values if dense) and every example passes ValidateExample (a sparse row as
  // ValidateSparseInput); the message names the first bad example. A caller that logs
  // batches validates before logging, so that no invalid batch is ever logged.
  // A multi-class model's batch has a class label per example (and its ys 0).
  absl::StatusOr<ValidatedBatch> Validate(
      const InputBatch& xs, absl::Span<const double> ys,
      absl::Span<const std::string> class_labels = {}) const {
    return ValidatedBatch::Make(batch_rules_, xs, ys, class_labels);
  }
  // Validate's verdict alone, for a dense batch (ys.size() * dim values).
  absl::Status ValidateBatch(absl::Span<const double> xs, absl::Span<const double> ys) const;

  // Observes the batch's examples in order, appending one Observation per applied
  // example to `out`. A batch validated against other rules is validated again first, so
  // a bad batch changes nothing; a multi-class batch whose new classes would take the
  // model past max_classes (CheckClassCapacity) changes nothing either. If an example
  // would make the model diverge, the ones before it stay applied and the error says how
  // many.
  absl::Status ObserveValidated(const ValidatedBatch& batch, std::vector<Observation>* out);
  // FailedPrecondition if the batch's classes that the model does not know yet would
  // take it past config().max_classes; OK for a batch without class labels. A journal
  // that logs batches before they are applied asks first, so that it never logs one the
  // model would refuse.
  absl::Status CheckClassCapacity(const ValidatedBatch& batch) const;
  // Validate, then ObserveValidated; xs holds the examples example-major
  // (ys.size() * dim).
  absl::Status ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                            std::vector<Observation>* out);
  absl::Status ObserveBatch(const InputBatch& xs, absl::Span<const double> ys,
                            std::vector<Observation>* out);

  // FailedPrecondition for kAveraged on a model that does not track the average.
  absl::StatusOr<double> Predict(absl::Span<const double> x,
                                 PredictionMode mode = PredictionMode::kConfigured) const;
  // Predicts out.size() inputs stored example-major in xs; all validated first.
  absl::Status PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured) const;
  absl::Status PredictBatch(const InputBatch& xs, absl::Span<double> out,
                            PredictionMode mode = PredictionMode::kConfigured) const;
  // True for a kind that predicts with a variance (the KRLS tracker).
  virtual bool has_predictive_variance() const { return false; }
  // PredictBatch with the current model (as kConfigured), and the predictive variance of
  // y at each input into `variances` (out.size() entries): the uncertainty of the
  // prediction plus the noise. FailedPrecondition for a kind without one; the same
  // validation as PredictBatch.
  absl::Status PredictBatchWithVariance(const InputBatch& xs, absl::Span<double> out,
                                        absl::Span<double> variances) const;

  // The sparse forms of Observe and Predict: x given by its non-zeros (core/sparse_vector.h:
  // indices strictly increasing and below dim, values finite, and at most
  // config.sparse.max_nonzeros of them under sparse storage). Both forms work with either
  // storage and give the same results: a model converts an input it does not store
  // natively.
  absl::Status ValidateSparseInput(SparseVectorView x) const;
  absl::StatusOr<Observation> ObserveSparse(SparseVectorView x, double y);
  absl::StatusOr<double> PredictSparse(SparseVectorView x,
                                       PredictionMode mode = PredictionMode::kConfigured) const;

  // Multi-class models (config().multiclass()) learn from class labels instead of y.
  // Their classes, in the order first seen (empty for the other kinds, and until the first
  // example).
  const std::vector<std::string>& classes() const { return classes_; }
  // InvalidArgument unless x is a valid input and the model is multi-class and accepts
  // the label (BatchRules::CheckClassLabel).
  absl::Status ValidateClassExample(absl::Span<const double> x,
                                    absl::string_view class_label) const;
  // One step on an example of class `class_label`, which joins classes() if it is new.
  // InvalidArgument on a bad example; FailedPrecondition if the class is new and the
  // model already has config().max_classes classes, or if the step would diverge. Either
  // way nothing changes.
  absl::StatusOr<Observation> ObserveClass(absl::Span<const double> x,
                                           absl::string_view class_label);
  // The batch's examples in order, one Observation each appended to `out`: xs.size()
  // inputs and as many labels, all validated first, and the whole batch refused
  // (FailedPrecondition, nothing applied) if its new classes would take the model past
  // max_classes. If an example would make the model diverge, the ones before it stay
  // applied and the error says how many. (Validate with the labels and ys of 0, then
  // ObserveValidated.)
  absl::Status ObserveClassBatch(const InputBatch& xs,
                                 absl::Span<const std::string> class_labels,
                                 std::vector<Observation>* out);
  // scores[c] = f_c(x) for each class c of classes() (scores.size() must be
  // classes().size()). InvalidArgument for a bad x or a model that is not multi-class.
  absl::Status PredictScores(absl::Span<const double> x, absl::Span<double> scores) const;
  // A multi-class model's predictions for a batch: per input the index in classes() of
  // the class of highest score (the first learned on a tie; kNoClass before any class),
  // appended to `predicted`, and its classes().size() scores, appended to `scores`
  // input-major. The inputs are all validated first; InvalidArgument for a bad input or a
  // model that is not multi-class.
  absl::Status PredictClassBatch(const InputBatch& xs, std::vector<uint32_t>* predicted,
                                 std::vector<double>* scores) const;

  // |f|^2 in the model's feature space (the offset excluded); for inspection, not for the
  // request path.
  virtual double SquaredNorm() const = 0;

  virtual ModelStats stats() const = 0;
  // rho or epsilon as learned by the nu-trick, else the config's (ModelStats::margin).
  double margin() const { return margin_; }
  const ModelConfig& config() const { return config_; }
  // The terms of a kernel expansion; the weights (D) of a random-feature model.
  virtual size_t expansion_size() const = 0;
  uint64_t steps() const { return steps_; }
  // The examples of the regret window, oldest first (empty without regret tracking).
  RegretWindow RegretWindowCopy() const { return regret_window_.Copy(); }
  // Bytes the model holds now.
  virtual size_t MemoryBytes() const = 0;

 protected:
  explicit Model(const ModelConfig& config);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The scalar half of the step at t = steps() + 1, computed before anything changes.
  struct StepScalars {
    uint64_t t = 0;
    double eta = 0.0;         // eta_t
    double prediction = 0.0;  // p_t = f_t(x_t)
    LossPoint at;             // the loss and its derivative g_t at p_t
    double offset = 0.0;      // b after the step
    double margin = 0.0;      // rho or epsilon after the step
  };
  // FailedPrecondition if the step counter is full (only a restored state gets there):
  // t is the learning rate's position, and wrapping to 0 would restart it.
  absl::Status CheckStepCounter() const;
  StepScalars ComputeStepScalars(double prediction, double y) const;
  // FailedPrecondition, changing nothing, unless the prediction, the loss, the new offset
  // and margin, the cumulative loss and whatever the kind checked (`update_finite`: its
  // new coefficients and averaged sums) are all finite.
  absl::Status CheckStepFinite(const StepScalars& step, bool update_finite) const;
  // Applies the scalar half: b, the margin, steps() = t, the statistics and the regret
  // window. What the step reports.
  Observation CommitStepScalars(const StepScalars& step, absl::Span<const double> x, double y);
  Observation CommitStepScalars(const StepScalars& step, SparseVectorView x, double y);

  // The statistics every kind keeps (steps, cumulative loss, mistakes, offset, margin).
  ModelStats ScalarStats() const;
  // True if any of a KRLS tracker's fields (posterior_mean .. signal_power_denominator) is
  // set: another kind's FromState refuses such a state rather than drop them.
  static bool HasTrackerFields(const ModelState& state);
  // InvalidArgument unless the state's offset, margin, average_offset_sum and cumulative
  // loss are finite, mistakes <= steps and the regret window fits the config and steps.
  static absl::Status ValidateStateScalars(const ModelState& state);
  // The scalar half of the state: offset, margin, steps, cumulative loss, mistakes and the
  // regret window, out and in.
  void ExportStateScalars(ModelState* state) const;
  void RestoreStateScalars(const ModelState& state);

  // One step on an example that passed ValidateExample; FailedPrecondition (nothing
  // changed) on divergence.
  virtual absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) = 0;
  // The predictive mean and variance of y at a valid x; only for a kind whose
  // has_predictive_variance() is true (the default aborts).
  virtual void PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                            double* variance) const;
  // f(x) for a valid x and a mode CheckPredictionMode accepted.
  virtual double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const = 0;
  // A multi-class kind's step on a valid x of class y, an index into classes() (which the
  // caller extended if y is new). known_classes: the classes there were before this
  // example, the ones the prequential prediction chooses from. The step changes nothing
  // when it fails. The default (the other kinds) returns Internal: they never get here.
  virtual absl::StatusOr<Observation> StepClass(absl::Span<const double> x, uint32_t y,
                                                uint32_t known_classes);
  // A multi-class kind's scores at a valid x (classes().size() entries). The default
  // (the other kinds, which have no classes) writes nothing.
  virtual void ScoresUnchecked(absl::Span<const double> x, absl::Span<double> scores) const;
  // The multi-class statistics every multi-class kind commits after its step: steps() = t,
  // the loss, a mistake unless the predicted class is y.
  Observation CommitClassStep(uint64_t t, double score, double loss, uint32_t predicted,
                              uint32_t y);
  // FromState's check of state.classes (each a valid label, no two equal, at most
  // max_classes, none for a model that is not multi-class), then classes() from it.
  static absl::Status ValidateClasses(const ModelState& state);
  void RestoreClasses(const ModelState& state);

  // The same for a sparse input; by default they densify it and call the above.
  virtual absl::StatusOr<Observation> StepSparse(SparseVectorView x, double y);
  virtual double PredictSparseUnchecked(SparseVectorView x, PredictionMode mode) const;

  // InvalidArgument naming values[i] if it is not finite.
  static absl::Status CheckFiniteValues(absl::string_view name,
                                        absl::Span<const double> values);

  const ModelConfig config_;
  const BatchRules batch_rules_;
  const Loss loss_;
  const LearningRate learning_rate_;
  RegretWindowBuffer regret_window_;
  double offset_ = 0.0;
  double margin_ = 0.0;
  uint64_t steps_ = 0;
  double cumulative_loss_ = 0.0;
  uint64_t mistakes_ = 0;
  // A multi-class model's classes in the order learned, and each one's index.
  std::vector<std::string> classes_;
  absl::flat_hash_map<std::string, uint32_t> class_index_;

 private:
  // ObserveClass on an example already validated: finds or adds the class, then steps.
  absl::StatusOr<Observation> LearnClass(absl::Span<const double> x,
                                         absl::string_view class_label);
  absl::Status CheckPredictionMode(PredictionMode mode) const;
  // PredictBatch's checks: `outputs` inputs, each valid, and the mode.
  absl::Status ValidatePredictBatch(const InputBatch& xs, size_t outputs,
                                    PredictionMode mode) const;
  // The steps of a validated batch whose rules are this model's.
  absl::Status ApplyBatch(const ValidatedBatch& batch, std::vector<Observation>* out);
  // Step's dense buffer for a sparse input (the regret window, a dense-storage model).
  std::vector<double> dense_scratch_;
  // InvalidArgument unless state.regret_window fits state.config and state.steps.
  static absl::Status ValidateRegretWindow(const ModelState& state);
};

}  // namespace okl

#endif  // OKL_CORE_MODEL_H_
