// tests/client/model_interface_test.cc
//
// LocalModel and RemoteModel behind ModelInterface: the same function, run against each,
// gives the same predictions, losses and statistics to the last bit; snapshots move a
// model from one to the other and it continues identically.

#include "client/model_interface.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "client/local_model.h"
#include "client/remote_model.h"
#include "core/runtime/model_registry.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_util.h"
#include "tests/core/test_model_key.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

// What an application might do, written once against the interface: learn the data in
// batches of varying size, then predict probes. Everything it saw is returned.
struct Trace {
  std::vector<double> predictions;  // prequential, in order
  std::vector<double> losses;
  std::vector<uint64_t> steps;            // after each batch
  std::vector<uint32_t> expansion_sizes;  // after each batch
  std::vector<double> probe_predictions;
  ModelSummary summary;
};

absl::StatusOr<Trace> RunApplication(ModelInterface& model, const Data& data,
                                     absl::Span<const double> probes) {
  Trace trace;
  const size_t sizes[] = {1, 7, 100, 33, 250};
  size_t begin = 0;
  for (size_t b = 0; begin < data.size(); ++b) {
    const size_t end = std::min(data.size(), begin + sizes[b % 5]);
    absl::StatusOr<ObserveResult> result =
        model.Observe(data.xs_range(begin, end), data.ys_range(begin, end));
    if (!result.ok()) return result.status();
    trace.predictions.insert(trace.predictions.end(), result->predictions.begin(),
                             result->predictions.end());
    trace.losses.insert(trace.losses.end(), result->losses.begin(), result->losses.end());
    trace.steps.push_back(result->steps);
    trace.expansion_sizes.push_back(result->expansion_size);
    begin = end;
  }
  absl::StatusOr<std::vector<double>> predictions = model.Predict(probes);
  if (!predictions.ok()) return predictions.status();
  trace.probe_predictions = *std::move(predictions);
  absl::StatusOr<ModelSummary> summary = model.Summary();
  if (!summary.ok()) return summary.status();
  trace.summary = *std::move(summary);
  return trace;
}

void ExpectSameTrace(const Trace& local, const Trace& remote) {
  EXPECT_EQ(Bits(local.predictions), Bits(remote.predictions));
  EXPECT_EQ(Bits(local.losses), Bits(remote.losses));
  EXPECT_EQ(local.steps, remote.steps);
  EXPECT_EQ(local.expansion_sizes, remote.expansion_sizes);
  EXPECT_EQ(Bits(local.probe_predictions), Bits(remote.probe_predictions));
  EXPECT_EQ(local.summary.config, remote.summary.config);
  const ModelStats& a = local.summary.stats;
  const ModelStats& b = remote.summary.stats;
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.expansion_size, b.expansion_size);
  EXPECT_EQ(Bits({a.cumulative_loss}), Bits({b.cumulative_loss}));
  EXPECT_EQ(a.mistakes, b.mistakes);
  EXPECT_EQ(a.truncation_error_bound.value_or(0), b.truncation_error_bound.value_or(0));
  EXPECT_EQ(a.terms_removed, b.terms_removed);
  EXPECT_EQ(Bits({a.offset}), Bits({b.offset}));
  EXPECT_EQ(Bits({a.margin}), Bits({b.margin}));
}

class ModelInterfaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
  }
  Client client() const { return Client(server_->channel()); }

  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ModelInterfaceTest, TheSameCodeGivesTheSamePredictionsLocallyAndRemotely) {
  ModelConfig regression = TestConfig();
  ModelConfig classifier = TestConfig();
  classifier.loss = {.type = LossType::kHinge, .rho = 1.0, .nu = 0.2};  // learns rho too
  classifier.averaged = true;
  classifier.offset = true;
  int n = 0;
  for (const ModelConfig& config : {regression, classifier}) {
    SCOPED_TRACE(n);
    const ModelId id{"acme", absl::StrCat("m", n++)};
    Data data = MakeData(1500, kDim, /*seed=*/31);
    if (config.loss.type == LossType::kHinge) {
      for (double& y : data.ys) y = y >= 0 ? 1.0 : -1.0;
    }
    const std::vector<double> probes = MakeProbes(40, kDim, /*seed=*/32);

    absl::StatusOr<std::unique_ptr<LocalModel>> local = LocalModel::Create(id, config);
    ASSERT_TRUE(local.ok()) << local.status();
    absl::StatusOr<std::unique_ptr<RemoteModel>> remote =
        RemoteModel::Create(client(), id, config);
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_EQ((*local)->id(), (*remote)->id());
    EXPECT_EQ((*local)->config(), (*remote)->config());

    absl::StatusOr<Trace> here = RunApplication(**local, data, probes);
    ASSERT_TRUE(here.ok()) << here.status();
    absl::StatusOr<Trace> there = RunApplication(**remote, data, probes);
    ASSERT_TRUE(there.ok()) << there.status();
    ExpectSameTrace(*here, *there);
    if (config.loss.type == LossType::kHinge) {
      EXPECT_GT(here->summary.stats.mistakes, 0u);
    }
  }
}

