// tests/server/isolation_test.cc
//
// Tenant isolation against a real okl_server process: what one tenant sends cannot make
// the server allocate without bound, stall other tenants, or leave a model it cannot
// restart; and what the server refuses, it refuses before it allocates or reads, with
// the code and a message naming the flag. Here: bounded requests (a small sparse request
// that would densify to hundreds of MB), a large Restore beside another tenant's calls,
// configs with non-finite numbers and restarts of every kind of config, the snapshot size
// limit and the checkpoint's back-off, the ObserveStream response cap, and cancellation.
// The quotas and the Restore protocol's bounds are in tenant_limits_test.cc, the shared
// helpers in isolation_util.h. Another tenant's p99 under a noisy one's load is
// noisy_neighbour_test.cc: it measures latency, so it runs in optimised builds only;
// here the large Restore's bounds are loose enough for any build.
// Memory is the server's peak RSS (VmHWM in /proc/<pid>/status),
// work its CPU time (utime + stime in /proc/<pid>/stat), counts its /metrics.
//
// OKL_ISOLATION_VERBOSE=1 prints the figures measured (peak RSS, latencies, durations).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/isolation_util.h"
#include "tests/server/server_process.h"
#include "tests/server/state_builder.h"

namespace okl::testing {
namespace {

using Code = ::grpc::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ====================================================================================
// Bounded requests: a small sparse request densifying to hundreds of MB.
// ====================================================================================

// A small request that would be large dense: 500 examples of one index each, 13 KB on the wire,
// 262 MB as dense doubles at dim 65536, over the default --max_request_bytes (64 MiB).
constexpr size_t kOverBoundExamples = 500;
// What the old server's peak RSS grew by was 1 GB; the dense copy alone is 262 MB. A
// refusal before densifying grows it by what serving any small call does.
constexpr uint64_t kMaxRejectedGrowth = 64 * kMiB;

class BoundedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    peak_at_start_ = PeakRssBytes(server_->pid());
    ASSERT_TRUE(IsOk(CreateModel(server_->stub(), ref_, config_)));
    // Some history, so that "unchanged" is not the empty model.
    ASSERT_TRUE(IsOk(ObserveOk(server_->stub(), ref_, OneIndexExamples(20, kWideDim, 1))));
    absl::StatusOr<ModelFingerprint> before = Fingerprint(server_->stub(), ref_, probes_);
    ASSERT_TRUE(before.ok()) << before.status();
    before_ = *before;
    peak_before_ = PeakRssBytes(server_->pid());
    ASSERT_GT(peak_before_, 0u);
  }

  // The server's peak RSS has not grown by more than a small call's worth, and the
  // model is as it was.
  void ExpectNothingAllocatedOrChanged(absl::string_view what) {
    const uint64_t peak_after = PeakRssBytes(server_->pid());
    if (Verbose()) {
      std::cerr << what << ": server peak RSS " << Mb(peak_at_start_) << " at start, "
                << Mb(peak_before_) << " before the request (20 examples and probes in), "
                << Mb(peak_after) << " after\n";
    }
    EXPECT_LT(peak_after - peak_before_, kMaxRejectedGrowth)
        << what << ": peak RSS " << Mb(peak_before_) << " -> " << Mb(peak_after);
    absl::StatusOr<ModelFingerprint> after = Fingerprint(server_->stub(), ref_, probes_);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(*after, before_) << what << " changed the model";
  }

  const v1::ModelConfig config_ = ParseConfig(kWideConfig);
  const v1::ModelRef ref_ = Ref("acme", "wide");
  const std::vector<v1::Vector> probes_ = MakeProbes(kWideDim, 4, 2, /*sparse=*/true);
  std::unique_ptr<ServerProcess> server_;
  ModelFingerprint before_;
  uint64_t peak_at_start_ = 0;
  uint64_t peak_before_ = 0;
};

TEST_F(BoundedRequestTest, SparseObserveOverMaxRequestBytesIsRefusedBeforeDensifying) {
  const std::vector<v1::Example> examples = OneIndexExamples(kOverBoundExamples, kWideDim, 3);
  v1::ObserveRequest request;
  *request.mutable_ref() = ref_;
  request.mutable_examples()->Add(examples.begin(), examples.end());
  ASSERT_LT(request.ByteSizeLong(), 16u << 10) << "the request is about 13 KB";
  if (Verbose()) std::cerr << "the request is " << request.ByteSizeLong() << " bytes\n";

  v1::ObserveResponse response;
  const grpc::Status status = Observe(server_->stub(), ref_, examples, &response);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  // The flag, its limit and what the request would take.
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("--max_request_bytes"), HasSubstr("67108864"),
                    HasSubstr(absl::StrCat(DenseBatchBytes(kOverBoundExamples, kWideDim)))));
  // The same as one ObserveStream message.
  const grpc::Status streamed = ObserveStream(server_->stub(), ref_, {examples}, &response);
  EXPECT_TRUE(HasCode(streamed, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(streamed.error_message(), HasSubstr("--max_request_bytes"));
  ExpectNothingAllocatedOrChanged("sparse Observe over --max_request_bytes");
}

TEST_F(BoundedRequestTest, SparsePredictOverMaxRequestBytesIsRefusedBeforeDensifying) {
  const std::vector<v1::Vector> inputs =
      InputsOf(OneIndexExamples(kOverBoundExamples, kWideDim, 4));
  std::vector<double> predictions;
  const grpc::Status status = Predict(server_->stub(), ref_, inputs, &predictions);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("--max_request_bytes"), HasSubstr("67108864")));
  ExpectNothingAllocatedOrChanged("sparse Predict over --max_request_bytes");
}

