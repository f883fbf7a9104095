// tests/server/noisy_neighbour_test.cc
//
// Tenant isolation measured as latency, against a real okl_server: while tenant A
// Restores a 300 MiB snapshot (twice: as a new model, then over it) and streams batches
// of 64 examples into a dim 4096 model without pause, tenant B's sequential Predicts on
// a small model (dim 16, budget 256) keep a p99 latency under 50 ms. B's p99 is measured
// alone first and then over the whole of A's load, and both are printed (docs/security.md
// quotes them).
//
// Registered only in builds without sanitizers: AddressSanitizer distorts timing. On a
// machine of 2 cores A's load keeps both busy; B's calls compete for CPU only, not for
// locks.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/security_util.h"
#include "tests/server/server_process.h"
#include "tests/server/state_builder.h"
#include "tests/test_paths.h"

namespace okl::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr absl::Duration kMaxP99 = absl::Milliseconds(50);

// B's model: a small one beside A's large one.
constexpr char kSmallConfig[] = R"pb(
  dim: 16
  kernel { gaussian { gamma: 0.1 } }
  loss { squared {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 256 }
)pb";

// A's models: the one it streams into and the one it restores, 32 KiB per term.
constexpr char kStreamConfig[] = R"pb(
  dim: 4096
  kernel { gaussian { gamma: 0.001 } }
  loss { squared {} }
  learning_rate { eta0: 0.1 }
  lambda: 0.001
  budget { max_terms: 1000 }
)pb";
constexpr char kRestoreConfig[] = R"pb(
  dim: 4096
  kernel { gaussian { gamma: 0.001 } }
  loss { squared {} }
  learning_rate { eta0: 0.1 }
  lambda: 0.001
  budget { max_terms: 10000 }
)pb";

