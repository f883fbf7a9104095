// tests/server/model_host_test.cc
//
// ModelHost over a real RocksDB in a temporary directory: the registry-plus-store wiring
// (create, replace, delete durable and visible in the right order), the retry of a
// request whose model was replaced, the config limits, the quotas reserved and released
// (ResourceQuotas itself: quotas_test.cc), concurrent mutations of one name racing
// batches into it, the write fences of tenant moves, and checkpoints meeting injected
// I/O errors.

#include "server/host/model_host.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/create_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "server/events/event_book.h"
#include "server/host/hosted_model.h"
#include "server/base/quotas.h"
#include "tests/core/test_model_key.h"
#include "tests/server/fault_file_system.h"
#include "tests/server/store_test_util.h"

namespace okl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// `n` examples of dimension 2 from `seed`.
void Feed(ModelEntry& entry, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> xs(2 * n), ys(n);
  for (double& x : xs) x = normal(rng);
  for (double& y : ys) y = normal(rng);
  std::vector<Observation> out;
  ASSERT_TRUE(entry.ObserveBatch(xs, ys, &out).ok());
}

std::vector<double> PredictAt(const ModelEntry& entry) {
  const std::vector<double> xs = {0.1, -0.2, 0.7, 0.3};
  std::vector<double> out(2);
  EXPECT_TRUE(entry.PredictBatch(xs, absl::MakeSpan(out)).ok());
  return out;
}

class ModelHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("okl_model_host_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ModelHost> OpenHost(
      ResourceQuotas::Limits quotas = {},
      std::shared_ptr<rocksdb::FileSystem> file_system = nullptr, bool sync_writes = false) {
    auto host = std::make_unique<ModelHost>(ModelHost::Options{.max_dim = 1024,
                                                               .max_terms = 100000,
                                                               .quotas = quotas,
                                                               .data_dir = dir_.string(),
                                                               .sync_writes = sync_writes,
                                                               .store_file_system = file_system});
    absl::Status status = host->Open();
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

  std::filesystem::path dir_;
};

