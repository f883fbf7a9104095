#include "core/select.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/status_macros.h"

namespace okl {
namespace {

constexpr double kDiscount = 1.0 - 1.0 / kSelectionHorizon;
// The discounted weights approach 1 / (1 - kDiscount) from below (up to rounding).
constexpr double kMaxWeight = 1.01 * kSelectionHorizon;
// Losses enter the discounted recent-loss sums clamped to this, so the sums stay finite
// whatever a candidate's (finite) loss is.
constexpr double kMaxComparedLoss = 1e100;

double Clamp(double loss) { return std::clamp(loss, -kMaxComparedLoss, kMaxComparedLoss); }

// A kernel width c / s for the median squared distance s, kept finite and positive.
KernelConfig GaussianOfWidth(double c, double input_scale) {
  const double s = std::isfinite(input_scale) && input_scale > 0 ? input_scale : 1.0;
  return {.type = KernelType::kGaussian,
          .gamma = std::clamp(c / std::clamp(s, 1e-200, 1e200), 1e-250, 1e250)};
}

ModelConfig Shape(const ModelConfig& config) {
  ModelConfig candidate;
  candidate.dim = config.dim;
  candidate.loss = config.loss;
  return candidate;
}

// Budgeted Pegasos (eta_t = 1 / (lambda t)) with merging: the learner that leads the
// published budgeted kernel learners on a9a.
ModelConfig Pegasos(const ModelConfig& config, double c, double input_scale, double lambda) {
  ModelConfig candidate = Shape(config);
  candidate.kernel = GaussianOfWidth(c, input_scale);
  candidate.learning_rate = {.schedule = Schedule::kPower, .eta0 = 1.0 / lambda, .theta = 1.0};
  candidate.lambda = lambda;
  candidate.budget = {.max_terms = 100, .policy = BudgetPolicy::kMerge};
  return candidate;
}

ModelConfig Norma(const ModelConfig& config, double c, double input_scale, double eta0,
                  double lambda, uint32_t max_terms, BudgetPolicy policy) {
  ModelConfig candidate = Shape(config);
  candidate.kernel = GaussianOfWidth(c, input_scale);
  candidate.learning_rate = {.schedule = Schedule::kConstant, .eta0 = eta0};
  candidate.lambda = lambda;
  candidate.budget = {.max_terms = max_terms, .policy = policy};
  return candidate;
}

// The median of the squared distances between the rows of `inputs` (n rows of dim), or 1
// if it is not positive and finite.
double MedianSquaredDistance(const std::vector<double>& inputs, size_t dim) {
  const size_t n = inputs.size() / dim;
  std::vector<double> distances;
  distances.reserve(n * (n - 1) / 2);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      double sum = 0.0;
      for (size_t j = 0; j < dim; ++j) {
        const double d = inputs[a * dim + j] - inputs[b * dim + j];
        sum += d * d;
      }
      distances.push_back(sum);
    }
  }
  if (distances.empty()) return 1.0;
  auto middle = distances.begin() + static_cast<std::ptrdiff_t>(distances.size() / 2);
  std::nth_element(distances.begin(), middle, distances.end());
  return std::isfinite(*middle) && *middle > 0 ? *middle : 1.0;
}

struct Bounds {
  double mean = 0.0;
  double half = 0.0;  // the confidence interval's half-width
};

Bounds PairedBounds(const CandidateRecord& record) {
  const double w = record.paired_weight;
  Bounds bounds;
  bounds.mean = record.difference_sum / w;
  const double variance =
      std::max(record.difference_square_sum / w - bounds.mean * bounds.mean, 0.0);
  bounds.half = kSelectionZ * std::sqrt(variance / w);
  return bounds;
}

// The sum of the `count` largest of `values`, saturating at the type's largest value.
template <typename T>
T SumOfLargest(std::vector<T> values, size_t count) {
  std::sort(values.begin(), values.end(), std::greater<T>());
  T sum = 0;
  for (size_t i = 0; i < std::min(count, values.size()); ++i) {
    if (values[i] >= std::numeric_limits<T>::max() - sum) return std::numeric_limits<T>::max();
    sum += values[i];
  }
  return sum;
}

}  // namespace

