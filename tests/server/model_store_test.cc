// tests/server/model_store_test.cc
//
// ModelStore against a real RocksDB in a temporary directory: round trips, the atomic
// checkpoint, deletion, Restore's replacement, corruption reported with the model's
// name, and RestoreModels' bit-identical replay.

#include "server/model_store.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"

namespace okl {
namespace {

using ::testing::ElementsAre;
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

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("okl_model_store_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ModelStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<ModelStore>> store = ModelStore::Open(dir_.string(), {});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Every model LoadModels returns, and "tenant/model: what" per damaged one.
  struct Loaded {
    std::vector<StoredModel> models;
    std::vector<std::string> damaged;
  };
  Loaded Load(ModelStore* store) {
    Loaded loaded;
    absl::Status status = store->LoadModels(
        [&](StoredModel model) {
          loaded.models.push_back(std::move(model));
          return absl::OkStatus();
        },
        [&](absl::string_view tenant, absl::string_view model, absl::string_view what) {
          loaded.damaged.push_back(absl::StrCat(tenant, "/", model, ": ", what));
          return absl::OkStatus();
        });
    EXPECT_TRUE(status.ok()) << status;
    return loaded;
  }

  // Writes `value` under `key` with RocksDB directly, the store closed.
  void RawPut(const std::string& key, const std::string& value) {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.string(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
    delete db;
  }

  std::filesystem::path dir_;
};

TEST_F(ModelStoreTest, ConfigAndLoggedBatchesSurviveReopenInOrder) {
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).ok());
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({3, 4, 5, 6}, 2), {1.5, -2}).ok());
    EXPECT_EQ((*log)->position().seq, 2u);
    EXPECT_EQ((*log)->position().examples, 3u);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  EXPECT_TRUE(loaded.damaged.empty());
  ASSERT_EQ(loaded.models.size(), 1u);
  const StoredModel& model = loaded.models[0];
  EXPECT_EQ(model.tenant, "acme");
  EXPECT_EQ(model.model, "churn");
  EXPECT_EQ(model.config, SmallConfig());
  EXPECT_FALSE(model.checkpoint.has_value());
  ASSERT_EQ(model.log.size(), 2u);
  EXPECT_EQ(model.log[0].seq, 1u);
  EXPECT_THAT(model.log[0].xs, ElementsAre(1, 2));
  EXPECT_THAT(model.log[1].xs, ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(model.log[1].ys, ElementsAre(1.5, -2));
  // The reopened log continues after the last record.
  auto log = store->OpenLog(model);
  EXPECT_EQ(log->position().seq, 2u);
}

// A model with sparse storage logs its batches as rows of non-zeros, whatever its dim,
// and reads them back exactly; a dense batch in the same log stays dense.
TEST_F(ModelStoreTest, SparseBatchesSurviveReopenAsRows) {
  ModelConfig config = SmallConfig();
  config.dim = 1u << 24;
  config.sparse.max_nonzeros = 4;
  SparseRows rows;
  const std::vector<uint32_t> i0 = {0, (1u << 24) - 1}, i1 = {}, i2 = {5, 6, 7};
  const std::vector<double> v0 = {1.5, -2}, v1 = {}, v2 = {0.25, 0.5, 0.75};
  rows.Append({i0, v0});
  rows.Append({i1, v1});
  rows.Append({i2, v2});
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "text", config);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(InputBatch::Sparse(rows), {1, -1, 1}).ok());
    EXPECT_EQ((*log)->position().examples, 3u);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  EXPECT_TRUE(loaded.damaged.empty());
  ASSERT_EQ(loaded.models.size(), 1u);
  ASSERT_EQ(loaded.models[0].log.size(), 1u);
  const StoredModel::Batch& batch = loaded.models[0].log[0];
  EXPECT_TRUE(batch.sparse);
  EXPECT_TRUE(batch.xs.empty());
  EXPECT_EQ(batch.sparse_xs, rows);
  EXPECT_THAT(batch.ys, ElementsAre(1, -1, 1));
  EXPECT_EQ(loaded.models[0].config, config);
}

