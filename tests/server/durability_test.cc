// tests/server/durability_test.cc
//
// Durability of okl_server (docs/design.md, "Durability"), tested on the real binary with a
// --data_dir that outlives each server process: an acknowledged Observe survives SIGKILL,
// an unacknowledged one is present or absent only as whole batches in order, a restart
// after SIGTERM replays nothing, Create/Delete/Restore are durable, a SIGKILL at a
// failpoint inside a checkpoint or a Restore (--failpoint) loses nothing acknowledged and
// leaves a Restore wholly there or not at all, a full disk fails Observe without applying
// it, and a damaged store keeps the server from starting. The random SIGKILLs (amid
// Observes, amid Restore, Delete and Create, and at each failpoint) are crash_test.cc,
// in the same binary; the helpers both use are durability_util.h.
//
// The oracle is core's NormaModel (CoreTwin) fed exactly the examples the restarted
// server says it holds: NORMA is deterministic, so the restored model must equal it to
// the last bit, its whole state (through Snapshot) as well as its predictions.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/runtime/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "tests/server/durability_util.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using ::testing::HasSubstr;

// --- Graceful restart ------------------------------------------------------------------

TEST(DurabilityTest, RestartAfterSigtermRestoresIdenticalModelsAndReplaysNothing) {
  TempDir dir("okl_durability_test");
  const std::vector<v1::ModelRef> refs = {Ref("acme", "regression"), Ref("acme", "classifier"),
                                          Ref("zeta", "sparse"), Ref("acme", "tracker"),
                                          Ref("acme", "selection")};
  const std::vector<v1::ModelConfig> configs = {RegressionConfig(), ClassificationConfig(),
                                                SparseTubeConfig(), TrackerConfig(),
                                                SelectConfig()};
  std::vector<std::unique_ptr<CoreTwin>> twins;
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  for (size_t i = 0; i < refs.size(); ++i) {
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), refs[i], configs[i])));
    twins.push_back(CoreTwin::Create(configs[i]));
    ASSERT_NE(twins.back(), nullptr);
  }
  const std::vector<v1::Vector> probes4 = MakeProbes(4, 8, 7);
  const std::vector<v1::Vector> probes6 = MakeProbes(6, 8, 8, /*sparse=*/true);
  auto probes_of = [&](size_t i) -> absl::Span<const v1::Vector> {
    return configs[i].dim() == 4 ? probes4 : probes6;
  };
  auto feed = [&](uint64_t seed) {
    for (size_t i = 0; i < refs.size(); ++i) {
      const std::vector<v1::Example> stream =
          MakeStream(configs[i], 300, seed + i, /*sparse=*/configs[i].dim() == 6);
      const std::vector<std::vector<v1::Example>> batches =
          SplitIntoBatches(stream, std::vector<size_t>{1, 17, 64, 3});
      v1::ObserveResponse response;
      // Half unary, half one stream.
      for (size_t b = 0; b < batches.size() / 2; ++b) {
        ASSERT_TRUE(IsOk(Observe(server->stub(), refs[i], batches[b], &response)));
      }
      const std::vector<std::vector<v1::Example>> rest(batches.begin() + batches.size() / 2,
                                                       batches.end());
      ASSERT_TRUE(IsOk(ObserveStream(server->stub(), refs[i], rest, &response)));
      twins[i]->Observe(stream);
    }
  };

  for (int restart = 0; restart < 2; ++restart) {
    SCOPED_TRACE(absl::StrCat("restart ", restart));
    ASSERT_NO_FATAL_FAILURE(feed(1000 * (restart + 1)));
    std::vector<std::string> snapshots(refs.size());
    std::vector<ModelFingerprint> fingerprints;
    for (size_t i = 0; i < refs.size(); ++i) {
      ASSERT_TRUE(IsOk(Snapshot(server->stub(), refs[i], &snapshots[i])));
      absl::StatusOr<ModelFingerprint> fingerprint =
          Fingerprint(server->stub(), refs[i], probes_of(i));
      ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
      fingerprints.push_back(*fingerprint);
    }
    const std::vector<std::string> names = ModelNames(server->stub(), "");

    StopGracefully(*server);
    server = StartServer(dir.data_dir());
    ASSERT_NE(server, nullptr);
    const std::optional<RestoreReport> report = ParseRestoreReport(server->Log());
    ASSERT_TRUE(report.has_value()) << "no startup line in the log:\n" << server->Log();
    EXPECT_EQ(report->models, static_cast<int>(refs.size()));
    EXPECT_EQ(report->batches, 0) << server->Log();
    EXPECT_EQ(report->examples, 0) << server->Log();
    EXPECT_THAT(server->Log(), HasSubstr("(0 log batches, 0 examples replayed)"));
    // Restored before it listens (and so before the port file and SERVING).
    EXPECT_LT(server->Log().find("okl_server: restored"), server->Log().find("listening on"))
        << server->Log();

    EXPECT_EQ(ModelNames(server->stub(), ""), names);
    for (size_t i = 0; i < refs.size(); ++i) {
      SCOPED_TRACE(RefName(refs[i]));
      std::string bytes;
      ASSERT_TRUE(IsOk(Snapshot(server->stub(), refs[i], &bytes)));
      EXPECT_TRUE(bytes == snapshots[i]) << "snapshot bytes differ after the restart";
      absl::StatusOr<ModelFingerprint> fingerprint =
          Fingerprint(server->stub(), refs[i], probes_of(i));
      ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
      EXPECT_EQ(*fingerprint, fingerprints[i]);
      EXPECT_TRUE(MatchesTwin(server->stub(), refs[i], *twins[i], probes_of(i)));
    }
  }
  // The restored models keep learning bit-identically.
  ASSERT_NO_FATAL_FAILURE(feed(5000));
  for (size_t i = 0; i < refs.size(); ++i) {
    EXPECT_TRUE(MatchesTwin(server->stub(), refs[i], *twins[i], probes_of(i)));
  }
  StopGracefully(*server);
}

