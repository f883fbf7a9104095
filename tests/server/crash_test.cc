// tests/server/crash_test.cc
//
// SIGKILL at random moments, on the real binary with a --data_dir that outlives it: amid
// concurrent Observes (an acknowledged batch survives, an unacknowledged one is present
// or absent only as whole batches in order), amid Restore, Delete and Create, and at
// each failpoint inside a checkpoint or a Restore (--failpoint). After each restart the
// models must equal core's NormaModel (CoreTwin) fed exactly the examples the server says
// it holds, to the last bit. The helpers are durability_util.h.

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
#include "tests/server/durability_util.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

// --- The crash test's bookkeeping ------------------------------------------------------

// What the clients of one model know: the batches acknowledged (by the position of their
// first example, from the response's step count) and, per writer, the batches of the
// call in flight when the server died. Of a call in flight, any prefix of its batches
// (messages) may have been applied, each whole; an acknowledged batch must be there.
class Ledger {
 public:
  explicit Ledger(int writers) : in_flight_(writers) {}

  void SetInFlight(int writer, std::vector<Batch> batches) {
    WriterLock lock(&mu_);
    in_flight_[writer] = std::move(batches);
  }

  // The call in flight for `writer` was acknowledged, its last example at step
  // `steps_after` (each batch in it consecutive: only single-writer models stream).
  void Acknowledge(int writer, uint64_t steps_after) {
    WriterLock lock(&mu_);
    std::vector<Batch> batches = std::move(in_flight_[writer]);
    in_flight_[writer].clear();
    uint64_t total = 0;
    for (const Batch& batch : batches) total += batch.size();
    if (steps_after < total) {
      errors_.push_back(
          absl::StrCat("steps ", steps_after, " after a call of ", total, " examples"));
      return;
    }
    uint64_t position = steps_after - total;
    for (Batch& batch : batches) {
      const uint64_t size = batch.size();
      if (!acked_.emplace(position, std::move(batch)).second) {
        errors_.push_back(absl::StrCat("two acknowledged batches start at step ", position));
      }
      position += size;
    }
  }

  void RecordError(std::string error) {
    WriterLock lock(&mu_);
    errors_.push_back(std::move(error));
  }

  std::vector<std::string> errors() const {
    WriterLock lock(&mu_);
    return errors_;
  }

  uint64_t AcknowledgedExamples() const {
    WriterLock lock(&mu_);
    uint64_t total = 0;
    for (const auto& [position, batch] : acked_) total += batch.size();
    return total;
  }

  // Every sequence of examples from step `start` to step `steps` that the ledger allows
  // (at most `limit`): the acknowledged batches at their positions, the gaps filled by
  // prefixes of the calls in flight.
  std::vector<Batch> Explanations(uint64_t start, uint64_t steps, size_t limit = 8) const {
    WriterLock lock(&mu_);
    std::vector<Batch> found;
    std::vector<size_t> next(in_flight_.size(), 0);
    std::vector<const Batch*> sequence;
    Search(start, steps, next, sequence, limit, found);
    return found;
  }

  std::string Describe() const {
    WriterLock lock(&mu_);
    std::string out = "acknowledged [";
    for (const auto& [position, batch] : acked_) {
      absl::StrAppend(&out, " ", position, "+", batch.size());
    }
    absl::StrAppend(&out, " ]; in flight:");
    for (size_t w = 0; w < in_flight_.size(); ++w) {
      absl::StrAppend(&out, " writer ", w, " [");
      for (const Batch& batch : in_flight_[w]) absl::StrAppend(&out, " ", batch.size());
      absl::StrAppend(&out, " ]");
    }
    return out;
  }

  // Forgets everything: the next round starts from a verified state.
  void Reset() {
    WriterLock lock(&mu_);
    acked_.clear();
    for (std::vector<Batch>& batches : in_flight_) batches.clear();
  }

