// SelectModel (core/select.h) against an independent plain implementation of its rule
// (each candidate run alone, the discounted paired sums summed out from the loss
// histories, the promotions and retirements decided from them), and on its own terms:
// the configs it refuses, the default set's warm-up and scaling, exact continuation from
// a snapshot at every phase, a diverging candidate retired, a step every candidate
// refuses changing nothing, and the states FromState refuses.

#include "core/select.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/reference_streams.h"

namespace okl {
namespace {

using ::testing::HasSubstr;
using testing::kStreamDim;
using testing::Labels;
using testing::MakeStream;
using testing::Stream;

ModelConfig Outer(LossType loss) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.loss = {.type = loss};
  config.select.enabled = true;
  return config;
}

ModelConfig Norma(double eta0, double gamma = 2.0) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.loss = {.type = LossType::kSquared};
  config.kernel = {.type = KernelType::kGaussian, .gamma = gamma};
  config.learning_rate = {.eta0 = eta0};
  config.lambda = 1e-3;
  config.budget = {.max_terms = 50};
  return config;
}

ModelConfig Tracker(uint32_t max_basis) {
  ModelConfig config;
  config.dim = kStreamDim;
  config.loss = {.type = LossType::kSquared};
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.krls_tracker = {.max_basis = max_basis, .noise_variance = 1e-2};
  return config;
}

// Two live of four: a slow learner that starts as champion and loses it, a good one, and
// two that wait for the slow one's retirement.
ModelConfig Selection() {
  ModelConfig config = Outer(LossType::kSquared);
  config.select.live = 2;
  config.select.candidates = {Norma(0.001), Norma(0.5), Norma(0.2, 8.0), Tracker(20)};
  return config;
}

std::unique_ptr<Model> MustCreate(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// The plain reference: every live candidate a separate model; the comparison sums
// recomputed each step from the loss histories with explicit weights beta^(T - t).
// It predicts with the leaders when told to (the caller resolves the default).
class ReferenceSelection {
 public:
  explicit ReferenceSelection(const ModelConfig& config, bool leaders = false)
      : configs_(config.select.candidates), live_(config.select.live), leaders_(leaders) {
    status_.assign(configs_.size(), CandidateStatus::kWaiting);
    models_.resize(configs_.size());
    losses_.resize(configs_.size());
    start_.assign(configs_.size(), 0);
    for (size_t i = 0; i < live_; ++i) StartCandidate(i, 0);
  }

  // The selection's prediction of y at x, then every live candidate learns it.
  double Observe(absl::Span<const double> x, double y) {
    std::vector<bool> leads(configs_.size());  // the leaders before this example
    for (size_t i = 0; i < configs_.size(); ++i) leads[i] = Leads(i);
    ++t_;
    double champion_prediction = 0.0;
    double sum = 0.0;
    size_t leaders = 0;
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (status_[i] != CandidateStatus::kLive) continue;
      absl::StatusOr<Observation> o = models_[i]->Observe(x, y);
      EXPECT_TRUE(o.ok()) << o.status();
      losses_[i].push_back(o->loss);
      if (i == champion_) champion_prediction = o->prediction;
      if (leads[i]) {
        sum += o->prediction;
        ++leaders;
      }
    }
    Decide();
    return leaders_ ? sum / static_cast<double>(leaders) : champion_prediction;
  }

  double Predict(absl::Span<const double> x) const {
    if (!leaders_) return models_[champion_]->Predict(x).value();
    double sum = 0.0;
    size_t leaders = 0;
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (!Leads(i)) continue;
      sum += models_[i]->Predict(x).value();
      ++leaders;
    }
    return sum / static_cast<double>(leaders);
  }
  // The champion, and each live candidate compared with it over kPromotionWeight and not
  // significantly worse.
  bool Leads(size_t i) const {
    if (status_[i] != CandidateStatus::kLive) return false;
    if (i == champion_) return true;
    const Sums sums = Paired(i);
    return sums.weight >= kPromotionWeight && sums.mean - sums.half <= 0;
  }
  size_t champion() const { return champion_; }
  CandidateStatus status(size_t i) const { return status_[i]; }
  size_t promotions() const { return promotions_; }

 private:
  void StartCandidate(size_t i, uint64_t at) {
    models_[i] = MustCreate(configs_[i]);
    status_[i] = CandidateStatus::kLive;
    start_[i] = at;
  }

  // The loss of candidate i at step s (it is live at s).
  double Loss(size_t i, uint64_t s) const { return losses_[i][s - start_[i] - 1]; }

  struct Sums {
    double weight = 0, mean = 0, half = 0;
  };
  Sums Paired(size_t i) const {
    const uint64_t from = std::max(start_[i], promoted_at_) + 1;
    const double beta = 1.0 - 1.0 / kSelectionHorizon;
    double w = 0, s = 0, q = 0;
    for (uint64_t step = from; step <= t_; ++step) {
      const double weight = std::pow(beta, static_cast<double>(t_ - step));
      const double a = Loss(i, step);
      const double b = Loss(champion_, step);
      const double d = a > b ? 1.0 : (a < b ? -1.0 : 0.0);  // the paired sign test
      w += weight;
      s += weight * d;
      q += weight * d * d;
    }
    Sums sums;
    sums.weight = w;
    if (w == 0) return sums;
    sums.mean = s / w;
    sums.half = kSelectionZ * std::sqrt(std::max(q / w - sums.mean * sums.mean, 0.0) / w);
    return sums;
  }

  void Decide() {
    size_t best = configs_.size();
    double best_upper = 0;
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (status_[i] != CandidateStatus::kLive || i == champion_) continue;
      const Sums sums = Paired(i);
      if (sums.weight < kPromotionWeight) continue;
      if (sums.mean + sums.half < 0 &&
          (best == configs_.size() || sums.mean + sums.half < best_upper)) {
        best = i;
        best_upper = sums.mean + sums.half;
      }
    }
    if (best < configs_.size()) {
      champion_ = best;
      promoted_at_ = t_;
      ++promotions_;
      return;
    }
    const auto waiting = std::find(status_.begin(), status_.end(), CandidateStatus::kWaiting);
    if (waiting == status_.end()) return;
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (status_[i] != CandidateStatus::kLive || i == champion_) continue;
      const Sums sums = Paired(i);
      if (sums.weight >= kRetirementWeight && sums.mean - sums.half > 0) {
        status_[i] = CandidateStatus::kRetired;
        models_[i].reset();
        StartCandidate(static_cast<size_t>(waiting - status_.begin()), t_);
        return;
      }
    }
  }

  std::vector<ModelConfig> configs_;
  size_t live_;
  bool leaders_;
  std::vector<CandidateStatus> status_;
  std::vector<std::unique_ptr<Model>> models_;
  std::vector<std::vector<double>> losses_;
  std::vector<uint64_t> start_;
  size_t champion_ = 0;
  uint64_t promoted_at_ = 0;
  uint64_t t_ = 0;
  size_t promotions_ = 0;
};