// --- Create, Delete, Restore -----------------------------------------------------------

TEST(DurabilityTest, CreatedModelSurvivesSigkillWithoutAnyExample) {
  TempDir dir("okl_durability_test");
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  const v1::ModelRef ref = Ref("acme", "fresh");
  v1::ModelInfo created;
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, ClassificationConfig(), &created)));
  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  EXPECT_EQ(info.SerializeAsString(), created.SerializeAsString())
      << info.ShortDebugString() << " vs " << created.ShortDebugString();
  EXPECT_EQ(info.stats().steps(), 0u);
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(ClassificationConfig());
  ASSERT_NE(twin, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, MakeProbes(4, 4, 1)));
}

TEST(DurabilityTest, DeletedModelDoesNotComeBackAfterSigkillOrSigterm) {
  TempDir dir("okl_durability_test");
  const std::vector<v1::Vector> probes = MakeProbes(4, 8, 3);
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  const v1::ModelRef a = Ref("acme", "a");
  const v1::ModelRef b = Ref("acme", "b");
  const v1::ModelRef c = Ref("acme", "c");
  std::map<std::string, std::unique_ptr<CoreTwin>> twins;
  for (const v1::ModelRef& ref : {a, b, c}) {
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, RegressionConfig())));
    const std::vector<v1::Example> stream =
        MakeStream(RegressionConfig(), 120, static_cast<uint64_t>(ref.model()[0]));
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, stream, &response)));
    twins[ref.model()] = TwinFedWith(RegressionConfig(), stream);
  }
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), b)));

  // SIGKILL: the delete is not undone by replaying b's log.
  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), b, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ModelNames(server->stub(), "acme"), ::testing::ElementsAre("acme/a", "acme/c"));
  EXPECT_TRUE(MatchesTwin(server->stub(), a, *twins["a"], probes));
  EXPECT_TRUE(MatchesTwin(server->stub(), c, *twins["c"], probes));

  // A model created again under the deleted name starts afresh, with its new config:
  // nothing of the old b's checkpoint or log leaks into it.
  const v1::ModelConfig new_config = ClassificationConfig();
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), b, new_config)));
  const std::vector<v1::Example> new_stream = MakeStream(new_config, 10, 99);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(server->stub(), b, new_stream, &response)));
  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(GetModel(server->stub(), b, &info)));
  EXPECT_EQ(info.stats().steps(), 10u);
  std::unique_ptr<CoreTwin> new_twin = TwinFedWith(new_config, new_stream);
  ASSERT_NE(new_twin, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), b, *new_twin, probes));

  // SIGTERM: the shutdown checkpoint does not resurrect a deleted model either.
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), a)));
  StopGracefully(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(HasCode(GetModel(server->stub(), a, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ModelNames(server->stub(), ""), ::testing::ElementsAre("acme/b", "acme/c"));
  const std::optional<RestoreReport> report = ParseRestoreReport(server->Log());
  ASSERT_TRUE(report.has_value()) << server->Log();
  EXPECT_EQ(report->models, 2);
  EXPECT_TRUE(MatchesTwin(server->stub(), c, *twins["c"], probes));
  StopGracefully(*server);
}

TEST(DurabilityTest, RestoredModelSurvivesSigkillBitIdentically) {
  TempDir dir("okl_durability_test");
  const std::vector<v1::Vector> probes = MakeProbes(4, 8, 5);
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  const v1::ModelRef source = Ref("acme", "source");
  const v1::ModelRef copy = Ref("other", "copy");
  const v1::ModelRef target = Ref("acme", "target");
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), source, ClassificationConfig())));
  ASSERT_TRUE(IsOk(
      Observe(server->stub(), source, MakeStream(ClassificationConfig(), 200, 1), &response)));
  // target has a history of its own (a log to replay) that the Restore replaces.
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), target, RegressionConfig())));
  ASSERT_TRUE(
      IsOk(Observe(server->stub(), target, MakeStream(RegressionConfig(), 150, 2), &response)));
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(server->stub(), source, &bytes)));
  ASSERT_TRUE(IsOk(Restore(server->stub(), copy, bytes)));
  ASSERT_TRUE(IsOk(Restore(server->stub(), target, bytes)));

  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  for (const v1::ModelRef& ref : {source, copy, target}) {
    std::string restored;
    ASSERT_TRUE(IsOk(Snapshot(server->stub(), ref, &restored))) << RefName(ref);
    EXPECT_TRUE(restored == bytes) << RefName(ref) << ": snapshot differs after the restart";
  }

  // Examples after the Restore replay on top of the restored state, not the old one.
  absl::StatusOr<ModelState> state = DecodeSnapshot(bytes);
  ASSERT_TRUE(state.ok()) << state.status();
  std::unique_ptr<CoreTwin> twin = CoreTwin::FromState(*state);
  ASSERT_NE(twin, nullptr);
  const std::vector<v1::Example> more = MakeStream(ClassificationConfig(), 40, 3);
  ASSERT_TRUE(IsOk(Observe(server->stub(), target, more, &response)));
  twin->Observe(more);
  ASSERT_TRUE(IsOk(Restore(server->stub(), copy, bytes)));  // again, over itself
  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), target, *twin, probes));
  std::string again;
  ASSERT_TRUE(IsOk(Snapshot(server->stub(), copy, &again)));
  EXPECT_TRUE(again == bytes);
  StopGracefully(*server);
}

