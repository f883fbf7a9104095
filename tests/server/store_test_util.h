// tests/server/store_test_util.h: what the model store's tests share: a small model
// config, its validated batches, and a scratch directory named after the running test.
#ifndef OKL_TESTS_SERVER_STORE_TEST_UTIL_H_
#define OKL_TESTS_SERVER_STORE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/input_batch.h"
#include "core/model.h"
#include "gtest/gtest.h"

namespace okl {

// Gaussian kernel, squared loss, dim 2, a budget of `max_terms`.
inline ModelConfig SmallConfig(uint32_t max_terms = 32) {
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.2};
  config.lambda = 0.01;
  config.budget = {.max_terms = max_terms};
  return config;
}

// A batch for a log (a journal takes only validated batches), validated against
// `config`'s rules: its views hold xs and ys, so use it within the expression that made
// them, e.g. log->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).
inline ValidatedBatch Valid(const ModelConfig& config, const InputBatch& xs,
                            absl::Span<const double> ys) {
  absl::StatusOr<ValidatedBatch> batch = ValidatedBatch::Make(BatchRules::Of(config), xs, ys);
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}
inline ValidatedBatch Valid(const InputBatch& xs, absl::Span<const double> ys) {
  return Valid(SmallConfig(), xs, ys);
}

// An empty directory under the system's temporary one, named after `prefix`, this
// process and the running test (the caller removes it).
inline std::filesystem::path ScratchDirForTest(absl::string_view prefix) {
  // A parameterized test's name holds '/': one directory, not two.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrReplaceAll(
          absl::StrCat(prefix, "_", getpid(), "_",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name()),
          {{"/", "_"}});
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace okl

#endif  // OKL_TESTS_SERVER_STORE_TEST_UTIL_H_