// Every vector is checked before anything is allocated: a bad index in the last of 500
// vectors is reported (INVALID_ARGUMENT, naming it), still without densifying the rest.
TEST_F(BoundedRequestTest, InvalidSparseVectorsAreRefusedWithoutAllocating) {
  struct Case {
    std::string what;
    v1::Vector bad;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"an index equal to dim", SparseVector({kWideDim}, {1.0}), "examples[499]"},
      {"indices not increasing", SparseVector({9, 9}, {1.0, 2.0}), "examples[499]"},
      {"more values than indices", SparseVector({1, 2}, {1.0, 2.0, 3.0}), "examples[499]"},
  };
  for (const Case& c : cases) {
    std::vector<v1::Example> examples = OneIndexExamples(kOverBoundExamples, kWideDim, 5);
    *examples.back().mutable_x() = c.bad;
    v1::ObserveResponse response;
    const grpc::Status status = Observe(server_->stub(), ref_, examples, &response);
    EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT)) << c.what;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.what;
    std::vector<v1::Vector> inputs = InputsOf(examples);
    std::vector<double> predictions;
    const grpc::Status predicted = Predict(server_->stub(), ref_, inputs, &predictions);
    EXPECT_TRUE(HasCode(predicted, Code::INVALID_ARGUMENT)) << c.what;
    EXPECT_THAT(predicted.error_message(), HasSubstr("inputs[499]")) << c.what;
  }
  ExpectNothingAllocatedOrChanged("invalid sparse vectors");
}

// Within the bound a sparse request is what its dense equivalent is, bit for bit, and
// what the core computes.
TEST_F(BoundedRequestTest, SparseRequestWithinTheBoundEqualsTheDenseOne) {
  const v1::ModelRef dense_ref = Ref("acme", "wide-dense");
  ASSERT_TRUE(IsOk(CreateModel(server_->stub(), dense_ref, config_)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config_);
  ASSERT_NE(twin, nullptr);
  // The sparse model has 20 examples of history (SetUp); give the dense one the same.
  const std::vector<v1::Example> history = OneIndexExamples(20, kWideDim, 1);
  std::vector<v1::Example> dense_history;
  for (const v1::Example& e : history) {
    dense_history.push_back(MakeExample(DenseVector(Densify(e.x(), kWideDim)), e.y()));
  }
  ASSERT_TRUE(IsOk(ObserveOk(server_->stub(), dense_ref, dense_history)));
  twin->Observe(history);

  // 24 examples: 12 MiB dense, within 64 MiB; sent sparse to one model, dense to the other.
  const std::vector<v1::Example> sparse = MakeStream(config_, 24, 6, /*sparse=*/true);
  std::vector<v1::Example> dense;
  for (const v1::Example& e : sparse) {
    dense.push_back(MakeExample(DenseVector(Densify(e.x(), kWideDim)), e.y()));
  }
  v1::ObserveResponse sparse_response;
  v1::ObserveResponse dense_response;
  ASSERT_TRUE(IsOk(Observe(server_->stub(), ref_, sparse, &sparse_response)));
  ASSERT_TRUE(IsOk(Observe(server_->stub(), dense_ref, dense, &dense_response)));
  const std::vector<Observation> expected = twin->Observe(sparse);
  const std::vector<double> sparse_predictions(sparse_response.predictions().begin(),
                                               sparse_response.predictions().end());
  const std::vector<double> dense_predictions(dense_response.predictions().begin(),
                                              dense_response.predictions().end());
  EXPECT_EQ(Bits(sparse_predictions), Bits(PredictionsOf(expected)));
  EXPECT_EQ(Bits(dense_predictions), Bits(PredictionsOf(expected)));

  // Predict, sparse and dense, against both models and the twin.
  const std::vector<v1::Vector> sparse_probes = MakeProbes(kWideDim, 16, 7, /*sparse=*/true);
  std::vector<v1::Vector> dense_probes;
  for (const v1::Vector& p : sparse_probes) {
    dense_probes.push_back(DenseVector(Densify(p, kWideDim)));
  }
  const std::vector<double> want = twin->Predict(sparse_probes);
  for (const v1::ModelRef& ref : {ref_, dense_ref}) {
    std::vector<double> got;
    ASSERT_TRUE(IsOk(Predict(server_->stub(), ref, sparse_probes, &got)));
    EXPECT_EQ(Bits(got), Bits(want)) << RefName(ref) << " sparse";
    ASSERT_TRUE(IsOk(Predict(server_->stub(), ref, dense_probes, &got)));
    EXPECT_EQ(Bits(got), Bits(want)) << RefName(ref) << " dense";
  }
}

// The bound is the flag's: a lower one refuses a request the default accepts.
TEST(BoundedRequestFlagTest, MaxRequestBytesIsTheFlagsValue) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_request_bytes=1000000"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kWideConfig);
  const v1::ModelRef ref = Ref("acme", "wide");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  // One example: 524,296 bytes dense; two: 1,048,592, over 1,000,000.
  EXPECT_TRUE(IsOk(ObserveOk(server->stub(), ref, OneIndexExamples(1, kWideDim, 1))));
  const grpc::Status status = ObserveOk(server->stub(), ref, OneIndexExamples(2, kWideDim, 2));
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), AllOf(HasSubstr("--max_request_bytes"),
                                            HasSubstr("1000000"), HasSubstr("1048592")));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), 1u);
}