TEST(SelectTest, AgreesWithThePlainReference) {
  const ModelConfig config = Selection();
  std::unique_ptr<Model> model = MustCreate(config);
  ASSERT_NE(model, nullptr);
  ReferenceSelection reference(config);
  const Stream stream = MakeStream(Labels::kRegression, 2500, 11);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
    ASSERT_TRUE(o.ok()) << o.status();
    const double expected = reference.Observe(stream.row(t), stream.y[t]);
    ASSERT_EQ(o->prediction, expected) << "step " << t + 1;
    ASSERT_EQ(model->stats().champion, reference.champion()) << "step " << t + 1;
  }
  const ModelStats stats = model->stats();
  ASSERT_EQ(stats.candidates.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(stats.candidates[i].status, reference.status(i));
  // The stream exercises both rules: the slow learner lost the lead and was retired.
  EXPECT_GE(stats.champion_changes, 1u);
  EXPECT_EQ(stats.champion_changes, reference.promotions());
  EXPECT_EQ(stats.candidates[0].status, CandidateStatus::kRetired);
  EXPECT_NE(stats.candidates[2].status, CandidateStatus::kWaiting);
  // Predict answers with the champion's model, which the reference ran alone.
  const std::vector<double> x = {0.1, -0.2, 0.3};
  absl::StatusOr<double> prediction = model->Predict(x);
  ASSERT_TRUE(prediction.ok());
  EXPECT_EQ(*prediction, reference.Predict(x));
}

