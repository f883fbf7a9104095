// core/select.h
//
// SelectModel: online model selection. Several candidate models (config.select.candidates,
// of any kind) learn from the same stream; Predict answers with the champion's prediction
// or the mean of the leaders around it (see "Predictions").
//
// Each example x_t, y_t is first predicted by every live candidate i, giving its
// progressive loss l_i,t (the loss before it learns the example), and then learned by all
// of them.
//
// Predictions (config.select.prediction; the default by the loss):
//   - champion (the default for regression): the champion's prediction, and its
//     predictive variance when it has one.
//   - leaders (the default for classification): the mean of the leaders' predictions.
//     The leaders are the champion and every live candidate compared with it over at
//     least kPromotionWeight and not significantly worse (its lower bound, below, is at
//     most 0). On classification the candidates' progressive losses are often within
//     noise of each other while their models differ by a point or more on held-out data,
//     and no progressive statistic tells which is best there; the leaders' mean does as
//     well as the best of them (measured: docs/learning-quality.md, "Model selection").
//     Every live candidate predicts already, so Observe costs no more; Predict asks each
//     leader.
// The selection's own prediction and loss (its cumulative loss sums them, saturating at
// DBL_MAX) are those it serves: the leaders' for each example are the leaders before it.
//
// Candidates are compared with the champion c example by example, by the sign of the
// paired difference, s_i,t = sign(l_i,t - l_c,t) in {-1, 0, 1}: a paired sign test, whose
// mean is negative when the challenger's loss is lower on more examples than it is
// higher. The sign, not the difference itself, because losses are heavy-tailed: on
// mg30 and lorenz one spike of a squared error outweighs a thousand steps of a better
// learner, and a test on the mean difference never resolved (measured:
// docs/learning-quality.md, "Model selection"). The sums are discounted by
// beta = 1 - 1/kSelectionHorizon per step (so the comparison follows a drifting stream
// and ranks by recent, steady-state behaviour),
// over the steps since the later of i's start and c's promotion:
//   W = sum beta^(T-t),  mean = sum beta^(T-t) s_t / W,
//   var = sum beta^(T-t) s_t^2 / W - mean^2,  half = z sqrt(var / W)
// ChaCha's rule (Wu et al., ICML 2021) on these bounds, with z = kSelectionZ:
//   - promote: once W >= kPromotionWeight, a challenger whose upper bound mean + half is
//     below 0 (significantly more often better than the champion) replaces it; among
//     several, the one of lowest upper bound. Every paired sum then restarts.
//   - retire: while candidates wait, a live candidate with W >= kRetirementWeight whose
//     lower bound mean - half is above 0 (significantly more often worse) is retired (its
//     model freed, its record kept), and the first waiting candidate starts. At most one
//     per step. With no candidate waiting, no one is retired: a loser may still win later.
// A candidate whose step diverges (FailedPrecondition) is retired at once; if it was the
// champion, the live candidate of lowest recent loss replaces it. If every live
// candidate diverges, the step is refused and nothing changes.
//
// The default set (no candidates listed): the first kScaleExamples examples are kept
// and predicted as 0; then input_scale s = the median squared distance between them
// fixes the kernel widths (gamma = c / s), the candidates are built (DefaultCandidates)
// and learn those examples in order. Everything is a deterministic function of the
// stream, so snapshots and log replay give the same champion and predictions bit for bit.
//
// Not thread-safe, as Model.
#ifndef OKL_CORE_SELECT_H_
#define OKL_CORE_SELECT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model.h"

