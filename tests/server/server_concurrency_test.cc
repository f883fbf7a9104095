// tests/server/server_concurrency_test.cc
//
// Many clients at once against a real okl_server: Observes and Predicts on one shared
// model and on models of their own, while other clients create and delete models, list
// them and snapshot them. Every call must succeed, or fail with NOT_FOUND where a model
// is being deleted; Observes on one model are applied one batch at a time (the steps
// after each batch are exactly the multiples of the batch size); every acknowledged
// example is counted; and a model written by one client alone computes what the core
// computes, bit for bit. Threads share one channel and stub, as an application would.

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using Code = ::grpc::StatusCode;

constexpr char kConfig[] = R"pb(
  dim: 4
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.01
  offset: true
  budget { max_terms: 64 policy: OLDEST }
)pb";

// Failures seen on the client threads, reported on the main thread.
class Failures {
 public:
  void Add(std::string failure) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failures_.size() < 50) failures_.push_back(std::move(failure));
    ++count_;
  }
  // Records `status` unless it is OK (or NOT_FOUND, if `not_found_ok`).
  void Check(const grpc::Status& status, absl::string_view what, bool not_found_ok = false) {
    if (status.ok()) return;
    if (not_found_ok && status.error_code() == Code::NOT_FOUND) return;
    Add(absl::StrCat(what, ": ", Describe(status)));
  }
  void ExpectNone() {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(count_, 0u) << "first failures:\n  " << absl::StrJoin(failures_, "\n  ");
  }

 private:
  std::mutex mu_;
  std::vector<std::string> failures_;
  size_t count_ = 0;
};

class ServerConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void TearDown() override {
    if (server_ == nullptr) return;
    absl::StatusOr<int> exit = server_->Stop();
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
        << "wait status " << *exit << "; log:\n"
        << server_->Log();
  }

  Stub& stub() { return server_->stub(); }

  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ServerConcurrencyTest, EveryCallSucceedsOrFindsItsModelDeletedAndEveryExampleCounts) {
  constexpr int kSharedWriters = 4;
  constexpr int kOwnWriters = 4;
  constexpr int kReaders = 4;
  constexpr int kChurners = 2;
  constexpr int kChurnClients = 3;
  constexpr int kCallsPerWriter = 40;
  constexpr size_t kBatch = 5;

  const v1::ModelConfig config = ParseConfig(kConfig);
  const v1::ModelRef shared = Ref("shared", "model");
  ASSERT_TRUE(IsOk(CreateModel(stub(), shared, config)));
  std::vector<v1::ModelRef> own;
  for (int i = 0; i < kOwnWriters; ++i) {
    own.push_back(Ref("own", absl::StrCat("model-", i)));
    ASSERT_TRUE(IsOk(CreateModel(stub(), own.back(), config)));
  }
  auto churn_ref = [](int churner, int round) {
    return Ref("churn", absl::StrCat("c", churner, "-", round % 3));
  };

  Failures failures;
  std::latch start(kSharedWriters + kOwnWriters + kReaders + kChurners + kChurnClients);
  std::atomic<bool> writers_done{false};
  std::atomic<uint64_t> shared_acknowledged{0};
  std::vector<std::vector<double>> own_predictions(kOwnWriters);
  std::vector<std::vector<v1::Example>> own_streams(kOwnWriters);
  std::vector<uint64_t> own_acknowledged(kOwnWriters, 0);

  std::vector<std::thread> threads;
  for (int w = 0; w < kSharedWriters; ++w) {
    threads.emplace_back([&, w] {
      const std::vector<v1::Example> stream =
          MakeStream(config, kCallsPerWriter * kBatch, 100 + w);
      start.arrive_and_wait();
      for (int c = 0; c < kCallsPerWriter; ++c) {
        const auto batch = absl::MakeConstSpan(stream).subspan(c * kBatch, kBatch);
        v1::ObserveResponse response;
        const grpc::Status status = Observe(stub(), shared, batch, &response);
        failures.Check(status, "Observe shared");
        if (!status.ok()) continue;
        if (response.predictions_size() != static_cast<int>(kBatch)) {
          failures.Add(absl::StrCat("Observe shared: ", response.predictions_size(),
                                    " predictions for ", kBatch, " examples"));
        }
        shared_acknowledged += kBatch;
      }
    });
  }
  for (int w = 0; w < kOwnWriters; ++w) {
    own_streams[w] = MakeStream(config, kCallsPerWriter * kBatch, 200 + w);
    threads.emplace_back([&, w] {
      const std::vector<v1::Example>& stream = own_streams[w];
      start.arrive_and_wait();
      for (int c = 0; c < kCallsPerWriter; ++c) {
        const auto batch = absl::MakeConstSpan(stream).subspan(c * kBatch, kBatch);
        v1::ObserveResponse response;
        // Every fourth call is a stream of single examples.
        const grpc::Status status =
            c % 4 == 3
                ? ObserveStream(stub(), own[w], SplitIntoBatches(batch, std::vector<size_t>{1}),
                                &response)
                : Observe(stub(), own[w], batch, &response);
        failures.Check(status, "Observe own");
        if (!status.ok()) break;  // the comparison with the core needs every example
        own_predictions[w].insert(own_predictions[w].end(), response.predictions().begin(),
                                  response.predictions().end());
        own_acknowledged[w] += kBatch;
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<v1::Vector> probes = MakeProbes(4, 8, 300 + r);
      start.arrive_and_wait();
      for (int c = 0; !writers_done || c < 20; ++c) {
        std::vector<double> predictions;
        failures.Check(Predict(stub(), shared, probes, &predictions), "Predict shared");
        failures.Check(Predict(stub(), own[(r + c) % kOwnWriters], probes, &predictions),
                       "Predict own");
        if (c % 5 == 0) {
          v1::ListModelsResponse list;
          failures.Check(ListModels(stub(), "", &list), "ListModels");
          v1::ModelInfo info;
          failures.Check(GetModel(stub(), shared, &info), "GetModel shared");
        }
        if (c % 10 == r) {
          // A snapshot taken mid-traffic is a consistent state: whole batches only.
          std::string bytes;
          const grpc::Status status = Snapshot(stub(), shared, &bytes);
          failures.Check(status, "Snapshot shared");
          v1::ModelSnapshot snapshot;
          if (status.ok() && (!snapshot.ParseFromString(bytes) ||
                              snapshot.steps() % kBatch != 0 || !FromProto(snapshot).ok())) {
            failures.Add(
                absl::StrCat("Snapshot shared: inconsistent at step ", snapshot.steps()));
          }
        }
        if (c > 2000) break;  // bounded even if the writers hang
      }
    });
  }
  for (int k = 0; k < kChurners; ++k) {
    threads.emplace_back([&, k] {
      const std::vector<v1::Example> stream = MakeStream(config, kBatch, 400 + k);
      start.arrive_and_wait();
      for (int round = 0; round < 30; ++round) {
        const v1::ModelRef ref = churn_ref(k, round);
        failures.Check(CreateModel(stub(), ref, config), "CreateModel churn");
        v1::ObserveResponse response;
        // Only this thread creates and deletes the name: the model is there.
        failures.Check(Observe(stub(), ref, stream, &response), "Observe churn (owner)");
        failures.Check(DeleteModel(stub(), ref), "DeleteModel churn");
      }
    });
  }
  for (int k = 0; k < kChurnClients; ++k) {
    threads.emplace_back([&, k] {
      const std::vector<v1::Example> stream = MakeStream(config, 2, 500 + k);
      const std::vector<v1::Vector> probes = MakeProbes(4, 2, 600 + k);
      start.arrive_and_wait();
      for (int c = 0; c < 150; ++c) {
        const v1::ModelRef ref = churn_ref(c % kChurners, c);
        v1::ObserveResponse response;
        failures.Check(Observe(stub(), ref, stream, &response), "Observe churn",
                       /*not_found_ok=*/true);
        std::vector<double> predictions;
        failures.Check(Predict(stub(), ref, probes, &predictions), "Predict churn",
                       /*not_found_ok=*/true);
        v1::ModelInfo info;
        failures.Check(GetModel(stub(), ref, &info), "GetModel churn", /*not_found_ok=*/true);
        std::string bytes;
        failures.Check(Snapshot(stub(), ref, &bytes), "Snapshot churn", /*not_found_ok=*/true);
      }
    });
  }
  for (size_t i = 0; i < kSharedWriters + kOwnWriters; ++i) threads[i].join();
  writers_done = true;
  for (size_t i = kSharedWriters + kOwnWriters; i < threads.size(); ++i) threads[i].join();
  failures.ExpectNone();

  // The shared model: every acknowledged example counted.
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), shared, &info)));
  EXPECT_EQ(shared_acknowledged.load(), uint64_t{kSharedWriters * kCallsPerWriter * kBatch});
  EXPECT_EQ(info.stats().steps(), shared_acknowledged.load());
  // Each writer's own model is what the core computes from its stream alone.
  for (int w = 0; w < kOwnWriters; ++w) {
    SCOPED_TRACE(RefName(own[w]));
    ASSERT_TRUE(IsOk(GetModel(stub(), own[w], &info)));
    EXPECT_EQ(info.stats().steps(), own_acknowledged[w]);
    std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
    ASSERT_NE(twin, nullptr);
    EXPECT_EQ(Bits(own_predictions[w]), Bits(PredictionsOf(twin->Observe(own_streams[w]))));
  }

  // The churned names are all deleted again.
  v1::ListModelsResponse list;
  ASSERT_TRUE(IsOk(ListModels(stub(), "churn", &list)));
  EXPECT_EQ(list.models_size(), 0);
}