std::vector<ModelConfig> DefaultCandidates(const ModelConfig& config, double input_scale) {
  std::vector<ModelConfig> candidates;
  const double widths[] = {0.25, 1.0, 4.0};
  if (IsClassificationLoss(config.loss.type)) {
    for (const double c : widths) {
      for (const double lambda : {1e-4, 1e-3}) {
        candidates.push_back(Pegasos(config, c, input_scale, lambda));
      }
    }
    candidates.push_back(
        Norma(config, 1.0, input_scale, 0.5, 1e-3, 100, BudgetPolicy::kOldest));
    ModelConfig features = Pegasos(config, 1.0, input_scale, 1e-4);
    features.budget = {};
    features.random_features = {.dimension = 256, .seed = 1};
    candidates.push_back(features);
  } else if (config.loss.type == LossType::kSquared) {
    for (const double c : widths) {
      for (const double noise : {1e-5, 1e-3}) {
        ModelConfig tracker = Shape(config);
        tracker.kernel = GaussianOfWidth(c, input_scale);
        tracker.krls_tracker = {.max_basis = 200, .noise_variance = noise};
        candidates.push_back(tracker);
      }
    }
    candidates.push_back(Norma(config, 1.0, input_scale, 0.5, 0.0, 200, BudgetPolicy::kMerge));
    candidates.push_back(
        Norma(config, 1.0, input_scale, 0.5, 1e-3, 200, BudgetPolicy::kOldest));
  } else {
    for (const double c : widths) {
      for (const double eta0 : {0.1, 0.5}) {
        candidates.push_back(
            Norma(config, c, input_scale, eta0, 1e-3, 200, BudgetPolicy::kOldest));
      }
    }
  }
  return candidates;
}

std::vector<ModelConfig> CandidateConfigs(const ModelConfig& config, double input_scale) {
  if (!config.select.candidates.empty()) return config.select.candidates;
  return DefaultCandidates(config, input_scale);
}

size_t LiveCandidates(const ModelConfig& config) {
  const size_t candidates = CandidateConfigs(config, 1.0).size();
  const size_t live = config.select.live > 0 ? config.select.live : kDefaultLiveCandidates;
  return std::min(live, candidates);
}

size_t SelectModel::WorstCaseMemoryBytes(const ModelConfig& config) {
  std::vector<size_t> bytes;
  for (const ModelConfig& candidate : CandidateConfigs(config, 1.0)) {
    bytes.push_back(okl::WorstCaseMemoryBytes(candidate));
  }
  const size_t models = SumOfLargest(bytes, LiveCandidates(config));
  const size_t own = sizeof(double) * kScaleExamples * (size_t{config.dim} + 1) +
                     bytes.size() * (sizeof(CandidateRecord) + sizeof(ModelConfig) +
                                     sizeof(Observation) + sizeof(void*) + 1);
  return models > SIZE_MAX - own ? SIZE_MAX : models + own;
}

double SelectModel::WorstCaseWorkPerExample(const ModelConfig& config) {
  std::vector<double> work;
  for (const ModelConfig& candidate : CandidateConfigs(config, 1.0)) {
    work.push_back(okl::WorstCaseWorkPerExample(candidate));
  }
  return SumOfLargest(work, LiveCandidates(config));
}

// Leaders by default for the classification losses, where the candidates' progressive
// losses rarely separate them (core/select.h, "Predictions").
bool PredictsWithLeaders(const ModelConfig& config) {
  switch (config.select.prediction) {
    case SelectPrediction::kChampion:
      return false;
    case SelectPrediction::kLeaders:
      return true;
    case SelectPrediction::kDefault:
      break;
  }
  return IsClassificationLoss(config.loss.type);
}

SelectModel::SelectModel(const ModelConfig& config)
    : Model(config), predicts_with_leaders_(PredictsWithLeaders(config)) {}

