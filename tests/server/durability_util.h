// tests/server/durability_util.h
//
// What the durability suites (durability_test.cc, crash_test.cc) share: servers on a
// --data_dir that outlives them, stopped gently or killed, the report a restart logs,
// and the models and the oracle (CoreTwin) a restarted model is compared with.
#ifndef OKL_TESTS_SERVER_DURABILITY_UTIL_H_
#define OKL_TESTS_SERVER_DURABILITY_UTIL_H_

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
#include "core/model.h"
#include "core/runtime/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {

// One Observe's examples.
using Batch = std::vector<v1::Example>;

// With OKL_DURABILITY_VERBOSE set, the tests print what each restart found (steps
// restored, calls in flight, batches replayed): the coverage of the random kills.
inline bool Verbose() { return std::getenv("OKL_DURABILITY_VERBOSE") != nullptr; }

// --- Fixtures --------------------------------------------------------------------------

inline std::unique_ptr<ServerProcess> StartServer(const std::string& data_dir,
                                                  std::vector<std::string> flags = {}) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({.flags = std::move(flags), .data_dir = data_dir});
  if (!server.ok()) {
    ADD_FAILURE() << "okl_server did not start: " << server.status();
    return nullptr;
  }
  return *std::move(server);
}

// What the startup line "okl_server: restored N models (R log batches, E examples
// replayed) in X.XXX s" says.
struct RestoreReport {
  int64_t models = 0;
  int64_t batches = 0;
  int64_t examples = 0;
};

inline std::optional<RestoreReport> ParseRestoreReport(const std::string& log) {
  static const std::regex kLine(
      R"(okl_server: restored (\d+) models? )"
      R"(\((\d+) log batch(es)?, (\d+) examples? replayed\) in \d+\.\d{3} s)");
  std::smatch match;
  if (!std::regex_search(log, match, kLine)) return std::nullopt;
  return RestoreReport{.models = std::stoll(match[1]),
                       .batches = std::stoll(match[2]),
                       .examples = std::stoll(match[4])};
}

inline std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// Stops `server` with SIGTERM and expects a clean exit.
inline void StopGracefully(ServerProcess& server) {
  absl::StatusOr<int> status = server.Stop();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << DescribeWait(*status) << "; log:\n"
      << server.Log();
}

inline void KillHard(ServerProcess& server) {
  absl::StatusOr<int> status = server.Kill();
  ASSERT_TRUE(status.ok()) << status.status();
}

// --- Failpoints (server/base/failpoint.h) ---------------------------------------------------

// True once `killed` is set, waiting up to 10 s for it: a server that kills itself (a
// failpoint) fails its clients' calls a moment before the test has seen it exit.
inline bool AwaitKill(const std::atomic<bool>& killed) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!killed.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return killed.load();
}

// A client of a failpoint round (numbered from 0): calls `stub` until a call fails after
// the kill (it is then in flight) or `stop`; a call failing before `killed` is set
// (AwaitKill) is a bug.
using FailpointClient = std::function<void(
    Stub& stub, int round, const std::atomic<bool>& killed, const std::atomic<bool>& stop)>;

// A group of failpoints and the seed of the rounds that use them: a failpoint crash
// test's parameter.
struct FailpointCase {
  const char* name;  // of the test
  std::vector<std::string> failpoints;
  uint64_t seed;

  friend void PrintTo(const FailpointCase& c, std::ostream* os) { *os << c.name; }
};

inline std::string FailpointCaseName(const ::testing::TestParamInfo<FailpointCase>& info) {
  return info.param.name;
}

// One of `failpoints`, armed to fire the first to third time it is reached: "NAME@N".
inline std::string RandomFailpoint(absl::Span<const std::string> failpoints,
                                   std::mt19937_64& random) {
  const std::string& name = failpoints[random() % failpoints.size()];
  return absl::StrCat(name, "@", 1 + random() % 3);
}