// ====================================================================================
// A large Restore by one tenant does not stall another tenant's calls.
// ====================================================================================

// Another tenant's calls, back to back on their own connection, until stopped: each
// call's latency, by kind.
class NeighbourCalls {
 public:
  NeighbourCalls(const ServerProcess& server, v1::ModelRef ref, std::vector<v1::Vector> inputs)
      : stub_(OwnStub(server)), ref_(std::move(ref)), inputs_(std::move(inputs)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~NeighbourCalls() { Stop(); }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  // After Stop().
  const std::vector<absl::Duration>& get_model() const { return get_model_; }
  const std::vector<absl::Duration>& predict() const { return predict_; }
  size_t failures() const { return failures_; }
  const std::string& first_failure() const { return first_failure_; }

 private:
  void Run() {
    while (!stop_.load()) {
      v1::ModelInfo info;
      absl::Time start = absl::Now();
      Check(GetModel(*stub_, ref_, &info), "GetModel");
      get_model_.push_back(absl::Now() - start);
      std::vector<double> predictions;
      start = absl::Now();
      Check(Predict(*stub_, ref_, inputs_, &predictions), "Predict");
      predict_.push_back(absl::Now() - start);
    }
  }
  void Check(const grpc::Status& status, absl::string_view what) {
    if (status.ok()) return;
    if (failures_++ == 0) first_failure_ = absl::StrCat(what, ": ", Describe(status));
  }

  std::unique_ptr<Stub> stub_;
  const v1::ModelRef ref_;
  const std::vector<v1::Vector> inputs_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<absl::Duration> get_model_;
  std::vector<absl::Duration> predict_;
  size_t failures_ = 0;
  std::string first_failure_;
};

// Success iff the neighbour's calls all succeeded, were enough to measure, and stayed
// within the bounds; prints the figures with OKL_ISOLATION_VERBOSE.
::testing::AssertionResult StayedFast(const NeighbourCalls& calls, absl::string_view during,
                                      absl::Duration max_p99, absl::Duration max_latency) {
  const absl::Duration get_p99 = Quantile(calls.get_model(), 0.99);
  const absl::Duration predict_p99 = Quantile(calls.predict(), 0.99);
  const absl::Duration get_max = Quantile(calls.get_model(), 1.0);
  const absl::Duration predict_max = Quantile(calls.predict(), 1.0);
  const std::string figures =
      absl::StrCat("tenant B during ", during, ": ", calls.get_model().size(), " GetModel p99 ",
                   Ms(get_p99), " ms max ", Ms(get_max), " ms, ", calls.predict().size(),
                   " Predict p99 ", Ms(predict_p99), " ms max ", Ms(predict_max), " ms");
  if (Verbose()) std::cerr << figures << "\n";
  if (calls.failures() > 0) {
    return ::testing::AssertionFailure()
           << calls.failures() << " calls failed, the first " << calls.first_failure();
  }
  if (calls.predict().size() < 10) {
    return ::testing::AssertionFailure() << "too few calls to measure: " << figures;
  }
  if (get_p99 >= max_p99 || predict_p99 >= max_p99 || get_max >= max_latency ||
      predict_max >= max_latency) {
    return ::testing::AssertionFailure()
           << "over p99 " << max_p99 << " or max " << max_latency << ": " << figures;
  }
  return ::testing::AssertionSuccess() << figures;
}

TEST(RestoreIsolationTest, AnotherTenantsCallsStayFastDuringALargeRestoreAndSnapshot) {
  // The old server held the registry's lock while it decoded and wrote the snapshot:
  // every other call waited the whole Restore (14 s for 300 MiB). Now only CPU is shared.
  const size_t snapshot_size = kSanitized ? 100 * kMiB : 300 * kMiB;
  const absl::Duration max_p99 = absl::Milliseconds(kSanitized ? 500 : 100);
  const absl::Duration max_latency = absl::Seconds(kSanitized ? 3 : 1);

  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig small = ParseConfig(kSmallConfig);
  const v1::ModelRef neighbour = Ref("tenant-b", "small");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), neighbour, small)));
  ASSERT_TRUE(IsOk(ObserveOk(server->stub(), neighbour, MakeStream(small, 200, 1))));

  const v1::ModelConfig big = ParseConfig(kDim4096Config);
  const size_t terms = TermsForSnapshotBytes(big, snapshot_size);
  absl::StatusOr<std::string> bytes = RandomSnapshot(big, terms, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const uint64_t peak_before = PeakRssBytes(server->pid());

  const v1::ModelRef ref = Ref("tenant-a", "big");
  {
    NeighbourCalls calls(*server, neighbour, MakeProbes(4, 16, 2));
    const absl::Time start = absl::Now();
    RestoreCall restore(server->stub(), absl::Seconds(120));
    restore.WriteAll(ref, *bytes, kSnapshotChunkBytes);
    const grpc::Status status = restore.Finish();
    const absl::Duration took = absl::Now() - start;
    calls.Stop();
    ASSERT_TRUE(IsOk(status));
    EXPECT_EQ(restore.info().stats().expansion_size(), terms);
    if (Verbose()) {
      std::cerr << "Restore of " << Mb(bytes->size()) << " (" << terms
                << " terms at dim 4096) took " << took << "; server peak RSS "
                << Mb(peak_before) << " before, " << Mb(PeakRssBytes(server->pid()))
                << " after, RSS after "
                << Mb(ProcStatusBytes(server->pid(), "VmRSS").value_or(0)) << "\n";
    }
    EXPECT_TRUE(StayedFast(calls, "the Restore", max_p99, max_latency));
  }
  {
    NeighbourCalls calls(*server, neighbour, MakeProbes(4, 16, 2));
    std::string snapshot;
    const absl::Time start = absl::Now();
    const grpc::Status status = Snapshot(server->stub(), ref, &snapshot);
    const absl::Duration took = absl::Now() - start;
    calls.Stop();
    ASSERT_TRUE(IsOk(status));
    // A restored model's snapshot is the bytes it was restored from.
    EXPECT_TRUE(snapshot == *bytes) << "the snapshot differs from the restored bytes";
    if (Verbose()) std::cerr << "Snapshot of the same took " << took << "\n";
    EXPECT_TRUE(StayedFast(calls, "the Snapshot", max_p99, max_latency));
  }
}

