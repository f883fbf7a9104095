// tests/server/isolation_util.h
//
// What the isolation suites (isolation_test.cc, tenant_limits_test.cc) share: their
// configs, the server process's memory and CPU as the kernel reports them, its metrics,
// servers and stubs of their own, a Restore driven chunk by chunk, and small stream
// helpers.
#ifndef OKL_TESTS_SERVER_ISOLATION_UTIL_H_
#define OKL_TESTS_SERVER_ISOLATION_UTIL_H_

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/spawned_server.h"
#include "core/create_model.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "tests/sanitized.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {

inline constexpr size_t kMiB = size_t{1} << 20;

inline bool Verbose() { return std::getenv("OKL_ISOLATION_VERBOSE") != nullptr; }

inline std::string Mb(uint64_t bytes) {
  return absl::StrCat(absl::SixDigits(static_cast<double>(bytes) / kMiB), " MiB");
}

// --- Configs ------------------------------------------------------------------------------

// A small model every test can afford.
inline constexpr char kSmallConfig[] = R"pb(
  dim: 4
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.01
  offset: true
  budget { max_terms: 64 }
)pb";

// A wide model: 65536 dimensions, so one dense example takes 512 KiB.
inline constexpr uint32_t kWideDim = 65536;
inline constexpr char kWideConfig[] = R"pb(
  dim: 65536
  kernel { gaussian { gamma: 0.5 } }
  loss { squared {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 100 }
)pb";

// A model whose snapshots are large: 32 KiB per term.
inline constexpr char kDim4096Config[] = R"pb(
  dim: 4096
  kernel { gaussian { gamma: 0.001 } }
  loss { squared {} }
  learning_rate { eta0: 0.1 }
  lambda: 0.001
  budget { max_terms: 10000 }
)pb";

inline ModelConfig CoreConfig(const v1::ModelConfig& config) {
  absl::StatusOr<ModelConfig> core = FromProto(config);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? *core : ModelConfig();
}

inline uint64_t WorstCaseBytes(const v1::ModelConfig& config) {
  return WorstCaseMemoryBytes(CoreConfig(config));
}

// `config` with another budget.
inline v1::ModelConfig WithMaxTerms(v1::ModelConfig config, uint32_t max_terms) {
  config.mutable_budget()->set_max_terms(max_terms);
  return config;
}

// --- The server process as the kernel sees it -----------------------------------------------

// The most resident memory the process has had since it started.
// (ProcStatusBytes is client/spawned_server.h's; 0 if it cannot be read.)
inline uint64_t PeakRssBytes(pid_t pid) { return ProcStatusBytes(pid, "VmHWM").value_or(0); }

// The CPU time (user + system, all threads) the process has used since it started.
inline double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces: count after it.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(close + 2), ' ');
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  uint64_t utime = 0;
  uint64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return -1;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// --- Metrics ------------------------------------------------------------------------------

inline absl::StatusOr<double> Metric(const ServerProcess& server, absl::string_view series) {
  return MetricValue(server.metrics_port(), series);
}

// The sample's value, or -1 (failing the test) if it cannot be read.
inline double MetricOrFail(const ServerProcess& server, absl::string_view series) {
  absl::StatusOr<double> value = Metric(server, series);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : -1;
}

inline std::string Rejections(absl::string_view quota) {
  return absl::StrCat("okl_quota_rejections_total{quota=\"", quota, "\"}");
}

// --- Servers ------------------------------------------------------------------------------