// A batch that diverges part-way (FAILED_PRECONDITION, the examples before the bad one
// stay applied) is logged whole and replayed through the same batch boundaries, so the
// restored model stops at the same example.
TEST(DurabilityTest, BatchThatDivergedPartWayReplaysIdentically) {
  TempDir dir("okl_durability_test");
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 1
    kernel { linear { c: 0 } }
    loss { squared {} }
    learning_rate { eta0: 0.5 }
    budget { max_terms: 10 }
  )pb");
  const std::vector<v1::Vector> probes = {DenseVector({0.5}), DenseVector({-2.0})};
  const v1::ModelRef ref = Ref("acme", "diverging");
  // k(x, x) = 1e400 overflows: the third example's prediction is not finite.
  const Batch batch = {
      MakeExample(DenseVector({1.0}), 1.0), MakeExample(DenseVector({1e200}), 1.0),
      MakeExample(DenseVector({1e200}), 1.0), MakeExample(DenseVector({0.5}), 1.0)};
  const Batch after = {MakeExample(DenseVector({0.25}), -1.0)};

  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  std::vector<double> xs;
  std::vector<double> ys;
  for (const v1::Example& example : batch) {
    xs.push_back(example.x().values(0));
    ys.push_back(example.y());
  }
  std::vector<Observation> observations;
  const absl::Status diverged = twin->model().ObserveBatch(xs, ys, &observations);
  ASSERT_EQ(diverged.code(), absl::StatusCode::kFailedPrecondition) << diverged;
  ASSERT_GT(twin->model().steps(), 0u);
  ASSERT_LT(twin->model().steps(), batch.size());

  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  v1::ObserveResponse response;
  EXPECT_TRUE(HasCode(Observe(server->stub(), ref, batch, &response),
                      grpc::StatusCode::FAILED_PRECONDITION));
  ASSERT_TRUE(IsOk(Observe(server->stub(), ref, after, &response)));
  twin->Observe(after);
  ASSERT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));

  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  StopGracefully(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  StopGracefully(*server);
}