// ObserveResponse.steps is "the model's step count after the last example" of that
// request. Batches on one model are applied one at a time, whole, so with every batch of
// 5 examples the responses' steps are exactly 5, 10, ..., 5 N, each once.
TEST_F(ServerConcurrencyTest, ConcurrentObservesOnOneModelEachReportTheStepsAfterTheirBatch) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 150;
  constexpr size_t kBatch = 5;
  const v1::ModelConfig config = ParseConfig(kConfig);
  const v1::ModelRef ref = Ref("steps", "model");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));

  Failures failures;
  std::mutex mu;
  std::vector<uint64_t> steps;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<v1::Example> stream = MakeStream(config, kCalls * kBatch, 800 + t);
      start.arrive_and_wait();
      for (int c = 0; c < kCalls; ++c) {
        v1::ObserveResponse response;
        const grpc::Status status = Observe(
            stub(), ref, absl::MakeConstSpan(stream).subspan(c * kBatch, kBatch), &response);
        failures.Check(status, "Observe");
        if (!status.ok()) continue;
        std::lock_guard<std::mutex> lock(mu);
        steps.push_back(response.steps());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  failures.ExpectNone();

  std::sort(steps.begin(), steps.end());
  std::vector<uint64_t> expected;
  for (uint64_t s = kBatch; s <= kThreads * kCalls * kBatch; s += kBatch) expected.push_back(s);
  std::vector<uint64_t> unexpected, missing;
  std::set_difference(steps.begin(), steps.end(), expected.begin(), expected.end(),
                      std::back_inserter(unexpected));
  std::set_difference(expected.begin(), expected.end(), steps.begin(), steps.end(),
                      std::back_inserter(missing));
  EXPECT_TRUE(unexpected.empty() && missing.empty())
      << "ObserveResponse.steps: unexpected (or repeated) " << absl::StrJoin(unexpected, ", ")
      << "; missing " << absl::StrJoin(missing, ", ");
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), uint64_t{kThreads * kCalls * kBatch});
}