// The q-quantile (0 < q <= 1) of `values`, nearest rank; 0 if empty.
absl::Duration Quantile(std::vector<absl::Duration> values, double q) {
  if (values.empty()) return absl::ZeroDuration();
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// A stub over a connection of its own: each tenant is its own client.
std::unique_ptr<Stub> OwnStub(const ServerProcess& server) {
  return v1::OnlineKernelLearning::NewStub(
      MakeChannel(server.address(), /*own_connection=*/true));
}

// B's calls: sequential Predicts until `stop`, each with its latency.
struct PredictLatencies {
  std::vector<absl::Duration> latencies;
  size_t failures = 0;
  std::string first_failure;
};

PredictLatencies PredictUntil(Stub& stub, const v1::ModelRef& ref,
                              const std::vector<v1::Vector>& inputs,
                              const std::function<bool()>& stop) {
  PredictLatencies out;
  while (!stop()) {
    std::vector<double> predictions;
    const absl::Time start = absl::Now();
    const grpc::Status status = Predict(stub, ref, inputs, &predictions);
    out.latencies.push_back(absl::Now() - start);
    if (!status.ok() && out.failures++ == 0) out.first_failure = Describe(status);
  }
  return out;
}

// Restores `bytes` in the server's own chunk size, one chunk at a time (a vector of
// chunks would copy all 300 MiB once more).
grpc::Status StreamRestore(Stub& stub, const v1::ModelRef& ref, const std::string& bytes) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(120));
  v1::ModelInfo info;
  std::unique_ptr<grpc::ClientWriter<v1::RestoreChunk>> writer = stub.Restore(&context, &info);
  v1::RestoreChunk chunk;
  for (size_t offset = 0; offset < bytes.size(); offset += kSnapshotChunkBytes) {
    chunk.Clear();
    if (offset == 0) {
      *chunk.mutable_ref() = ref;
      chunk.set_snapshot_bytes(bytes.size());
    }
    chunk.set_data(bytes.substr(offset, kSnapshotChunkBytes));
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST(NoisyNeighbourTest,
     QuietTenantsPredictP99StaysUnder50msWhileANoisyTenantRestoresAndStreams) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);

  // B: a small model with a full budget.
  const v1::ModelConfig small = ParseConfig(kSmallConfig);
  const v1::ModelRef quiet = Ref("tenant-b", "small");
  std::unique_ptr<Stub> b_stub = OwnStub(*server);
  ASSERT_TRUE(IsOk(CreateModel(*b_stub, quiet, small)));
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(*b_stub, quiet, MakeStream(small, 1000, 1), &observed)));
  ASSERT_EQ(observed.expansion_size(), 256u);
  const std::vector<v1::Vector> b_inputs = MakeProbes(16, 8, 2);

  // A: a stream model, and a 300 MiB snapshot built directly (9,594 terms at dim 4096).
  const v1::ModelConfig stream_config = ParseConfig(kStreamConfig);
  const v1::ModelRef stream_ref = Ref("tenant-a", "stream");
  std::unique_ptr<Stub> a_stub = OwnStub(*server);
  ASSERT_TRUE(IsOk(CreateModel(*a_stub, stream_ref, stream_config)));
  const v1::ModelConfig restore_config = ParseConfig(kRestoreConfig);
  const size_t terms = TermsForSnapshotBytes(restore_config, 300 * kMiB);
  absl::StatusOr<std::string> snapshot = RandomSnapshot(restore_config, terms, 3);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // Eight distinct batches of 64, sent in turn.
  std::vector<v1::ObserveRequest> batches;
  for (int i = 0; i < 8; ++i) {
    v1::ObserveRequest request;
    const std::vector<v1::Example> examples = MakeStream(stream_config, 64, 10 + i);
    request.mutable_examples()->Add(examples.begin(), examples.end());
    batches.push_back(std::move(request));
  }

  // B alone.
  const absl::Time alone_until = absl::Now() + absl::Seconds(3);
  const PredictLatencies alone =
      PredictUntil(*b_stub, quiet, b_inputs, [&] { return absl::Now() >= alone_until; });

  // A's load: the stream from the start, the two Restores one after the other; B runs
  // until the second Restore has finished.
  std::atomic<bool> restores_done{false};
  std::atomic<bool> stop_stream{false};
  grpc::Status stream_status;
  uint64_t stream_batches = 0;
  v1::ObserveResponse stream_response;
  std::thread streamer([&] {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(150));
    std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
        a_stub->ObserveStream(&context, &stream_response);
    for (size_t i = 0; !stop_stream.load(); ++i) {
      v1::ObserveRequest request = batches[i % batches.size()];
      if (i == 0) *request.mutable_ref() = stream_ref;
      if (!writer->Write(request)) break;
      ++stream_batches;
    }
    writer->WritesDone();
    stream_status = writer->Finish();
  });
  grpc::Status restore_status[2];
  absl::Duration restore_time[2];
  std::thread restorer([&] {
    std::unique_ptr<Stub> stub = OwnStub(*server);
    for (int i = 0; i < 2; ++i) {
      const absl::Time start = absl::Now();
      restore_status[i] = StreamRestore(*stub, Ref("tenant-a", "big"), *snapshot);
      restore_time[i] = absl::Now() - start;
    }
    restores_done.store(true);
  });
  const absl::Time load_start = absl::Now();
  const PredictLatencies loaded =
      PredictUntil(*b_stub, quiet, b_inputs, [&] { return restores_done.load(); });
  const absl::Duration load_time = absl::Now() - load_start;
  restorer.join();
  stop_stream.store(true);
  streamer.join();

  const absl::Duration alone_p99 = Quantile(alone.latencies, 0.99);
  const absl::Duration loaded_p99 = Quantile(loaded.latencies, 0.99);
  std::cout << "noisy neighbour: tenant B's Predict (dim 16, 256 terms, 8 inputs) p99 "
            << Ms(alone_p99) << " ms alone (" << alone.latencies.size() << " calls, max "
            << Ms(Quantile(alone.latencies, 1.0)) << " ms), " << Ms(loaded_p99)
            << " ms under tenant A's load (" << loaded.latencies.size() << " calls over "
            << load_time << ", p50 " << Ms(Quantile(loaded.latencies, 0.5)) << " ms, max "
            << Ms(Quantile(loaded.latencies, 1.0)) << " ms); A restored "
            << snapshot->size() / kMiB << " MiB (" << terms << " terms at dim 4096) in "
            << restore_time[0] << " and, over it, " << restore_time[1] << ", and streamed "
            << stream_batches * 64 << " examples at dim 4096 in batches of 64 meanwhile"
            << std::endl;
  RecordProperty("b_predict_p99_alone_ms", absl::StrCat(Ms(alone_p99)));
  RecordProperty("b_predict_p99_loaded_ms", absl::StrCat(Ms(loaded_p99)));

  ASSERT_TRUE(IsOk(restore_status[0])) << "first Restore";
  ASSERT_TRUE(IsOk(restore_status[1])) << "second Restore";
  EXPECT_TRUE(IsOk(stream_status)) << "A's ObserveStream";
  EXPECT_EQ(stream_response.steps(), stream_batches * 64);
  EXPECT_GT(stream_batches, 0u);
  EXPECT_EQ(alone.failures, 0u) << alone.first_failure;
  EXPECT_EQ(loaded.failures, 0u) << loaded.first_failure;
  ASSERT_GE(loaded.latencies.size(), 100u) << "too few of B's calls during A's load";
  EXPECT_LT(loaded_p99, kMaxP99) << "tenant B's Predict p99 under tenant A's load";
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(*b_stub, Ref("tenant-a", "big"), &info)));
  EXPECT_EQ(info.stats().expansion_size(), terms);
}