// A model with sparse storage and a dim far over --max_dim (2^20): the server keeps its
// examples' non-zeros end to end (the request, the log record, the replay), and after a
// SIGKILL the replayed model is the core model fed the same examples sparsely, bit for bit.
TEST(DurabilityTest, SparseStorageModelOfAMillionFeaturesReplaysExactlyAfterSigkill) {
  TempDir dir("okl_durability_test");
  constexpr uint32_t kDim = 1u << 20;
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 1048576
    kernel { gaussian { gamma: 0.5 } }
    loss { hinge { rho: 1 } }
    learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
    lambda: 0.01
    budget { max_terms: 40 policy: OLDEST }
    averaged: true
    averaging_window: 16
    sparse { max_nonzeros: 8 }
  )pb");
  absl::StatusOr<ModelConfig> core_config = FromProto(config);
  ASSERT_TRUE(core_config.ok()) << core_config.status();
  absl::StatusOr<std::unique_ptr<Model>> core = CreateModel(*core_config);
  ASSERT_TRUE(core.ok()) << core.status();

  // Examples with 1 to 8 non-zeros, half of them among the first 64 indices (so that
  // terms meet) and half anywhere below 2^20.
  std::mt19937_64 rng(11);
  auto random_vector = [&](std::vector<uint32_t>* indices, std::vector<double>* values) {
    std::map<uint32_t, double> entries;
    const size_t n = 1 + rng() % 8;
    while (entries.size() < n) {
      const uint32_t j = static_cast<uint32_t>(entries.size() % 2 == 0 ? rng() % 64 : rng() % kDim);
      entries[j] = static_cast<double>(rng() % 1000) / 500.0 - 1.0;
    }
    indices->clear();
    values->clear();
    for (const auto& [j, v] : entries) {
      indices->push_back(j);
      values->push_back(v);
    }
  };
  std::vector<Batch> batches(12);
  std::vector<uint32_t> indices;
  std::vector<double> values;
  for (Batch& batch : batches) {
    for (int i = 0; i < 5; ++i) {
      random_vector(&indices, &values);
      const double y = (indices[0] % 2 == 0) ? 1.0 : -1.0;
      batch.push_back(MakeExample(SparseVector(indices, values), y));
      ASSERT_TRUE((*core)->ObserveSparse({indices, values}, y).ok());
    }
  }
  std::vector<v1::Vector> probes;
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i) {
    random_vector(&indices, &values);
    probes.push_back(SparseVector(indices, values));
    expected.push_back(*(*core)->PredictSparse({indices, values}));
  }
  auto expect_core_model = [&](ServerProcess& server, absl::string_view when) {
    std::vector<double> predictions;
    ASSERT_TRUE(IsOk(Predict(server.stub(), Ref("acme", "text"), probes, &predictions)))
        << when;
    EXPECT_EQ(Bits(predictions), Bits(expected)) << when;
    std::string bytes;
    ASSERT_TRUE(IsOk(Snapshot(server.stub(), Ref("acme", "text"), &bytes))) << when;
    absl::StatusOr<ModelState> state = DecodeSnapshot(bytes);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_TRUE(*state == (*core)->ExportState()) << when;
  };

  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  const v1::ModelRef ref = Ref("acme", "text");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  v1::ObserveResponse response;
  for (size_t b = 0; b < 6; ++b) {
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, batches[b], &response)));
  }
  ASSERT_TRUE(IsOk(ObserveStream(server->stub(), ref,
                                 std::vector<Batch>(batches.begin() + 6, batches.end()),
                                 &response)));
  EXPECT_EQ(response.steps(), 60u);
  expect_core_model(*server, "live");
  // An input over max_nonzeros is refused, naming the limit.
  std::vector<uint32_t> nine = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> ones(9, 1.0);
  std::vector<double> unused;
  const grpc::Status too_many =
      Predict(server->stub(), ref, {SparseVector(nine, ones)}, &unused);
  EXPECT_TRUE(HasCode(too_many, grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(too_many.error_message(), HasSubstr("more than the model's 8"));

  KillHard(*server);
  server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  expect_core_model(*server, "after SIGKILL");
  StopGracefully(*server);
}

// --- A store that cannot write ---------------------------------------------------------

// How a test fills the store's disk.
enum class FullDisk {
  // RLIMIT_FSIZE (set in the child before exec, SIGXFSZ ignored): once the store's
  // write-ahead log would grow past the limit, write() fails with EFBIG, which the store
  // sees as it would a full disk. It needs no privileges, but it bounds each file, not
  // the filesystem: RocksDB's other files still have room.
  kFileSizeLimit,
  // A real filesystem that fills: a tmpfs (TmpfsLauncher) in a mount namespace of
  // the server's own (unshare with a user namespace: no root needed on the host), so
  // every file of the store, the WAL and RocksDB's own, gets ENOSPC. It vanishes with
  // the server, so this variant does not restart on it.
  kTmpfs,
};

// The tmpfs of FullDisk::kTmpfs: 32 MiB, of which a filler file takes 20 MiB until the
// test deletes it ("space freed"); the store is a directory in it.
constexpr char kTmpfsFiller[] = "filler";
constexpr char kTmpfsStore[] = "store";

// The launcher that runs the server on that tmpfs over `mount_point`, or nullopt if this
// machine cannot make one (no unshare, or user namespaces disabled).
std::optional<std::vector<std::string>> TmpfsLauncher(const std::string& mount_point) {
  const std::string mount =
      absl::StrCat("mount -t tmpfs -o size=32m tmpfs '", mount_point, "'");
  const std::string probe = absl::StrCat(
      "/usr/bin/unshare --user --map-root-user --mount /bin/sh -c \"", mount,
      "\" >/dev/null 2>&1");
  if (std::system(probe.c_str()) != 0) return std::nullopt;
  const std::string setup = absl::StrCat(mount, " && head -c 20M /dev/zero > '", mount_point,
                                         "/", kTmpfsFiller, "' && exec \"$@\"");
  return std::vector<std::string>{"/usr/bin/unshare", "--user", "--map-root-user", "--mount",
                                  "/bin/sh",          "-c",     setup,              "sh"};
}

class FullDiskTest : public ::testing::TestWithParam<FullDisk> {};

// On the full tmpfs over `mount_point`: the metric and the health service say writes are
// failing while reads go on; once the filler is deleted, writes resume without a
// restart, and the model holds exactly the acknowledged examples.
void ExpectWritesResumeOnceSpaceIsFreed(ServerProcess& server, const std::string& mount_point,
                                        const v1::ModelRef& ref, const v1::ModelConfig& config,
                                        CoreTwin* twin, const std::vector<v1::Vector>& probes) {
  const int metrics = server.metrics_port();
  const std::string no_space = R"(okl_store_write_failures_total{kind="no_space"})";
  EXPECT_EQ(MetricValue(metrics, "okl_store_writable").value_or(-1), 0);
  EXPECT_GT(MetricValue(metrics, no_space).value_or(-1), 0);
  EXPECT_EQ(MetricValue(metrics, "okl_store_resumptions_total").value_or(-1), 0);
  EXPECT_LT(MetricValue(metrics, "okl_store_free_bytes").value_or(-1), 1 << 20);
  // The background thread polls the store every 100 ms.
  auto health_becomes = [&](absl::string_view service, ServingStatus wanted) {
    absl::StatusOr<ServingStatus> status;
    for (int i = 0; i < 50; ++i) {
      status = CheckHealth(server.channel(), service);
      if (status.ok() && *status == wanted) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << service << ": " << (status.ok() ? ServingStatusName(*status)
                                                     : status.status().ToString());
    return false;
  };
  EXPECT_TRUE(health_becomes("okl.v1.OnlineKernelLearning/writes", ServingStatus::kNotServing));
  // Reads work, so the server as a whole stays SERVING (a restart would not free the disk).
  EXPECT_TRUE(health_becomes("", ServingStatus::kServing));
  EXPECT_TRUE(health_becomes("okl.v1.OnlineKernelLearning", ServingStatus::kServing));

  // Space is freed: the filler is deleted from inside the server's own mount namespace.
  const std::string filler =
      absl::StrCat("/proc/", server.pid(), "/root", mount_point, "/", kTmpfsFiller);
  std::error_code error;
  ASSERT_TRUE(std::filesystem::remove(filler, error)) << filler << ": " << error.message();

  // Writes resume by themselves: the server retries the store once a second.
  const Batch batch = MakeStream(config, 150, 99);
  grpc::Status status;
  v1::ObserveResponse response;
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  do {
    status = Observe(server.stub(), ref, batch, &response);
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(200));
  } while (!status.ok() && absl::Now() < deadline);
  ASSERT_TRUE(status.ok()) << "writes did not resume once space was freed: " << Describe(status)
                           << "; log:\n"
                           << server.Log();
  twin->Observe(batch);
  EXPECT_TRUE(MatchesTwin(server.stub(), ref, *twin, probes));
  EXPECT_EQ(MetricValue(metrics, "okl_store_writable").value_or(-1), 1);
  EXPECT_EQ(MetricValue(metrics, "okl_store_resumptions_total").value_or(-1), 1);
  EXPECT_TRUE(health_becomes("okl.v1.OnlineKernelLearning/writes", ServingStatus::kServing));
  EXPECT_THAT(server.Log(), HasSubstr("the model store accepts writes again"));
}

TEST_P(FullDiskTest, ObserveFailsAndChangesNothingWhenTheStoreCannotWrite) {
  TempDir dir("okl_durability_test");
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 16
    kernel { gaussian { gamma: 0.5 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    lambda: 0.01
    budget { max_terms: 50 }
  )pb");
  const std::vector<v1::Vector> probes = MakeProbes(16, 8, 11);
  const v1::ModelRef ref = Ref("acme", "full-disk");
  const std::vector<std::string> flags = {"--checkpoint_every_examples=1000000000",
                                          "--checkpoint_every=0"};
  ServerProcessOptions options = {.flags = flags, .data_dir = dir.data_dir()};
  if (GetParam() == FullDisk::kTmpfs) {
    std::filesystem::create_directories(dir.data_dir());
    std::optional<std::vector<std::string>> launcher = TmpfsLauncher(dir.data_dir());
    if (!launcher.has_value()) GTEST_SKIP() << "this machine cannot mount a tmpfs of its own";
    options.launcher = *std::move(launcher);
    options.data_dir = absl::StrCat(dir.data_dir(), "/", kTmpfsStore);
  } else {
    options.file_size_limit = 512 << 10;
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);

  // Batches of ~25 KB on the wire: the file size limit is reached within about 25 of
  // them, the tmpfs (12 MiB left beside the filler) within about 400.
  Batch acknowledged;
  std::vector<Batch> rejected;
  grpc::Status failure;
  for (int i = 0; i < 3000 && rejected.empty(); ++i) {
    const Batch batch = MakeStream(config, 150, 1000 + i);
    v1::ObserveResponse response;
    const grpc::Status status = Observe(server->stub(), ref, batch, &response);
    if (status.ok()) {
      twin->Observe(batch);
      acknowledged.insert(acknowledged.end(), batch.begin(), batch.end());
      ASSERT_EQ(response.steps(), acknowledged.size());
    } else {
      failure = status;
      rejected.push_back(batch);
    }
  }
  ASSERT_FALSE(rejected.empty()) << "Observe never failed on the full disk; log:\n"
                                 << server->Log();
  // A full disk fails writes; it does not take the server down.
  ASSERT_TRUE(server->Running()) << "okl_server died on the full disk; log:\n" << server->Log();
  if (GetParam() == FullDisk::kTmpfs) {
    EXPECT_TRUE(HasCode(failure, grpc::StatusCode::RESOURCE_EXHAUSTED)) << Describe(failure);
    EXPECT_THAT(failure.error_message(), HasSubstr("the model store is full"));
  }
  ASSERT_GT(acknowledged.size(), 0u)
      << "the first Observe failed already: " << Describe(failure) << "; log:\n"
      << server->Log();
  EXPECT_THAT(failure.error_code(), ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                                                     grpc::StatusCode::RESOURCE_EXHAUSTED))
      << Describe(failure);
  if (Verbose()) {
    std::cerr << "acknowledged " << acknowledged.size() << " then " << Describe(failure)
              << "\n";
  }
  // The rejected batch was not applied: the model is exactly the acknowledged examples.
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));

  // Still unwritable: a small batch and a stream fail the same way and change nothing.
  const Batch small = MakeStream(config, 1, 7);
  v1::ObserveResponse response;
  grpc::Status again = Observe(server->stub(), ref, small, &response);
  EXPECT_THAT(again.error_code(), ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                                                   grpc::StatusCode::RESOURCE_EXHAUSTED))
      << Describe(again);
  if (!again.ok()) rejected.push_back(small);
  again = ObserveStream(server->stub(), ref, {small}, &response);
  EXPECT_THAT(again.error_code(), ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                                                   grpc::StatusCode::RESOURCE_EXHAUSTED))
      << Describe(again);
  if (!again.ok()) rejected.push_back(small);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));

  // Create, Delete and Restore are acknowledged only once durable, so they fail too, and
  // change nothing: a model acknowledged as created (or deleted) would be lost (or come
  // back) at the next restart.
  const auto unwritable =
      ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::RESOURCE_EXHAUSTED);
  const v1::ModelRef other = Ref("acme", "created-on-a-full-disk");
  grpc::Status created = CreateModel(server->stub(), other, config);
  EXPECT_THAT(created.error_code(), unwritable) << Describe(created);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), other, &info), grpc::StatusCode::NOT_FOUND));
  grpc::Status deleted = DeleteModel(server->stub(), ref);
  EXPECT_THAT(deleted.error_code(), unwritable) << Describe(deleted);
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(server->stub(), ref, &bytes)));
  const v1::ModelRef copy = Ref("acme", "restored-on-a-full-disk");
  grpc::Status restored = Restore(server->stub(), copy, bytes);
  EXPECT_THAT(restored.error_code(), unwritable) << Describe(restored);
  EXPECT_TRUE(HasCode(GetModel(server->stub(), copy, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ModelNames(server->stub(), ""), ::testing::ElementsAre("acme/full-disk"));
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  EXPECT_TRUE(server->Running()) << "okl_server died on the full disk; log:\n" << server->Log();
  if (GetParam() == FullDisk::kTmpfs) {
    ExpectWritesResumeOnceSpaceIsFreed(*server, dir.data_dir(), ref, config, twin.get(),
                                       probes);
    return;  // its store vanishes with the server
  }

  // With room again, a restart has every acknowledged example; of the rejected ones at
  // most a whole-batch prefix (they were never acknowledged).
  KillHard(*server);
  server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(ModelNames(server->stub(), ""), ::testing::ElementsAre("acme/full-disk"));
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  Batch expected = acknowledged;
  size_t next_rejected = 0;
  while (expected.size() < info.stats().steps() && next_rejected < rejected.size()) {
    const Batch& batch = rejected[next_rejected++];
    expected.insert(expected.end(), batch.begin(), batch.end());
  }
  ASSERT_EQ(info.stats().steps(), expected.size())
      << "acknowledged " << acknowledged.size() << " examples";
  if (Verbose()) {
    std::cerr << "after restart: " << info.stats().steps() << " steps; log:\n" << server->Log();
  }
  std::unique_ptr<CoreTwin> restored_twin = TwinFedWith(config, expected);
  ASSERT_NE(restored_twin, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *restored_twin, probes));
  StopGracefully(*server);
}

