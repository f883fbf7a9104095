// tests/server/model_store_test.cc
//
// ModelStore against a real RocksDB in a temporary directory: round trips, the atomic
// checkpoint, deletion, Restore's replacement, corruption reported with the model's
// name, RestoreModels' bit-identical replay, and writes failing on injected I/O errors
// (a full disk that is freed again, a failing device).

#include "server/store/model_store.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "tests/core/test_model_key.h"
#include "tests/server/fault_file_system.h"
#include "tests/server/store_test_util.h"

namespace okl {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ScratchDirForTest("okl_model_store_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ModelStore> OpenStore(ModelStore::Options options = {}) {
    absl::StatusOr<std::unique_ptr<ModelStore>> store =
        ModelStore::Open(dir_.string(), std::move(options));
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
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({3, 4, 5, 6}, 2), {1.5, -2}), nullptr).ok());
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
    ASSERT_TRUE((*log)->Append(Valid(config, InputBatch::Sparse(rows), {1, -1, 1}), nullptr).ok());
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

// A batch with class labels (a multi-class model's) is logged with them, dense or
// sparse, and read back exactly. The store reads records without judging them: the
// model's own rules do when the log is replayed (ModelEntry's and Model's tests).
TEST_F(ModelStoreTest, ClassLabelsSurviveReopen) {
  ModelConfig classes = SmallConfig();
  classes.loss = {.type = LossType::kMulticlassHinge};
  const BatchRules rules = BatchRules::Of(classes);
  const std::vector<double> xs = {1, 2, -1, 0.5, 0, 3};
  const std::vector<double> zeros = {0, 0, 0};
  SparseRows rows;
  const std::vector<uint32_t> i0 = {1}, i1 = {0, 1};
  const std::vector<double> v0 = {-2}, v1 = {0.25, 4};
  rows.Append({i0, v0});
  rows.Append({i1, v1});
  const std::vector<double> sparse_zeros = {0, 0};
  const std::vector<std::string> sparse_labels = {"owl", "dog"};
  const std::vector<std::string> labels = {"chat \xF0\x9F\x90\x88", "dog", "emu"};
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "kinds", SmallConfig());
    ASSERT_TRUE(log.ok()) << log.status();
    absl::StatusOr<ValidatedBatch> dense =
        ValidatedBatch::Make(rules, InputBatch::Dense(xs, 2), zeros, labels);
    absl::StatusOr<ValidatedBatch> sparse =
        ValidatedBatch::Make(rules, InputBatch::Sparse(rows), sparse_zeros, sparse_labels);
    ASSERT_TRUE(dense.ok() && sparse.ok()) << dense.status() << sparse.status();
    ASSERT_TRUE((*log)->Append(*dense, nullptr).ok());
    ASSERT_TRUE((*log)->Append(*sparse, nullptr).ok());
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    EXPECT_EQ((*log)->position().examples, 6u);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  EXPECT_TRUE(loaded.damaged.empty());
  ASSERT_EQ(loaded.models.size(), 1u);
  const std::vector<StoredModel::Batch>& log = loaded.models[0].log;
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].class_labels, labels);
  EXPECT_THAT(log[0].xs, ElementsAreArray(xs));
  EXPECT_THAT(log[0].ys, ElementsAreArray(zeros));
  EXPECT_EQ(log[1].class_labels, sparse_labels);
  EXPECT_EQ(log[1].sparse_xs, rows);
  EXPECT_TRUE(log[2].class_labels.empty());  // a record without labels has none
  EXPECT_THAT(log[2].ys, ElementsAre(0.5));
}

// A labelled record whose label lengths do not add up to its bytes is damaged, named as
// any other damaged record is.
TEST_F(ModelStoreTest, ALabelledRecordThatDoesNotAddUpIsDamaged) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->CreateModel("acme", "kinds", SmallConfig()).ok());
  }
  // One dense example of dim 2 with the class bit, y 0, a label length of 5 and 3 bytes.
  std::string record;
  const uint64_t head = 1 | (uint64_t{1} << 62);
  record.append(reinterpret_cast<const char*>(&head), 8);
  const double values[3] = {1, 2, 0};
  record.append(reinterpret_cast<const char*>(values), sizeof(values));
  const uint32_t length = 5;
  record.append(reinterpret_cast<const char*>(&length), 4);
  record.append("dog");
  RawPut("i/0000000000000001/l/0000000000000001", record);
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.damaged.size(), 1u);
  EXPECT_THAT(loaded.damaged[0],
              HasSubstr("acme/kinds: log record 1 has 3 bytes of class labels, not 5"));
}