TEST_F(ModelHostTest, CreateReplaceDeleteAreDurableAndVisible) {
  std::vector<double> replaced_predictions;
  {
    auto host = OpenHost();
    auto a = host->Create(TestKey("acme", "a"), SmallConfig());
    ASSERT_TRUE(a.ok()) << a.status();
    Feed((*a)->entry(), 20, 1);
    auto b = host->Create(TestKey("acme", "b"), SmallConfig());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(host->Create(TestKey("acme", "a"), SmallConfig()).status().code(),
              absl::StatusCode::kAlreadyExists);
    // Replace b with a's state: b now predicts as a does.
    absl::StatusOr<ModelState> state = (*a)->entry().ExportState();
    ASSERT_TRUE(state.ok());
    auto reservation = host->Reserve(TestKey("acme", "b"), state->config);
    ASSERT_TRUE(reservation.ok()) << reservation.status();
    auto b2 = host->Replace(TestKey("acme", "b"), *state, *std::move(reservation));
    ASSERT_TRUE(b2.ok()) << b2.status();
    EXPECT_EQ(PredictAt((*b2)->entry()), PredictAt((*a)->entry()));
    replaced_predictions = PredictAt((*b2)->entry());
    // The old entry refuses work: requests that found it look again.
    EXPECT_EQ((*b)->entry().Summary().status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(host->Create(TestKey("other", "c"), SmallConfig()).ok());
    ASSERT_TRUE(host->Delete(TestKey("other", "c")).ok());
    EXPECT_EQ(host->Delete(TestKey("other", "c")).code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(host->CheckpointModels(/*all=*/true), 1u);  // a has a log; b a checkpoint
  }
  auto host = OpenHost();
  EXPECT_EQ(host->List("").size(), 2u);
  EXPECT_EQ(host->Find(TestKey("other", "c")).status().code(), absl::StatusCode::kNotFound);
  auto b = host->Find(TestKey("acme", "b"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(PredictAt((*b)->entry()), replaced_predictions);
  // Restored models count against the quotas.
  EXPECT_EQ(host->quotas().TenantUsage("acme").first, 2u);
  EXPECT_EQ(host->quotas().TenantUsage("acme").second,
            2 * WorstCaseMemoryBytes(SmallConfig()));
}

TEST_F(ModelHostTest, WithModelRetriesOnTheEntryThatReplacedTheOneFound) {
  auto host = OpenHost();
  auto first = host->Create(TestKey("t", "m"), SmallConfig());
  ASSERT_TRUE(first.ok());
  std::shared_ptr<HostedModel> cached = *first;  // a stream found it earlier
  absl::StatusOr<ModelState> state = (*first)->entry().ExportState();
  auto reservation = host->Reserve(TestKey("t", "m"), state->config);
  ASSERT_TRUE(reservation.ok());
  auto second = host->Replace(TestKey("t", "m"), *state, *std::move(reservation));
  ASSERT_TRUE(second.ok());
  std::vector<const HostedModel*> ran_on;
  absl::Status status = host->WithModel(TestKey("t", "m"), &cached, [&](HostedModel& model) {
    ran_on.push_back(&model);
    return model.entry().Summary().status();
  });
  EXPECT_TRUE(status.ok()) << status;
  ASSERT_EQ(ran_on.size(), 2u);
  EXPECT_EQ(ran_on[0], first->get());
  EXPECT_EQ(ran_on[1], second->get());
  EXPECT_EQ(cached, *second);
  // A deleted model: NotFound after one more look.
  ASSERT_TRUE(host->Delete(TestKey("t", "m")).ok());
  int runs = 0;
  status = host->WithModel(TestKey("t", "m"), &cached, [&](HostedModel& model) {
    ++runs;
    return model.entry().Summary().status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runs, 1);
}

// One record per model: a Restore installs a new one and closes the old, book and all; a
// Delete closes it. Holders of a closed one get NotFound, which WithModel retries on.
TEST_F(ModelHostTest, AReplacedOrDeletedModelIsClosedWithItsBook) {
  auto host = OpenHost();
  auto first = host->Create(TestKey("t", "m"), SmallConfig());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->existing_book(), nullptr);  // made on first use
  absl::StatusOr<std::shared_ptr<EventBook>> book = (*first)->Book();
  ASSERT_TRUE(book.ok()) << book.status();
  EXPECT_EQ((*first)->existing_book(), *book);
  EXPECT_EQ(*(*first)->Book(), *book);  // the same book each time
  EXPECT_NE((*first)->log(), nullptr);
  EXPECT_EQ((*first)->log(), (*first)->entry().journal().get());

  absl::StatusOr<ModelState> state = (*first)->entry().ExportState();
  ASSERT_TRUE(state.ok());
  auto reservation = host->Reserve(TestKey("t", "m"), state->config);
  ASSERT_TRUE(reservation.ok());
  auto second = host->Replace(TestKey("t", "m"), *state, *std::move(reservation));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)->Book().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*first)->entry().Summary().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*host->Find(TestKey("t", "m")), *second);
  EXPECT_EQ((*second)->existing_book(), nullptr);  // the snapshot had no events
  EXPECT_NE((*second)->log(), (*first)->log());
  ASSERT_TRUE((*second)->Book().ok());

  ASSERT_TRUE(host->Delete(TestKey("t", "m")).ok());
  EXPECT_EQ((*second)->Book().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*second)->entry().Summary().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host->Find(TestKey("t", "m")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host->size(), 0u);
}

TEST_F(ModelHostTest, CheckConfigNamesTheLimit) {
  auto host = OpenHost();
  ModelConfig config = SmallConfig();
  config.dim = 2048;
  EXPECT_THAT(host->Create(TestKey("t", "m"), config).status().message(),
              HasSubstr("--max_dim"));
  config = SmallConfig(0);
  EXPECT_THAT(host->Create(TestKey("t", "m"), config).status().message(),
              AllOf(HasSubstr("unbounded"), HasSubstr("--max_terms")));
  config = SmallConfig(200000);
  EXPECT_THAT(host->Create(TestKey("t", "m"), config).status().message(),
              HasSubstr("--max_terms"));
  EXPECT_TRUE(host->List("").empty());
}

TEST_F(ModelHostTest, ConfigsThatCouldOutgrowTheSnapshotLimitAreRefused) {
  ModelHost::Options options;  // in memory: no data_dir
  options.max_terms = kMaxTerms;
  ModelHost host(options);
  ASSERT_TRUE(host.Open().ok());
  ModelConfig config = SmallConfig(4100);
  config.dim = 65536;
  const absl::Status status = host.Create(TestKey("t", "m"), config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // 2^31 - 1 bytes over 65537 doubles + 10 bytes per term, less the fixed part.
  EXPECT_THAT(status.message(), AllOf(HasSubstr("snapshot size limit"),
                                      HasSubstr("budget.max_terms may be at most 4095")));
  config.budget.max_terms = 4095;
  EXPECT_TRUE(host.CheckConfig(config).ok());
}

TEST_F(ModelHostTest, QuotasAreReservedAtCreateAndReleasedAtDelete) {
  const uint64_t bytes = WorstCaseMemoryBytes(SmallConfig());
  auto host = OpenHost({.max_models = 10, .max_models_per_tenant = 2,
                        .max_bytes_per_tenant = 3 * bytes});
  ASSERT_TRUE(host->Create(TestKey("a", "1"), SmallConfig()).ok());
  ASSERT_TRUE(host->Create(TestKey("a", "2"), SmallConfig()).ok());
  absl::Status status = host->Create(TestKey("a", "3"), SmallConfig()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("--max_models_per_tenant=2"),
                                      HasSubstr("holds 2 models")));
  EXPECT_EQ(host->Find(TestKey("a", "3")).status().code(), absl::StatusCode::kNotFound);
  // Another tenant is not affected.
  ASSERT_TRUE(host->Create(TestKey("b", "1"), SmallConfig()).ok());
  // A bigger model goes over the tenant's bytes.
  ModelConfig big = SmallConfig(200);
  ASSERT_TRUE(host->Delete(TestKey("a", "2")).ok());
  status = host->Create(TestKey("a", "2"), big).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_bytes_per_tenant"));
  ASSERT_TRUE(host->Create(TestKey("a", "2"), SmallConfig()).ok());
  const ResourceQuotas::Usage usage = host->quotas().usage();
  EXPECT_EQ(usage.models, 3u);
  EXPECT_EQ(usage.bytes, 3 * bytes);
  EXPECT_EQ(usage.rejections[static_cast<size_t>(Quota::kModelsPerTenant)], 1u);
  EXPECT_EQ(usage.rejections[static_cast<size_t>(Quota::kBytesPerTenant)], 1u);
}

TEST_F(ModelHostTest, ReplaceSwapsTheReservationOfTheModelItReplaces) {
  const uint64_t small = WorstCaseMemoryBytes(SmallConfig(32));
  const uint64_t large = WorstCaseMemoryBytes(SmallConfig(64));
  auto host = OpenHost({.max_models = 1});
  auto entry = host->Create(TestKey("a", "m"), SmallConfig(32));
  ASSERT_TRUE(entry.ok());
  auto donor = CreateModel(SmallConfig(64));
  ASSERT_TRUE(donor.ok());
  const ModelState state = (*donor)->ExportState();
  // Replacing the one model the server may hold is not a new model.
  auto reservation = host->Reserve(TestKey("a", "m"), state.config);
  ASSERT_TRUE(reservation.ok()) << reservation.status();
  EXPECT_EQ(reservation->models(), 0u);
  EXPECT_EQ(host->quotas().usage().bytes, small + large);  // both, while it runs
  ASSERT_TRUE(host->Replace(TestKey("a", "m"), state, *std::move(reservation)).ok());
  EXPECT_EQ(host->quotas().usage().models, 1u);
  EXPECT_EQ(host->quotas().usage().bytes, large);
  // A new name is one model too many.
  EXPECT_EQ(host->Reserve(TestKey("a", "n"), state.config).status().code(),
            absl::StatusCode::kResourceExhausted);
  // An abandoned reservation gives everything back.
  { auto dropped = host->Reserve(TestKey("a", "m"), state.config); }
  EXPECT_EQ(host->quotas().usage().bytes, large);
}

TEST_F(ModelHostTest, MutationsOfOneNameRaceBatchesWithoutLosingOrder) {
  auto host = OpenHost();
  ASSERT_TRUE(host->Create(TestKey("t", "m"), SmallConfig()).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> applied{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      std::shared_ptr<HostedModel> entry;
      std::vector<Observation> out;
      std::mt19937 rng(w);
      std::normal_distribution<double> normal;
      while (!stop.load()) {
        const std::vector<double> xs = {normal(rng), normal(rng)};
        const std::vector<double> ys = {normal(rng)};
        absl::Status status = host->WithModel(TestKey("t", "m"), &entry, [&](HostedModel& model) {
          ModelEntry& e = model.entry();
          out.clear();
          return e.ObserveBatch(xs, ys, &out);
        });
        if (status.ok()) applied.fetch_add(1);
        // NotFound while the model is deleted; nothing else.
        EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kNotFound) << status;
      }
    });
  }
  for (int round = 0; round < 40; ++round) {
    // Let the writers apply some batches between mutations (bounded wait).
    const int target = applied.load() + 5;
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (applied.load() < target && absl::Now() < give_up) absl::SleepFor(absl::Microseconds(100));
    auto entry = host->Find(TestKey("t", "m"));
    if (entry.ok()) {
      absl::StatusOr<ModelState> state = (*entry)->entry().ExportState();
      if (state.ok()) {
        auto reservation = host->Reserve(TestKey("t", "m"), state->config);
        ASSERT_TRUE(reservation.ok());
        ASSERT_TRUE(host->Replace(TestKey("t", "m"), *state, *std::move(reservation)).ok());
      }
    }
    if (round % 10 == 9) {
      ASSERT_TRUE(host->Delete(TestKey("t", "m")).ok());
      ASSERT_TRUE(host->Create(TestKey("t", "m"), SmallConfig()).ok());
    }
  }
  stop.store(true);
  for (std::thread& t : writers) t.join();
  EXPECT_GE(applied.load(), 200);
  EXPECT_EQ(host->quotas().usage().models, 1u);
  EXPECT_EQ(host->quotas().usage().bytes, WorstCaseMemoryBytes(SmallConfig()));
  // What the store holds is what the registry holds.
  auto live = host->Find(TestKey("t", "m"));
  ASSERT_TRUE(live.ok());
  const std::vector<double> expected = PredictAt((*live)->entry());
  const uint64_t steps = (*live)->entry().Summary()->stats.steps;
  host.reset();
  host = OpenHost();
  auto restored = host->Find(TestKey("t", "m"));
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ((*restored)->entry().Summary()->stats.steps, steps);
  EXPECT_EQ(PredictAt((*restored)->entry()), expected);
}