// One round of a failpoint crash test: starts okl_server on `data_dir` with `flags` and
// --failpoint=`failpoint` ("NAME@N"), runs each of `clients` on a thread of its own until
// the server has SIGKILLed itself at the failpoint, and joins them. Fails the current test
// unless the server did so within `timeout` (then the log tells what was reached).
inline void RunUntilFailpoint(const std::string& data_dir, std::vector<std::string> flags,
                              absl::string_view failpoint,
                              absl::Span<const FailpointClient> clients, int round,
                              absl::Duration timeout) {
  flags.push_back(absl::StrCat("--failpoint=", failpoint));
  std::unique_ptr<ServerProcess> server = StartServer(data_dir, std::move(flags));
  ASSERT_NE(server, nullptr);
  std::atomic<bool> killed{false};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (const FailpointClient& client : clients) {
    threads.emplace_back([&server, &killed, &stop, &client, round] {
      client(server->stub(), round, killed, stop);
    });
  }
  const absl::StatusOr<int> exit = server->WaitForExit(timeout);
  killed.store(true);
  stop.store(true);
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(exit.ok()) << "the failpoint was not reached in " << absl::FormatDuration(timeout)
                         << ": " << exit.status() << "; log:\n"
                         << server->Log();
  ASSERT_TRUE(WIFSIGNALED(*exit) && WTERMSIG(*exit) == SIGKILL)
      << DescribeWait(*exit) << "; log:\n"
      << server->Log();
  const absl::string_view name = failpoint.substr(0, failpoint.find('@'));
  ASSERT_THAT(server->Log(),
              ::testing::HasSubstr(absl::StrCat("failpoint ", name, " reached")));
}

// `rounds` rounds of a failpoint crash test on `data_dir`: each arms one of `param`'s
// failpoints (RandomFailpoint, drawn from `random`) and runs `clients` until the kill
// (RunUntilFailpoint), then restarts okl_server with `flags` alone, hands `verify` its
// stub and stops it gently. Stops at the first round that fails.
inline void RunFailpointRounds(const FailpointCase& param, int rounds, std::mt19937_64& random,
                               const std::string& data_dir,
                               const std::vector<std::string>& flags,
                               absl::Span<const FailpointClient> clients,
                               const std::function<void(Stub&)>& verify,
                               absl::Duration timeout) {
  for (int round = 0; round < rounds; ++round) {
    const std::string failpoint = RandomFailpoint(param.failpoints, random);
    SCOPED_TRACE(absl::StrCat("round ", round, ", --failpoint=", failpoint));
    if (Verbose()) std::cerr << "round " << round << ": --failpoint=" << failpoint << "\n";
    RunUntilFailpoint(data_dir, flags, failpoint, clients, round, timeout);
    if (::testing::Test::HasFailure()) return;

    std::unique_ptr<ServerProcess> server = StartServer(data_dir, flags);
    ASSERT_NE(server, nullptr);
    verify(server->stub());
    if (::testing::Test::HasFailure()) return;
    StopGracefully(*server);
  }
}

// --- Models and the oracle -------------------------------------------------------------

// Three configs that between them exercise the state a checkpoint must carry: offset,
// the nu-trick's margin, the averaged hypothesis, every budget policy, sparse inputs.
inline v1::ModelConfig RegressionConfig() {
  return ParseConfig(R"pb(
    dim: 4
    kernel { gaussian { gamma: 1 } }
    loss { squared {} }
    learning_rate { eta0: 0.2 }
    lambda: 0.01
    offset: true
    budget { max_terms: 40 policy: OLDEST }
  )pb");
}

inline v1::ModelConfig ClassificationConfig() {
  return ParseConfig(R"pb(
    dim: 4
    kernel { laplacian { gamma: 0.5 } }
    loss { hinge { nu: 0.3 } }
    learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
    lambda: 0.1
    averaged: true
    budget { max_terms: 30 policy: SMALLEST }
  )pb");
}

inline v1::ModelConfig SparseTubeConfig() {
  return ParseConfig(R"pb(
    dim: 6
    kernel { polynomial { gamma: 0.5 c: 1 degree: 3 } }
    loss { epsilon_insensitive { epsilon: 0.1 nu: 0.2 } }
    learning_rate { eta0: 0.1 schedule: POWER theta: 0.6 }
    lambda: 0.05
    offset: true
    budget { max_terms: 25 drop_below: 1e-4 }
  )pb");
}

// The KRLS tracker, pruning on most steps and forgetting: its Q, Sigma and K are state a
// checkpoint and a replayed log must reproduce to the last bit.
inline v1::ModelConfig TrackerConfig() {
  return ParseConfig(R"pb(
    dim: 4
    kernel { gaussian { gamma: 0.7 } }
    loss { squared {} }
    krls_tracker { max_basis: 15 noise_variance: 0.01 forgetting: 0.998 }
  )pb");
}

