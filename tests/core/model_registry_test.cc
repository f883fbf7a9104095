#include "core/runtime/model_registry.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/test_model_key.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

ModelConfig SmallConfig() {
  ModelConfig config;
  config.dim = 2;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.2};
  config.lambda = 0.01;
  config.budget = {.max_terms = 32};
  return config;
}

TEST(ValidateNameTest, AcceptsTheDocumentedAlphabetUpTo64Characters) {
  EXPECT_TRUE(ValidateName("tenant", "a").ok());
  EXPECT_TRUE(ValidateName("tenant", "Acme-Corp_1.prod").ok());
  EXPECT_TRUE(ValidateName("model", std::string(64, 'x')).ok());
}

TEST(ValidateNameTest, RejectsEmptyLongAndForeignCharacters) {
  for (const std::string& bad :
       {std::string(), std::string(65, 'x'), std::string("a b"), std::string("a/b"),
        std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
    absl::Status status = ValidateName("model", bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("model name"));
  }
}

TEST(ModelKeyTest, MakeChecksBothNames) {
  absl::StatusOr<ModelKey> id = ModelKey::Make("acme", "churn");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->tenant(), "acme");
  EXPECT_EQ(id->model(), "churn");
  EXPECT_EQ(id->Describe(), "model \"churn\" of tenant \"acme\"");
  EXPECT_EQ(*id, TestKey("acme", "churn"));
  EXPECT_NE(*id, TestKey("acme", "churn2"));
  absl::Status bad_model = ModelKey::Make("t", "bad name").status();
  EXPECT_EQ(bad_model.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_model.message(), HasSubstr("model name \"bad name\""));
  absl::Status bad_tenant = ModelKey::Make("", "m").status();
  EXPECT_EQ(bad_tenant.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_tenant.message(), HasSubstr("tenant name"));
}

TEST(ModelRegistryTest, CreateFindListDelete) {
  ModelRegistry registry({.max_models = 10});
  ASSERT_TRUE(registry.Create(TestKey("t1", "b"), SmallConfig()).ok());
  ASSERT_TRUE(registry.Create(TestKey("t1", "a"), SmallConfig()).ok());
  ASSERT_TRUE(registry.Create(TestKey("t2", "a"), SmallConfig()).ok());
  EXPECT_EQ(registry.size(), 3u);

  absl::StatusOr<std::shared_ptr<ModelEntry>> found = registry.Find(TestKey("t1", "b"));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->model(), "b");

  std::vector<std::shared_ptr<ModelEntry>> t1 = registry.List("t1");
  ASSERT_EQ(t1.size(), 2u);
  EXPECT_EQ(t1[0]->model(), "a");  // sorted
  EXPECT_EQ(t1[1]->model(), "b");
  EXPECT_EQ(registry.List("").size(), 3u);

  ASSERT_TRUE(registry.Delete(TestKey("t1", "a")).ok());
  EXPECT_EQ(registry.Find(TestKey("t1", "a")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Delete(TestKey("t1", "a")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.size(), 2u);
}

// Counts the batches an entry logs.
class CountingJournal : public ModelJournal {
 public:
  absl::Status Append(const ValidatedBatch& batch, const JournalNote*) override {
    ++batches;
    examples += batch.size();
    class_labels.insert(class_labels.end(), batch.class_labels().begin(),
                        batch.class_labels().end());
    return absl::OkStatus();
  }
  int batches = 0;
  size_t examples = 0;
  std::vector<std::string> class_labels;  // every logged batch's, in order
};

// A batch is validated once, against the entry it is meant for; handed to another entry
// whose config differs (as a Restore may install one meanwhile), it is checked again
// there, and the entry's journal never sees a batch its model would refuse.
TEST(ModelEntryTest, ABatchValidatedForAnotherConfigIsCheckedAgainBeforeItIsLogged) {
  ModelConfig classify = SmallConfig();
  classify.loss = {.type = LossType::kHinge};
  auto journal = std::make_shared<CountingJournal>();
  auto regress = std::make_shared<ModelEntry>("t", "regress", *CreateModel(SmallConfig()));
  auto classifier =
      std::make_shared<ModelEntry>("t", "classify", *CreateModel(classify), journal);
  const std::vector<double> xs = {0.5, -0.5, 1, 2};
  const std::vector<double> ys = {0.25, 1};  // a regression's labels; a hinge takes -1 or +1
  absl::StatusOr<ValidatedBatch> batch = regress->Validate(InputBatch::Dense(xs, 2), ys);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size(), 2u);
  EXPECT_EQ(classifier->Validate(InputBatch::Dense(xs, 2), ys).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<Observation> out;
  const absl::Status refused = classifier->ObserveBatch(*batch, &out);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("example 0"));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(journal->batches, 0);
  EXPECT_EQ(classifier->Summary()->stats.steps, 0u);

  // Its own entry applies it, and a part of it (Subrange) as validly.
  ASSERT_TRUE(regress->ObserveBatch(batch->Subrange(1, 1), &out).ok());
  ASSERT_TRUE(regress->ObserveBatch(batch->Subrange(0, 1), &out).ok());
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(regress->Summary()->stats.steps, 2u);
  // A batch of -1/+1 labels passes both rules, and the classifier logs it once.
  const std::vector<double> signs = {-1, 1};
  absl::StatusOr<ValidatedBatch> both = regress->Validate(InputBatch::Dense(xs, 2), signs);
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE(classifier->ObserveBatch(*both, &out).ok());
  EXPECT_EQ(journal->batches, 1);
  EXPECT_EQ(journal->examples, 2u);
  EXPECT_EQ(classifier->Summary()->stats.steps, 2u);
}