INSTANTIATE_TEST_SUITE_P(Ways, FullDiskTest,
                         ::testing::Values(FullDisk::kFileSizeLimit, FullDisk::kTmpfs),
                         [](const ::testing::TestParamInfo<FullDisk>& info) {
                           return info.param == FullDisk::kTmpfs ? "Tmpfs" : "FileSizeLimit";
                         });

// An ObserveStream that fills the disk part-way ends with the store's error; the
// messages before the failing one stay applied, each whole, and they are exactly what a
// restart (with room again) restores.
TEST(DurabilityTest, ObserveStreamThatFillsTheDiskKeepsTheMessagesBeforeTheFailure) {
  TempDir dir("okl_durability_test");
  const v1::ModelConfig config = ParseConfig(R"pb(
    dim: 16
    kernel { gaussian { gamma: 0.5 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    lambda: 0.01
    budget { max_terms: 50 }
  )pb");
  const std::vector<v1::Vector> probes = MakeProbes(16, 8, 41);
  const v1::ModelRef ref = Ref("acme", "full-stream");
  const std::vector<std::string> flags = {"--checkpoint_every_examples=1000000000",
                                          "--checkpoint_every=0"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(
      {.flags = flags, .data_dir = dir.data_dir(), .file_size_limit = 512 << 10});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));

  constexpr size_t kMessage = 150;  // examples per message, ~25 KB on the wire
  const Batch stream = MakeStream(config, 80 * kMessage, 43);
  const std::vector<Batch> messages = SplitIntoBatches(stream, std::vector<size_t>{kMessage});
  v1::ObserveResponse response;
  const grpc::Status status = ObserveStream(server->stub(), ref, messages, &response);
  EXPECT_THAT(status.error_code(), ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                                                    grpc::StatusCode::RESOURCE_EXHAUSTED))
      << Describe(status);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  const uint64_t applied = info.stats().steps();
  EXPECT_GT(applied, 0u);
  EXPECT_LT(applied, stream.size());
  EXPECT_EQ(applied % kMessage, 0u) << "part of a message was applied";
  std::unique_ptr<CoreTwin> twin =
      TwinFedWith(config, absl::MakeConstSpan(stream).subspan(0, applied));
  ASSERT_NE(twin, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));

  KillHard(*server);
  server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, probes));
  StopGracefully(*server);
}

