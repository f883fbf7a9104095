// RandomFeatureModel on real data: one pass over Adult (a9a), then its test accuracy.
// The data sets are read in place from the checkout's data/ (see data/README.md).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/io/data_reader.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace okl {
namespace {

using ::okl::testing::DataPath;

// One pass over a9a_train (32,561 rows, dim 123, sparse binary), then the test accuracy
// on a9a_test (16,281 rows). Pegasos steps (POWER, theta 1, eta0 = 1 / lambda) on 1,000
// gaussian random features, ~0.1 s. Measured 84.93% (seeds 1-8: 84.81-85.03%; the
// budgeted kernel learners of tests/real_data/norma_real_data_test.cc reach 84.94% with 100
// merged terms). Asserted: at least 84.4%, 0.5 points below the measured figure and 0.4
// below the worst seed.
TEST(RandomFeatureRealDataTest, AdultTestAccuracyAfterOnePass) {
  absl::StatusOr<Dataset> train = ReadLibsvm(DataPath("a9a_train.txt"), 123);
  absl::StatusOr<Dataset> test = ReadLibsvm(DataPath("a9a_test.txt"), 123);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  ASSERT_EQ(train->size(), 32561u);

  ModelConfig config;
  config.dim = 123;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.05};
  config.loss = {.type = LossType::kHinge, .rho = 1.0};
  config.lambda = 0.0003;
  config.learning_rate = {
      .schedule = Schedule::kPower, .eta0 = 1 / config.lambda, .theta = 1.0};
  config.random_features = {.dimension = 1000, .seed = 1};
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();

  std::vector<Observation> observations;
  ASSERT_TRUE((*model)->ObserveBatch(train->x, train->y, &observations).ok());
  std::vector<double> predictions(test->size());
  ASSERT_TRUE((*model)->PredictBatch(test->x, absl::MakeSpan(predictions)).ok());
  size_t correct = 0;
  for (size_t i = 0; i < test->size(); ++i) correct += predictions[i] * test->y[i] > 0;
  const double accuracy = static_cast<double>(correct) / static_cast<double>(test->size());
  EXPECT_GE(accuracy, 0.844) << "measured 0.8493";
}

}  // namespace
}  // namespace okl