// A multi-class batch reaches the journal with its class labels; one whose new classes
// would take the model past max_classes is refused whole before it is logged, so that a
// replay of the journal never meets a batch the model refused.
TEST(ModelEntryTest, AMulticlassBatchIsLoggedWithItsClassesAndOnePastMaxClassesIsNot) {
  ModelConfig config = SmallConfig();
  config.loss = {.type = LossType::kMulticlassHinge};
  config.max_classes = 3;
  auto journal = std::make_shared<CountingJournal>();
  auto entry = std::make_shared<ModelEntry>("t", "classes", *CreateModel(config), journal);
  const std::vector<double> xs = {0.5, -0.5, 1, 2, -1, 0};
  const std::vector<double> ys(3, 0.0);
  const std::vector<std::string> labels = {"cat", "dog", "cat"};
  std::vector<Observation> out;
  ASSERT_TRUE(entry->ObserveBatch(*entry->Validate(InputBatch::Dense(xs, 2), ys, labels), &out)
                  .ok());
  EXPECT_EQ(journal->class_labels, labels);
  EXPECT_EQ(out.size(), 3u);

  // "owl" fits (3 of 3), "owl" and "emu" do not: the batch is refused, logged never.
  const std::vector<std::string> two_new = {"owl", "emu", "cat"};
  absl::StatusOr<ValidatedBatch> batch = entry->Validate(InputBatch::Dense(xs, 2), ys, two_new);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const absl::Status refused = entry->ObserveBatch(*batch, &out);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("max_classes 3"));
  EXPECT_EQ(journal->batches, 1);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(entry->Summary()->stats.steps, 3u);

  // A batch without class labels, or with a y, is refused where it is validated.
  EXPECT_EQ(entry->Validate(InputBatch::Dense(xs, 2), ys).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<double> signs = {1, -1, 1};
  EXPECT_THAT(entry->Validate(InputBatch::Dense(xs, 2), signs, labels).status().message(),
              HasSubstr("leaves y 0"));
}

// n inputs of dim 2 on a small grid, and the same trained entry for each PredictAll test.
std::vector<double> GridInputs(size_t n) {
  std::vector<double> xs(2 * n);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.01 * static_cast<double>(i % 97) - 0.4;
  return xs;
}

std::shared_ptr<ModelEntry> TrainedEntry(const ModelConfig& config) {
  auto entry = std::make_shared<ModelEntry>("t", "m", *CreateModel(config));
  const std::vector<double> xs = GridInputs(40);
  std::vector<double> ys(40);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = i % 3 == 0 ? 1.0 : -1.0;
  std::vector<Observation> out;
  EXPECT_TRUE(entry->ObserveBatch(xs, ys, &out).ok());
  return entry;
}