// The JSON number after `"key": ` in the first object after `"section": {` of `json`
// (okl_loadgen's report); nullopt if absent.
std::optional<double> JsonNumberIn(const std::string& json, absl::string_view section,
                                   absl::string_view key) {
  const size_t at = json.find(absl::StrCat("\"", section, "\": {"));
  if (at == std::string::npos) return std::nullopt;
  const size_t end = json.find('}', at);
  const size_t k = json.find(absl::StrCat("\"", key, "\": "), at);
  if (k == std::string::npos || k > end) return std::nullopt;
  return std::strtod(json.c_str() + k + key.size() + 4, nullptr);
}

// Another process's GetModels on a fixed schedule, every 5 ms, over TLS with a token
// (okl_loadgen, "get" in open loop: each latency from the call's scheduled time, so a
// stall counts for every call it delayed), while tenant A restores a 93 MiB snapshot over
// its own model again and again on the same 2 cores. What okl controls is asserted: the
// server answers 99% of B's calls within 25 ms of their arrival (its own histogram, from
// the call's start to its status). B's latency end to end, from the schedule, is printed
// (a bound on it would time the machine, not okl): with the server keeping freed heap
// memory, its p99 is about 20 ms here (docs/benchmarks.md, "Noisy neighbour").
TEST(NoisyNeighbourTest, ScheduledGetModelsFromAnotherProcessAreServedFastWhileARestoreRepeats) {
  if (LoadgenBinary() == nullptr) {
    GTEST_SKIP() << "okl_loadgen is not built (OKL_BUILD_BENCHMARKS=OFF)";
  }
  absl::StatusOr<std::unique_ptr<SecureServer>> started = SecureServer::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<SecureServer> server = *std::move(started);
  const v1::ModelConfig restore_config = ParseConfig(kRestoreConfig);
  const size_t terms = TermsForSnapshotBytes(restore_config, 93 * kMiB);
  absl::StatusOr<std::string> snapshot = RandomSnapshot(restore_config, terms, 4);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();

  std::atomic<bool> stop{false};
  std::vector<grpc::Status> restores;
  std::thread restorer([&] {
    std::unique_ptr<Stub> stub = server->StubFor(Who::kWriteA);
    while (!stop.load()) restores.push_back(StreamRestore(*stub, Ref("a", "big"), *snapshot));
  });
  // B: its own process, tenant and token (through the environment, out of the process
  // list).
  absl::StatusOr<CommandResult> loadgen =
      RunCommand({LoadgenBinary(), absl::StrCat("--server=", server->process().address()),
                  absl::StrCat("--tls_ca_file=", server->certs().ca.path), "--tenant=b",
                  "--scenarios=get", "--rate=200", "--duration=8s", "--warmup=1s"},
                 {absl::StrCat("OKL_TOKEN=", server->token(Who::kWriteAB))});
  stop.store(true);
  restorer.join();
  ASSERT_TRUE(loadgen.ok()) << loadgen.status();
  const std::string& output = loadgen->out;
  const std::string within_25ms =
      "okl_rpc_duration_seconds_bucket{service=\"okl.v1.OnlineKernelLearning\","
      "method=\"GetModel\",le=\"0.025\"}";
  const int metrics_port = server->process().metrics_port();
  absl::StatusOr<double> served_within = MetricValue(metrics_port, within_25ms);
  absl::StatusOr<double> served =
      MetricValue(metrics_port,
                  "okl_rpc_duration_seconds_count{service=\"okl.v1.OnlineKernelLearning\","
                  "method=\"GetModel\"}");
  auto scheduled = [&](absl::string_view key) {
    return JsonNumberIn(output, "get@200/s", key).value_or(-1);
  };
  std::cout << "noisy neighbour: another process's GetModel every 5 ms over TLS with a "
            << "token, while tenant A restored " << snapshot->size() / kMiB << " MiB "
            << restores.size() << " times: served within 25 ms " << served_within.value_or(-1)
            << " of " << served.value_or(-1) << "; from the schedule, end to end: p50 "
            << scheduled("p50_us") / 1000 << " ms, p99 " << scheduled("p99_us") / 1000
            << " ms, p999 " << scheduled("p999_us") / 1000 << " ms (" << scheduled("requests")
            << " calls)" << std::endl;
  ASSERT_EQ(loadgen->exit_code(), 0) << "okl_loadgen failed:\n" << loadgen->err;
  for (const grpc::Status& status : restores) EXPECT_TRUE(IsOk(status)) << "A's Restore";
  EXPECT_GE(restores.size(), 2u) << "too few of A's Restores during B's calls";
  EXPECT_EQ(scheduled("errors"), 0) << output;
  EXPECT_GE(scheduled("requests"), 1500) << output;
  ASSERT_TRUE(served_within.ok()) << served_within.status();
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_GE(*served_within, 0.99 * *served)
      << "fewer than 99% of B's GetModels were served within 25 ms of their arrival";
}

}  // namespace
}  // namespace okl::testing