TEST_F(ModelStoreTest, CheckpointReplacesTheLogUpToItsSequenceAtomically) {
  auto norma = CreateModel(SmallConfig());
  ASSERT_TRUE(norma.ok());
  std::vector<Observation> out;
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).ok());
    ASSERT_TRUE((*norma)->ObserveBatch({1, 2}, {0.5}, &out).ok());
    const ModelLog::Position at = (*log)->position();
    const ModelState state = (*norma)->ExportState();
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({3, 4}, 2), {1.0}).ok());  // after the exported state
    ASSERT_TRUE((*log)->Checkpoint(state, at).ok());
    EXPECT_TRUE((*log)->HasLog());
    // An older checkpoint never overwrites a newer one.
    ASSERT_TRUE((*log)->Checkpoint(ModelState(), {.seq = 0}).ok());
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 1u);
  const StoredModel& model = loaded.models[0];
  ASSERT_TRUE(model.checkpoint.has_value());
  EXPECT_EQ(model.checkpoint_seq, 1u);
  EXPECT_EQ(*model.checkpoint, (*norma)->ExportState());
  ASSERT_EQ(model.log.size(), 1u);
  EXPECT_EQ(model.log[0].seq, 2u);
  EXPECT_THAT(model.log[0].xs, ElementsAre(3, 4));
}

TEST_F(ModelStoreTest, DeletedModelDoesNotComeBackAndARecreatedOneStartsEmpty) {
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).ok());
    ASSERT_TRUE(store->DeleteModel(log->get()).ok());
    EXPECT_EQ((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).code(), absl::StatusCode::kNotFound);
    auto other = store->CreateModel("acme", "other", SmallConfig());
    ASSERT_TRUE(other.ok());
  }
  {
    auto store = OpenStore();
    Loaded loaded = Load(store.get());
    ASSERT_EQ(loaded.models.size(), 1u);
    EXPECT_EQ(loaded.models[0].model, "other");
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok());
    EXPECT_GT((*log)->incarnation(), loaded.models[0].incarnation);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 2u);
  EXPECT_EQ(loaded.models[0].model, "churn");
  EXPECT_TRUE(loaded.models[0].log.empty());
}

TEST_F(ModelStoreTest, ReplaceModelInstallsTheCheckpointAndDropsTheOldLog) {
  auto norma = CreateModel(SmallConfig());
  std::vector<Observation> out;
  ASSERT_TRUE((*norma)->ObserveBatch({1, 2, 3, 4}, {1, -1}, &out).ok());
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({9, 9}, 2), {9}).ok());
    auto replaced = store->ReplaceModel("acme", "churn", (*norma)->ExportState(), log->get());
    ASSERT_TRUE(replaced.ok()) << replaced.status();
    EXPECT_EQ((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).code(), absl::StatusCode::kNotFound);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 1u);
  ASSERT_TRUE(loaded.models[0].checkpoint.has_value());
  EXPECT_EQ(*loaded.models[0].checkpoint, (*norma)->ExportState());
  EXPECT_TRUE(loaded.models[0].log.empty());
}

TEST_F(ModelStoreTest, RestoreModelsReplaysBitIdenticallyThroughCheckpointAndLog) {
  ModelConfig config = SmallConfig();
  config.budget.max_terms = 8;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  ModelState live;
  {
    auto store = OpenStore();
    ModelRegistry registry({});
    absl::StatusOr<std::shared_ptr<ModelLog>> log = store->CreateModel("acme", "churn", config);
    ASSERT_TRUE(log.ok()) << log.status();
    auto entry = registry.Create("acme", "churn", config, *log);
    ASSERT_TRUE(entry.ok());
    std::vector<Observation> out;
    for (int batch = 0; batch < 20; ++batch) {
      std::vector<double> xs(2 * 5), ys(5);
      for (double& x : xs) x = normal(rng);
      for (double& y : ys) y = normal(rng);
      ASSERT_TRUE((*entry)->ObserveBatch(xs, ys, &out).ok());
      if (batch == 11) {
        ASSERT_TRUE(CheckpointEntry(**entry, log->get()).ok());
      }
    }
    // An invalid batch is neither logged nor applied.
    EXPECT_EQ((*entry)->ObserveBatch({1, NAN}, {1}, &out).code(),
              absl::StatusCode::kInvalidArgument);
    live = *(*entry)->ExportState();
  }
  auto store = OpenStore();
  ModelRegistry registry({});
  auto stats = RestoreModels(store.get(), &registry, {});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->models, 1u);
  EXPECT_EQ(stats->log_batches, 8u);
  EXPECT_EQ(stats->log_examples, 40u);
  auto entry = registry.Find("acme", "churn");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(*(*entry)->ExportState(), live);
  // The restored model logs on after its last record.
  std::vector<Observation> out;
  ASSERT_TRUE((*entry)->ObserveBatch({0.1, 0.2}, {1}, &out).ok());
  auto* log = dynamic_cast<ModelLog*>((*entry)->journal().get());
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->position().seq, 21u);
}