// --- Damaged and unusable stores -------------------------------------------------------

// Opens the RocksDB at `path` (every column family; the server must not run) and
// overwrites with garbage the value of every key `select` picks, in one synced write.
// Returns the keys overwritten. With `select` false for every key: lists nothing, changes
// nothing, but `keys` (if not null) receives every key.
absl::StatusOr<std::vector<std::string>> CorruptValues(
    const std::string& path, const std::function<bool(absl::string_view key)>& select,
    std::vector<std::string>* keys = nullptr) {
  std::vector<std::string> families;
  rocksdb::Status status =
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &families);
  if (!status.ok()) return absl::InternalError(status.ToString());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& family : families) {
    descriptors.emplace_back(family, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  status = rocksdb::DB::Open(rocksdb::DBOptions(), path, descriptors, &handles, &raw);
  if (!status.ok()) return absl::InternalError(status.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  // Not a protobuf (tag 0 is invalid), no valid checksum, not a number.
  const std::string garbage("\x00\xff\x07 garbage \xde\xad\xbe\xef", 17);
  std::vector<std::string> corrupted;
  rocksdb::WriteBatch batch;
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handle));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const absl::string_view key(it->key().data(), it->key().size());
      if (keys != nullptr) keys->emplace_back(key);
      if (!select(key)) continue;
      status = batch.Put(handle, it->key(), garbage);
      if (!status.ok()) return absl::InternalError(status.ToString());
      corrupted.emplace_back(key);
    }
    if (!it->status().ok()) return absl::InternalError(it->status().ToString());
  }
  rocksdb::WriteOptions options;
  options.sync = true;
  status = db->Write(options, &batch);
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    rocksdb::Status ignored = db->DestroyColumnFamilyHandle(handle);
    (void)ignored;
  }
  if (!status.ok()) return absl::InternalError(status.ToString());
  status = db->Close();
  if (!status.ok()) return absl::InternalError(status.ToString());
  return corrupted;
}