 private:
  void Search(uint64_t position, uint64_t steps, std::vector<size_t>& next,
              std::vector<const Batch*>& sequence, size_t limit,
              std::vector<Batch>& found) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (found.size() >= limit || position > steps) return;
    if (position == steps) {
      // Every acknowledged batch must have been placed.
      size_t placed = 0;
      for (const auto& [start, batch] : acked_) placed += start < steps ? 1 : 0;
      if (placed != acked_.size()) return;
      Batch examples;
      for (const Batch* batch : sequence)
        examples.insert(examples.end(), batch->begin(), batch->end());
      found.push_back(std::move(examples));
      return;
    }
    auto acked = acked_.find(position);
    if (acked != acked_.end()) {
      sequence.push_back(&acked->second);
      Search(position + acked->second.size(), steps, next, sequence, limit, found);
      sequence.pop_back();
      return;
    }
    for (size_t w = 0; w < in_flight_.size(); ++w) {
      if (next[w] >= in_flight_[w].size()) continue;
      const Batch& batch = in_flight_[w][next[w]];
      ++next[w];
      sequence.push_back(&batch);
      Search(position + batch.size(), steps, next, sequence, limit, found);
      sequence.pop_back();
      --next[w];
    }
  }

  mutable Mutex mu_;
  std::map<uint64_t, Batch> acked_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<Batch>> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

struct CrashModel {
  v1::ModelRef ref;
  v1::ModelConfig config;
  bool sparse = false;
  int writers = 1;  // 2: concurrent unary writers, ordered by the responses' steps
  std::unique_ptr<Ledger> ledger = nullptr;
  Batch verified = {};  // the examples the model is known to hold, in order
};

// One client thread: unary Observe batches of varied sizes and, for a model with one
// writer, ObserveStream calls of several messages, until the server dies (or `stop`).
void RunWriter(Stub& stub, CrashModel& model, int writer, uint64_t seed,
               const std::atomic<bool>& killed, const std::atomic<bool>& stop) {
  std::mt19937_64 random(seed);
  auto next_batch = [&] {
    const size_t size = random() % 10 == 0 ? 100 + random() % 150 : 1 + random() % 24;
    return MakeStream(model.config, size, random(), model.sparse);
  };
  while (!stop.load()) {
    const bool stream = model.writers == 1 && random() % 3 == 0;
    std::vector<Batch> batches;
    const size_t count = stream ? 2 + random() % 5 : 1;
    for (size_t i = 0; i < count; ++i) batches.push_back(next_batch());
    model.ledger->SetInFlight(writer, batches);
    v1::ObserveResponse response;
    const grpc::Status status = stream ? ObserveStream(stub, model.ref, batches, &response)
                                       : Observe(stub, model.ref, batches[0], &response);
    if (!status.ok()) {
      // Only the kill may end a writer; the calls that fail after it are in flight.
      if (!killed.load()) {
        model.ledger->RecordError(
            absl::StrCat(RefName(model.ref), " writer ", writer,
                         ": failed before the kill: ", okl::testing::Describe(status)));
      }
      return;
    }
    model.ledger->Acknowledge(writer, response.steps());
  }
}

struct CrashCase {
  uint64_t seed;
  bool frequent_checkpoints;  // --checkpoint_every_examples=50 --checkpoint_every=50ms
  bool sync_writes;
};

std::string CrashCaseName(const ::testing::TestParamInfo<CrashCase>& info) {
  return absl::StrCat("Seed", info.param.seed,
                      info.param.frequent_checkpoints ? "FrequentCheckpoints" : "",
                      info.param.sync_writes ? "SyncWrites" : "");
}

class CrashTest : public ::testing::TestWithParam<CrashCase> {};