// The leaders' mean, on both losses: chosen for squared loss, the default for hinge.
// Each prediction Observe returns is the mean over the leaders before the example; the
// stats mark who serves.
TEST(SelectTest, LeadersAgreeWithThePlainReference) {
  ModelConfig regression = Selection();
  regression.select.prediction = SelectPrediction::kLeaders;
  ModelConfig classification = Outer(LossType::kHinge);
  classification.select.live = 3;
  for (const double gamma : {0.5, 2.0, 8.0}) {
    ModelConfig candidate = Norma(0.3, gamma);
    candidate.loss = classification.loss;
    classification.select.candidates.push_back(candidate);
  }
  for (const ModelConfig& config : {regression, classification}) {
    const bool regressing = config.loss.type == LossType::kSquared;
    SCOPED_TRACE(regressing ? "squared loss, leaders chosen" : "hinge loss, by default");
    std::unique_ptr<Model> model = MustCreate(config);
    ASSERT_NE(model, nullptr);
    EXPECT_TRUE(dynamic_cast<const SelectModel&>(*model).predicts_with_leaders());
    ReferenceSelection reference(config, /*leaders=*/true);
    const Stream stream =
        MakeStream(regressing ? Labels::kRegression : Labels::kClassification, 2500, 17);
    size_t steps_with_several_leaders = 0;
    for (size_t t = 0; t < stream.y.size(); ++t) {
      size_t serving = 0;
      const ModelStats before = model->stats();
      for (size_t i = 0; i < before.candidates.size(); ++i) {
        EXPECT_EQ(before.candidates[i].serving, reference.Leads(i)) << "candidate " << i;
        serving += before.candidates[i].serving;
      }
      steps_with_several_leaders += serving > 1;
      absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
      ASSERT_TRUE(o.ok()) << o.status();
      ASSERT_DOUBLE_EQ(o->prediction, reference.Observe(stream.row(t), stream.y[t]))
          << "step " << t + 1;
    }
    // The mean was over more than the champion for part of the stream at least.
    EXPECT_GT(steps_with_several_leaders, 100u);
    const std::vector<double> x = {0.1, -0.2, 0.3};
    absl::StatusOr<double> prediction = model->Predict(x);
    ASSERT_TRUE(prediction.ok());
    EXPECT_DOUBLE_EQ(*prediction, reference.Predict(x));
    // A mean of candidates has no predictive variance, whatever the champion is.
    EXPECT_FALSE(model->has_predictive_variance());
  }
  // The default for regression is the champion; hinge may choose it.
  EXPECT_FALSE(
      dynamic_cast<const SelectModel&>(*MustCreate(Selection())).predicts_with_leaders());
  classification.select.prediction = SelectPrediction::kChampion;
  EXPECT_FALSE(
      dynamic_cast<const SelectModel&>(*MustCreate(classification)).predicts_with_leaders());
}

// Predict's variances are the champion's while it is a tracker, and there are none
// while it is not: the slow NORMA starts as champion and the tracker takes over.
TEST(SelectTest, PredictsWithTheChampionsVarianceWhenItHasOne) {
  ModelConfig config = Outer(LossType::kSquared);
  config.select.candidates = {Norma(0.001), Tracker(20)};
  std::unique_ptr<Model> model = MustCreate(config);
  std::unique_ptr<Model> tracker = MustCreate(Tracker(20));
  ASSERT_NE(model, nullptr);
  ASSERT_NE(tracker, nullptr);
  const std::vector<double> x = {0.1, -0.2, 0.3};
  const InputBatch probe = InputBatch::Dense(x, kStreamDim);
  double mean = 0.0;
  double variance = 0.0;
  EXPECT_FALSE(model->has_predictive_variance());
  EXPECT_EQ(model
                ->PredictBatchWithVariance(probe, absl::MakeSpan(&mean, 1),
                                           absl::MakeSpan(&variance, 1))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  const Stream stream = MakeStream(Labels::kRegression, 1500, 13);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
    ASSERT_TRUE(tracker->Observe(stream.row(t), stream.y[t]).ok());
  }
  ASSERT_EQ(model->stats().champion, 1u);
  EXPECT_TRUE(model->has_predictive_variance());
  ASSERT_TRUE(model
                  ->PredictBatchWithVariance(probe, absl::MakeSpan(&mean, 1),
                                             absl::MakeSpan(&variance, 1))
                  .ok());
  double tracker_mean = 0.0;
  double tracker_variance = 0.0;
  ASSERT_TRUE(tracker
                  ->PredictBatchWithVariance(probe, absl::MakeSpan(&tracker_mean, 1),
                                             absl::MakeSpan(&tracker_variance, 1))
                  .ok());
  EXPECT_EQ(mean, tracker_mean);
  EXPECT_EQ(variance, tracker_variance);
  EXPECT_GT(variance, 0.0);
}