// A server with `flags`; null (the test failed) if it does not start.
inline std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> flags = {},
                                                  ServerProcessOptions options = {}) {
  options.flags.insert(options.flags.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A stub over a connection of its own: another tenant is another client.
inline std::unique_ptr<Stub> OwnStub(const ServerProcess& server) {
  return v1::OnlineKernelLearning::NewStub(
      MakeChannel(server.address(), /*own_connection=*/true));
}

// --- Calls --------------------------------------------------------------------------------

// A Restore whose chunks the test writes one at a time: to hold the call open, or to see
// how far the server read before it answered.
class RestoreCall {
 public:
  explicit RestoreCall(Stub& stub, absl::Duration timeout = kRpcTimeout) {
    SetDeadline(&context_, timeout);
    writer_ = stub.Restore(&context_, &info_);
  }

  // False once the server has ended the call (Finish() says how).
  bool Write(const v1::RestoreChunk& chunk) {
    if (!writer_->Write(chunk)) return false;
    ++written_;
    return true;
  }

  // Writes `bytes` in chunks of `chunk_bytes`, the first carrying `ref` and `declared`
  // (snapshot_bytes), until the first failed write. True if all were written.
  bool WriteAll(const v1::ModelRef& ref, absl::string_view bytes, size_t chunk_bytes,
                uint64_t declared = 0) {
    v1::RestoreChunk chunk;
    for (size_t offset = 0; offset == 0 || offset < bytes.size(); offset += chunk_bytes) {
      chunk.Clear();
      if (offset == 0) {
        *chunk.mutable_ref() = ref;
        chunk.set_snapshot_bytes(declared);
      }
      chunk.set_data(std::string(bytes.substr(offset, chunk_bytes)));
      if (!Write(chunk)) return false;
    }
    return true;
  }

  grpc::Status Finish() {
    writer_->WritesDone();
    return writer_->Finish();
  }

  void Cancel() { context_.TryCancel(); }
  // Chunks the client library accepted before the call ended.
  size_t written() const { return written_; }
  const v1::ModelInfo& info() const { return info_; }

 private:
  grpc::ClientContext context_;
  v1::ModelInfo info_;
  std::unique_ptr<grpc::ClientWriter<v1::RestoreChunk>> writer_;
  size_t written_ = 0;
};

// Restores `bytes` in chunks of `chunk_bytes` with a declared size.
inline grpc::Status RestoreDeclared(Stub& stub, const v1::ModelRef& ref,
                                    absl::string_view bytes, size_t chunk_bytes,
                                    uint64_t declared, v1::ModelInfo* info = nullptr) {
  RestoreCall call(stub);
  call.WriteAll(ref, bytes, chunk_bytes, declared);
  grpc::Status status = call.Finish();
  if (info != nullptr) *info = call.info();
  return status;
}

// Writes `first` then copies of `filler` (up to `total_chunks` chunks in all, e.g. 300
// MiB) until the server ends the call, and returns the status; `call` tells how many
// chunks the client got out before that.
inline grpc::Status StreamUntilRefused(RestoreCall& call, const v1::RestoreChunk& first,
                                       const std::string& filler, size_t total_chunks) {
  if (call.Write(first)) {
    v1::RestoreChunk chunk;
    chunk.set_data(filler);
    for (size_t i = 1; i < total_chunks && call.Write(chunk); ++i) {
    }
  }
  return call.Finish();
}

// Bytes no snapshot starts with: random, after a first byte that is no field's tag.
inline std::string Junk(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string junk(size, '\0');
  for (char& c : junk) c = static_cast<char>(random());
  junk[0] = '\xff';
  return junk;
}

// The model's snapshot bytes; empty (the test failed) on error.
inline std::string SnapshotOf(Stub& stub, const v1::ModelRef& ref) {
  std::string bytes;
  grpc::Status status = Snapshot(stub, ref, &bytes);
  EXPECT_TRUE(IsOk(status)) << "Snapshot " << RefName(ref);
  return bytes;
}

inline grpc::Status ObserveOk(Stub& stub, const v1::ModelRef& ref,
                              absl::Span<const v1::Example> examples) {
  v1::ObserveResponse response;
  return Observe(stub, ref, examples, &response);
}

// `n` examples with one nonzero coordinate each: ~26 bytes on the wire, 512 KiB dense at
// dim 65536.
inline std::vector<v1::Example> OneIndexExamples(size_t n, uint32_t dim, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<v1::Example> examples;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t index = static_cast<uint32_t>(random() % dim);
    const double x = value(random);
    examples.push_back(MakeExample(SparseVector({index}, {x}), 0.5 * x));
  }
  return examples;
}

inline std::vector<v1::Vector> InputsOf(absl::Span<const v1::Example> examples) {
  std::vector<v1::Vector> inputs;
  for (const v1::Example& example : examples) inputs.push_back(example.x());
  return inputs;
}

// Success iff the server's model predicts `probes` as the twin does, to the last bit, and
// has taken as many steps.
inline ::testing::AssertionResult MatchesTwin(Stub& stub, const v1::ModelRef& ref,
                                              CoreTwin& twin,
                                              absl::Span<const v1::Vector> probes) {
  v1::ModelInfo info;
  grpc::Status status = GetModel(stub, ref, &info);
  if (!status.ok()) return ::testing::AssertionFailure() << "GetModel: " << Describe(status);
  if (info.stats().steps() != twin.model().steps()) {
    return ::testing::AssertionFailure() << "the server's model took " << info.stats().steps()
                                         << " steps, the twin " << twin.model().steps();
  }
  std::vector<double> predictions;
  status = Predict(stub, ref, probes, &predictions);
  if (!status.ok()) return ::testing::AssertionFailure() << "Predict: " << Describe(status);
  const std::vector<double> expected = twin.Predict(probes);
  if (Bits(predictions) != Bits(expected)) {
    return ::testing::AssertionFailure()
           << "predictions differ: server " << ::testing::PrintToString(predictions)
           << ", twin " << ::testing::PrintToString(expected);
  }
  return ::testing::AssertionSuccess();
}

// The q-quantile (0 < q <= 1) of `values`, nearest rank; 0 if empty.
inline absl::Duration Quantile(std::vector<absl::Duration> values, double q) {
  if (values.empty()) return absl::ZeroDuration();
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

inline double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_ISOLATION_UTIL_H_