// PredictAll answers what PredictBatch answers input by input, in chunks of 256 with
// `before_chunk` between them; an error from it ends the call with that error.
TEST(ModelEntryTest, PredictAllIsPredictBatchInChunksOf256) {
  const std::shared_ptr<ModelEntry> entry = TrainedEntry(SmallConfig());
  const std::vector<double> xs = GridInputs(600);
  std::vector<size_t> calls;
  absl::StatusOr<BatchPrediction> answer =
      entry->PredictAll(InputBatch::Dense(xs, 2), [&](size_t predicted) {
        calls.push_back(predicted);
        return absl::OkStatus();
      });
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(calls, (std::vector<size_t>{256, 512}));
  std::vector<double> plain(600);
  ASSERT_TRUE(entry->PredictBatch(xs, absl::MakeSpan(plain)).ok());
  EXPECT_EQ(answer->predictions, plain);
  EXPECT_TRUE(answer->variances.empty());
  EXPECT_TRUE(answer->novel.empty());

  const absl::StatusOr<BatchPrediction> cancelled =
      entry->PredictAll(InputBatch::Dense(xs, 2), [](size_t predicted) {
        return predicted < 512 ? absl::OkStatus() : absl::CancelledError("stop");
      });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  // A dense batch that is not whole inputs is refused.
  EXPECT_EQ(entry->PredictAll(InputBatch::Dense(absl::MakeConstSpan(xs).first(5), 2))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  entry->MarkDeleted();
  EXPECT_EQ(entry->PredictAll(InputBatch::Dense(xs, 2)).status().code(),
            absl::StatusCode::kNotFound);
}

// For the novelty loss each input is flagged f(x) < rho; a tracker adds its variances.
TEST(ModelEntryTest, PredictAllAddsNoveltyFlagsAndATrackersVariances) {
  ModelConfig novelty = SmallConfig();
  novelty.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.2};
  const std::shared_ptr<ModelEntry> detector = TrainedEntry(novelty);
  const std::vector<double> xs = GridInputs(300);
  absl::StatusOr<BatchPrediction> flagged = detector->PredictAll(InputBatch::Dense(xs, 2));
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  ASSERT_EQ(flagged->novel.size(), 300u);
  const double rho = detector->Summary()->stats.margin;
  size_t novel = 0;
  for (size_t i = 0; i < 300; ++i) {
    EXPECT_EQ(flagged->novel[i], flagged->predictions[i] < rho) << i;
    novel += flagged->novel[i];
  }
  EXPECT_GT(novel, 0u);
  EXPECT_LT(novel, 300u);

  ModelConfig tracker = SmallConfig();
  tracker.budget = {};
  tracker.learning_rate = {};
  tracker.lambda = 0;
  tracker.krls_tracker = {.max_basis = 16, .noise_variance = 1e-2, .forgetting = 1.0};
  const std::shared_ptr<ModelEntry> gp = TrainedEntry(tracker);
  absl::StatusOr<BatchPrediction> answer = gp->PredictAll(InputBatch::Dense(xs, 2));
  ASSERT_TRUE(answer.ok()) << answer.status();
  std::vector<double> means(300), variances(300);
  ASSERT_TRUE(gp->PredictBatchWithVariance(InputBatch::Dense(xs, 2), absl::MakeSpan(means),
                                           absl::MakeSpan(variances))
                  .ok());
  EXPECT_EQ(answer->predictions, means);
  EXPECT_EQ(answer->variances, variances);
  EXPECT_TRUE(answer->novel.empty());
}

TEST(ModelRegistryTest, CreateRejectsDuplicatesFullRegistryAndBadConfigs) {
  ModelRegistry registry({.max_models = 1});
  ASSERT_TRUE(registry.Create(TestKey("t", "m"), SmallConfig()).ok());
  EXPECT_EQ(registry.Create(TestKey("t", "m"), SmallConfig()).status().code(),
            absl::StatusCode::kAlreadyExists);
  absl::Status full = registry.Create(TestKey("t", "other"), SmallConfig()).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("max_models"));
  ModelConfig bad = SmallConfig();
  bad.kernel.gamma = -1;
  ASSERT_TRUE(registry.Delete(TestKey("t", "m")).ok());
  EXPECT_EQ(registry.Create(TestKey("t", "m"), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.size(), 0u);
}

TEST(ModelRegistryTest, EntryObservesAndPredictsLikeThePlainModel) {
  ModelRegistry registry({});
  auto entry = registry.Create(TestKey("t", "m"), SmallConfig());
  ASSERT_TRUE(entry.ok());
  auto plain = CreateModel(SmallConfig());
  ASSERT_TRUE(plain.ok());

  const std::vector<double> xs = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6};
  const std::vector<double> ys = {1.0, -0.5, 0.25};
  std::vector<Observation> via_entry, via_plain;
  ASSERT_TRUE((*entry)->ObserveBatch(xs, ys, &via_entry).ok());
  ASSERT_TRUE((*plain)->ObserveBatch(xs, ys, &via_plain).ok());
  ASSERT_EQ(via_entry.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(via_entry[i].prediction, via_plain[i].prediction);
  }
  std::vector<double> out(3), expected(3);
  ASSERT_TRUE((*entry)->PredictBatch(xs, absl::MakeSpan(out)).ok());
  ASSERT_TRUE((*plain)->PredictBatch(xs, absl::MakeSpan(expected)).ok());
  EXPECT_EQ(out, expected);

  absl::StatusOr<ModelSummary> summary = (*entry)->Summary();
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->stats.steps, 3u);
  EXPECT_EQ(summary->config, SmallConfig());
}