// A KRLS tracker behind both: the same trace, the same predictive variances to the last
// bit (of the same model version as the predictions), and its noise estimate; a NORMA
// model's PredictWithVariance has predictions and no variances.
TEST_F(ModelInterfaceTest, BothPredictATrackersVariances) {
  ModelConfig tracker = TestConfig();
  tracker.learning_rate = {};
  tracker.lambda = 0;
  tracker.offset = false;
  tracker.budget = {};
  tracker.krls_tracker = {.max_basis = 30, .noise_variance = 1e-3, .forgetting = 0.999};
  const ModelId id{"acme", "tracker"};
  const Data data = MakeData(600, kDim, /*seed=*/41);
  const std::vector<double> probes = MakeProbes(20, kDim, /*seed=*/42);
  absl::StatusOr<std::unique_ptr<LocalModel>> local = LocalModel::Create(id, tracker);
  ASSERT_TRUE(local.ok()) << local.status();
  absl::StatusOr<std::unique_ptr<RemoteModel>> remote =
      RemoteModel::Create(client(), id, tracker);
  ASSERT_TRUE(remote.ok()) << remote.status();
  absl::StatusOr<Trace> here = RunApplication(**local, data, probes);
  ASSERT_TRUE(here.ok()) << here.status();
  absl::StatusOr<Trace> there = RunApplication(**remote, data, probes);
  ASSERT_TRUE(there.ok()) << there.status();
  ExpectSameTrace(*here, *there);
  EXPECT_EQ(Bits({here->summary.stats.noise_variance}),
            Bits({there->summary.stats.noise_variance}));
  EXPECT_GT(here->summary.stats.noise_variance, 0.0);

  absl::StatusOr<PredictResult> a = (*local)->PredictWithVariance(probes);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<PredictResult> b = (*remote)->PredictWithVariance(probes);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->variances.size(), 20u);
  EXPECT_EQ(Bits(a->predictions), Bits(here->probe_predictions));
  EXPECT_EQ(Bits(a->predictions), Bits(b->predictions));
  EXPECT_EQ(Bits(a->variances), Bits(b->variances));
  for (const double variance : a->variances) EXPECT_GT(variance, 0.0);

  absl::StatusOr<std::unique_ptr<LocalModel>> norma =
      LocalModel::Create({"acme", "norma"}, TestConfig());
  ASSERT_TRUE(norma.ok()) << norma.status();
  absl::StatusOr<PredictResult> plain = (*norma)->PredictWithVariance(probes);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->predictions.size(), 20u);
  EXPECT_TRUE(plain->variances.empty());
}