// Requests on the model a Restore replaces go on: before the swap on the old model,
// after it on the new one (a request that found the old one waits for the swap and is
// applied to the new one), none refused, none lost, none applied twice.
TEST(RestoreIsolationTest, ObservesOnTheModelBeingReplacedContinueOnTheNewOne) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 256
    kernel { gaussian { gamma: 0.01 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    lambda: 0.001
    budget { max_terms: 50000 }
  )pb");
  const v1::ModelRef ref = Ref("acme", "replaced");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  // The replacement: 40,000 terms (80 MiB) and a million steps, far more than the old
  // model reaches meanwhile, so each response's steps say which model it came from.
  absl::StatusOr<ModelState> state = RandomState(CoreConfig(config), 40000, 1);
  ASSERT_TRUE(state.ok()) << state.status();
  state->steps = 1000000;
  absl::StatusOr<std::string> bytes = EncodeSnapshot(*state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const uint64_t restored_steps = state->steps;

  constexpr size_t kBatch = 4;
  std::vector<std::vector<v1::Example>> batches;  // acknowledged, in order
  std::vector<uint64_t> steps_after;
  std::string failure;
  std::atomic<bool> restored{false};
  std::thread observer([&] {
    std::unique_ptr<Stub> stub = OwnStub(*server);
    // Until the Restore is done, and 10 batches more.
    int after = 0;
    for (uint64_t seed = 100; after < 10 && failure.empty(); ++seed) {
      if (restored.load()) ++after;
      const std::vector<v1::Example> batch = MakeStream(config, kBatch, seed);
      v1::ObserveResponse response;
      const grpc::Status status = Observe(*stub, ref, batch, &response);
      if (!status.ok()) {
        failure = Describe(status);
        break;
      }
      batches.push_back(batch);
      steps_after.push_back(response.steps());
    }
  });
  absl::SleepFor(absl::Milliseconds(200));
  const grpc::Status status = Restore(server->stub(), ref, *bytes);
  restored.store(true);
  observer.join();
  ASSERT_TRUE(IsOk(status));
  EXPECT_EQ(failure, "") << "an Observe failed while its model was replaced";

  std::unique_ptr<CoreTwin> twin = CoreTwin::FromState(*state);
  ASSERT_NE(twin, nullptr);
  size_t old_batches = 0;
  uint64_t expected = restored_steps;
  for (size_t i = 0; i < batches.size(); ++i) {
    if (steps_after[i] < restored_steps) {
      // The old model's: all of them come before the first of the new one.
      EXPECT_EQ(old_batches, i) << "batch " << i << " went to the old model after the swap";
      EXPECT_EQ(steps_after[i], (i + 1) * kBatch);
      ++old_batches;
      continue;
    }
    expected += kBatch;
    EXPECT_EQ(steps_after[i], expected) << "batch " << i;
    twin->Observe(batches[i]);
  }
  if (Verbose()) {
    std::cerr << old_batches << " batches went to the old model, "
              << batches.size() - old_batches << " to the restored one\n";
  }
  EXPECT_GT(old_batches, 0u);
  EXPECT_GE(batches.size() - old_batches, 10u);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, MakeProbes(256, 4, 7)));
}

// ====================================================================================
// Every config number finite; a restart after Observe and SIGTERM.
// ====================================================================================