absl::StatusOr<std::unique_ptr<SelectModel>> SelectModel::Create(const ModelConfig& config) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (!config.select_kind()) {
    return absl::InvalidArgumentError("SelectModel needs a config with select.enabled");
  }
  std::unique_ptr<SelectModel> model(new SelectModel(config));
  if (!config.select.candidates.empty()) OKL_RETURN_IF_ERROR(model->Start(0.0));
  return model;
}

absl::Status SelectModel::Start(double input_scale) {
  input_scale_ = input_scale;
  configs_ = CandidateConfigs(config_, input_scale);
  records_.assign(configs_.size(), CandidateRecord{});
  models_.clear();
  models_.resize(configs_.size());
  observations_.assign(configs_.size(), Observation{});
  stepped_.assign(configs_.size(), 0);
  for (size_t i = 0; i < LiveCandidates(config_); ++i) {
    OKL_ASSIGN_OR_RETURN(models_[i], CreateModel(configs_[i]));
    records_[i].status = CandidateStatus::kLive;
    records_[i].started_at = steps_;
  }
  champion_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<Observation> SelectModel::Step(absl::Span<const double> x, double y) {
  OKL_RETURN_IF_ERROR(CheckStepCounter());
  StepScalars step;
  step.t = steps_ + 1;
  step.margin = margin_;
  if (configs_.empty()) {
    // A default set warming up: keep the example, predict 0.
    step.at = loss_.At(y, 0.0, margin_);
    OKL_RETURN_IF_ERROR(CheckStepFinite(step, true));
    // Room for all the warm-up examples at once: no growth beyond what
    // WorstCaseMemoryBytes counts.
    warmup_inputs_.reserve(kScaleExamples * config_.dim);
    warmup_labels_.reserve(kScaleExamples);
    warmup_inputs_.insert(warmup_inputs_.end(), x.begin(), x.end());
    warmup_labels_.push_back(y);
    if (warmup_labels_.size() == kScaleExamples) {
      absl::Status started = Start(MedianSquaredDistance(warmup_inputs_, config_.dim));
      for (size_t i = 0; started.ok() && i < warmup_labels_.size(); ++i) {
        started = StepCandidates(
                      absl::MakeConstSpan(warmup_inputs_).subspan(i * config_.dim, config_.dim),
                      warmup_labels_[i])
                      .status();
        if (started.ok()) Compare();
      }
      if (!started.ok()) {
        // Back to the state before this example: still warming up.
        configs_.clear();
        records_.clear();
        models_.clear();
        input_scale_ = 0.0;
        champion_ = 0;
        champion_changes_ = 0;
        warmup_inputs_.resize(warmup_inputs_.size() - x.size());
        warmup_labels_.pop_back();
        return started;
      }
      warmup_inputs_.clear();
      warmup_inputs_.shrink_to_fit();
      warmup_labels_.clear();
      warmup_labels_.shrink_to_fit();
    }
    return CommitStepScalars(step, x, y);
  }
  OKL_ASSIGN_OR_RETURN(const Observation champion, StepCandidates(x, y));
  step.prediction = champion.prediction;
  step.at.value = champion.loss;
  const Observation observation = CommitStepScalars(step, x, y);
  // The champions' losses summed: each is finite, but their sum could pass DBL_MAX after
  // the candidates have learned, when the step can no longer be refused; it saturates.
  if (!std::isfinite(cumulative_loss_)) cumulative_loss_ = std::numeric_limits<double>::max();
  Compare();
  return observation;
}

absl::StatusOr<Observation> SelectModel::StepCandidates(absl::Span<const double> x, double y) {
  size_t stepped = 0;
  for (size_t i = 0; i < models_.size(); ++i) {
    stepped_[i] = 0;
    if (models_[i] == nullptr) continue;
    absl::StatusOr<Observation> observation = models_[i]->Observe(x, y);
    if (observation.ok()) {
      observations_[i] = *observation;
      stepped_[i] = 1;
      ++stepped;
    }
  }
  if (stepped == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("every live candidate diverged at step ", steps_ + 1,
                     "; the example was not applied. Scale the inputs and labels"));
  }
  // A candidate whose step diverged changed nothing and is retired; a champion among
  // them gives way to the live candidate of lowest recent loss.
  bool champion_lost = false;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] != nullptr && !stepped_[i]) {
      champion_lost |= i == champion_;
      Retire(i);
    }
  }
  if (champion_lost) {
    size_t best = models_.size();
    for (size_t i = 0; i < models_.size(); ++i) {
      if (models_[i] == nullptr) continue;
      if (best == models_.size() || records_[i].recent_loss() < records_[best].recent_loss()) {
        best = i;
      }
    }
    Crown(best);
  }
  // What the selection serves for this example: the champion's prediction, or the mean of
  // the leaders before this example (their records are updated below).
  Observation served = observations_[champion_];
  if (predicts_with_leaders_) {
    double sum = 0.0;
    size_t leaders = 0;
    for (size_t i = 0; i < models_.size(); ++i) {
      if (!leader(i)) continue;
      sum += observations_[i].prediction;
      ++leaders;
    }
    served.prediction = sum / static_cast<double>(leaders);
    served.loss = loss_.At(y, served.prediction, margin_).value;
  }
  const double champion_loss = observations_[champion_].loss;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == nullptr) continue;
    CandidateRecord& record = records_[i];
    const double loss = observations_[i].loss;
    ++record.steps;
    record.cumulative_loss += loss;
    record.weight = kDiscount * record.weight + 1.0;
    record.loss_sum = kDiscount * record.loss_sum + Clamp(loss);
    if (i == champion_) continue;
    // The paired sign test's statistic (core/select.h).
    const double difference = loss > champion_loss ? 1.0 : loss < champion_loss ? -1.0 : 0.0;
    record.paired_weight = kDiscount * record.paired_weight + 1.0;
    record.difference_sum = kDiscount * record.difference_sum + difference;
    record.difference_square_sum =
        kDiscount * record.difference_square_sum + difference * difference;
  }
  return served;
}