// A restored selection continues bit for bit, from every phase: before and after the
// default set is built, after a promotion and a retirement.
TEST(SelectTest, SnapshotsContinueExactly) {
  for (const ModelConfig& config : {Selection(), Outer(LossType::kSquared),
                                    Outer(LossType::kHinge), Outer(LossType::kHuber)}) {
    const Labels labels =
        IsClassificationLoss(config.loss.type) ? Labels::kClassification : Labels::kRegression;
    const Stream stream = MakeStream(labels, 1200, 5);
    std::unique_ptr<Model> model = MustCreate(config);
    ASSERT_NE(model, nullptr);
    size_t t = 0;
    for (const size_t cut : {0, 1, 31, 32, 33, 300, 900}) {
      for (; t < cut; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
      const ModelState state = model->ExportState();
      absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
      ASSERT_TRUE(restored.ok()) << "after " << cut << ": " << restored.status();
      ASSERT_TRUE((*restored)->ExportState() == state) << "after " << cut;
      for (size_t s = t; s < std::min(t + 150, stream.y.size()); ++s) {
        absl::StatusOr<Observation> a = model->Observe(stream.row(s), stream.y[s]);
        absl::StatusOr<Observation> b = (*restored)->Observe(stream.row(s), stream.y[s]);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->prediction, b->prediction) << "after " << cut << ", step " << s + 1;
        ASSERT_EQ(a->loss, b->loss);
      }
      ASSERT_TRUE(model->ExportState() == (*restored)->ExportState()) << "after " << cut;
      model = *std::move(restored);
      t = std::min(t + 150, stream.y.size());
    }
  }
}

TEST(SelectTest, DefaultSetWarmsUpThenScalesItsKernelsByTheMedianDistance) {
  const ModelConfig config = Outer(LossType::kSquared);
  std::unique_ptr<Model> model = MustCreate(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 200, 9);
  for (size_t t = 0; t < kScaleExamples; ++t) {
    absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->prediction, 0.0) << "a default set predicts 0 while it warms up";
    EXPECT_EQ(model->stats().candidates.empty(), t + 1 < kScaleExamples);
  }
  // The median of the 496 squared distances between the first 32 inputs (an upper median).
  std::vector<double> distances;
  for (size_t a = 0; a < kScaleExamples; ++a) {
    for (size_t b = a + 1; b < kScaleExamples; ++b) {
      double d2 = 0;
      for (size_t j = 0; j < kStreamDim; ++j) {
        d2 += std::pow(stream.row(a)[j] - stream.row(b)[j], 2);
      }
      distances.push_back(d2);
    }
  }
  std::sort(distances.begin(), distances.end());
  const double median = distances[distances.size() / 2];
  EXPECT_EQ(model->ExportState().input_scale, median);
  const ModelStats stats = model->stats();
  ASSERT_EQ(stats.candidates.size(), 8u);
  EXPECT_EQ(stats.candidates[0].config.kernel.gamma, 0.25 / median);
  EXPECT_EQ(stats.candidates[2].config.kernel.gamma, 1.0 / median);
  EXPECT_EQ(stats.candidates[4].config.kernel.gamma, 4.0 / median);
  EXPECT_TRUE(stats.candidates[0].config.krls_tracker_kind());
  for (const CandidateStats& candidate : stats.candidates) {
    // Every candidate learned the 32 warm-up examples.
    EXPECT_EQ(candidate.status, CandidateStatus::kLive);
    EXPECT_EQ(candidate.steps, kScaleExamples);
  }
  // After the warm-up the champion predicts: close to the target on this smooth stream.
  for (size_t t = kScaleExamples; t < 100; ++t) {
    ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  }
  double squared_error = 0;
  for (size_t t = 100; t < 200; ++t) {
    absl::StatusOr<Observation> o = model->Observe(stream.row(t), stream.y[t]);
    ASSERT_TRUE(o.ok());
    squared_error += std::pow(o->prediction - stream.y[t], 2);
  }
  double variance = 0, mean = 0;
  for (size_t t = 100; t < 200; ++t) mean += stream.y[t] / 100;
  for (size_t t = 100; t < 200; ++t) variance += std::pow(stream.y[t] - mean, 2);
  EXPECT_LT(squared_error, 0.5 * variance);
}