TEST(ConfigValidationTest, NonFiniteNumberInAFieldTheConfigDoesNotReadIsInvalidArgument) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  struct Case {
    const char* field;
    const char* config;
  };
  const Case cases[] = {
      // theta is read by the POWER schedule only.
      {"learning_rate.theta", R"pb(dim: 2
                                   kernel { gaussian { gamma: 1 } }
                                   loss { squared {} }
                                   learning_rate { schedule: CONSTANT eta0: 0.1 theta: nan }
                                   budget { max_terms: 10 })pb"},
      {"learning_rate.theta", R"pb(dim: 2
                                   kernel { gaussian { gamma: 1 } }
                                   loss { squared {} }
                                   learning_rate { schedule: INVERSE_SQRT eta0: 0.1 theta: inf }
                                   budget { max_terms: 10 })pb"},
      {"learning_rate.theta", R"pb(dim: 2
                                   kernel { gaussian { gamma: 1 } }
                                   loss { squared {} }
                                   learning_rate { eta0: 0.1 theta: -inf }
                                   budget { max_terms: 10 })pb"},
      {"lambda", R"pb(dim: 2
                      kernel { gaussian { gamma: 1 } }
                      loss { squared {} }
                      learning_rate { eta0: 0.1 }
                      lambda: nan
                      budget { max_terms: 10 })pb"},
      {"budget.drop_below", R"pb(dim: 2
                                 kernel { gaussian { gamma: 1 } }
                                 loss { squared {} }
                                 learning_rate { eta0: 0.1 }
                                 budget { max_terms: 10 drop_below: inf })pb"},
      {"loss.nu", R"pb(dim: 2
                       kernel { gaussian { gamma: 1 } }
                       loss { hinge { nu: nan } }
                       learning_rate { eta0: 0.1 }
                       budget { max_terms: 10 })pb"},
  };
  for (const Case& c : cases) {
    const v1::ModelConfig config = ParseConfig(c.config);
    const v1::ModelRef ref = Ref("acme", "nan");
    const grpc::Status status = CreateModel(server->stub(), ref, config);
    EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT)) << c.config;
    EXPECT_THAT(status.error_message(), HasSubstr(c.field)) << c.config;
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(server->stub(), ref, &info), Code::NOT_FOUND));
  }
}

// A snapshot carrying such a config is refused at its first chunk, as bytes that are
// not a valid snapshot.
TEST(ConfigValidationTest, SnapshotWhoseConfigHasANaNIsRefused) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  absl::StatusOr<ModelState> state = RandomState(CoreConfig(config), 10, 1);
  ASSERT_TRUE(state.ok()) << state.status();
  state->config.learning_rate.theta = std::nan("");  // CONSTANT: theta is not read
  absl::StatusOr<std::string> bytes = EncodeSnapshot(*state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const v1::ModelRef ref = Ref("acme", "nan");
  const grpc::Status status = Restore(server->stub(), ref, *bytes);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  EXPECT_THAT(status.error_message(), HasSubstr("learning_rate.theta"));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), ref, &info), Code::NOT_FOUND));
}

// A restart: Observe, SIGTERM (the final checkpoint stores the config as the
// state holds it), start again on the same data. Stored configs are compared by their
// canonical bytes, so every valid config must come back, whatever it holds in the fields
// its mode does not read, and -0.0 where 0 is allowed.
TEST(RestartTest, ServerRestartsAfterObserveAndSigtermForEveryKindOfValidConfig) {
  const std::vector<std::pair<std::string, std::string>> configs = {
      {"plain", kSmallConfig},
      {"constant-with-theta", R"pb(dim: 3
                                   kernel { gaussian { gamma: 0.5 } }
                                   loss { squared {} }
                                   learning_rate { schedule: CONSTANT eta0: 0.2 theta: 0.7 }
                                   lambda: 0.01
                                   budget { max_terms: 40 })pb"},
      {"negative-zeros", R"pb(dim: 3
                              kernel { polynomial { gamma: 0.5 c: -0.0 degree: 2 } }
                              loss { epsilon_insensitive { epsilon: -0.0 } }
                              learning_rate { eta0: 0.05 }
                              lambda: -0.0
                              budget { max_terms: 40 drop_below: -0.0 })pb"},
      {"power-hinge-nu", R"pb(dim: 3
                              kernel { laplacian { gamma: 0.5 } }
                              loss { hinge { rho: 1 nu: 0.1 } }
                              learning_rate { schedule: POWER eta0: 0.5 theta: 0.6 }
                              lambda: 0.01
                              offset: true
                              averaged: true
                              budget { max_terms: 30 policy: SMALLEST })pb"},
      {"regret-window", R"pb(dim: 3
                             kernel { gaussian { gamma: 0.5 } }
                             loss { squared {} }
                             learning_rate { eta0: 0.2 }
                             lambda: 0.01
                             regret_window: 50
                             budget { max_terms: 40 })pb"},
  };
  TempDir dir("okl_isolation_test");
  std::unique_ptr<ServerProcess> server = StartServer({}, {.data_dir = dir.data_dir()});
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<CoreTwin>> twins;
  std::vector<v1::ModelConfig> wire;
  for (size_t i = 0; i < configs.size(); ++i) {
    const v1::ModelConfig config = ParseConfig(configs[i].second);
    wire.push_back(config);
    const v1::ModelRef ref = Ref("acme", configs[i].first);
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config))) << configs[i].first;
    twins.push_back(CoreTwin::Create(config));
    ASSERT_NE(twins.back(), nullptr);
    const std::vector<v1::Example> stream = MakeStream(config, 120, 10 + i);
    ASSERT_TRUE(IsOk(ObserveOk(server->stub(), ref, stream))) << configs[i].first;
    twins.back()->Observe(stream);
  }
  absl::StatusOr<int> exit = server->Stop();
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << "SIGTERM exit status " << *exit << "; log:\n"
      << server->Log();

  // Twice: after the first restart the models come from the checkpoint SIGTERM wrote,
  // after the second from one written by a server that restored them.
  for (int restart = 1; restart <= 2; ++restart) {
    server = StartServer({}, {.data_dir = dir.data_dir()});
    ASSERT_NE(server, nullptr) << "restart " << restart;
    for (size_t i = 0; i < configs.size(); ++i) {
      const v1::ModelRef ref = Ref("acme", configs[i].first);
      const std::vector<v1::Vector> probes = MakeProbes(wire[i].dim(), 8, 100 + i);
      EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twins[i], probes))
          << configs[i].first << " after restart " << restart;
      v1::ModelInfo info;
      ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
      EXPECT_EQ(CanonicalConfigBytes(CoreConfig(info.config())),
                CanonicalConfigBytes(CoreConfig(wire[i])))
          << configs[i].first;
      const std::vector<v1::Example> more = MakeStream(wire[i], 30, 1000 * restart + i);
      ASSERT_TRUE(IsOk(ObserveOk(server->stub(), ref, more))) << configs[i].first;
      twins[i]->Observe(more);
      EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twins[i], probes)) << configs[i].first;
    }
    exit = server->Stop();
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << "log:\n" << server->Log();
  }
}