namespace okl {

inline constexpr double kSelectionHorizon = 1000.0;
inline constexpr double kSelectionZ = 3.0;
inline constexpr double kPromotionWeight = 100.0;
inline constexpr double kRetirementWeight = 500.0;
inline constexpr size_t kScaleExamples = 32;
// select.live = 0: every candidate, at most this many.
inline constexpr uint32_t kDefaultLiveCandidates = 8;

// okl's default candidates for `config` (a select config without candidates), the kernel
// widths scaled by input_scale (the median squared distance between inputs; a
// non-positive or non-finite scale counts as 1). Classification (hinge, logistic):
// budgeted Pegasos with merging at 100 terms over three widths and two regularisers,
// NORMA with a constant step, and random features. Squared loss: the KRLS tracker at 200
// bases over three widths and two noise levels, and NORMA with merging and with OLDEST.
// Other losses: NORMA over three widths and two step sizes. See docs/learning-quality.md,
// "Model selection".
std::vector<ModelConfig> DefaultCandidates(const ModelConfig& config, double input_scale);

// The candidates of `config`: its list, or the default set at input_scale.
std::vector<ModelConfig> CandidateConfigs(const ModelConfig& config, double input_scale);

// The live candidates at once: select.live, or all of them up to kDefaultLiveCandidates.
size_t LiveCandidates(const ModelConfig& config);

class SelectModel : public Model {
 public:
  // The live candidates' worst cases (the largest `LiveCandidates` of them) and the
  // warm-up examples.
  static size_t WorstCaseMemoryBytes(const ModelConfig& config);
  // The most work per example: the largest LiveCandidates candidates' together.
  static double WorstCaseWorkPerExample(const ModelConfig& config);

  // InvalidArgument unless ValidateConfig(config) passes and config.select.enabled.
  static absl::StatusOr<std::unique_ptr<SelectModel>> Create(const ModelConfig& config);
  // InvalidArgument if the state is inconsistent: records that do not match the
  // candidates, live states that do not match the live records or do not restore, a
  // champion that is not live, warm-up examples where none are kept.
  static absl::StatusOr<std::unique_ptr<SelectModel>> FromState(const ModelState& state);

  ModelState ExportState() const override;
  double SquaredNorm() const override;
  ModelStats stats() const override;
  // The champion's (0 before the candidates exist).
  size_t expansion_size() const override;
  size_t MemoryBytes() const override;

  // True while the selection predicts with the champion and the champion predicts with
  // a variance (a KRLS tracker): Predict's variances are then the champion's.
  bool has_predictive_variance() const override;

  // True if the selection predicts with its leaders (see the header comment).
  bool predicts_with_leaders() const { return predicts_with_leaders_; }
  // True if candidate i is live and a leader now.
  bool leader(size_t i) const;

  // The index of the champion among the candidates.
  uint32_t champion() const { return champion_; }
  // The candidates' configs (empty while a default set warms up).
  const std::vector<ModelConfig>& candidate_configs() const { return configs_; }

 protected:
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) override;
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const override;
  void PredictWithVarianceUnchecked(absl::Span<const double> x, double* mean,
                                    double* variance) const override;

 private:
  explicit SelectModel(const ModelConfig& config);

  // FromState's restoring of a default set warming up (its examples so far), and of
  // built candidates (their configs, records and models, and the champion).
  absl::Status RestoreWarmup(const ModelState& state);
  absl::Status RestoreCandidates(const ModelState& state);
  // Builds the candidates (once their configs are known) and starts the first live ones.
  absl::Status Start(double input_scale);
  // The step of the live candidates on one example: progressive losses, learning, the
  // champion's prediction and loss into `champion_observation`.
  absl::StatusOr<Observation> StepCandidates(absl::Span<const double> x, double y);
  // Promotion and retirement after a step (see the header comment).
  void Compare();
  absl::Status StartNextWaiting();
  void Retire(size_t i);
  // Candidate i becomes the champion: every comparison with the champion restarts.
  void Crown(size_t i);

  // The leaders' mean prediction of x (leaders' own Predict calls).
  double LeadersPrediction(absl::Span<const double> x, PredictionMode mode) const;

  const bool predicts_with_leaders_;
  double input_scale_ = 0.0;
  std::vector<double> warmup_inputs_;
  std::vector<double> warmup_labels_;
  std::vector<ModelConfig> configs_;
  std::vector<CandidateRecord> records_;
  // The live candidates' models, indexed as configs_ (null unless live).
  std::vector<std::unique_ptr<Model>> models_;
  uint32_t champion_ = 0;
  uint64_t champion_changes_ = 0;
  // Step's scratch: each live candidate's observation (indexed as configs_).
  std::vector<Observation> observations_;
  std::vector<char> stepped_;
};

}  // namespace okl

#endif  // OKL_CORE_SELECT_H_