TEST(SelectTest, DefaultCandidatesAreValidAtAnyScale) {
  for (const LossType loss :
       {LossType::kSquared, LossType::kHinge, LossType::kLogistic, LossType::kHuber,
        LossType::kEpsilonInsensitive, LossType::kNovelty}) {
    for (const double scale : {0.0, 1e-300, 1e-3, 1.0, 1e300, std::nan("")}) {
      const std::vector<ModelConfig> candidates = DefaultCandidates(Outer(loss), scale);
      ASSERT_FALSE(candidates.empty());
      ModelConfig config = Outer(loss);
      config.select.candidates = candidates;
      EXPECT_TRUE(ValidateConfig(config).ok())
          << LossTypeName(loss) << " at " << scale << ": " << ValidateConfig(config);
    }
  }
  EXPECT_EQ(DefaultCandidates(Outer(LossType::kHinge), 1.0).size(), 8u);
}

TEST(SelectTest, InvalidConfigsNameTheField) {
  struct Case {
    const char* name;
    void (*mutate)(ModelConfig&);
    const char* message;
  };
  const Case cases[] = {
      {"outer kernel", [](ModelConfig& c) { c.kernel.gamma = 3; }, "kernel must be left unset"},
      {"outer budget", [](ModelConfig& c) { c.budget.max_terms = 3; }, "budget"},
      {"outer regret window", [](ModelConfig& c) { c.regret_window = 8; }, "regret_window"},
      {"too many live", [](ModelConfig& c) { c.select.live = 17; }, "select.live"},
      {"too many candidates",
       [](ModelConfig& c) { c.select.candidates.assign(65, Norma(0.1)); }, "at most 64"},
      {"candidate dim", [](ModelConfig& c) { c.select.candidates[1].dim = 2; },
       "select.candidates[1].dim"},
      {"candidate loss",
       [](ModelConfig& c) { c.select.candidates[0].loss.type = LossType::kHuber; },
       "select.candidates[0].loss"},
      {"nested select", [](ModelConfig& c) { c.select.candidates[2].select.enabled = true; },
       "cannot select"},
      {"invalid candidate", [](ModelConfig& c) { c.select.candidates[3].kernel.gamma = -1; },
       "select.candidates[3]: "},
      {"sparse candidate",
       [](ModelConfig& c) { c.select.candidates[0].sparse.max_nonzeros = 2; }, "dense storage"},
      {"select fields without select",
       [](ModelConfig& c) {
         c = Norma(0.1);
         c.select.live = 2;
       },
       "select.enabled is false"},
  };
  ASSERT_TRUE(ValidateConfig(Selection()).ok());
  for (const Case& c : cases) {
    ModelConfig config = Selection();
    c.mutate(config);
    const absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.name;
  }
}

// A candidate whose step diverges is retired and the others go on; a step that every
// live candidate refuses changes nothing.
TEST(SelectTest, DivergingCandidatesAreRetiredAndAllDivergingChangesNothing) {
  ModelConfig config = Outer(LossType::kSquared);
  ModelConfig wild = Norma(1.0);
  wild.lambda = 0;
  wild.kernel = {.type = KernelType::kLinear, .c = 0};
  wild.learning_rate.eta0 = 1e300;  // the first update with a non-zero x overflows
  config.select.candidates = {wild, Norma(0.5)};
  std::unique_ptr<Model> model = MustCreate(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 50, 3);
  for (size_t t = 0; t < 50; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  ModelStats stats = model->stats();
  EXPECT_EQ(stats.candidates[0].status, CandidateStatus::kRetired);
  EXPECT_EQ(stats.champion, 1u);
  EXPECT_EQ(stats.candidates[1].steps, 50u);

  config.select.candidates = {wild};
  model = MustCreate(config);
  ASSERT_NE(model, nullptr);
  const ModelState before = model->ExportState();
  const absl::StatusOr<Observation> refused = model->Observe(stream.row(0), 1e300);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("every live candidate diverged"));
  EXPECT_TRUE(model->ExportState() == before);
}