// ====================================================================================
// The snapshot size limit, and the checkpoint's back-off.
// ====================================================================================

TEST(SnapshotLimitTest, ConfigWhoseSnapshotCouldExceed2GiBIsInvalidArgument) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig too_big = WithMaxTerms(ParseConfig(kWideConfig), 4100);
  ASSERT_GT(MaxSnapshotBytes(CoreConfig(too_big)), kMaxSnapshotBytes);
  // The most terms that fit, as the server should compute it.
  uint32_t most = 4100;
  while (MaxSnapshotBytes(CoreConfig(WithMaxTerms(too_big, most))) > kMaxSnapshotBytes) --most;

  const v1::ModelRef ref = Ref("acme", "huge");
  const grpc::Status status = CreateModel(server->stub(), ref, too_big);
  EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("max_terms"), HasSubstr(absl::StrCat("at most ", most))));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), ref, &info), Code::NOT_FOUND));

  // What it says fits, fits (nothing of it is allocated until terms arrive).
  const v1::ModelConfig fits = WithMaxTerms(too_big, most);
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), ref, fits)));
  EXPECT_TRUE(IsOk(ObserveOk(server->stub(), ref, OneIndexExamples(3, kWideDim, 1))));
  EXPECT_TRUE(IsOk(DeleteModel(server->stub(), ref)));
  EXPECT_TRUE(HasCode(CreateModel(server->stub(), ref, WithMaxTerms(too_big, most + 1)),
                      Code::INVALID_ARGUMENT));

  // A Restore of such a config (one term: 512 KiB of bytes) is refused likewise.
  absl::StatusOr<std::string> bytes = RandomSnapshot(too_big, 1, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const grpc::Status restored = Restore(server->stub(), Ref("acme", "huge-restored"), *bytes);
  EXPECT_TRUE(HasCode(restored, Code::INVALID_ARGUMENT));
  EXPECT_THAT(restored.error_message(), HasSubstr(absl::StrCat("at most ", most)));
  EXPECT_TRUE(
      HasCode(GetModel(server->stub(), Ref("acme", "huge-restored"), &info), Code::NOT_FOUND));
}