// Starts okl_server on `data_dir` and expects it to exit 1, before it listens, with a
// message naming the damaged model.
void ExpectRefusesToStart(const std::string& data_dir, absl::string_view model) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> refused =
      ServerProcess::Start({.wait_until_serving = false, .data_dir = data_dir});
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<int> exit = (*refused)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status() << "; log:\n" << (*refused)->Log();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << DescribeWait(*exit) << "; log:\n"
                                                           << (*refused)->Log();
  EXPECT_THAT((*refused)->Log(), HasSubstr(absl::StrCat("model ", model, " is damaged")));
}

TEST(DurabilityTest, DamagedModelStopsTheServerUnlessSkipped) {
  TempDir dir("okl_durability_test");
  const std::vector<v1::Vector> probes = MakeProbes(4, 8, 13);
  const v1::ModelRef victim = Ref("acme", "victim-model");
  const v1::ModelRef healthy = Ref("acme", "healthy");
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  std::unique_ptr<CoreTwin> twin;
  for (const v1::ModelRef& ref : {victim, healthy}) {
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, RegressionConfig())));
    const std::vector<v1::Example> stream = MakeStream(RegressionConfig(), 100, 17);
    v1::ObserveResponse response;
    ASSERT_TRUE(IsOk(Observe(server->stub(), ref, stream, &response)));
    twin = TwinFedWith(RegressionConfig(), stream);
  }
  StopGracefully(*server);
  server.reset();

  // The key that names the model ("m/acme/victim-model" in server/store/model_store.h's
  // layout) holds its config.
  absl::StatusOr<std::vector<std::string>> corrupted = CorruptValues(
      dir.data_dir(),
      [](absl::string_view key) { return absl::StrContains(key, "victim-model"); });
  ASSERT_TRUE(corrupted.ok()) << corrupted.status();
  ASSERT_FALSE(corrupted->empty()) << "no key of the store names the model";
  ASSERT_NO_FATAL_FAILURE(ExpectRefusesToStart(dir.data_dir(), "acme/victim-model"));

  server = StartServer(dir.data_dir(), {"--skip_damaged_models"});
  ASSERT_NE(server, nullptr);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), victim, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ModelNames(server->stub(), ""), ::testing::ElementsAre("acme/healthy"));
  EXPECT_TRUE(MatchesTwin(server->stub(), healthy, *twin, probes));
  EXPECT_THAT(server->Log(), HasSubstr("acme/victim-model"));
  StopGracefully(*server);
}