void SelectModel::Compare() {
  size_t best = models_.size();
  double best_upper = 0.0;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == nullptr || i == champion_) continue;
    if (records_[i].paired_weight < kPromotionWeight) continue;
    const Bounds bounds = PairedBounds(records_[i]);
    const double upper = bounds.mean + bounds.half;
    if (upper < 0 && (best == models_.size() || upper < best_upper)) {
      best = i;
      best_upper = upper;
    }
  }
  if (best < models_.size()) {
    Crown(best);
    return;
  }
  const bool waiting = std::any_of(records_.begin(), records_.end(), [](const auto& record) {
    return record.status == CandidateStatus::kWaiting;
  });
  if (!waiting) return;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == nullptr || i == champion_) continue;
    if (records_[i].paired_weight < kRetirementWeight) continue;
    const Bounds bounds = PairedBounds(records_[i]);
    if (bounds.mean - bounds.half > 0) {
      Retire(i);
      // A waiting candidate that cannot be built (its config is validated, so this does
      // not happen) is retired in its turn, and the next one tried.
      while (!StartNextWaiting().ok()) {
      }
      return;
    }
  }
}

absl::Status SelectModel::StartNextWaiting() {
  for (size_t j = 0; j < records_.size(); ++j) {
    if (records_[j].status != CandidateStatus::kWaiting) continue;
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(configs_[j]);
    if (!model.ok()) {
      records_[j].status = CandidateStatus::kRetired;
      return model.status();
    }
    models_[j] = *std::move(model);
    records_[j].status = CandidateStatus::kLive;
    records_[j].started_at = steps_;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

void SelectModel::Retire(size_t i) {
  models_[i].reset();
  CandidateRecord& record = records_[i];
  record.status = CandidateStatus::kRetired;
  record.ResetComparison();
}

void SelectModel::Crown(size_t i) {
  champion_ = static_cast<uint32_t>(i);
  ++champion_changes_;
  for (CandidateRecord& record : records_) record.ResetComparison();
}

bool SelectModel::leader(size_t i) const {
  if (i >= models_.size() || models_[i] == nullptr) return false;
  if (i == champion_) return true;
  const CandidateRecord& record = records_[i];
  if (record.paired_weight < kPromotionWeight) return false;
  const Bounds bounds = PairedBounds(record);
  return bounds.mean - bounds.half <= 0;
}

double SelectModel::LeadersPrediction(absl::Span<const double> x, PredictionMode mode) const {
  double sum = 0.0;
  size_t leaders = 0;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (!leader(i)) continue;
    sum += models_[i]->Predict(x, mode).value_or(0.0);
    ++leaders;
  }
  return sum / static_cast<double>(leaders);
}

double SelectModel::PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const {
  if (configs_.empty() || models_[champion_] == nullptr) return 0.0;
  if (predicts_with_leaders_) return LeadersPrediction(x, mode);
  return models_[champion_]->Predict(x, mode).value_or(0.0);
}

bool SelectModel::has_predictive_variance() const {
  return !predicts_with_leaders_ && !configs_.empty() && models_[champion_] != nullptr &&
         models_[champion_]->has_predictive_variance();
}

void SelectModel::PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                               double* variance) const {
  // x is validated and the champion has a variance (PredictBatchWithVariance checked
  // both), so the champion's own call cannot fail.
  const absl::Status status = models_[champion_]->PredictBatchWithVariance(
      InputBatch::Dense(x, config_.dim), absl::MakeSpan(mean, 1), absl::MakeSpan(variance, 1));
  if (!status.ok()) std::abort();
}