// Rounds of: writers stream into three models (one with two concurrent writers), the
// server is SIGKILLed after a random delay, a new server restores from the same
// --data_dir, and each model must be exactly core's model fed what the clients know was
// applied (every acknowledged batch, plus whole batches of the calls in flight, in
// order). Some kills land while the server drains after SIGTERM. The last round ends
// with SIGTERM amid the traffic, after which nothing is replayed.
TEST_P(CrashTest, RestartAfterSigkillHoldsExactlyTheAcknowledgedBatchesAndAWholeBatchPrefix) {
  const CrashCase param = GetParam();
  std::mt19937_64 random(param.seed);
  TempDir dir("okl_durability_test");
  std::vector<std::string> flags;
  if (param.frequent_checkpoints) {
    flags.push_back("--checkpoint_every_examples=50");
    flags.push_back("--checkpoint_every=50ms");
  }
  if (param.sync_writes) flags.push_back("--sync_writes=true");

  std::vector<CrashModel> models;
  models.push_back({Ref("acme", "regression"), RegressionConfig(), false, 1});
  models.push_back({Ref("acme", "classifier"), ClassificationConfig(), false, 1});
  models.push_back({Ref("zeta", "shared-sparse"), SparseTubeConfig(), true, 2});
  models.push_back({Ref("acme", "tracker"), TrackerConfig(), false, 1});
  models.push_back({Ref("acme", "selection"), SelectConfig(), false, 1});
  for (CrashModel& model : models) model.ledger = std::make_unique<Ledger>(model.writers);
  const std::vector<v1::Vector> probes4 = MakeProbes(4, 8, param.seed + 100);
  const std::vector<v1::Vector> probes6 = MakeProbes(6, 8, param.seed + 200, /*sparse=*/true);
  auto probes_of = [&](const CrashModel& model) -> absl::Span<const v1::Vector> {
    return model.config.dim() == 4 ? probes4 : probes6;
  };

  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  for (const CrashModel& model : models) {
    ASSERT_TRUE(IsOk(CreateModel(server->stub(), model.ref, model.config)));
  }

  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const bool last = round == kRounds - 1;
    std::atomic<bool> killed{false};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (CrashModel& model : models) {
      for (int w = 0; w < model.writers; ++w) {
        threads.emplace_back(RunWriter, std::ref(server->stub()), std::ref(model), w, random(),
                             std::cref(killed), std::cref(stop));
      }
    }
    // Sometimes at once, usually after a few hundred milliseconds of traffic.
    const int64_t delay_ms = random() % 5 == 0 ? random() % 10 : 20 + random() % 400;
    absl::SleepFor(absl::Milliseconds(delay_ms));
    killed.store(true);
    if (last) {
      // Graceful, amid the traffic: calls in flight finish (acknowledged) or are refused
      // as the server drains, and then every model is checkpointed.
      StopGracefully(*server);
    } else if (random() % 3 == 0) {
      // SIGKILL while the server drains or writes its shutdown checkpoints.
      ASSERT_TRUE(server->Signal(SIGTERM).ok());
      absl::SleepFor(absl::Milliseconds(random() % 20));
      KillHard(*server);
    } else {
      KillHard(*server);
    }
    stop.store(true);
    for (std::thread& thread : threads) thread.join();
    for (const CrashModel& model : models) {
      for (const std::string& error : model.ledger->errors()) ADD_FAILURE() << error;
    }
    server.reset();

    // A crash during the restore itself must change nothing either.
    if (!last && random() % 2 == 0) {
      absl::StatusOr<std::unique_ptr<ServerProcess>> early = ServerProcess::Start(
          {.flags = flags, .wait_until_serving = false, .data_dir = dir.data_dir()});
      ASSERT_TRUE(early.ok()) << early.status();
      absl::SleepFor(absl::Milliseconds(random() % 30));
      KillHard(**early);
    }

    server = StartServer(dir.data_dir(), flags);
    ASSERT_NE(server, nullptr);
    const std::optional<RestoreReport> report = ParseRestoreReport(server->Log());
    ASSERT_TRUE(report.has_value()) << "no startup line in the log:\n" << server->Log();
    EXPECT_EQ(report->models, static_cast<int64_t>(models.size())) << server->Log();
    if (last) {
      EXPECT_EQ(report->batches, 0) << server->Log();
      EXPECT_EQ(report->examples, 0) << server->Log();
    }

    for (CrashModel& model : models) {
      SCOPED_TRACE(RefName(model.ref));
      v1::ModelInfo info;
      ASSERT_TRUE(IsOk(GetModel(server->stub(), model.ref, &info)));
      const uint64_t steps = info.stats().steps();
      const uint64_t start = model.verified.size();
      std::vector<Batch> explanations = model.ledger->Explanations(start, steps);
      ASSERT_FALSE(explanations.empty())
          << "the restored model has " << steps << " steps, which no whole-batch prefix of "
          << "the calls in flight explains; before this round it had " << start << "; "
          << model.ledger->Describe();
      ::testing::AssertionResult matched = ::testing::AssertionFailure();
      for (const Batch& explanation : explanations) {
        Batch candidate = model.verified;
        candidate.insert(candidate.end(), explanation.begin(), explanation.end());
        std::unique_ptr<CoreTwin> twin = TwinFedWith(model.config, candidate);
        ASSERT_NE(twin, nullptr);
        matched = MatchesTwin(server->stub(), model.ref, *twin, probes_of(model));
        if (matched) {
          model.verified = std::move(candidate);
          break;
        }
      }
      ASSERT_TRUE(matched) << "(" << explanations.size() << " candidate sequences tried; "
                           << model.ledger->Describe() << ")";
      if (Verbose()) {
        std::cerr << "round " << round << " " << RefName(model.ref) << ": steps " << start
                  << " -> " << steps << ", acknowledged "
                  << model.ledger->AcknowledgedExamples() << ", candidates "
                  << explanations.size() << "; replayed " << report->batches << " batches, "
                  << report->examples << " examples; "
                  << model.ledger->Describe().substr(model.ledger->Describe().find("in flight"))
                  << "\n";
      }
      model.ledger->Reset();
    }
  }
  StopGracefully(*server);
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, CrashTest,
    ::testing::Values(CrashCase{1, false, false}, CrashCase{2, true, false},
                      CrashCase{3, false, false}, CrashCase{4, true, false},
                      CrashCase{5, false, true}, CrashCase{6, true, true},
                      CrashCase{7, false, false}, CrashCase{8, true, false},
                      CrashCase{9, false, false}, CrashCase{10, true, false},
                      CrashCase{11, true, true}, CrashCase{12, true, false}),
    CrashCaseName);

