// tests/client/client_test.cc
//
// okl::Client against a real okl_server on loopback: every method, the server's error
// codes and messages, deadlines (a server stopped with SIGSTOP), retries across a server
// restart, snapshots through files, and the regret statistics.

#include "client/client.h"

#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tests/client/client_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kService[] = "okl.v1.OnlineKernelLearning";

// kill(SIGSTOP) returns before every thread of the target has stopped; /proc says when.
bool WaitUntilStopped(pid_t pid) {
  auto stopped = [](const std::filesystem::path& stat_path) {
    std::ifstream stat(stat_path);
    std::string line;
    std::getline(stat, line);
    // "tid (comm) S ...": the state follows the last ')'.
    const size_t paren = line.rfind(')');
    return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    bool all = true;
    std::error_code error;
    for (const auto& task :
         std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), error)) {
      all = all && stopped(task.path() / "stat");
    }
    if (all && !error) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
  }

  Client MakeClient(ClientOptions options = {}) const {
    absl::StatusOr<Client> client = Client::Connect(server_->address(), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ClientTest, CreateGetListDeleteRoundTrip) {
  const Client client = MakeClient();
  const ModelConfig config = TestConfig();
  absl::StatusOr<ModelSummary> created = client.CreateModel({"acme", "b"}, config);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->tenant, "acme");
  EXPECT_EQ(created->model, "b");
  EXPECT_EQ(created->config, config);
  EXPECT_EQ(created->stats.steps, 0u);
  ASSERT_TRUE(client.CreateModel({"acme", "a"}, config).ok());
  ASSERT_TRUE(client.CreateModel({"other", "c"}, config).ok());

  absl::StatusOr<ModelSummary> got = client.GetModel({"acme", "b"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->config, config);
  EXPECT_FALSE(got->stats.regret.has_value());
  EXPECT_FALSE(got->stats.truncation_error_bound.has_value());

  auto names = [](const std::vector<ModelSummary>& models) {
    std::vector<std::string> out;
    for (const ModelSummary& m : models) out.push_back(absl::StrCat(m.tenant, "/", m.model));
    return out;
  };
  absl::StatusOr<std::vector<ModelSummary>> acme = client.ListModels("acme");
  ASSERT_TRUE(acme.ok()) << acme.status();
  EXPECT_THAT(names(*acme), ElementsAre("acme/a", "acme/b"));
  absl::StatusOr<std::vector<ModelSummary>> all = client.ListModels();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(names(*all), ElementsAre("acme/a", "acme/b", "other/c"));

  ASSERT_TRUE(client.DeleteModel({"acme", "b"}).ok());
  EXPECT_EQ(client.GetModel({"acme", "b"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.DeleteModel({"acme", "b"}).code(), absl::StatusCode::kNotFound);
  acme = client.ListModels("acme");
  ASSERT_TRUE(acme.ok()) << acme.status();
  EXPECT_THAT(names(*acme), ElementsAre("acme/a"));
}

// The client's status is the server's: the same code and the same message, as a raw
// call through the generated stub receives them.
TEST_F(ClientTest, ErrorsCarryTheServersCodeAndMessage) {
  const Client client = MakeClient();
  const ModelId id{"acme", "m"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  v1::ModelRef ref;
  ref.set_tenant(id.tenant);
  ref.set_model(id.model);
  auto raw = [&](auto call) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return call(&context);
  };

  // ALREADY_EXISTS
  absl::Status status = client.CreateModel(id, TestConfig()).status();
  v1::CreateModelRequest create;
  *create.mutable_ref() = ref;
  *create.mutable_config() = ToProto(TestConfig());
  v1::ModelInfo info;
  grpc::Status expected = raw(
      [&](grpc::ClientContext* c) { return server_->stub().CreateModel(c, create, &info); });
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(static_cast<int>(status.code()), static_cast<int>(expected.error_code()));
  EXPECT_EQ(status.message(), expected.error_message());
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"m\""));

  // NOT_FOUND
  status = client.GetModel({"acme", "missing"}).status();
  v1::ModelRef missing = ref;
  missing.set_model("missing");
  expected =
      raw([&](grpc::ClientContext* c) { return server_->stub().GetModel(c, missing, &info); });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), expected.error_message());

  // INVALID_ARGUMENT: an input of the wrong dimension (2 values for a model of dim 3).
  const std::vector<double> xs = {0.1, 0.2};
  const std::vector<double> ys = {1.0};
  status = client.Observe(id, xs, ys).status();
  v1::ObserveRequest observe;
  *observe.mutable_ref() = ref;
  v1::Example* example = observe.add_examples();
  example->mutable_x()->add_values(0.1);
  example->mutable_x()->add_values(0.2);
  example->set_y(1.0);
  v1::ObserveResponse observed;
  expected = raw(
      [&](grpc::ClientContext* c) { return server_->stub().Observe(c, observe, &observed); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), expected.error_message());
  EXPECT_THAT(std::string(status.message()), HasSubstr("dim"));

  // INVALID_ARGUMENT for a name, and for a config the server cannot run.
  EXPECT_EQ(client.CreateModel({"acme", "bad name!"}, TestConfig()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelConfig unbounded = TestConfig();
  unbounded.budget.max_terms = 0;
  status = client.CreateModel({"acme", "unbounded"}, unbounded).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_terms"));
  // A NaN label: validated whole, nothing applied.
  status = client.Observe(id, {0.1, 0.2, 0.3}, {std::nan("")}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ModelSummary> summary = client.GetModel(id);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->stats.steps, 0u);
}

TEST_F(ClientTest, ObserveAndPredictMatchCoreBitForBit) {
  const Client client = MakeClient();
  const ModelId id{"acme", "m"};
  // Huber's bounded derivative makes the truncation bound apply once the budget bites.
  ModelConfig config = TestConfig();
  config.loss = {.type = LossType::kHuber, .delta = 0.5};
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(1000, kDim, /*seed=*/7);
  CoreTwin twin(config);
  std::vector<double> predictions, losses;
  for (size_t begin = 0; begin < data.size(); begin += 250) {
    const size_t end = begin + 250;
    absl::StatusOr<ObserveResult> result =
        client.Observe(id, data.xs_range(begin, end), data.ys_range(begin, end));
    ASSERT_TRUE(result.ok()) << result.status();
    twin.Observe(data, begin, end);
    EXPECT_EQ(result->steps, end);
    EXPECT_EQ(result->expansion_size, twin.model->expansion_size());
    predictions.insert(predictions.end(), result->predictions.begin(),
                       result->predictions.end());
    losses.insert(losses.end(), result->losses.begin(), result->losses.end());
  }
  EXPECT_EQ(Bits(predictions), Bits(twin.predictions));
  EXPECT_EQ(Bits(losses), Bits(twin.losses));

  const std::vector<double> probes = MakeProbes(50, kDim, /*seed=*/8);
  absl::StatusOr<std::vector<double>> predicted = client.Predict(id, probes, kDim);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  EXPECT_EQ(Bits(*predicted), Bits(twin.Predict(probes)));

  absl::StatusOr<ModelSummary> summary = client.GetModel(id);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const ModelStats core = twin.model->stats();
  EXPECT_EQ(summary->stats.steps, core.steps);
  EXPECT_EQ(summary->stats.expansion_size, core.expansion_size);
  EXPECT_EQ(Bits({summary->stats.cumulative_loss}), Bits({core.cumulative_loss}));
  // The budget removed terms, so the (constant-rate, OLDEST, bounded-loss) truncation
  // bound applies.
  ASSERT_TRUE(core.truncation_error_bound.has_value());
  ASSERT_TRUE(summary->stats.truncation_error_bound.has_value());
  EXPECT_EQ(*summary->stats.truncation_error_bound, *core.truncation_error_bound);
  EXPECT_EQ(summary->stats.terms_removed, core.terms_removed);
  EXPECT_GT(summary->stats.terms_removed, 0u);
  EXPECT_EQ(summary->stats.offset, core.offset);
  EXPECT_EQ(summary->stats.margin, 0.0);  // Huber has no margin
}

// A novelty model's Predict also returns the server's f(x) < rho per input, which agrees
// with the predictions and the model's rho; another model's is empty.
TEST_F(ClientTest, PredictReturnsTheNoveltyDecisionOfANoveltyModel) {
  const Client client = MakeClient();
  ModelConfig config = TestConfig();
  config.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.2};
  const ModelId id{"acme", "novelty"};
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(300, kDim, /*seed=*/11);
  ASSERT_TRUE(client.Observe(id, data.xs_range(0, 300), data.ys_range(0, 300)).ok());
  const std::vector<double> probes = MakeProbes(40, kDim, /*seed=*/12);
  std::vector<bool> novel = {true};
  absl::StatusOr<std::vector<double>> predicted = client.Predict(id, probes, kDim, &novel);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  absl::StatusOr<ModelSummary> summary = client.GetModel(id);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(novel.size(), predicted->size());
  size_t flagged = 0;
  for (size_t i = 0; i < novel.size(); ++i) {
    EXPECT_EQ(novel[i], (*predicted)[i] < summary->stats.margin) << "input " << i;
    flagged += novel[i];
  }
  EXPECT_GT(flagged, 0u);
  EXPECT_LT(flagged, novel.size());

  const ModelId other{"acme", "not-novelty"};
  ASSERT_TRUE(client.CreateModel(other, TestConfig()).ok());
  ASSERT_TRUE(client.Predict(other, probes, kDim, &novel).ok());
  EXPECT_TRUE(novel.empty());
}