double SelectModel::SquaredNorm() const {
  if (configs_.empty() || models_[champion_] == nullptr) return 0.0;
  return models_[champion_]->SquaredNorm();
}

size_t SelectModel::expansion_size() const {
  if (configs_.empty() || models_[champion_] == nullptr) return 0;
  return models_[champion_]->expansion_size();
}

ModelStats SelectModel::stats() const {
  ModelStats stats = ScalarStats();
  stats.expansion_size = static_cast<uint32_t>(expansion_size());
  stats.champion = champion_;
  stats.champion_changes = champion_changes_;
  for (size_t i = 0; i < configs_.size(); ++i) {
    const CandidateRecord& record = records_[i];
    stats.candidates.push_back(
        {.config = configs_[i],
         .status = record.status,
         .steps = record.steps,
         .cumulative_loss = record.cumulative_loss,
         .recent_loss = record.recent_loss(),
         .started_at = record.started_at,
         .serving = predicts_with_leaders_ ? leader(i) : i == champion_});
  }
  return stats;
}

size_t SelectModel::MemoryBytes() const {
  size_t bytes = sizeof(double) * (warmup_inputs_.capacity() + warmup_labels_.capacity()) +
                 configs_.capacity() * sizeof(ModelConfig) +
                 records_.capacity() * sizeof(CandidateRecord) +
                 observations_.capacity() * sizeof(Observation) + stepped_.capacity() +
                 models_.capacity() * sizeof(void*);
  for (const std::unique_ptr<Model>& model : models_) {
    if (model != nullptr) bytes += model->MemoryBytes();
  }
  return bytes;
}

ModelState SelectModel::ExportState() const {
  ModelState state;
  state.config = config_;
  ExportStateScalars(&state);
  for (const std::unique_ptr<Model>& model : models_) {
    if (model != nullptr) state.candidate_states.push_back(model->ExportState());
  }
  state.candidates = records_;
  state.champion = champion_;
  state.champion_changes = champion_changes_;
  state.input_scale = input_scale_;
  state.warmup_inputs = warmup_inputs_;
  state.warmup_labels = warmup_labels_;
  return state;
}