// --- Crashes amid Restore, Delete and Create ------------------------------------------

// One model ref under a sequence of operations, each acknowledged before the next: what
// the model must be after a crash is the state after the last acknowledged operation, or
// after the one in flight too. nullopt: the model does not exist.
class ChurnActor {
 public:
  ChurnActor(v1::ModelRef ref, std::vector<std::string> snapshots, uint64_t seed)
      : ref_(std::move(ref)), snapshots_(std::move(snapshots)), random_(seed) {}

  // Runs operations until one fails (after the kill: it is then in flight) or `stop`.
  void Run(Stub& stub, const std::atomic<bool>& killed, const std::atomic<bool>& stop) {
    while (!stop.load()) {
      const uint64_t dice = random_() % 10;
      grpc::Status status;
      std::optional<ModelState> next;
      if (!acked_.has_value()) {
        // Absent: create it (fresh) or restore it from a snapshot.
        if (dice < 5) {
          const v1::ModelConfig config = ClassificationConfig();
          next = TwinFedWith(config, {})->model().ExportState();
          in_flight_ = next;
          has_in_flight_ = true;
          status = CreateModel(stub, ref_, config);
        } else {
          const std::string& bytes = snapshots_[random_() % snapshots_.size()];
          next = *DecodeSnapshot(bytes);
          in_flight_ = next;
          has_in_flight_ = true;
          status = Restore(stub, ref_, bytes);
        }
      } else if (dice < 6) {
        const Batch batch = MakeStream(ClassificationConfig(), 1 + random_() % 60, random_());
        std::unique_ptr<CoreTwin> twin = CoreTwin::FromState(*acked_);
        twin->Observe(batch);
        next = twin->model().ExportState();
        in_flight_ = next;
        has_in_flight_ = true;
        v1::ObserveResponse response;
        status = Observe(stub, ref_, batch, &response);
      } else if (dice < 8) {
        const std::string& bytes = snapshots_[random_() % snapshots_.size()];
        next = *DecodeSnapshot(bytes);
        in_flight_ = next;
        has_in_flight_ = true;
        status = Restore(stub, ref_, bytes);
      } else {
        next = std::nullopt;
        in_flight_ = next;
        has_in_flight_ = true;
        status = DeleteModel(stub, ref_);
      }
      if (!status.ok()) {
        if (!AwaitKill(killed)) {
          ADD_FAILURE() << RefName(ref_) << ": failed before the kill: " << Describe(status);
        }
        return;
      }
      acked_ = std::move(next);
      has_in_flight_ = false;
      ++operations_;
    }
  }