TEST_F(ClientTest, TheLearnedMarginAndTheOffsetAreReadIntoTheStats) {
  const Client client = MakeClient();
  ModelConfig hinge = TestConfig();
  hinge.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.2};
  hinge.offset = true;
  ModelConfig tube = TestConfig();
  tube.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1, .nu = 0.3};
  ModelConfig novelty = TestConfig();
  novelty.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.1};
  int n = 0;
  for (const ModelConfig& config : {hinge, tube, novelty}) {
    SCOPED_TRACE(LossTypeName(config.loss.type));
    const ModelId id{"acme", absl::StrCat("margin-", n++)};
    ASSERT_TRUE(client.CreateModel(id, config).ok());
    Data data = MakeData(300, kDim, /*seed=*/9);
    if (config.loss.type == LossType::kHinge) {
      for (double& y : data.ys) y = y >= 0 ? 1.0 : -1.0;
    }
    ASSERT_TRUE(client.Observe(id, data.xs, data.ys).ok());
    CoreTwin twin(config);
    twin.Observe(data, 0, data.size());
    absl::StatusOr<ModelSummary> summary = client.GetModel(id);
    ASSERT_TRUE(summary.ok()) << summary.status();
    const ModelStats core = twin.model->stats();
    EXPECT_EQ(summary->stats.margin, core.margin);
    EXPECT_NE(summary->stats.margin, config.loss.type == LossType::kEpsilonInsensitive
                                         ? config.loss.epsilon
                                         : config.loss.rho);  // learned
    EXPECT_EQ(summary->stats.offset, core.offset);
    EXPECT_EQ(summary->stats.terms_removed, core.terms_removed);
  }
}