// The full disk is RLIMIT_FSIZE (see durability_test.cc): the logged batch fits under it,
// the checkpoint that would follow it does not. RocksDB sees EFBIG, an I/O error that
// stops its writes until a restart, so the failed checkpoint is counted and not retried
// (every retry would fail; the back-off of other failures is ModelStoreTest's), the
// metrics and health say so, and nothing is lost: the log keeps every example, so a
// restart with room restores them all.
TEST(CheckpointFailureTest, ACheckpointOnAStoppedStoreIsNotRetriedAndLosesNothing) {
  TempDir dir("okl_isolation_test");
  // 1200 terms: the server applies (and logs) an Observe in groups of 2^26 / (dim x
  // max_terms) = 1747 examples, so the 1500 below are one log record.
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 32
    kernel { gaussian { gamma: 0.1 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    lambda: 0.001
    budget { max_terms: 1200 }
  )pb");
  const v1::ModelRef ref = Ref("acme", "unwritable");
  const std::vector<v1::Vector> probes = MakeProbes(32, 8, 3);
  // 1500 examples: one log record of ~400 KB; the checkpoint (1200 terms of 33 doubles)
  // another ~320 KB, past the 640 KiB the files may grow to.
  const std::vector<v1::Example> stream = MakeStream(config, 1500, 4);
  const std::vector<std::string> flags = {"--checkpoint_every_examples=1000",
                                          "--checkpoint_every=0"};
  std::unique_ptr<ServerProcess> server =
      StartServer(flags, {.data_dir = dir.data_dir(), .file_size_limit = 640 << 10});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  ASSERT_TRUE(IsOk(ObserveOk(server->stub(), ref, stream)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  twin->Observe(stream);

  // The first attempt follows within a poll or two.
  double seen = 0;
  const absl::Time begin = absl::Now();
  while (absl::Now() - begin < absl::Seconds(10) && seen < 1) {
    seen = MetricOrFail(*server, "okl_checkpoint_failures_total");
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(seen, 1) << "the checkpoint did not fail once; log:\n" << server->Log();
  EXPECT_EQ(MetricOrFail(*server, "okl_store_writable"), 0);
  EXPECT_EQ(MetricOrFail(*server, R"(okl_store_write_failures_total{kind="io_error"})"), 1);
  // Not retried: with back-off alone it would have been, at +1 s and +3 s.
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(MetricOrFail(*server, "okl_checkpoint_failures_total"), 1);
  absl::StatusOr<ServingStatus> writes =
      CheckHealth(server->channel(), "okl.v1.OnlineKernelLearning/writes");
  ASSERT_TRUE(writes.ok()) << writes.status();
  EXPECT_EQ(*writes, ServingStatus::kNotServing);
  EXPECT_EQ(MetricOrFail(*server, "okl_models_failing_checkpoints"), 1);
  // The model serves on, unchanged.
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  // A model created on the full disk is refused (it would not be durable), and gives
  // its reservation back.
  const double reserved = MetricOrFail(*server, "okl_quota_reserved_bytes");
  const grpc::Status created = CreateModel(server->stub(), Ref("acme", "on-full-disk"), config);
  EXPECT_THAT(created.error_code(),
              ::testing::AnyOf(Code::UNAVAILABLE, Code::RESOURCE_EXHAUSTED))
      << Describe(created);
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), reserved);

  // A crash, then a restart with room: every acknowledged example is back, and the
  // checkpoint now succeeds.
  ASSERT_TRUE(server->Kill().ok());
  server = StartServer(flags, {.data_dir = dir.data_dir()});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  const std::vector<v1::Example> more = MakeStream(config, 1000, 5);
  ASSERT_TRUE(IsOk(ObserveOk(server->stub(), ref, more)));
  twin->Observe(more);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(MetricOrFail(*server, "okl_checkpoint_failures_total"), 0);
  EXPECT_EQ(MetricOrFail(*server, "okl_models_failing_checkpoints"), 0);
  absl::StatusOr<int> exit = server->Stop();
  ASSERT_TRUE(exit.ok()) << exit.status();
  server = StartServer(flags, {.data_dir = dir.data_dir()});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
}

// An Observe larger than one of the server's groups is logged and applied group by group
// (so that a cancelled call stops between them). When the store fails part-way it must
// not answer with a code clients retry (UNAVAILABLE, RESOURCE_EXHAUSTED) for a request it
// partly applied: a retry would apply the first groups twice. The full disk here holds
// the first group's log record and not the second's.
TEST(FullDiskTest, APartlyAppliedObserveIsNotAnsweredWithARetryableCode) {
  TempDir dir("okl_isolation_test");
  // dim 32, 2000 terms: groups of 2^26 / 64000 = 1048 examples, ~277 KB of log each.
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 32
    kernel { gaussian { gamma: 0.1 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    lambda: 0.001
    budget { max_terms: 2000 }
  )pb");
  const v1::ModelRef ref = Ref("acme", "half-written");
  std::unique_ptr<ServerProcess> server =
      StartServer({"--checkpoint_every_examples=0", "--checkpoint_every=0"},
                  {.data_dir = dir.data_dir(), .file_size_limit = 350 << 10});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  const grpc::Status status = ObserveOk(server->stub(), ref, MakeStream(config, 1500, 4));
  ASSERT_FALSE(status.ok()) << "the full disk took all 1500 examples";
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  if (status.error_code() == Code::UNAVAILABLE ||
      status.error_code() == Code::RESOURCE_EXHAUSTED) {
    EXPECT_EQ(info.stats().steps(), 0u) << Describe(status);
  } else {
    EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(info.stats().steps())))
        << "the error does not say how many examples were applied";
  }
}

// ====================================================================================
// The ObserveStream response cap.
// ====================================================================================

TEST(ObserveStreamCapTest, ResponseCarriesAtMostMaxResponsePredictions) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_response_predictions=1000"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const v1::ModelRef ref = Ref("acme", "m");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  const std::vector<v1::Example> stream = MakeStream(config, 5000, 1);
  v1::ObserveResponse response;
  // Batches of 64: the cap falls inside one (1000 = 15 x 64 + 40).
  ASSERT_TRUE(IsOk(ObserveStream(
      server->stub(), ref, SplitIntoBatches(stream, std::vector<size_t>{64}), &response)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  const std::vector<Observation> expected = twin->Observe(stream);
  EXPECT_EQ(response.predictions_size(), 1000);
  EXPECT_EQ(response.losses_size(), 1000);
  EXPECT_EQ(response.predictions_omitted(), 4000u);
  EXPECT_EQ(response.steps(), 5000u);
  EXPECT_EQ(response.expansion_size(), twin->model().expansion_size());
  const std::vector<double> got(response.predictions().begin(), response.predictions().end());
  const std::vector<double> want = PredictionsOf(expected);
  EXPECT_EQ(Bits(got), Bits(absl::MakeConstSpan(want).first(1000)));
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, MakeProbes(4, 16, 2)));
}

// The cap is ObserveStream's (its response accumulates over messages; okl_server --help,
// server.h and okl.proto all say so); a unary Observe's response, bounded by --max_batch,
// carries every prediction.
TEST(ObserveStreamCapTest, UnaryObserveReturnsEveryPrediction) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_response_predictions=1000"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const v1::ModelRef ref = Ref("acme", "m");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  const std::vector<v1::Example> batch = MakeStream(config, 5000, 1);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(server->stub(), ref, batch, &response)));
  EXPECT_EQ(response.predictions_size(), 5000);
  EXPECT_EQ(response.losses_size(), 5000);
  EXPECT_EQ(response.predictions_omitted(), 0u);
  EXPECT_EQ(response.steps(), 5000u);
}

// ====================================================================================
// Cancellation: a call past its deadline stops using the server's CPU.
// ====================================================================================