  // Checks the restarted server against the acknowledged state (or the in-flight one)
  // and continues from what it holds.
  void Verify(Stub& stub) {
    SCOPED_TRACE(RefName(ref_));
    std::optional<ModelState> served;
    std::string bytes;
    const grpc::Status status = Snapshot(stub, ref_, &bytes);
    if (status.error_code() != grpc::StatusCode::NOT_FOUND) {
      ASSERT_TRUE(IsOk(status));
      absl::StatusOr<ModelState> state = DecodeSnapshot(bytes);
      ASSERT_TRUE(state.ok()) << state.status();
      served = *std::move(state);
    }
    auto describe = [](const std::optional<ModelState>& state) {
      return state.has_value() ? absl::StrCat("a model at step ", state->steps, " with ",
                                              state->coefficients.size(), " terms")
                               : std::string("no model");
    };
    if (Verbose()) {
      std::cerr << RefName(ref_) << ": " << operations_ << " ops, served " << describe(served)
                << ", acked " << describe(acked_) << ", in flight "
                << (has_in_flight_ ? describe(in_flight_) : "-") << "\n";
    }
    if (served == acked_) {
      // As acknowledged.
    } else if (has_in_flight_ && served == in_flight_) {
      acked_ = std::move(served);
    } else {
      ADD_FAILURE() << "after " << operations_ << " acknowledged operations the server has "
                    << describe(served) << "; acknowledged: " << describe(acked_)
                    << (has_in_flight_ ? absl::StrCat("; in flight: ", describe(in_flight_))
                                       : std::string("; nothing in flight"));
      acked_ = std::move(served);
    }
    has_in_flight_ = false;
  }

 private:
  const v1::ModelRef ref_;
  const std::vector<std::string> snapshots_;
  std::mt19937_64 random_;
  std::optional<ModelState> acked_;
  std::optional<ModelState> in_flight_;
  bool has_in_flight_ = false;
  int operations_ = 0;
};

// Checkpoints racing the churn: every 50 examples or 20 ms.
std::vector<std::string> ChurnFlags() {
  return {"--checkpoint_every_examples=50", "--checkpoint_every=20ms"};
}

// What the churn restores: snapshots of the classification model after 0, 37 and 150
// steps, and one of another config.
std::vector<std::string> ChurnSnapshots() {
  std::vector<std::unique_ptr<CoreTwin>> twins;
  for (size_t steps : {0, 37, 150}) {
    twins.push_back(TwinFedWith(ClassificationConfig(),
                                MakeStream(ClassificationConfig(), steps, 300 + steps)));
  }
  twins.push_back(TwinFedWith(RegressionConfig(), MakeStream(ClassificationConfig(), 80, 400)));
  std::vector<std::string> snapshots;
  for (const std::unique_ptr<CoreTwin>& twin : twins) {
    if (twin == nullptr) {
      ADD_FAILURE() << "a churn snapshot's model could not be built";
      continue;
    }
    snapshots.push_back(*EncodeSnapshot(twin->model().ExportState()));
  }
  return snapshots;
}

// One thread per actor, running it against `stub` until the kill or `stop`.
std::vector<std::thread> StartActors(std::vector<std::unique_ptr<ChurnActor>>& actors,
                                     Stub& stub, const std::atomic<bool>& killed,
                                     const std::atomic<bool>& stop) {
  std::vector<std::thread> threads;
  for (std::unique_ptr<ChurnActor>& actor : actors) {
    threads.emplace_back(
        [&stub, &killed, &stop, actor = actor.get()] { actor->Run(stub, killed, stop); });
  }
  return threads;
}