TEST_F(ModelInterfaceTest, BothRejectWhatTheModelCannotTake) {
  const ModelId id{"acme", "m"};
  absl::StatusOr<std::unique_ptr<LocalModel>> local = LocalModel::Create(id, TestConfig());
  ASSERT_TRUE(local.ok());
  absl::StatusOr<std::unique_ptr<RemoteModel>> remote =
      RemoteModel::Create(client(), id, TestConfig());
  ASSERT_TRUE(remote.ok());
  for (ModelInterface* model : {static_cast<ModelInterface*>(local->get()),
                                static_cast<ModelInterface*>(remote->get())}) {
    EXPECT_EQ(model->Observe({1, 2}, {1}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->Observe({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->Observe({1, 2, std::nan("")}, {1}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->Predict({1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->Predict({}).status().code(), absl::StatusCode::kInvalidArgument);
    absl::StatusOr<ModelSummary> summary = model->Summary();
    ASSERT_TRUE(summary.ok());
    EXPECT_EQ(summary->stats.steps, 0u);  // nothing was applied
  }
  EXPECT_EQ(RemoteModel::Create(client(), id, TestConfig()).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RemoteModel::Open(client(), {"acme", "absent"}).status().code(),
            absl::StatusCode::kNotFound);
  ModelConfig invalid = TestConfig();
  invalid.kernel.gamma = -1;
  EXPECT_EQ(LocalModel::Create(id, invalid).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelInterfaceTest, SnapshotsMoveAModelBetweenProcessAndServer) {
  const Client c = client();
  const ModelConfig config = TestConfig();
  const Data data = MakeData(1200, kDim, /*seed=*/41);
  const std::vector<double> probes = MakeProbes(30, kDim, /*seed=*/42);

  // Server -> process.
  absl::StatusOr<std::unique_ptr<RemoteModel>> remote =
      RemoteModel::Create(c, {"acme", "r"}, config);
  ASSERT_TRUE(remote.ok());
  ASSERT_TRUE((*remote)->Observe(data.xs_range(0, 600), data.ys_range(0, 600)).ok());
  absl::StatusOr<std::string> bytes = c.Snapshot({"acme", "r"});
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<std::unique_ptr<LocalModel>> local =
      LocalModel::FromSnapshot({"acme", "l"}, *bytes);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->Summary()->stats.steps, 600u);
  absl::StatusOr<ObserveResult> a =
      (*remote)->Observe(data.xs_range(600, 1200), data.ys_range(600, 1200));
  absl::StatusOr<ObserveResult> b =
      (*local)->Observe(data.xs_range(600, 1200), data.ys_range(600, 1200));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Bits(a->predictions), Bits(b->predictions));

  // Process -> server, under a new name.
  absl::StatusOr<std::string> local_bytes = (*local)->Snapshot();
  ASSERT_TRUE(local_bytes.ok());
  EXPECT_TRUE(*local_bytes == *c.Snapshot({"acme", "r"})) << "same state, same bytes";
  ASSERT_TRUE(c.Restore({"acme", "copy"}, *local_bytes).ok());
  absl::StatusOr<std::unique_ptr<RemoteModel>> copy = RemoteModel::Open(c, {"acme", "copy"});
  ASSERT_TRUE(copy.ok());
  absl::StatusOr<std::vector<double>> p_local = (*local)->Predict(probes);
  absl::StatusOr<std::vector<double>> p_copy = (*copy)->Predict(probes);
  ASSERT_TRUE(p_local.ok() && p_copy.ok());
  EXPECT_EQ(Bits(*p_local), Bits(*p_copy));

  // Bytes that are not a snapshot.
  EXPECT_EQ(LocalModel::FromSnapshot({"acme", "x"}, "garbage").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(LocalModelTest, WrapsARegistryEntryAndPredictsWithAChosenHypothesis) {
  ModelRegistry registry({.max_models = 10});
  ModelConfig config = TestConfig();
  config.averaged = true;
  absl::StatusOr<std::shared_ptr<ModelEntry>> entry =
      registry.Create(TestKey("acme", "m"), config);
  ASSERT_TRUE(entry.ok());
  LocalModel model(*entry);
  EXPECT_EQ(model.id(), (ModelId{"acme", "m"}));
  const Data data = MakeData(200, kDim, /*seed=*/51);
  ASSERT_TRUE(model.Observe(data.xs, data.ys).ok());
  absl::StatusOr<std::shared_ptr<ModelEntry>> found = registry.Find(TestKey("acme", "m"));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->Summary()->stats.steps, 200u);

  const std::vector<double> probes = MakeProbes(5, kDim, /*seed=*/52);
  absl::StatusOr<std::vector<double>> configured = model.Predict(probes);
  absl::StatusOr<std::vector<double>> averaged =
      model.Predict(probes, PredictionMode::kAveraged);
  absl::StatusOr<std::vector<double>> current = model.Predict(probes, PredictionMode::kCurrent);
  ASSERT_TRUE(configured.ok() && averaged.ok() && current.ok());
  EXPECT_EQ(Bits(*configured), Bits(*averaged));
  EXPECT_NE(Bits(*configured), Bits(*current));

  absl::StatusOr<std::unique_ptr<LocalModel>> plain =
      LocalModel::Create({"a", "b"}, TestConfig());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->Predict(probes, PredictionMode::kAveraged).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace okl::testing