// A selection: listed candidates (two of three live, a tracker among them) whose
// champion, leaders and retirements a checkpoint and a replayed log must reproduce.
inline v1::ModelConfig SelectConfig() {
  return ParseConfig(R"pb(
    dim: 4
    loss { squared {} }
    select {
      live: 2
      prediction: LEADERS
      candidates {
        kernel { gaussian { gamma: 1 } }
        learning_rate { eta0: 0.002 }
        budget { max_terms: 20 }
      }
      candidates {
        kernel { gaussian { gamma: 0.7 } }
        krls_tracker { max_basis: 10 noise_variance: 0.01 }
      }
      candidates {
        kernel { gaussian { gamma: 2 } }
        learning_rate { eta0: 0.3 }
        budget { max_terms: 20 policy: MERGE }
      }
    }
  )pb");
}

// Compares the served model with `twin` to the last bit: its whole state (decoded from
// Snapshot), its statistics and its predictions at `probes`.
inline ::testing::AssertionResult MatchesTwin(Stub& stub, const v1::ModelRef& ref,
                                              CoreTwin& twin,
                                              absl::Span<const v1::Vector> probes) {
  std::string bytes;
  grpc::Status status = Snapshot(stub, ref, &bytes);
  if (!status.ok()) {
    return ::testing::AssertionFailure()
           << "Snapshot " << RefName(ref) << ": " << Describe(status);
  }
  absl::StatusOr<ModelState> served = DecodeSnapshot(bytes);
  if (!served.ok()) {
    return ::testing::AssertionFailure()
           << "DecodeSnapshot " << RefName(ref) << ": " << served.status();
  }
  const ModelState expected = twin.model().ExportState();
  if (!(*served == expected)) {
    return ::testing::AssertionFailure()
           << RefName(ref) << ": the served state differs from core's: steps " << served->steps
           << " vs " << expected.steps << ", terms " << served->coefficients.size() << " vs "
           << expected.coefficients.size() << ", cumulative loss " << served->cumulative_loss
           << " vs " << expected.cumulative_loss << ", scale " << served->scale << " vs "
           << expected.scale << ", offset " << served->offset << " vs " << expected.offset;
  }
  v1::ModelInfo info;
  status = GetModel(stub, ref, &info);
  if (!status.ok()) {
    return ::testing::AssertionFailure()
           << "GetModel " << RefName(ref) << ": " << Describe(status);
  }
  // Without the remembered events' counts, which are the event book's, not the model's
  // (the delayed-feedback crash tests check them on their own).
  v1::ModelStats served_stats = info.stats();
  for (auto clear :
       {&v1::ModelStats::clear_events_pending, &v1::ModelStats::clear_labels_applied,
        &v1::ModelStats::clear_events_expired, &v1::ModelStats::clear_labels_duplicate,
        &v1::ModelStats::clear_served_loss, &v1::ModelStats::clear_served_labels}) {
    (served_stats.*clear)();
  }
  const v1::ModelStats expected_stats = twin.WireStats();
  if (served_stats.SerializeAsString() != expected_stats.SerializeAsString()) {
    return ::testing::AssertionFailure()
           << RefName(ref) << ": stats {" << served_stats.ShortDebugString() << "}, core's {"
           << expected_stats.ShortDebugString() << "}";
  }
  std::vector<double> predictions;
  status = Predict(stub, ref, probes, &predictions);
  if (!status.ok()) {
    return ::testing::AssertionFailure()
           << "Predict " << RefName(ref) << ": " << Describe(status);
  }
  if (Bits(predictions) != Bits(twin.Predict(probes))) {
    return ::testing::AssertionFailure()
           << RefName(ref) << ": probe predictions differ: served "
           << absl::StrJoin(predictions, " ") << ", core "
           << absl::StrJoin(twin.Predict(probes), " ");
  }
  return ::testing::AssertionSuccess();
}

inline std::unique_ptr<CoreTwin> TwinFedWith(const v1::ModelConfig& config,
                                             absl::Span<const v1::Example> examples) {
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  if (twin != nullptr && !examples.empty()) twin->Observe(examples);
  return twin;
}

inline std::vector<std::string> ModelNames(Stub& stub, absl::string_view tenant) {
  v1::ListModelsResponse response;
  grpc::Status status = ListModels(stub, tenant, &response);
  EXPECT_TRUE(IsOk(status));
  std::vector<std::string> names;
  for (const v1::ModelInfo& info : response.models()) names.push_back(RefName(info.ref()));
  return names;
}

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_DURABILITY_UTIL_H_