class CancellationTest : public ::testing::Test {
 protected:
  // dim 512 and 20,000 terms: one Predict costs 10 M kernel terms per input (under a
  // sanitizer, which slows it several times, a quarter of the terms).
  static constexpr uint32_t kDim = 512;
  static constexpr size_t kTerms = kSanitized ? 5000 : 20000;

  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    config_ = ParseConfig(R"pb(
      dim: 512
      kernel { gaussian { gamma: 0.002 } }
      loss { squared {} }
      learning_rate { eta0: 0.05 }
      lambda: 0.001
      budget { max_terms: 20000 }
    )pb");
    absl::StatusOr<ModelState> state = RandomState(CoreConfig(config_), kTerms, 1);
    ASSERT_TRUE(state.ok()) << state.status();
    absl::StatusOr<std::string> bytes = EncodeSnapshot(*state);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(IsOk(Restore(server_->stub(), ref_, *bytes)));
    twin_ = CoreTwin::FromState(*state);
    ASSERT_NE(twin_, nullptr);
  }

  // The server's CPU seconds for Predict of `inputs`, run to completion.
  double CpuOfPredict(absl::Span<const v1::Vector> inputs) {
    const double before = CpuSeconds(server_->pid());
    std::vector<double> predictions;
    EXPECT_TRUE(IsOk(Predict(server_->stub(), ref_, inputs, &predictions)));
    return CpuSeconds(server_->pid()) - before;
  }

  // Waits until the server's CPU time stops growing (under 50 ms over 500 ms; at most
  // 60 s) and returns it. A server still working on a cancelled call keeps a core busy.
  double CpuWhenIdle() {
    double last = CpuSeconds(server_->pid());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(500));
      const double now = CpuSeconds(server_->pid());
      if (now - last < 0.05) return now;
      last = now;
    }
    ADD_FAILURE() << "the server did not go idle within 60 s";
    return last;
  }

  v1::ModelConfig config_;
  const v1::ModelRef ref_ = Ref("acme", "big");
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<CoreTwin> twin_;
};

TEST_F(CancellationTest, PredictPastItsDeadlineStopsWorking) {
  const std::vector<v1::Vector> inputs = MakeProbes(kDim, 10000, 2);
  // What 64 inputs cost run to completion (a quarter of one of the server's groups).
  const double per_64 = CpuOfPredict(absl::MakeConstSpan(inputs).first(64));
  const double full = per_64 * 10000 / 64;

  v1::PredictRequest request;
  *request.mutable_ref() = ref_;
  request.mutable_inputs()->Add(inputs.begin(), inputs.end());
  const double cpu_before = CpuWhenIdle();
  grpc::ClientContext context;
  const absl::Duration timeout = absl::Seconds(1);
  SetDeadline(&context, timeout);
  v1::PredictResponse response;
  const absl::Time start = absl::Now();
  const grpc::Status status = server_->stub().Predict(&context, request, &response);
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(HasCode(status, Code::DEADLINE_EXCEEDED));
  EXPECT_LT(took, timeout + absl::Seconds(1));
  const double used = CpuWhenIdle() - cpu_before;
  if (Verbose()) {
    std::cerr << "Predict of 10,000 inputs at " << kTerms << " terms x dim 512: " << full
              << " CPU s to complete (" << per_64 << " s per 64 inputs); with a " << timeout
              << " deadline it returned in " << took << " and the server used " << used
              << " CPU s on it\n";
  }
  // The deadline's worth of work and the group running then, not the whole call.
  EXPECT_LT(used, 0.25 * full) << "the server went on after the deadline";
  // It still serves, unchanged.
  std::vector<double> predictions;
  const std::vector<v1::Vector> probes = MakeProbes(kDim, 4, 3);
  ASSERT_TRUE(IsOk(Predict(server_->stub(), ref_, probes, &predictions)));
  EXPECT_EQ(Bits(predictions), Bits(twin_->Predict(probes)));
}

// Observe stops between groups too; the examples applied before it stopped stay
// applied (whole groups, logged), and are exactly a prefix of the batch.
TEST_F(CancellationTest, ObservePastItsDeadlineStopsWorkingAfterAPrefix) {
  const std::vector<v1::Example> batch = MakeStream(config_, 10000, 4);
  v1::ObserveRequest request;
  *request.mutable_ref() = ref_;
  request.mutable_examples()->Add(batch.begin(), batch.end());
  const double cpu_before = CpuWhenIdle();
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(1));
  v1::ObserveResponse response;
  const grpc::Status status = server_->stub().Observe(&context, request, &response);
  EXPECT_TRUE(HasCode(status, Code::DEADLINE_EXCEEDED));
  const double used = CpuWhenIdle() - cpu_before;
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server_->stub(), ref_, &info)));
  const uint64_t applied = info.stats().steps() - twin_->model().steps();
  if (Verbose()) {
    std::cerr << "Observe of 10,000 examples with a 1 s deadline: " << applied << " applied, "
              << used << " CPU s of the server\n";
  }
  // Each example costs about what a prediction does: 10,000 would take over a minute.
  EXPECT_LT(applied, 2000u) << "the server went on after the deadline";
  EXPECT_LT(used, 15.0) << "the server went on after the deadline";
  twin_->Observe(absl::MakeConstSpan(batch).first(applied));
  EXPECT_TRUE(MatchesTwin(server_->stub(), ref_, *twin_, MakeProbes(kDim, 4, 5)));
}

}  // namespace
}  // namespace okl::testing
