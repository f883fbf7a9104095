// NormaModel learns on real streams: the prequential (predict, then learn) error falls as
// the stream proceeds. Mackey-Glass (delay 30) is one-step-ahead regression on a time
// embedding; Adult ("a9a") is binary classification with 123 sparse binary features.
// The data sets are read in place from the checkout's data/ (see data/README.md).
//
// The thresholds were measured with the configurations below (which are deterministic:
// no randomness anywhere) and are asserted with a stated margin, so that a regression in
// learning fails while a harmless change in rounding does not.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/io/data_reader.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace okl {
namespace {

using ::okl::testing::DataPath;

// Mackey-Glass: row n = [s_n, ..., s_{n-6}], target s_{n+1}; 4,999 rows, values in
// [0.21, 1.39] with variance 0.079. Gaussian kernel, squared loss, a constant step and a
// small regulariser, no budget (every step adds a term: 4,999 terms, ~0.03 s).
// Why no budget: with lambda this small a term keeps 86% of its weight after 1,000 steps,
// so truncating to the newest 500-2,000 terms (OLDEST) throws away much of the function
// and the error no longer falls steadily (measured with gamma 1: last-1,000 MSE
// 0.0025-0.009; with an offset and a budget it even diverged).
TEST(NormaRealDataTest, MackeyGlassPrequentialSquaredErrorFalls) {
  absl::StatusOr<Dataset> data = ReadSeries(DataPath("mg30.dat"), 7);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->dim, 7u);
  ASSERT_EQ(data->size(), 4999u);

  ModelConfig config;
  config.dim = 7;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.0003;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();

  constexpr size_t kBlock = 1000;
  double first_sum = 0.0;
  double last_sum = 0.0;
  for (size_t i = 0; i < data->size(); ++i) {
    absl::StatusOr<Observation> o = (*model)->Observe(data->row(i), data->y[i]);
    ASSERT_TRUE(o.ok()) << "row " << i << ": " << o.status();
    const double error = o->prediction - data->y[i];
    if (i < kBlock) first_sum += error * error;
    if (i >= data->size() - kBlock) last_sum += error * error;
  }
  const double first_mse = first_sum / kBlock;
  const double last_mse = last_sum / kBlock;

  // Measured: MSE 0.01084 on the first 1,000 steps, 0.000518 on the last 1,000 (a ratio of
  // 20.9; -21.8 dB relative to the series' variance). Asserted with a margin of 2: the
  // error falls by at least 10x and ends below 0.001.
  EXPECT_LT(last_mse, first_mse / 10.0) << "first " << first_mse << ", last " << last_mse;
  EXPECT_LT(last_mse, 0.001) << "measured 0.000518";
}

// Adult: the first 20,000 rows of a9a_train, labels +-1 (24% positive, so always guessing
// -1 errs 24% of the time). Gaussian kernel, hinge loss, a constant step with an offset,
// an OLDEST budget of 500 terms (~0.2 s; ~6 s under ASan). (With a constant step and the
// hinge loss every term is born with |alpha| = eta, so SMALLEST removes the oldest term
// too.) A budget of 1,000 learns a little better (17.56% later) at twice the cost.
TEST(NormaRealDataTest, AdultPrequentialMistakeRateFalls) {
  absl::StatusOr<Dataset> data = ReadLibsvm(DataPath("a9a_train.txt"), 123);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->dim, 123u);
  ASSERT_EQ(data->size(), 32561u);

  ModelConfig config;
  config.dim = 123;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.1};
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  config.lambda = 0.0001;
  config.offset = true;
  config.budget = {.max_terms = 500, .policy = BudgetPolicy::kOldest};
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();

  constexpr size_t kRows = 20000;
  constexpr size_t kEarly = 2000;   // rows [0, kEarly)
  constexpr size_t kLater = 10000;  // rows [kLater, kRows)
  uint64_t early_mistakes = 0;
  uint64_t later_mistakes = 0;
  uint64_t all_mistakes = 0;
  for (size_t i = 0; i < kRows; ++i) {
    absl::StatusOr<Observation> o = (*model)->Observe(data->row(i), data->y[i]);
    ASSERT_TRUE(o.ok()) << "row " << i << ": " << o.status();
    if (o->prediction * data->y[i] <= 0.0) {
      ++all_mistakes;
      if (i < kEarly) ++early_mistakes;
      if (i >= kLater) ++later_mistakes;
    }
  }
  EXPECT_EQ((*model)->stats().mistakes, all_mistakes);
  const double early = static_cast<double>(early_mistakes) / kEarly;
  const double later = static_cast<double>(later_mistakes) / (kRows - kLater);

  // Measured: 20.75% mistakes on rows 1-2,000, 18.62% on rows 10,001-20,000 (published
  // one-pass NORMA test error on Adult: 16.35%). Asserted with margins of about half the
  // drop (2.1 points): the later rate is at least 1 point below the early one, and at
  // most 19.6%, 1 point above the measured rate.
  EXPECT_LT(later, early - 0.01) << "early " << early << ", later " << later;
  EXPECT_LT(later, 0.196) << "measured 0.1862";
}