TEST_F(ServerConcurrencyTest, PredictDuringRestoresSeesTheOldModelOrTheNewOneNeverAMix) {
  const v1::ModelConfig config = ParseConfig(kConfig);
  const std::vector<v1::Vector> probes = MakeProbes(4, 16, 700);
  // Two different states of one model, as snapshots, and their predictions.
  std::vector<std::string> snapshots;
  std::vector<std::vector<uint64_t>> expected;
  for (uint64_t seed : {701u, 702u}) {
    const v1::ModelRef source = Ref("restore", absl::StrCat("source-", seed));
    ASSERT_TRUE(IsOk(CreateModel(stub(), source, config)));
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(stub(), source, MakeStream(config, 100, seed), &response)));
    std::string bytes;
    ASSERT_TRUE(IsOk(Snapshot(stub(), source, &bytes)));
    snapshots.push_back(bytes);
    std::vector<double> predictions;
    ASSERT_TRUE(IsOk(Predict(stub(), source, probes, &predictions)));
    expected.push_back(Bits(predictions));
  }
  ASSERT_NE(expected[0], expected[1]);

  const v1::ModelRef target = Ref("restore", "target");
  ASSERT_TRUE(IsOk(Restore(stub(), target, snapshots[0])));
  Failures failures;
  std::atomic<bool> done{false};
  std::latch start(5);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; i < 200; ++i) {
      failures.Check(Restore(stub(), target, snapshots[i % 2], /*chunk_bytes=*/1024),
                     "Restore");
    }
    done = true;
  });
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int c = 0; !done && c < 20000; ++c) {
        std::vector<double> predictions;
        const grpc::Status status = Predict(stub(), target, probes, &predictions);
        failures.Check(status, "Predict during Restore");
        if (status.ok() && Bits(predictions) != expected[0] &&
            Bits(predictions) != expected[1]) {
          failures.Add("Predict during Restore: predictions of neither snapshot");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  failures.ExpectNone();
  std::vector<double> predictions;
  ASSERT_TRUE(IsOk(Predict(stub(), target, probes, &predictions)));
  EXPECT_EQ(Bits(predictions), expected[1]);  // the last restore installed snapshot 1
}

// A novelty model's rho moves with every step (nu-trick), so a Predict racing Observes
// must flag each input against the rho of the very model version that made its
// prediction. An in-process twin fed the same examples one at a time gives every
// version's predictions at the probes and its rho; each concurrent answer must be one of
// those versions, flags included.
TEST_F(ServerConcurrencyTest, NoveltyFlagsUseTheRhoOfTheModelVersionThatPredicted) {
  constexpr size_t kSteps = 400;
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 2
    kernel { gaussian { gamma: 2 } }
    loss { novelty { rho: 0.2 nu: 0.2 } }
    learning_rate { eta0: 0.1 }
    lambda: 0.05
    budget { max_terms: 100 policy: SMALLEST }
  )pb");
  const v1::ModelRef ref = Ref("novelty", "racing");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, config)));
  const std::vector<v1::Example> stream = MakeStream(config, kSteps, 900);
  // Fewer than the 256 inputs the server predicts under one read of the model.
  const std::vector<v1::Vector> probes = MakeProbes(2, 40, 901);

  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  struct Version {
    std::vector<uint64_t> prediction_bits;
    std::vector<bool> novel;
  };
  std::vector<Version> versions;
  for (size_t step = 0; step <= kSteps; ++step) {
    if (step > 0) twin->Observe({stream[step - 1]});
    const std::vector<double> predictions = twin->Predict(probes);
    const double rho = twin->model().stats().margin;
    std::vector<bool> novel;
    for (const double p : predictions) novel.push_back(p < rho);
    versions.push_back({.prediction_bits = Bits(predictions), .novel = std::move(novel)});
  }

  Failures failures;
  std::atomic<bool> done{false};
  std::atomic<size_t> answers{0};
  std::latch start(4);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (const v1::Example& example : stream) {
      v1::ObserveResponse response;
      failures.Check(Observe(stub(), ref, {example}, &response), "Observe");
    }
    done = true;
  });
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      while (!done) {
        v1::PredictResponse response;
        const grpc::Status status = Predict(stub(), ref, probes, &response);
        failures.Check(status, "Predict");
        if (!status.ok()) continue;
        ++answers;
        const std::vector<uint64_t> bits = Bits(response.predictions());
        const std::vector<bool> novel(response.novel().begin(), response.novel().end());
        const bool matches =
            std::any_of(versions.begin(), versions.end(), [&](const Version& version) {
              return version.prediction_bits == bits && version.novel == novel;
            });
        if (!matches) {
          failures.Add("Predict: no model version made these predictions and flags");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  failures.ExpectNone();
  EXPECT_GT(answers.load(), 0u);
}

}  // namespace
}  // namespace okl::testing