TEST_F(ModelStoreTest, CorruptRecordsAreReportedWithTheModelsName) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->CreateModel("acme", "good", SmallConfig()).ok());
    auto log = store->CreateModel("acme", "bad_log", SmallConfig());
    ASSERT_TRUE((*log)->Append(InputBatch::Dense({1, 2}, 2), {0.5}).ok());
    ASSERT_TRUE(store->CreateModel("acme", "bad_config", SmallConfig()).ok());
  }
  RawPut("m/acme/bad_config", "garbage that is long enough");
  // The log record of incarnation 2 ("bad_log"), cut short.
  RawPut("i/0000000000000002/l/0000000000000001", std::string(12, 'x'));
  {
    auto store = OpenStore();
    Loaded loaded = Load(store.get());
    ASSERT_EQ(loaded.models.size(), 1u);
    EXPECT_EQ(loaded.models[0].model, "good");
    ASSERT_EQ(loaded.damaged.size(), 2u);
    EXPECT_THAT(loaded.damaged[0], HasSubstr("acme/bad_config: config record fails"));
    EXPECT_THAT(loaded.damaged[1], HasSubstr("acme/bad_log: log record 1 has 12 bytes"));
  }
  auto store = OpenStore();
  ModelRegistry registry({});
  auto refused = RestoreModels(store.get(), &registry, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("model acme/bad_config is damaged: config record fails its checksum; "
                        "refusing to start (--skip_damaged_models skips it)"));

  std::vector<std::string> warnings;
  ModelRegistry skipping({});
  auto stats = RestoreModels(
      store.get(), &skipping,
      {.skip_damaged = true, .warn = [&](absl::string_view w) { warnings.emplace_back(w); }});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->models, 1u);
  EXPECT_EQ(stats->skipped, 2u);
  EXPECT_EQ(warnings.size(), 2u);
  // The damaged models' data is left in place.
  Loaded again = Load(store.get());
  EXPECT_EQ(again.damaged.size(), 2u);
}

TEST_F(ModelStoreTest, CorruptCheckpointIsReported) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->CreateModel("acme", "churn", SmallConfig()).ok());
  }
  RawPut("i/0000000000000001/c", std::string(40, '\0'));
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.damaged.size(), 1u);
  EXPECT_THAT(loaded.damaged[0], HasSubstr("acme/churn: checkpoint"));
}

TEST_F(ModelStoreTest, OpenRefusesAFileALockedStoreAndAForeignDatabase) {
  auto store = OpenStore();
  auto second = ModelStore::Open(dir_.string(), {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr(dir_.string()));
  store.reset();

  const std::string file = (dir_ / "LOCK").string();  // a file, not a directory
  auto not_dir = ModelStore::Open(file, {});
  EXPECT_EQ(not_dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(not_dir.status().message(), HasSubstr(file));

  const std::string foreign = (dir_ / "foreign").string();
  rocksdb::DB* db = nullptr;
  rocksdb::Options options;
  options.create_if_missing = true;
  ASSERT_TRUE(rocksdb::DB::Open(options, foreign, &db).ok());
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "k", "v").ok());
  delete db;
  auto other = ModelStore::Open(foreign, {});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("no okl format marker"));
}

TEST_F(ModelStoreTest, OrphanedIncarnationsAreRemovedAndNeverReused) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->CreateModel("acme", "churn", SmallConfig()).ok());
  }
  RawPut("i/0000000000000009/l/0000000000000001", std::string(8, 'x'));
  {
    auto store = OpenStore();
    Loaded loaded = Load(store.get());
    EXPECT_TRUE(loaded.damaged.empty());
    auto log = store->CreateModel("acme", "new", SmallConfig());
    EXPECT_EQ((*log)->incarnation(), 10u);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 2u);
  EXPECT_TRUE(loaded.models[1].log.empty());
}

}  // namespace
}  // namespace okl