// A tenant's fence (tenant moves): every write of the tenant is refused with
// Unavailable and changes nothing; reads go on; other tenants are untouched; lifting it
// lets writes in again.
TEST_F(ModelHostTest, AFenceRefusesEveryWriteOfItsTenantOnlyAndChangesNothing) {
  auto host = OpenHost();
  auto model = host->Create(TestKey("moving", "m"), SmallConfig());
  ASSERT_TRUE(model.ok());
  Feed((*model)->entry(), 10, 1);
  ASSERT_TRUE(host->Create(TestKey("staying", "m"), SmallConfig()).ok());
  ASSERT_TRUE(host->FenceWrites("moving", absl::InfiniteFuture()).ok());

  const std::vector<double> before = PredictAt((*model)->entry());
  const std::vector<double> xs = {0.5, 0.5};
  const std::vector<double> ys = {1.0};
  std::vector<Observation> out;
  std::shared_ptr<HostedModel> entry;
  bool ran = false;
  absl::Status write =
      host->WithModelForWrite(TestKey("moving", "m"), &entry, [&](HostedModel& model) {
          ModelEntry& e = model.entry();
        ran = true;
        return e.ObserveBatch(xs, ys, &out);
      });
  EXPECT_EQ(write.code(), absl::StatusCode::kUnavailable) << write;
  EXPECT_THAT(write.message(), AllOf(HasSubstr("\"moving\" is being moved"),
                                     HasSubstr("not applied"), HasSubstr("retry")));
  EXPECT_FALSE(ran);
  EXPECT_EQ(host->Create(TestKey("moving", "n"), SmallConfig()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(host->Delete(TestKey("moving", "m")).code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<ModelState> state = (*model)->entry().ExportState();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(host->Reserve(TestKey("moving", "m"), state->config).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(host->Replace(TestKey("moving", "m"), *state, QuotaReservation()).status().code(),
            absl::StatusCode::kUnavailable);
  // Nothing changed, and reads are served.
  EXPECT_EQ((*model)->entry().Summary()->stats.steps, 10u);
  EXPECT_EQ(PredictAt((*host->Find(TestKey("moving", "m")))->entry()), before);
  EXPECT_EQ(host->List("moving").size(), 1u);
  EXPECT_TRUE(host->CheckNotMoved("moving").ok());
  // Another tenant writes on.
  entry.reset();
  EXPECT_TRUE(
      host->WithModelForWrite(TestKey("staying", "m"), &entry,
                              [&](HostedModel& model) {
          ModelEntry& e = model.entry(); return e.ObserveBatch(xs, ys, &out); })
          .ok());

  host->LiftFence("moving");
  entry.reset();
  EXPECT_TRUE(
      host->WithModelForWrite(TestKey("moving", "m"), &entry,
                              [&](HostedModel& model) {
          ModelEntry& e = model.entry(); return e.ObserveBatch(xs, ys, &out); })
          .ok());
  EXPECT_EQ((*model)->entry().Summary()->stats.steps, 11u);
  EXPECT_TRUE(host->Create(TestKey("moving", "n"), SmallConfig()).ok());
}

// The fence waits for the writes already running: when FenceWrites returns, every write
// that was let in has finished (so a snapshot then holds them all).
TEST_F(ModelHostTest, AFenceWaitsForTheWritesAlreadyRunning) {
  auto host = OpenHost();
  ASSERT_TRUE(host->Create(TestKey("t", "m"), SmallConfig()).ok());
  PlainMutex mu;
  CondVar cv;
  bool inside = false;
  bool release = false;
  std::thread writer([&] {
    std::shared_ptr<HostedModel> entry;
    std::vector<Observation> out;
    const std::vector<double> xs = {0.5, 0.5};
    const std::vector<double> ys = {1.0};
    absl::Status status =
        host->WithModelForWrite(TestKey("t", "m"), &entry, [&](HostedModel& model) {
          ModelEntry& e = model.entry();
          {
            PlainLock lock(&mu);
            inside = true;
            cv.SignalAll();
            while (!release) cv.Wait(&mu);
          }
          return e.ObserveBatch(xs, ys, &out);
        });
    EXPECT_TRUE(status.ok()) << status;
  });
  {
    PlainLock lock(&mu);
    while (!inside) cv.Wait(&mu);
  }
  // The write is running: a fence with a short deadline says so, and stays up.
  absl::Status fenced = host->FenceWrites("t", absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(fenced.code(), absl::StatusCode::kDeadlineExceeded) << fenced;
  EXPECT_THAT(fenced.message(), HasSubstr("1 write(s)"));
  EXPECT_EQ(host->Create(TestKey("t", "n"), SmallConfig()).status().code(),
            absl::StatusCode::kUnavailable);
  // Fence again, and let the write finish meanwhile: the fence returns once it has.
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(50));
    PlainLock lock(&mu);
    release = true;
    cv.SignalAll();
  });
  EXPECT_TRUE(host->FenceWrites("t", absl::Now() + absl::Seconds(30)).ok());
  EXPECT_EQ((*host->Find(TestKey("t", "m")))->entry().Summary()->stats.steps, 1u);
  releaser.join();
  writer.join();
}

// Dropping a fenced tenant deletes its models here; the fence stays, and the tenant's
// requests then get Unavailable ("moved"), not NotFound, until it is lifted.
TEST_F(ModelHostTest, DroppingAMovedTenantLeavesItsRequestsUnavailable) {
  auto host = OpenHost();
  ASSERT_TRUE(host->Create(TestKey("gone", "a"), SmallConfig()).ok());
  ASSERT_TRUE(host->Create(TestKey("gone", "b"), SmallConfig()).ok());
  ASSERT_TRUE(host->Create(TestKey("kept", "a"), SmallConfig()).ok());
  absl::StatusOr<std::vector<std::string>> dropped =
      host->DropTenant("gone", absl::InfiniteFuture());
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(host->List("gone").empty());
  EXPECT_EQ(host->quotas().usage().models, 1u);
  absl::Status found = host->Find(TestKey("gone", "a")).status();
  EXPECT_EQ(found.code(), absl::StatusCode::kUnavailable) << found;
  EXPECT_THAT(found.message(), HasSubstr("has moved to another replica"));
  std::shared_ptr<HostedModel> entry;
  EXPECT_EQ(host->WithModel(TestKey("gone", "a"), &entry,
                            [](HostedModel&) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(host->CheckNotMoved("gone").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(host->Create(TestKey("gone", "a"), SmallConfig()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(host->Find(TestKey("kept", "a")).ok());
  EXPECT_EQ(host->Find(TestKey("kept", "zzz")).status().code(), absl::StatusCode::kNotFound);
  // The deletions are durable: a restart (which lifts fences) finds no model of "gone".
  host.reset();
  host = OpenHost();
  EXPECT_TRUE(host->List("gone").empty());
  EXPECT_EQ(host->Find(TestKey("gone", "a")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(host->Create(TestKey("gone", "a"), SmallConfig()).ok());
}

using ::okl::testing::FaultInjectingFileSystem;

// A checkpoint meets an I/O error: it fails, is counted, and loses nothing; the next
// start restores exactly the state the acknowledged batches made, whether the failed
// write landed or not (a failed fsync can leave it durable). A failing device stops
// writes until that restart; a full disk only until space is freed.
TEST_F(ModelHostTest, AnIoErrorDuringACheckpointLosesNothingAndTheNextStartIsExact) {
  struct Case {
    const char* name;
    FaultInjectingFileSystem::Fault fault;
    bool sync_writes;
  };
  const Case cases[] = {
      {"device error writing the log",
       {.op = FaultInjectingFileSystem::Op::kAppend, .file_suffix = ".log"},
       false},
      {"device error at the log's fsync",
       {.op = FaultInjectingFileSystem::Op::kSync, .file_suffix = ".log"},
       true},
      {"full disk writing the log",
       {.op = FaultInjectingFileSystem::Op::kAppend,
        .file_suffix = ".log",
        .error = rocksdb::IOStatus::NoSpace("injected")},
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::filesystem::remove_all(dir_);
    const bool full_disk = c.fault.error.IsNoSpace();
    ModelState acknowledged;
    {
      auto fs = std::make_shared<FaultInjectingFileSystem>();
      auto host = OpenHost({}, fs, c.sync_writes);
      auto a = host->Create(TestKey("acme", "a"), SmallConfig());
      ASSERT_TRUE(a.ok()) << a.status();
      for (uint32_t i = 0; i < 5; ++i) Feed((*a)->entry(), 10, 100 + i);
      fs->Arm(c.fault);
      EXPECT_EQ(host->CheckpointModels(/*all=*/true), 0u);
      EXPECT_EQ(fs->injected(), 1);
      EXPECT_EQ(host->checkpoint_failures(), 1u);
      EXPECT_EQ(host->models_failing_checkpoints(), 1u);
      EXPECT_FALSE(host->store_health().writable);
      // While the store refuses writes no checkpoint is tried (none fails, none backs off).
      EXPECT_EQ(host->CheckpointModels(/*all=*/true), 0u);
      EXPECT_EQ(host->checkpoint_failures(), 1u);
      // Batches are refused and change nothing.
      const std::vector<double> before = PredictAt((*a)->entry());
      std::vector<Observation> out;
      absl::Status refused = (*a)->entry().ObserveBatch(std::vector<double>{0.5, 0.5}, {1.0}, &out);
      EXPECT_EQ(refused.code(), full_disk ? absl::StatusCode::kResourceExhausted
                                          : absl::StatusCode::kUnavailable)
          << refused;
      EXPECT_EQ(PredictAt((*a)->entry()), before);
      absl::StatusOr<ModelState> state = (*a)->entry().ExportState();
      ASSERT_TRUE(state.ok());
      acknowledged = *std::move(state);
      if (full_disk) {
        // Space freed: the host resumes the store, the model takes batches again and
        // its checkpoint goes through.
        fs->Disarm();
        EXPECT_TRUE(host->MaintainStore(absl::Now()).writable);
        EXPECT_EQ(host->store_health().resumptions, 1u);
        Feed((*a)->entry(), 10, 200);
        EXPECT_EQ(host->CheckpointModels(/*all=*/true), 1u);
        EXPECT_EQ(host->models_failing_checkpoints(), 0u);
        state = (*a)->entry().ExportState();
        ASSERT_TRUE(state.ok());
        acknowledged = *std::move(state);
      } else {
        EXPECT_FALSE(host->MaintainStore(absl::Now()).writable);
        EXPECT_FALSE(host->store_health().resumable);
      }
    }
    auto host = OpenHost();
    auto a = host->Find(TestKey("acme", "a"));
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<ModelState> restored = (*a)->entry().ExportState();
    ASSERT_TRUE(restored.ok());
    EXPECT_TRUE(*restored == acknowledged);
    EXPECT_TRUE(host->store_health().writable);
  }
}

// MaintainStore asks a stopped store to resume at most once per interval.
TEST_F(ModelHostTest, MaintainStoreRetriesAFullDiskAtMostOncePerInterval) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto host = OpenHost({}, fs);
  auto a = host->Create(TestKey("acme", "a"), SmallConfig());
  ASSERT_TRUE(a.ok()) << a.status();
  fs->Arm({.op = FaultInjectingFileSystem::Op::kAppend,
           .file_suffix = "",
           .error = rocksdb::IOStatus::NoSpace("injected"),
           .sticky = true});
  std::vector<Observation> out;
  EXPECT_EQ((*a)->entry().ObserveBatch(std::vector<double>{0.5, 0.5}, {1.0}, &out).code(),
            absl::StatusCode::kResourceExhausted);
  const int failed_writes = fs->injected();
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE(host->MaintainStore(t0).writable);  // one attempt: its flush fails
  const int after_first = fs->injected();
  EXPECT_GT(after_first, failed_writes);
  EXPECT_FALSE(host->MaintainStore(t0 + absl::Milliseconds(500)).writable);
  EXPECT_EQ(fs->injected(), after_first);  // too soon: not tried
  fs->Disarm();
  EXPECT_TRUE(host->MaintainStore(t0 + absl::Milliseconds(1100)).writable);
  EXPECT_TRUE((*a)->entry().ObserveBatch(std::vector<double>{0.5, 0.5}, {1.0}, &out).ok());
}

}  // namespace
}  // namespace okl