TEST_F(ModelStoreTest, CheckpointReplacesTheLogUpToItsSequenceAtomically) {
  auto norma = CreateModel(SmallConfig());
  ASSERT_TRUE(norma.ok());
  std::vector<Observation> out;
  {
    auto store = OpenStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    ASSERT_TRUE((*norma)->ObserveBatch({1, 2}, {0.5}, &out).ok());
    const ModelLog::Position at = (*log)->position();
    const ModelState state = (*norma)->ExportState();
    ASSERT_TRUE((*log)
                    ->Append(Valid(InputBatch::Dense({3, 4}, 2), {1.0}), nullptr)
                    .ok());  // after the exported state
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
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    ASSERT_TRUE(store->DeleteModel(log->get()).ok());
    EXPECT_EQ((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).code(),
              absl::StatusCode::kNotFound);
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
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({9, 9}, 2), {9}), nullptr).ok());
    auto replaced = store->ReplaceModel("acme", "churn", (*norma)->ExportState(), log->get());
    ASSERT_TRUE(replaced.ok()) << replaced.status();
    EXPECT_EQ((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).code(),
              absl::StatusCode::kNotFound);
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
    auto entry = registry.Create(TestKey("acme", "churn"), config, *log);
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
  auto entry = registry.Find(TestKey("acme", "churn"));
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
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
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

namespace okl {
namespace {

using ::okl::testing::FaultInjectingFileSystem;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The seqs of a loaded model's log records.
std::vector<uint64_t> LogSeqs(const StoredModel& model) {
  std::vector<uint64_t> seqs;
  for (const StoredModel::Batch& batch : model.log) seqs.push_back(batch.seq);
  return seqs;
}

class ModelStoreFaultTest : public ModelStoreTest {
 protected:
  std::unique_ptr<ModelStore> OpenFaultyStore(bool sync_writes = false) {
    return OpenStore({.sync_writes = sync_writes, .file_system = fs_});
  }
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
};

// A full disk: the write is refused with RESOURCE_EXHAUSTED and leaves nothing behind,
// every write after it too while the disk stays full, and once there is room TryResume
// brings writes back without reopening; the store then holds exactly what succeeded.
TEST_F(ModelStoreFaultTest, AFullDiskStopsWritesUntilSpaceIsFreedThenTheyResume) {
  {
    auto store = OpenFaultyStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    EXPECT_TRUE(store->health().writable);

    fs_->Arm({.op = FaultInjectingFileSystem::Op::kAppend,
              .file_suffix = "",
              .error = rocksdb::IOStatus::NoSpace("injected"),
              .sticky = true});
    absl::Status refused = (*log)->Append(Valid(InputBatch::Dense({3, 4}, 2), {1.0}), nullptr);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("the model store is full"));
    EXPECT_THAT(refused.message(), HasSubstr("resume"));
    EXPECT_THAT(refused.message(), ::testing::Not(HasSubstr(dir_.string())));
    StoreHealth health = store->health();
    EXPECT_FALSE(health.writable);
    EXPECT_TRUE(health.resumable);
    EXPECT_THAT(health.error, HasSubstr("injected"));
    EXPECT_EQ(health.no_space_refusals, 1u);
    EXPECT_EQ((*log)->position().seq, 1u);  // the failed record consumed no sequence

    // Stopped: a write fails at once, and so does every kind of write.
    EXPECT_EQ((*log)->Append(Valid(InputBatch::Dense({5, 6}, 2), {2.0}), nullptr).code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(store->CreateModel("acme", "other", SmallConfig()).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(store->health().no_space_refusals, 3u);
    // Reads go on.
    Loaded during = Load(store.get());
    ASSERT_EQ(during.models.size(), 1u);
    EXPECT_THAT(LogSeqs(during.models[0]), ElementsAre(1));

    // Still full: resuming fails (RocksDB cannot flush), cheaply, and may be retried.
    EXPECT_EQ(store->TryResume().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_FALSE(store->health().writable);

    fs_->Disarm();  // space freed
    absl::Status resumed = store->TryResume();
    ASSERT_TRUE(resumed.ok()) << resumed;
    health = store->health();
    EXPECT_TRUE(health.writable);
    EXPECT_EQ(health.resumptions, 1u);
    EXPECT_TRUE(health.error.empty());
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({7, 8}, 2), {3.0}), nullptr).ok());
    EXPECT_TRUE(store->TryResume().ok());  // nothing to resume: a no-op
    EXPECT_EQ(store->health().resumptions, 1u);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 1u);
  const StoredModel& model = loaded.models[0];
  ASSERT_THAT(LogSeqs(model), ElementsAre(1, 2));
  EXPECT_THAT(model.log[0].xs, ElementsAre(1, 2));
  EXPECT_THAT(model.log[1].xs, ElementsAre(7, 8));
}

// Another I/O error (a failing device) stops writes until a restart: UNAVAILABLE, with
// the store's "outcome unknown" mark, and TryResume refuses. What was acknowledged is
// all there after the restart.
TEST_F(ModelStoreFaultTest, AnIoErrorStopsWritesUntilARestartAndLosesNothing) {
  {
    auto store = OpenFaultyStore();
    auto log = store->CreateModel("acme", "churn", SmallConfig());
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
    fs_->Arm({.op = FaultInjectingFileSystem::Op::kAppend, .file_suffix = ".log"});
    absl::Status refused = (*log)->Append(Valid(InputBatch::Dense({3, 4}, 2), {1.0}), nullptr);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("until okl_server is restarted"));
    EXPECT_TRUE(WriteOutcomeUnknown(refused));
    const StoreHealth health = store->health();
    EXPECT_FALSE(health.writable);
    EXPECT_FALSE(health.resumable);
    EXPECT_EQ(health.io_error_refusals, 1u);
    EXPECT_EQ(store->TryResume().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*log)->Append(Valid(InputBatch::Dense({5, 6}, 2), {2.0}), nullptr).code(),
              absl::StatusCode::kUnavailable);
  }
  auto store = OpenStore();
  Loaded loaded = Load(store.get());
  ASSERT_EQ(loaded.models.size(), 1u);
  EXPECT_THAT(LogSeqs(loaded.models[0]), ElementsAre(1));
  EXPECT_TRUE(store->health().writable);
}