// A damaged log record (not the config) is damage too: replaying around it would give a
// model that never existed. The victim's records are found by their count: in
// server/store/model_store.h's layout a model's log is "i/<incarnation>/l/<seq>", and the
// victim has three records where the healthy model has one.
TEST(DurabilityTest, DamagedLogRecordStopsTheServerUnlessSkipped) {
  TempDir dir("okl_durability_test");
  const std::vector<v1::Vector> probes = MakeProbes(4, 8, 19);
  const v1::ModelRef victim = Ref("acme", "victim-model");
  const v1::ModelRef healthy = Ref("acme", "healthy");
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir());
  ASSERT_NE(server, nullptr);
  const std::vector<v1::Example> stream = MakeStream(RegressionConfig(), 30, 23);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), victim, RegressionConfig())));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), healthy, RegressionConfig())));
  for (size_t i = 0; i < 3; ++i) {
    const absl::Span<const v1::Example> batch = absl::MakeConstSpan(stream).subspan(10 * i, 10);
    ASSERT_TRUE(IsOk(Observe(server->stub(), victim, batch, &response)));
  }
  ASSERT_TRUE(IsOk(Observe(server->stub(), healthy, stream, &response)));
  std::unique_ptr<CoreTwin> twin = TwinFedWith(RegressionConfig(), stream);
  ASSERT_NE(twin, nullptr);
  KillHard(*server);  // SIGTERM would checkpoint and drop the log
  server.reset();

  std::vector<std::string> keys;
  ASSERT_TRUE(CorruptValues(
                  dir.data_dir(), [](absl::string_view) { return false; }, &keys)
                  .ok());
  // The log records per incarnation: "i/<inc>/l/<seq>".
  std::map<std::string, std::vector<std::string>> records;
  for (const std::string& key : keys) {
    const std::vector<std::string> parts = absl::StrSplit(key, '/');
    if (parts.size() == 4 && parts[0] == "i" && parts[2] == "l")
      records[parts[1]].push_back(key);
  }
  std::string middle;
  for (const auto& [incarnation, log] : records) {
    if (log.size() == 3) middle = log[1];
  }
  ASSERT_FALSE(middle.empty()) << "no incarnation with three log records among: "
                               << absl::StrJoin(keys, ", ");
  absl::StatusOr<std::vector<std::string>> corrupted =
      CorruptValues(dir.data_dir(), [&](absl::string_view key) { return key == middle; });
  ASSERT_TRUE(corrupted.ok()) << corrupted.status();
  ASSERT_EQ(corrupted->size(), 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectRefusesToStart(dir.data_dir(), "acme/victim-model"));

  server = StartServer(dir.data_dir(), {"--skip_damaged_models"});
  ASSERT_NE(server, nullptr);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), victim, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_TRUE(MatchesTwin(server->stub(), healthy, *twin, probes));
  StopGracefully(*server);
}

TEST(DurabilityTest, DataDirThatIsARegularFileStopsTheServer) {
  TempDir dir("okl_durability_test");
  const std::string file = dir.path() + "/not-a-directory";
  std::ofstream(file) << "a regular file\n";
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({.wait_until_serving = false, .data_dir = file});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> exit = (*server)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status() << "; log:\n" << (*server)->Log();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << DescribeWait(*exit);
  EXPECT_THAT((*server)->Log(), HasSubstr(file));
}

TEST(DurabilityTest, SecondServerOnTheSameDataDirStopsAndTheFirstKeepsServing) {
  TempDir dir("okl_durability_test");
  std::unique_ptr<ServerProcess> first = StartServer(dir.data_dir());
  ASSERT_NE(first, nullptr);
  const v1::ModelRef ref = Ref("acme", "owned");
  ASSERT_TRUE(IsOk(CreateModel(first->stub(), ref, RegressionConfig())));

  absl::StatusOr<std::unique_ptr<ServerProcess>> second =
      ServerProcess::Start({.wait_until_serving = false, .data_dir = dir.data_dir()});
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<int> exit = (*second)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status() << "; log:\n" << (*second)->Log();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << DescribeWait(*exit);
  EXPECT_THAT((*second)->Log(), HasSubstr(dir.data_dir()));

  const std::vector<v1::Example> stream = MakeStream(RegressionConfig(), 25, 31);
  v1::ObserveResponse response;
  ASSERT_TRUE(IsOk(Observe(first->stub(), ref, stream, &response)));
  KillHard(*first);
  first = StartServer(dir.data_dir());
  ASSERT_NE(first, nullptr);
  std::unique_ptr<CoreTwin> twin = TwinFedWith(RegressionConfig(), stream);
  ASSERT_NE(twin, nullptr);
  EXPECT_TRUE(MatchesTwin(first->stub(), ref, *twin, MakeProbes(4, 8, 37)));
  StopGracefully(*first);
}

// --- No store --------------------------------------------------------------------------

TEST(DurabilityTest, EmptyDataDirKeepsModelsInMemoryOnly) {
  TempDir dir("okl_durability_test");
  const std::vector<std::string> flags = {"--data_dir="};  // wins over the harness's
  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  const v1::ModelRef ref = Ref("acme", "ephemeral");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, RegressionConfig())));
  v1::ObserveResponse response;
  ASSERT_TRUE(
      IsOk(Observe(server->stub(), ref, MakeStream(RegressionConfig(), 20, 1), &response)));
  StopGracefully(*server);
  EXPECT_FALSE(std::filesystem::exists(dir.data_dir()));

  server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), ref, &info), grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ModelNames(server->stub(), ""), ::testing::IsEmpty());
  StopGracefully(*server);
}

}  // namespace
}  // namespace okl::testing