class ChurnCrashTest : public ::testing::TestWithParam<uint64_t> {};

// Two clients each cycle one model through Create, Observe, Restore (of snapshots taken
// at other steps, some of another config) and Delete, with background checkpoints every
// 50 examples or 20 ms racing them; the server is SIGKILLed at a random moment. After the
// restart each model is exactly as its last acknowledged operation left it (or as the
// one in flight did): no checkpoint of a replaced or deleted incarnation resurfaces.
TEST_P(ChurnCrashTest, RestartAfterSigkillAmidRestoreDeleteAndCreate) {
  std::mt19937_64 random(GetParam());
  TempDir dir("okl_durability_test");
  const std::vector<std::string> flags = ChurnFlags();
  const std::vector<std::string> snapshots = ChurnSnapshots();

  std::vector<std::unique_ptr<ChurnActor>> actors;
  actors.push_back(std::make_unique<ChurnActor>(Ref("churn", "one"), snapshots, random()));
  actors.push_back(std::make_unique<ChurnActor>(Ref("churn", "two"), snapshots, random()));

  std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir(), flags);
  ASSERT_NE(server, nullptr);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::atomic<bool> killed{false};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads = StartActors(actors, server->stub(), killed, stop);
    absl::SleepFor(absl::Milliseconds(20 + random() % 300));
    killed.store(true);
    KillHard(*server);
    stop.store(true);
    for (std::thread& thread : threads) thread.join();
    server = StartServer(dir.data_dir(), flags);
    ASSERT_NE(server, nullptr);
    for (std::unique_ptr<ChurnActor>& actor : actors) actor->Verify(server->stub());
  }
  StopGracefully(*server);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ChurnCrashTest, ::testing::Values(21, 22, 23, 24, 25, 26),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return absl::StrCat("Seed", info.param);
                         });

class FailpointCrashTest : public ::testing::TestWithParam<FailpointCase> {};

// 20 rounds: the ChurnCrashTest traffic (Create, Observe, Restore, Delete, with
// checkpoints every 50 examples or 20 ms) against a server armed to SIGKILL itself at a
// failpoint of the group, the first to third time it is reached; then a restart without
// the failpoint must hold each model exactly as its last acknowledged operation left it,
// or as the one in flight did: a checkpoint cut short loses nothing acknowledged, and a
// Restore cut short is wholly there or not at all.
TEST_P(FailpointCrashTest, EveryRestartIsExactAfterAKillAtTheFailpoint) {
  const FailpointCase& param = GetParam();
  std::mt19937_64 random(param.seed);
  TempDir dir("okl_failpoint_test");
  const std::vector<std::string> flags = ChurnFlags();
  const std::vector<std::string> snapshots = ChurnSnapshots();
  std::vector<std::unique_ptr<ChurnActor>> actors;
  for (const char* model : {"one", "two"}) {
    actors.push_back(
        std::make_unique<ChurnActor>(Ref("failpoint", model), snapshots, random()));
  }

  std::vector<FailpointClient> clients;
  for (std::unique_ptr<ChurnActor>& actor : actors) {
    clients.push_back([actor = actor.get()](Stub& stub, int, const std::atomic<bool>& killed,
                                            const std::atomic<bool>& stop) {
      actor->Run(stub, killed, stop);
    });
  }
  RunFailpointRounds(
      param, /*rounds=*/20, random, dir.data_dir(), flags, clients,
      [&actors](Stub& stub) {
        for (std::unique_ptr<ChurnActor>& actor : actors) actor->Verify(stub);
      },
      absl::Seconds(30));
}

INSTANTIATE_TEST_SUITE_P(
    Groups, FailpointCrashTest,
    ::testing::Values(
        FailpointCase{"Checkpoint", {"checkpoint.encoded", "checkpoint.written"}, 31},
        FailpointCase{
            "Restore", {"restore.received", "restore.written", "restore.installed"}, 32}),
    FailpointCaseName);

}  // namespace
}  // namespace okl::testing