TEST(SelectTest, InconsistentStatesAreRefused) {
  std::unique_ptr<Model> model = MustCreate(Selection());
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 300, 2);
  for (size_t t = 0; t < 300; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  const ModelState good = model->ExportState();
  ASSERT_TRUE(ModelFromState(good).ok());
  struct Corruption {
    const char* name;
    void (*corrupt)(ModelState&);
    const char* message;
  };
  const Corruption corruptions[] = {
      {"a record missing", [](ModelState& s) { s.candidates.pop_back(); }, "records for"},
      {"a live state missing", [](ModelState& s) { s.candidate_states.pop_back(); },
       "fewer candidate states"},
      {"champion waiting", [](ModelState& s) { s.champion = 3; }, "champion"},
      {"a candidate state's steps", [](ModelState& s) { s.candidate_states[0].steps += 1; },
       "steps"},
      {"NaN sum", [](ModelState& s) { s.candidates[1].loss_sum = std::nan(""); }, "non-finite"},
      {"support beside", [](ModelState& s) { s.support = {1.0}; }, "another model kind"},
      {"warm-up examples", [](ModelState& s) { s.warmup_labels = {1.0}; }, "warm-up"},
      {"an input scale", [](ModelState& s) { s.input_scale = 2; }, "input_scale"},
      {"weight too large", [](ModelState& s) { s.candidates[1].weight = 5000; }, "weights"},

  };
  for (const Corruption& c : corruptions) {
    ModelState bad = good;
    c.corrupt(bad);
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(bad);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(restored.status().message(), HasSubstr(c.message)) << c.name;
  }
  // Another kind refuses a selection's fields.
  std::unique_ptr<Model> norma = MustCreate(Norma(0.1));
  ModelState state = norma->ExportState();
  state.champion_changes = 1;
  EXPECT_EQ(ModelFromState(state).status().code(), absl::StatusCode::kInvalidArgument);
}

// A candidate's state must be in the current layout: an averaged expansion without its
// previous block's sums (what format 1 lacked) would restore, and export otherwise.
TEST(SelectTest, ACandidateStateOfAnOlderLayoutIsRefused) {
  ModelConfig config = Outer(LossType::kSquared);
  ModelConfig averaged = Norma(0.3);
  averaged.averaged = true;
  averaged.averaging_window = 5;
  config.select.candidates = {averaged, Norma(0.5)};
  std::unique_ptr<Model> model = MustCreate(config);
  ASSERT_NE(model, nullptr);
  const Stream stream = MakeStream(Labels::kRegression, 40, 4);
  for (size_t t = 0; t < 40; ++t) ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
  ModelState state = model->ExportState();
  ASSERT_TRUE(ModelFromState(state).ok());
  ASSERT_FALSE(state.candidate_states[0].average_previous.empty());
  state.candidate_states[0].average_previous.clear();
  ASSERT_TRUE(ModelFromState(state.candidate_states[0]).ok()) << "a kind reads it as format 1";
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(restored.status().message(), HasSubstr("not in the current layout"));
}

TEST(SelectTest, WorstCasesCountTheLargestLiveCandidates) {
  const ModelConfig config = Selection();
  std::vector<size_t> bytes;
  for (const ModelConfig& c : config.select.candidates)
    bytes.push_back(WorstCaseMemoryBytes(c));
  std::sort(bytes.rbegin(), bytes.rend());
  EXPECT_GE(WorstCaseMemoryBytes(config), bytes[0] + bytes[1]);
  EXPECT_LT(WorstCaseMemoryBytes(config), bytes[0] + bytes[1] + bytes[2]);
  std::vector<double> work;
  for (const ModelConfig& c : config.select.candidates)
    work.push_back(WorstCaseWorkPerExample(c));
  std::sort(work.rbegin(), work.rend());
  EXPECT_EQ(WorstCaseWorkPerExample(config), work[0] + work[1]);
  // A model's memory never exceeds its worst case, default set included.
  for (const ModelConfig& c :
       {Selection(), Outer(LossType::kSquared), Outer(LossType::kHinge)}) {
    std::unique_ptr<Model> model = MustCreate(c);
    const Stream stream = MakeStream(
        IsClassificationLoss(c.loss.type) ? Labels::kClassification : Labels::kRegression, 400,
        1);
    for (size_t t = 0; t < 400; ++t) {
      ASSERT_TRUE(model->Observe(stream.row(t), stream.y[t]).ok());
      ASSERT_LE(model->MemoryBytes(), WorstCaseMemoryBytes(c)) << "after " << t + 1;
    }
  }
  // A wide default set warming up: its kept examples stay within the worst case too.
  ModelConfig wide = Outer(LossType::kHinge);
  wide.dim = 300;
  std::unique_ptr<Model> model = MustCreate(wide);
  ASSERT_NE(model, nullptr);
  std::vector<double> x(wide.dim);
  for (size_t t = 0; t < kScaleExamples + 2; ++t) {
    for (size_t j = 0; j < x.size(); ++j)
      x[j] = std::sin(0.37 * static_cast<double>(t * 31 + j));
    ASSERT_TRUE(model->Observe(x, t % 2 == 0 ? 1.0 : -1.0).ok());
    ASSERT_LE(model->MemoryBytes(), WorstCaseMemoryBytes(wide)) << "after " << t + 1;
  }
}

}  // namespace
}  // namespace okl