// With --sync_writes, a write whose fsync fails has its bytes in RocksDB's log already:
// RocksDB reports the write failed yet would replay it at the next open. Resuming
// writes drops it (RocksDB flushes its memtables, which never held it, and starts a new
// log), so the store never hands it to a model; only a restart before the resume
// replays it, which the refusal's message says.
TEST_F(ModelStoreFaultTest, AWriteWhoseFsyncFailedIsDroppedWhenWritesResume) {
  for (const bool resume : {true, false}) {
    SCOPED_TRACE(resume ? "resumed, then restarted" : "restarted without resuming");
    std::filesystem::remove_all(dir_);
    {
      auto store = OpenFaultyStore(/*sync_writes=*/true);
      auto log = store->CreateModel("acme", "churn", SmallConfig());
      ASSERT_TRUE(log.ok()) << log.status();
      ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
      fs_->Arm({.op = FaultInjectingFileSystem::Op::kSync,
                .file_suffix = ".log",
                .error = rocksdb::IOStatus::NoSpace("injected at fsync")});
      absl::Status refused = (*log)->Append(Valid(InputBatch::Dense({3, 4}, 2), {1.0}), nullptr);
      EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(refused.message(), HasSubstr("a restart before writes resume replays it"));
      ASSERT_EQ(fs_->injected(), 1);
      if (resume) {
        ASSERT_TRUE(store->TryResume().ok());
      }
      fs_ = std::make_shared<FaultInjectingFileSystem>();
    }
    auto store = OpenStore();
    Loaded loaded = Load(store.get());
    ASSERT_EQ(loaded.models.size(), 1u);
    if (resume) {
      EXPECT_THAT(LogSeqs(loaded.models[0]), ElementsAre(1));
    } else {
      EXPECT_THAT(LogSeqs(loaded.models[0]), ElementsAre(1, 2));
    }
  }
}

// A failed checkpoint is not due again for 1 s, then 2 s, 4 s, ... up to 5 minutes, so a
// model that cannot be checkpointed is not encoded every poll; a success ends it.
TEST_F(ModelStoreTest, AFailedCheckpointBacksOffDoublingUpToFiveMinutes) {
  auto norma = CreateModel(SmallConfig());
  ASSERT_TRUE(norma.ok());
  auto store = OpenStore();
  auto log = store->CreateModel("acme", "churn", SmallConfig());
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
  const absl::Time t0 = absl::Now();
  auto due = [&](absl::Duration after) {
    return (*log)->CheckpointDue(/*every_examples=*/1, absl::ZeroDuration(), t0 + after);
  };
  EXPECT_TRUE(due(absl::ZeroDuration()));
  EXPECT_FALSE((*log)->checkpoint_failing());
  absl::Duration failed_at;  // after t0
  absl::Duration expected_wait = absl::Seconds(1);
  for (int failure = 1; failure <= 12; ++failure) {
    SCOPED_TRACE(absl::StrCat("failure ", failure));
    (*log)->CheckpointFailed(t0 + failed_at);
    EXPECT_TRUE((*log)->checkpoint_failing());
    EXPECT_FALSE(due(failed_at + expected_wait - absl::Milliseconds(1)));
    EXPECT_TRUE(due(failed_at + expected_wait));
    failed_at += expected_wait;
    expected_wait = std::min(2 * expected_wait, absl::Minutes(5));
  }
  EXPECT_EQ(expected_wait, absl::Minutes(5));
  ASSERT_TRUE((*log)->Checkpoint((*norma)->ExportState(), (*log)->position()).ok());
  EXPECT_FALSE((*log)->checkpoint_failing());
  ASSERT_TRUE((*log)->Append(Valid(InputBatch::Dense({3, 4}, 2), {1.0}), nullptr).ok());
  EXPECT_TRUE(due(failed_at));  // due at once again
}

}  // namespace
}  // namespace okl