namespace {

absl::Status Inconsistent(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
}

// InvalidArgument if the state sets a field of another model kind.
absl::Status CheckOnlySelectionFields(const ModelState& state) {
  // Nothing of the other kinds: the state without its selection fields and scalars is
  // an empty one.
  ModelState rest = state;
  rest.config = {};
  rest.candidate_states.clear();
  rest.candidates.clear();
  rest.champion = 0;
  rest.champion_changes = 0;
  rest.input_scale = 0.0;
  rest.warmup_inputs.clear();
  rest.warmup_labels.clear();
  rest.offset = rest.margin = rest.cumulative_loss = 0.0;
  rest.steps = rest.mistakes = 0;
  if (!(rest == ModelState{})) {
    return Inconsistent("a selection's state sets fields of another model kind");
  }
  return absl::OkStatus();
}

// InvalidArgument unless the record of candidate `name` is one a selection after `steps`
// steps can hold.
absl::Status CheckCandidateRecord(const CandidateRecord& record, const std::string& name,
                                  uint64_t steps) {
  for (const double value :
       {record.cumulative_loss, record.weight, record.loss_sum, record.paired_weight,
        record.difference_sum, record.difference_square_sum}) {
    if (!std::isfinite(value)) return Inconsistent(name + " holds a non-finite sum");
  }
  if (record.weight < 0 || record.paired_weight < 0 || record.difference_square_sum < 0 ||
      record.weight > kMaxWeight || record.paired_weight > kMaxWeight || record.steps > steps ||
      record.started_at > steps) {
    return Inconsistent(absl::StrCat(name, ": weights ", record.weight, " and ",
                                     record.paired_weight, " (in [0, ", kMaxWeight,
                                     "]), steps ", record.steps, " and start ",
                                     record.started_at, " (at most the selection's)"));
  }
  if (record.status == CandidateStatus::kWaiting &&
      !(record.steps == 0 && record.weight == 0 && record.paired_weight == 0)) {
    return Inconsistent(name + " waits but has learned");
  }
  if (record.status != CandidateStatus::kLive && record.paired_weight != 0) {
    return Inconsistent(name + " is not live but is compared with the champion");
  }
  if (record.paired_weight == 0 &&
      (record.difference_sum != 0 || record.difference_square_sum != 0)) {
    return Inconsistent(name + " has paired sums without weight");
  }
  return absl::OkStatus();
}

// The model of live candidate `name` (of `config`, with `record`) from its state.
absl::StatusOr<std::unique_ptr<Model>> RestoreCandidate(const ModelState& candidate_state,
                                                        const ModelConfig& config,
                                                        const CandidateRecord& record,
                                                        const std::string& name) {
  if (!(candidate_state.config == config)) {
    return Inconsistent(name + "'s state has another config than the candidate's");
  }
  if (candidate_state.steps != record.steps ||
      candidate_state.cumulative_loss != record.cumulative_loss) {
    return Inconsistent(absl::StrCat(name, "'s state has ", candidate_state.steps,
                                     " steps and a loss sum of ",
                                     candidate_state.cumulative_loss, ", its record ",
                                     record.steps, " and ", record.cumulative_loss));
  }
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(candidate_state);
  if (!restored.ok()) {
    return Inconsistent(absl::StrCat(name, ": ", restored.status().message()));
  }
  // A candidate's state is always in the current layout (a selection's snapshots are
  // all format 4): one that a kind reads only as an older layout would not export as
  // it was restored.
  if (!((*restored)->ExportState() == candidate_state)) {
    return Inconsistent(name + "'s state is not in the current layout");
  }
  return restored;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SelectModel>> SelectModel::FromState(const ModelState& state) {
  const ModelConfig& config = state.config;
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (!config.select_kind()) {
    return absl::InvalidArgumentError("SelectModel needs a config with select.enabled");
  }
  OKL_RETURN_IF_ERROR(CheckOnlySelectionFields(state));
  OKL_RETURN_IF_ERROR(ValidateStateScalars(state));
  if (state.offset != 0.0) return Inconsistent("a selection has no offset of its own");
  std::unique_ptr<SelectModel> model(new SelectModel(config));
  if (state.margin != model->margin_) {
    return Inconsistent(absl::StrCat("a selection's margin is its loss's, ", model->margin_,
                                     ", not ", state.margin));
  }
  model->RestoreStateScalars(state);
  const bool default_set = config.select.candidates.empty();
  const bool warming = default_set && state.input_scale == 0.0;
  if (warming) {
    OKL_RETURN_IF_ERROR(model->RestoreWarmup(state));
    return model;
  }
  if (!state.warmup_inputs.empty() || !state.warmup_labels.empty()) {
    return Inconsistent("warm-up examples in a selection whose candidates are built");
  }
  if (default_set ? !(std::isfinite(state.input_scale) && state.input_scale > 0)
                  : state.input_scale != 0.0) {
    return Inconsistent(
        absl::StrCat("input_scale is ", state.input_scale,
                     default_set ? " (a default set's is positive and finite once it is built)"
                                 : " (0 for listed candidates)"));
  }
  OKL_RETURN_IF_ERROR(model->RestoreCandidates(state));
  return model;
}

absl::Status SelectModel::RestoreWarmup(const ModelState& state) {
  const size_t dim = state.config.dim;
  if (state.warmup_labels.size() != state.steps || state.steps >= kScaleExamples ||
      state.warmup_inputs.size() != state.steps * dim) {
    return Inconsistent(absl::StrCat(
        "a default set warming up keeps each of its first ", kScaleExamples,
        " examples: after ", state.steps, " steps it holds ", state.warmup_labels.size(),
        " labels and ", state.warmup_inputs.size(), " input values (dim ", dim, ")"));
  }
  if (!state.candidates.empty() || !state.candidate_states.empty() || state.champion != 0 ||
      state.champion_changes != 0) {
    return Inconsistent("a default set warming up has no candidates yet");
  }
  for (size_t i = 0; i < state.warmup_labels.size(); ++i) {
    OKL_RETURN_IF_ERROR(
        ValidateExample(absl::MakeConstSpan(state.warmup_inputs).subspan(i * dim, dim),
                        state.warmup_labels[i]));
  }
  warmup_inputs_.reserve(kScaleExamples * dim);
  warmup_labels_.reserve(kScaleExamples);
  warmup_inputs_ = state.warmup_inputs;
  warmup_labels_ = state.warmup_labels;
  return absl::OkStatus();
}

absl::Status SelectModel::RestoreCandidates(const ModelState& state) {
  input_scale_ = state.input_scale;
  configs_ = CandidateConfigs(state.config, state.input_scale);
  const size_t n = configs_.size();
  if (state.candidates.size() != n) {
    return Inconsistent(
        absl::StrCat("records for ", state.candidates.size(), " candidates, not ", n));
  }
  records_ = state.candidates;
  models_.resize(n);
  observations_.assign(n, Observation{});
  stepped_.assign(n, 0);
  size_t live = 0;
  for (size_t i = 0; i < n; ++i) {
    const CandidateRecord& record = state.candidates[i];
    const std::string name = absl::StrCat("candidate ", i);
    OKL_RETURN_IF_ERROR(CheckCandidateRecord(record, name, state.steps));
    if (record.status != CandidateStatus::kLive) continue;
    if (live == state.candidate_states.size()) {
      return Inconsistent("fewer candidate states than live candidates");
    }
    OKL_ASSIGN_OR_RETURN(models_[i], RestoreCandidate(state.candidate_states[live++],
                                                      configs_[i], record, name));
  }
  if (live != state.candidate_states.size()) {
    return Inconsistent(absl::StrCat(state.candidate_states.size(), " candidate states for ",
                                     live, " live candidates"));
  }
  if (live == 0 || live > LiveCandidates(state.config)) {
    return Inconsistent(
        absl::StrCat(live, " live candidates (1 to ", LiveCandidates(state.config), ")"));
  }
  if (state.champion >= n ||
      state.candidates[state.champion].status != CandidateStatus::kLive ||
      state.candidates[state.champion].paired_weight != 0) {
    return Inconsistent(
        absl::StrCat("the champion, candidate ", state.champion, ", is not a live candidate"));
  }
  champion_ = state.champion;
  champion_changes_ = state.champion_changes;
  return absl::OkStatus();
}

}  // namespace okl