// Test accuracy on a9a_test after one pass over all of a9a_train (sign(f(x)) = y; 0 is a
// mistake), of each hypothesis in `modes`.
std::vector<double> A9aTestAccuracies(const ModelConfig& config,
                                      const std::vector<PredictionMode>& modes) {
  absl::StatusOr<Dataset> train = ReadLibsvm(DataPath("a9a_train.txt"), 123);
  absl::StatusOr<Dataset> test = ReadLibsvm(DataPath("a9a_test.txt"), 123);
  EXPECT_TRUE(train.ok() && test.ok());
  std::vector<double> accuracies(modes.size(), 0.0);
  if (!train.ok() || !test.ok()) return accuracies;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return accuracies;
  std::vector<Observation> observations;
  const absl::Status observed = (*model)->ObserveBatch(train->x, train->y, &observations);
  EXPECT_TRUE(observed.ok()) << observed;
  EXPECT_LE((*model)->expansion_size(), config.budget.max_terms);
  std::vector<double> predictions(test->size());
  for (size_t m = 0; m < modes.size(); ++m) {
    EXPECT_TRUE((*model)->PredictBatch(test->x, absl::MakeSpan(predictions), modes[m]).ok());
    size_t correct = 0;
    for (size_t i = 0; i < test->size(); ++i) correct += predictions[i] * test->y[i] > 0;
    accuracies[m] = static_cast<double>(correct) / static_cast<double>(test->size());
  }
  return accuracies;
}

double A9aTestAccuracy(const ModelConfig& config) {
  return A9aTestAccuracies(config, {PredictionMode::kConfigured})[0];
}

// The budgeted learners of Wang, Crammer and Vucetic (JMLR 13, 2012, Table 3) at 100
// terms: client/examples/a9a_pegasos_merge.textproto and a9a_merge.textproto (~0.5 s each;
// ~10 s under ASan). Measured: Pegasos steps with MERGE 84.94% (published BPegasos with
// merging: 84.55%); NORMA with MERGE 83.67% against 80.64% with OLDEST at the same
// budget. Asserted: Pegasos + MERGE at least 84.6% (0.3 points below the measured
// figure), and merging at least 2 points ahead of OLDEST for NORMA.
TEST(NormaRealDataTest, AdultTestAccuracyWithMergingAt100Terms) {
  ModelConfig pegasos;
  pegasos.dim = 123;
  pegasos.kernel = {.type = KernelType::kGaussian, .gamma = 0.05};
  pegasos.loss = {.type = LossType::kHinge, .rho = 1.0};
  pegasos.lambda = 0.0003;
  pegasos.learning_rate = {
      .schedule = Schedule::kPower, .eta0 = 1 / pegasos.lambda, .theta = 1.0};
  pegasos.budget = {.max_terms = 100, .policy = BudgetPolicy::kMerge};
  EXPECT_GE(A9aTestAccuracy(pegasos), 0.846) << "measured 0.8494";

  ModelConfig norma;
  norma.dim = 123;
  norma.kernel = {.type = KernelType::kGaussian, .gamma = 0.1};
  norma.loss = {.type = LossType::kHinge, .rho = 1.0};
  norma.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  norma.lambda = 0.001;
  norma.budget = {.max_terms = 100, .policy = BudgetPolicy::kMerge};
  const double merged = A9aTestAccuracy(norma);
  norma.budget.policy = BudgetPolicy::kOldest;
  const double oldest = A9aTestAccuracy(norma);
  EXPECT_GT(merged, oldest + 0.02) << "measured 0.8367 against 0.8064";
}

// The averaged hypothesis on a budget (suffix averaging over blocks of max_terms steps)
// against the current model, for client/examples/a9a.textproto (1,000 terms, OLDEST;
// ~1 s). Measured: averaged 84.25%, current 83.39%.
TEST(NormaRealDataTest, AdultAveragedHypothesisOnABudgetBeatsTheCurrentModel) {
  ModelConfig config;
  config.dim = 123;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.1};
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.001;
  config.budget = {.max_terms = 1000, .policy = BudgetPolicy::kOldest};
  config.averaged = true;
  const std::vector<double> accuracy =
      A9aTestAccuracies(config, {PredictionMode::kAveraged, PredictionMode::kCurrent});
  EXPECT_GE(accuracy[0], accuracy[1] + 0.004) << "measured 0.8425 against 0.8339";
}

}  // namespace
}  // namespace okl