TEST(ModelRegistryTest, DeletedEntryRefusesWorkHeldByInFlightRequests) {
  ModelRegistry registry({});
  auto entry = registry.Create(TestKey("t", "m"), SmallConfig());
  ASSERT_TRUE(entry.ok());
  std::shared_ptr<ModelEntry> held = *entry;  // as a request in flight holds it
  ASSERT_TRUE(registry.Delete(TestKey("t", "m")).ok());
  std::vector<Observation> out;
  EXPECT_EQ(held->ObserveBatch({0.0, 0.0}, {1.0}, &out).code(),
            absl::StatusCode::kNotFound);
  std::vector<double> p(1);
  EXPECT_EQ(held->PredictBatch({0.0, 0.0}, absl::MakeSpan(p)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(out.empty());
}

TEST(ModelRegistryTest, PutReplacesAtomicallyAndRetiresTheOldEntry) {
  ModelRegistry registry({.max_models = 1});
  auto old_entry = registry.Create(TestKey("t", "m"), SmallConfig());
  ASSERT_TRUE(old_entry.ok());
  std::vector<Observation> out;
  ASSERT_TRUE((*old_entry)->ObserveBatch({0.5, 0.5}, {1.0}, &out).ok());

  auto fresh = CreateModel(SmallConfig());
  ASSERT_TRUE(fresh.ok());
  auto put =
      registry.Put(TestKey("t", "m"), std::move(*fresh));  // replacing needs no free slot
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*registry.Find(TestKey("t", "m")))->Summary()->stats.steps, 0u);
  EXPECT_EQ((*old_entry)->Summary().status().code(), absl::StatusCode::kNotFound);

  auto another = CreateModel(SmallConfig());
  ASSERT_TRUE(another.ok());
  EXPECT_EQ(registry.Put(TestKey("t", "n"), std::move(*another)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Many threads observe and predict on shared and separate models while others create
// and delete. Run under ThreadSanitizer in CI; here it also checks that each shared
// model saw exactly the examples acknowledged to its writers.
TEST(ModelRegistryTest, ConcurrentObservePredictCreateDelete) {
  ModelRegistry registry({.max_models = 100});
  ASSERT_TRUE(registry.Create(TestKey("t", "shared"), SmallConfig()).ok());
  constexpr int kWriters = 4;
  constexpr int kReaders = 4;
  constexpr int kStepsPerWriter = 300;
  std::atomic<int> acknowledged{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;

  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      const std::string own = absl::StrCat("own", w);
      if (!registry.Create(TestKey("t", own), SmallConfig()).ok()) failed = true;
      for (int i = 0; i < kStepsPerWriter; ++i) {
        const std::vector<double> x = {0.01 * i, -0.02 * w};
        std::vector<Observation> out;
        auto shared = registry.Find(TestKey("t", "shared"));
        if (!shared.ok() || !(*shared)->ObserveBatch(x, {0.5}, &out).ok()) {
          failed = true;
        } else {
          ++acknowledged;
        }
        auto mine = registry.Find(TestKey("t", own));
        if (!mine.ok() || !(*mine)->ObserveBatch(x, {-0.5}, &out).ok()) failed = true;
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      std::vector<double> p(1);
      for (int i = 0; i < 2 * kStepsPerWriter; ++i) {
        auto shared = registry.Find(TestKey("t", "shared"));
        if (!shared.ok() || !(*shared)->PredictBatch({0.1, 0.1}, absl::MakeSpan(p)).ok()) {
          failed = true;
        }
      }
    });
  }
  threads.emplace_back([&] {  // churn: create and delete short-lived models
    for (int i = 0; i < 200; ++i) {
      const std::string name = absl::StrCat("temp", i % 5);
      (void)registry.Create(TestKey("t", name), SmallConfig());
      if (auto e = registry.Find(TestKey("t", name)); e.ok()) {
        std::vector<Observation> out;
        (void)(*e)->ObserveBatch({0.0, 0.0}, {1.0}, &out);  // may race with Delete
      }
      (void)registry.Delete(TestKey("t", name));
    }
  });
  for (std::thread& t : threads) t.join();

  EXPECT_FALSE(failed);
  auto shared = registry.Find(TestKey("t", "shared"));
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ((*shared)->Summary()->stats.steps, static_cast<uint64_t>(acknowledged.load()));
  EXPECT_EQ(acknowledged.load(), kWriters * kStepsPerWriter);
  for (int w = 0; w < kWriters; ++w) {
    auto own = registry.Find(TestKey("t", absl::StrCat("own", w)));
    ASSERT_TRUE(own.ok());
    EXPECT_EQ((*own)->Summary()->stats.steps, static_cast<uint64_t>(kStepsPerWriter));
  }
}

}  // namespace
}  // namespace okl