TEST_F(ClientTest, ChecksSizesLocallyBeforeCallingTheServer) {
  const Client client = MakeClient();
  const ModelId id{"acme", "m"};
  EXPECT_EQ(client.Predict(id, {1, 2, 3}, /*dim=*/2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Predict(id, {1, 2, 3}, /*dim=*/0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Observe(id, {1, 2, 3}, {1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An empty batch goes to the server, which explains its rule.
  absl::Status status = client.Observe(id, {}, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no examples"));
  // Predict on a missing model: NOT_FOUND from the server.
  EXPECT_EQ(client.Predict(id, {1, 2, 3}, kDim).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, SnapshotThroughAFileRestoresIdenticalPredictions) {
  const Client client = MakeClient();
  const ModelId id{"acme", "big"};
  // 2400 terms of dim 64: a snapshot over 1 MiB, so it crosses the wire in several chunks
  // both ways.
  const uint32_t dim = 64;
  const ModelConfig config = TestConfig(dim, /*max_terms=*/3000);
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(2800, dim, /*seed=*/11);
  ASSERT_TRUE(client.Observe(id, data.xs_range(0, 2400), data.ys_range(0, 2400)).ok());

  const std::string dir = MakeTempDir("snapshots");
  const std::string path = dir + "/big.okl";
  ASSERT_TRUE(client.SnapshotToFile(id, path).ok());
  absl::StatusOr<std::string> bytes = client.Snapshot(id);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GT(bytes->size(), kSnapshotChunkBytes);
  std::ifstream file(path, std::ios::binary);
  const std::string on_disk{std::istreambuf_iterator<char>(file), {}};
  EXPECT_TRUE(on_disk == *bytes) << "the file differs from Snapshot()'s bytes";
  // Nothing but the snapshot is left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);

  const ModelId copy{"acme", "copy"};
  absl::StatusOr<ModelSummary> restored = client.RestoreFromFile(copy, path);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->tenant, "acme");
  EXPECT_EQ(restored->model, "copy");
  EXPECT_EQ(restored->config, config);
  EXPECT_EQ(restored->stats.steps, 2400u);

  // Both continue identically, to the last bit.
  absl::StatusOr<ObserveResult> a =
      client.Observe(id, data.xs_range(2400, 2800), data.ys_range(2400, 2800));
  absl::StatusOr<ObserveResult> b =
      client.Observe(copy, data.xs_range(2400, 2800), data.ys_range(2400, 2800));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Bits(a->predictions), Bits(b->predictions));
  const std::vector<double> probes = MakeProbes(20, dim, /*seed=*/12);
  absl::StatusOr<std::vector<double>> pa = client.Predict(id, probes, dim);
  absl::StatusOr<std::vector<double>> pb = client.Predict(copy, probes, dim);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(Bits(*pa), Bits(*pb));

  // Restore from bytes replaces a model in place; corrupt bytes are DATA_LOSS and change
  // nothing.
  ASSERT_TRUE(client.Restore(copy, *bytes).ok());
  absl::StatusOr<ModelSummary> replaced = client.GetModel(copy);
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(replaced->stats.steps, 2400u);
  std::string corrupt = *bytes;
  corrupt[corrupt.size() / 2] ^= 0x01;
  EXPECT_EQ(client.Restore(copy, corrupt).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(client.Restore(copy, "").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(client.GetModel(copy)->stats.steps, 2400u);

  // Local file errors are the errno's.
  EXPECT_EQ(client.RestoreFromFile(copy, dir + "/absent.okl").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(client.SnapshotToFile(id, dir + "/no/such/dir/x.okl").ok());
  // A missing model leaves no file behind.
  EXPECT_EQ(client.SnapshotToFile({"acme", "missing"}, dir + "/missing.okl").code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing.okl"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  std::filesystem::remove_all(dir);
}

TEST_F(ClientTest, HealthReportsServingAndUnknownServices) {
  const Client client = MakeClient();
  absl::StatusOr<bool> serving = client.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  serving = client.Health(kService);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  EXPECT_EQ(client.Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

// A stopped server accepts bytes into its socket but answers nothing: every call ends at
// its deadline, reads (which retry only on UNAVAILABLE) included.
TEST_F(ClientTest, CallsEndAtTheirDeadlineWhenTheServerStalls) {
  const Client client = MakeClient();
  const ModelId id{"acme", "m"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  ASSERT_TRUE(client.Health().ok());  // connected

  ASSERT_TRUE(server_->Signal(SIGSTOP).ok());
  ASSERT_TRUE(WaitUntilStopped(server_->pid()));
  const Client impatient = client.WithDeadline(absl::Milliseconds(300));
  EXPECT_EQ(impatient.options().deadline, absl::Milliseconds(300));
  EXPECT_EQ(client.options().deadline, absl::Seconds(30));
  const absl::Time start = absl::Now();
  const absl::Status get = impatient.GetModel(id).status();
  const absl::Duration get_took = absl::Now() - start;
  const Data data = MakeData(10, kDim, /*seed=*/1);
  const absl::Status observe = impatient.Observe(id, data.xs, data.ys).status();
  const absl::Status predict = impatient.Predict(id, data.xs, kDim).status();
  ASSERT_TRUE(server_->Signal(SIGCONT).ok());

  EXPECT_EQ(get.code(), absl::StatusCode::kDeadlineExceeded) << get;
  EXPECT_EQ(observe.code(), absl::StatusCode::kDeadlineExceeded) << observe;
  EXPECT_EQ(predict.code(), absl::StatusCode::kDeadlineExceeded) << predict;
  EXPECT_GE(get_took, absl::Milliseconds(250));
  EXPECT_LT(get_took, absl::Seconds(10));  // generous: a loaded machine
  // The server resumes. Whether it applied the Observe that timed out depends on whether
  // it read the request before the cancellation: a deadline does not say whether a change
  // happened, which is why Observe is never retried.
  absl::StatusOr<ModelSummary> summary = client.GetModel(id);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->stats.steps == 0 || summary->stats.steps == 10) << summary->stats.steps;
}

// Reads retry UNAVAILABLE with backoff; writes are attempted once. Counted from the
// client's side (an interceptor sees every attempt).
TEST_F(ClientTest, ReadsRetryUnavailableAndWritesDoNot) {
  CallCounter counter;
  const Client client(CountingChannel(server_->address(), &counter),
                      {.max_attempts = 4, .initial_backoff = absl::Milliseconds(20)});
  const ModelId id{"acme", "m"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  ASSERT_TRUE(server_->Kill().ok());

  const Data data = MakeData(2, kDim, /*seed=*/1);
  EXPECT_EQ(client.Predict(id, data.xs, kDim).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.GetModel(id).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.ListModels("acme").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Snapshot(id).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Health().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Observe(id, data.xs, data.ys).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.CreateModel({"acme", "n"}, TestConfig()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.DeleteModel(id).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Restore(id, "bytes").status().code(), absl::StatusCode::kUnavailable);

  EXPECT_EQ(counter.okl_calls("Predict"), 4);
  EXPECT_EQ(counter.okl_calls("GetModel"), 4);
  EXPECT_EQ(counter.okl_calls("ListModels"), 4);
  EXPECT_EQ(counter.okl_calls("Snapshot"), 4);
  EXPECT_EQ(counter.calls("/grpc.health.v1.Health/Check"), 4);
  EXPECT_EQ(counter.okl_calls("Observe"), 1);
  EXPECT_EQ(counter.okl_calls("CreateModel"), 2);  // one before the kill
  EXPECT_EQ(counter.okl_calls("DeleteModel"), 1);
  EXPECT_EQ(counter.okl_calls("Restore"), 1);
}

// A Predict issued while the server is down succeeds once it is back on the same port
// (and the same data directory), with the same answer.
TEST(ClientRestartTest, PredictSucceedsAcrossAServerRestart) {
  absl::StatusOr<int> port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string data_dir = MakeTempDir("data");
  const ServerProcessOptions options = {.listen = absl::StrCat("127.0.0.1:", *port),
                                        .data_dir = data_dir};
  std::unique_ptr<ServerProcess> server = StartServer(options);
  ASSERT_NE(server, nullptr);

  CallCounter counter;
  // Enough attempts for a restart on a loaded machine: up to ~50 x 200 ms.
  const Client client(CountingChannel(server->address(), &counter),
                      {.max_attempts = 50, .max_backoff = absl::Milliseconds(200)});
  const ModelId id{"acme", "m"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  const Data data = MakeData(300, kDim, /*seed=*/3);
  ASSERT_TRUE(client.Observe(id, data.xs, data.ys).ok());
  const std::vector<double> probes = MakeProbes(10, kDim, /*seed=*/4);
  absl::StatusOr<std::vector<double>> before = client.Predict(id, probes, kDim);
  ASSERT_TRUE(before.ok()) << before.status();

  ASSERT_TRUE(server->Kill().ok());
  server.reset();
  const int predicts_before = counter.okl_calls("Predict");
  absl::StatusOr<std::vector<double>> after;
  std::thread predictor([&] { after = client.Predict(id, probes, kDim); });
  absl::SleepFor(absl::Milliseconds(300));  // a few attempts fail meanwhile
  server = StartServer(options);            // from the main thread, as the harness asks
  predictor.join();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Bits(*after), Bits(*before));
  EXPECT_GT(counter.okl_calls("Predict") - predicts_before, 1);
  server.reset();
  std::filesystem::remove_all(data_dir);
}

TEST_F(ClientTest, RegretIsReadIntoTheStats) {
  const Client client = MakeClient();
  const ModelId id{"acme", "r"};
  ModelConfig config = TestConfig();
  config.regret_window = 64;
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(100, kDim, /*seed=*/5);
  ASSERT_TRUE(client.Observe(id, data.xs, data.ys).ok());
  // The server computes the regret in the background after the first batch.
  absl::StatusOr<ModelSummary> summary;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    summary = client.GetModel(id);
    ASSERT_TRUE(summary.ok()) << summary.status();
    if (summary->stats.regret.has_value()) break;
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  ASSERT_TRUE(summary->stats.regret.has_value()) << "no regret within 20 s";
  EXPECT_EQ(summary->stats.regret->window, 64u);
  EXPECT_EQ(summary->stats.regret->last_step, 100u);
  EXPECT_TRUE(std::isfinite(summary->stats.regret->regret));
  // Squared loss: the comparator is solved directly, so the gap is rounding error.
  EXPECT_GE(summary->stats.regret->duality_gap, 0.0);
  EXPECT_LT(summary->stats.regret->duality_gap, 1e-6);
  EXPECT_EQ(summary->config.regret_window, 64u);
}

TEST(ClientConnectTest, RejectsUnusableOptions) {
  EXPECT_EQ(Client::Connect("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("127.0.0.1:1", {.deadline = absl::ZeroDuration()}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("127.0.0.1:1", {.bearer_token = "two words"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("127.0.0.1:1", {.bearer_token = "new\nline"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("127.0.0.1:1", {.use_tls = true, .tls_cert_chain = "pem"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A server that is not there shows on the first call, as UNAVAILABLE.
  absl::StatusOr<int> port = PickUnusedPort();
  ASSERT_TRUE(port.ok());
  absl::StatusOr<Client> client =
      Client::Connect(absl::StrCat("127.0.0.1:", *port), {.max_attempts = 1});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->GetModel({"a", "b"}).status().code(), absl::StatusCode::kUnavailable);
}

// Delayed feedback: a remembering Predict serves the predictions a plain Predict would;
// labels, out of order and in several calls, are the Observes of the remembered inputs
// in the order the labels came (bit for bit against a model fed those Observes); the
// first label of an event wins; an unknown id changes nothing.
TEST_F(ClientTest, LabelsOfRememberedPredictionsAreObservesInLabelOrder) {
  const Client client = MakeClient();
  const Data data = MakeData(/*n=*/60, kDim, /*seed=*/29);
  const ModelId served{"delay", "served"};
  const ModelId twin{"delay", "twin"};
  for (const ModelId& id : {served, twin}) {
    ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
    ASSERT_TRUE(client.Observe(id, data.xs_range(0, 50), data.ys_range(0, 50)).ok());
  }
  // Inputs 50..54 under our ids, 55..59 under the server's.
  absl::StatusOr<RememberedPredictions> ours = client.PredictRemembering(
      served, data.xs_range(50, 55), kDim,
      {.event_ids = {"e0", "e1", "e2", "e3", "e4"}, .wait = absl::Minutes(5)});
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_THAT(ours->event_ids, ElementsAre("e0", "e1", "e2", "e3", "e4"));
  absl::StatusOr<std::vector<double>> plain = client.Predict(twin, data.xs_range(50, 55), kDim);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Bits(ours->predictions), Bits(*plain));
  absl::StatusOr<RememberedPredictions> theirs =
      client.PredictRemembering(served, data.xs_range(55, 60), kDim, {});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->event_ids.size(), 5u);
  // The server's: its expiry, then 17 to 32 more hexadecimal digits.
  EXPECT_THAT(theirs->event_ids[0], MatchesRegex("[0-9a-f]{33,48}"));
  EXPECT_NE(theirs->event_ids[0], theirs->event_ids[1]);

  // Labels in another order than the predictions, with a repeat and an unknown id.
  const std::vector<EventLabel> first = {{"e3", data.ys[53]},
                                         {theirs->event_ids[1], data.ys[56]},
                                         {"e3", 99.0},  // a repeat within the call
                                         {"nobody", 1.0},
                                         {"e0", data.ys[50]}};
  absl::StatusOr<LabelResult> labelled = client.Label(served, first);
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_THAT(labelled->outcomes, ElementsAre(LabelOutcome::kApplied, LabelOutcome::kApplied,
                                              LabelOutcome::kDuplicate, LabelOutcome::kUnknown,
                                              LabelOutcome::kApplied));
  EXPECT_EQ(labelled->predictions.size(), 3u);
  EXPECT_EQ(labelled->losses.size(), 3u);
  EXPECT_EQ(labelled->steps, 53u);
  labelled = client.Label(served, {{"e0", 5.0}, {"e1", data.ys[51]}});
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_THAT(labelled->outcomes,
              ElementsAre(LabelOutcome::kDuplicate, LabelOutcome::kApplied));
  EXPECT_EQ(labelled->steps, 54u);

  // The twin observes the applied labels' examples in label order: 53, 56, 50, 51.
  std::vector<double> twin_predictions;
  for (const size_t i : {53, 56, 50, 51}) {
    absl::StatusOr<ObserveResult> observed =
        client.Observe(twin, data.x(i), data.ys_range(i, i + 1));
    ASSERT_TRUE(observed.ok()) << observed.status();
    twin_predictions.push_back(observed->predictions[0]);
  }
  // The last label's prequential prediction is the twin's (the earlier ones were returned
  // by the first call).
  EXPECT_EQ(Bits(labelled->predictions), Bits({twin_predictions[3]}));
  const std::vector<double> probes = MakeProbes(/*n=*/20, kDim, /*seed=*/5);
  absl::StatusOr<std::vector<double>> after = client.Predict(served, probes, kDim);
  absl::StatusOr<std::vector<double>> twin_after = client.Predict(twin, probes, kDim);
  ASSERT_TRUE(after.ok() && twin_after.ok());
  EXPECT_EQ(Bits(*after), Bits(*twin_after));
  // GetModel reports the counts: 10 remembered, 4 applied, 2 duplicates.
  ModelEventCounts events;
  ASSERT_TRUE(client.GetModel(served, &events).ok());
  EXPECT_EQ(events.pending, 6u);
  EXPECT_EQ(events.applied, 4u);
  EXPECT_EQ(events.duplicates, 2u);
  EXPECT_EQ(events.expired, 0u);
  EXPECT_EQ(events.served_labels, 4u);
  EXPECT_GT(events.served_loss, 0);
  ASSERT_TRUE(client.GetModel(twin, &events).ok());
  EXPECT_EQ(events, ModelEventCounts{});
}

TEST_F(ClientTest, RememberingAndLabellingCheckTheirArguments) {
  const Client client = MakeClient();
  const ModelId id{"delay", "checks"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  const std::vector<double> two_inputs = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  auto expect_invalid = [](const absl::Status& status, const std::string& part) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(part));
  };
  expect_invalid(
      client.PredictRemembering(id, two_inputs, kDim, {.event_ids = {"only-one"}}).status(),
      "1 event ids for 2 inputs");
  expect_invalid(
      client.PredictRemembering(id, two_inputs, kDim, {.wait = absl::Seconds(-1)}).status(),
      "must not be negative");
  expect_invalid(
      client
          .PredictRemembering(id, two_inputs, kDim,
                              {.default_label = std::numeric_limits<double>::infinity()})
          .status(),
      "must be finite");
  expect_invalid(client.PredictRemembering(id, two_inputs, 4, {}).status(),
                 "not a multiple of dim 4");
  // The server's checks: a bad id, an id used before (nothing of the request remembered).
  expect_invalid(
      client.PredictRemembering(id, two_inputs, kDim, {.event_ids = {"a", "b c"}}).status(),
      "");
  ASSERT_TRUE(client.PredictRemembering(id, two_inputs, kDim, {.event_ids = {"a", "b"}}).ok());
  EXPECT_EQ(client.PredictRemembering(id, two_inputs, kDim, {.event_ids = {"c", "a"}})
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  absl::StatusOr<LabelResult> c = client.Label(id, {{"c", 1.0}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->outcomes, ElementsAre(LabelOutcome::kUnknown));
  // A label that is not finite: nothing applied, "a" still takes its first label after.
  expect_invalid(client.Label(id, {{"a", std::numeric_limits<double>::quiet_NaN()}}).status(),
                 "");
  absl::StatusOr<LabelResult> a = client.Label(id, {{"a", 1.0}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->outcomes, ElementsAre(LabelOutcome::kApplied));
  EXPECT_EQ(a->steps, 1u);
  EXPECT_EQ(LabelOutcomeName(LabelOutcome::kDuplicate), "duplicate");
}

}  // namespace
}  // namespace okl::testing
