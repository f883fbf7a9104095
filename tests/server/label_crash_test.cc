// tests/server/label_crash_test.cc
//
// Delayed feedback (docs/delayed-feedback.md) under a SIGKILL at each of its failpoints
// (server/base/failpoint.h), on the real binary with a --data_dir that outlives it: a kill at
// any moment loses no acknowledged remembered event and no acknowledged label, lands a
// request in flight whole or not at all, and applies no label twice. After each restart
// the model must equal core's model (CoreTwin) fed Observe(x_e, y) in the order the
// labels were applied, to the last bit. The helpers are durability_util.h.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/server/durability_util.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using Labels = std::vector<std::pair<std::string, double>>;

std::vector<v1::LabelOutcome> Outcomes(const v1::LabelResponse& response) {
  std::vector<v1::LabelOutcome> outcomes;
  for (int outcome : response.outcomes()) {
    outcomes.push_back(static_cast<v1::LabelOutcome>(outcome));
  }
  return outcomes;
}

std::string DescribeOutcomes(const std::vector<v1::LabelOutcome>& outcomes) {
  return absl::StrJoin(outcomes, " ", [](std::string* out, v1::LabelOutcome outcome) {
    absl::StrAppend(out, v1::LabelOutcome_Name(outcome));
  });
}

// A model whose events one client remembers and labels, and the core model (the twin)
// fed Observe(x_e, y) for every label the server applied, in the order it applied them.
class EventClient {
 public:
  EventClient(v1::ModelRef ref, v1::ModelConfig config, bool sparse, uint64_t seed)
      : ref_(std::move(ref)),
        config_(std::move(config)),
        sparse_(sparse),
        random_(seed),
        twin_(CoreTwin::Create(config_)),
        probes_(MakeProbes(config_.dim(), 8, seed + 1, sparse)) {}

  const v1::ModelRef& ref() const { return ref_; }

  // Checks that the served model is the twin, to the last bit, and that the served
  // counts say `applied` labels (the twin's steps) and `pending` events.
  void ExpectTwin(Stub& stub, uint64_t pending) {
    EXPECT_TRUE(MatchesTwin(stub, ref_, *twin_, probes_));
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(GetModel(stub, ref_, &info)));
    EXPECT_EQ(info.stats().events_pending(), pending);
    EXPECT_EQ(info.stats().labels_applied() + expired_with_default_,
              twin_->model().stats().steps);
  }

 protected:
  // `n` new inputs (the x of a made stream).
  std::vector<v1::Vector> NewInputs(size_t n) {
    std::vector<v1::Vector> inputs;
    for (v1::Example& example : MakeStream(config_, n, random_(), sparse_)) {
      inputs.push_back(std::move(*example.mutable_x()));
    }
    return inputs;
  }

  // Feeds the twin (x_e, y) for each of `labels`, in order.
  void Apply(const Labels& labels) {
    std::vector<v1::Example> examples;
    for (const auto& [id, y] : labels) examples.push_back(MakeExample(inputs_.at(id), y));
    if (!examples.empty()) twin_->Observe(examples);
  }

  const v1::ModelRef ref_;
  const v1::ModelConfig config_;
  const bool sparse_;
  std::mt19937_64 random_;
  const std::unique_ptr<CoreTwin> twin_;
  const std::vector<v1::Vector> probes_;
  absl::flat_hash_map<std::string, v1::Vector> inputs_;  // of every event sent
  uint64_t expired_with_default_ = 0;                    // steps not counted in labels_applied
};

// Remembers a few inputs at a time under ids of its own and labels random subsets of the
// pending events, out of order, sometimes repeating an id within a request or one
// labelled before. Its waits are an hour, so no event expires in a test.
class LabelClient final : public EventClient {
 public:
  using EventClient::EventClient;

  // Runs calls until one fails (after the kill: it is then in flight) or `stop`. Each
  // acknowledged call's outcomes must be as this client expects.
  void Run(Stub& stub, int round, const std::atomic<bool>& killed,
           const std::atomic<bool>& stop) {
    while (!stop.load()) {
      const bool remember = pending_.size() < 3 || random_() % 5 < 2;
      const grpc::Status status = remember ? RememberSome(stub, round) : LabelSome(stub);
      if (!status.ok()) {
        if (!AwaitKill(killed)) {
          ADD_FAILURE() << RefName(ref_) << ": failed before the kill: " << Describe(status);
        }
        return;
      }
    }
  }

  // After the restart: the request in flight landed whole or not at all; every
  // acknowledged label is a duplicate; every acknowledged event is still there, and is
  // labelled now; and the model is the twin. The next round starts with no event pending.
  void Verify(Stub& stub) {
    SCOPED_TRACE(RefName(ref_));
    std::string report = absl::StrCat(RefName(ref_), ": ", acked_labels_.size(),
                                      " labels acknowledged, ", pending_.size(), " pending");
    if (!in_flight_label_.empty()) {
      // Sent again as it was: its labels applied then (all duplicates now) or now (as
      // expected then). Either way they are applied after the acknowledged ones.
      const std::vector<v1::LabelOutcome> expected = Expected(in_flight_label_);
      v1::LabelResponse response;
      ASSERT_TRUE(IsOk(Label(stub, ref_, in_flight_label_, &response)));
      const std::vector<v1::LabelOutcome> got = Outcomes(response);
      const std::vector<v1::LabelOutcome> landed(expected.size(), v1::LABEL_DUPLICATE);
      EXPECT_TRUE(got == expected || got == landed)
          << "the Label in flight, sent again, is " << DescribeOutcomes(got) << "; expected "
          << DescribeOutcomes(expected) << " (not applied before the kill) or all duplicates";
      absl::StrAppend(&report, "; a Label in flight, ",
                      expected == landed ? "of duplicates"
                      : got == landed    ? "applied"
                                         : "not applied");
      Acknowledge(in_flight_label_, expected);
      in_flight_label_.clear();
    }
    if (!acked_labels_.empty()) {
      v1::LabelResponse response;
      ASSERT_TRUE(IsOk(Label(stub, ref_, acked_labels_, &response)));
      EXPECT_EQ(Outcomes(response),
                std::vector<v1::LabelOutcome>(acked_labels_.size(), v1::LABEL_DUPLICATE))
          << "an acknowledged label is lost";
      acked_labels_.clear();
    }
    if (!in_flight_remember_.empty()) {
      // Remembered whole or not at all.
      const Labels labels = NewLabels(in_flight_remember_);
      v1::LabelResponse response;
      ASSERT_TRUE(IsOk(Label(stub, ref_, labels, &response)));
      const std::vector<v1::LabelOutcome> got = Outcomes(response);
      const bool remembered = got.front() == v1::LABEL_APPLIED;
      EXPECT_EQ(got, std::vector<v1::LabelOutcome>(
                         got.size(), remembered ? v1::LABEL_APPLIED : v1::LABEL_UNKNOWN))
          << "the remembering Predict in flight is remembered in part";
      if (remembered) Apply(labels);
      absl::StrAppend(&report, "; a remembering Predict in flight, ",
                      remembered ? "remembered" : "not remembered");
      in_flight_remember_.clear();
    }
    if (!pending_.empty()) {
      std::shuffle(pending_.begin(), pending_.end(), random_);
      const Labels labels = NewLabels(pending_);
      v1::LabelResponse response;
      ASSERT_TRUE(IsOk(Label(stub, ref_, labels, &response)));
      EXPECT_EQ(Outcomes(response),
                std::vector<v1::LabelOutcome>(labels.size(), v1::LABEL_APPLIED))
          << "an acknowledged event is lost or was labelled";
      Acknowledge(labels, Outcomes(response));
      pending_.clear();
    }
    if (Verbose()) std::cerr << report << "\n";
    ExpectTwin(stub, /*pending=*/0);
  }

 private:
  grpc::Status RememberSome(Stub& stub, int round) {
    const std::vector<v1::Vector> inputs = NewInputs(1 + random_() % 4);
    v1::Remember remember;
    remember.set_wait_seconds(3600);
    for (const v1::Vector& x : inputs) {
      const std::string id = absl::StrFormat("r%02d-%04d", round, next_id_++);
      remember.add_event_ids(id);
      inputs_[id] = x;
    }
    if (random_() % 2 == 0) remember.set_default_label(0.5);  // never used: no wait ends
    in_flight_remember_.assign(remember.event_ids().begin(), remember.event_ids().end());
    v1::PredictResponse response;
    const grpc::Status status = PredictRemembering(stub, ref_, inputs, remember, &response);
    if (!status.ok()) return status;
    EXPECT_THAT(response.event_ids(), ::testing::ElementsAreArray(in_flight_remember_));
    pending_.insert(pending_.end(), in_flight_remember_.begin(), in_flight_remember_.end());
    in_flight_remember_.clear();
    return status;
  }

  grpc::Status LabelSome(Stub& stub) {
    // A random subset of the pending events, in random order.
    std::shuffle(pending_.begin(), pending_.end(), random_);
    const size_t n = 1 + random_() % std::min<size_t>(4, pending_.size());
    Labels labels = NewLabels(absl::MakeConstSpan(pending_).last(n));
    pending_.resize(pending_.size() - n);
    if (random_() % 4 == 0) {
      // The same event again, with another y: the first wins.
      labels.push_back({labels[random_() % labels.size()].first, Y()});
    }
    if (!labelled_.empty() && random_() % 3 == 0) {
      // One labelled before (perhaps in an earlier round).
      labels.insert(labels.begin() + random_() % (labels.size() + 1),
                    {labelled_[random_() % labelled_.size()], Y()});
    }
    in_flight_label_ = labels;
    v1::LabelResponse response;
    const grpc::Status status = Label(stub, ref_, labels, &response);
    if (!status.ok()) return status;
    const std::vector<v1::LabelOutcome> expected = Expected(labels);
    EXPECT_EQ(Outcomes(response), expected) << RefName(ref_);
    Acknowledge(labels, expected);
    for (const auto& label : labels) acked_labels_.push_back(label);
    in_flight_label_.clear();
    return status;
  }

  // The outcomes of `labels` had they been sent now, before Acknowledge.
  std::vector<v1::LabelOutcome> Expected(const Labels& labels) const {
    std::vector<v1::LabelOutcome> outcomes;
    std::vector<std::string> seen;
    for (const auto& [id, y] : labels) {
      const bool before =
          std::find(labelled_.begin(), labelled_.end(), id) != labelled_.end() ||
          std::find(seen.begin(), seen.end(), id) != seen.end();
      outcomes.push_back(before ? v1::LABEL_DUPLICATE : v1::LABEL_APPLIED);
      seen.push_back(id);
    }
    return outcomes;
  }

  // Records the labels of `labels` whose outcome is APPLIED as applied now: the twin
  // learns them, and their ids are labelled.
  void Acknowledge(const Labels& labels, const std::vector<v1::LabelOutcome>& outcomes) {
    Labels applied;
    for (size_t i = 0; i < labels.size() && i < outcomes.size(); ++i) {
      if (outcomes[i] != v1::LABEL_APPLIED) continue;
      applied.push_back(labels[i]);
      labelled_.push_back(labels[i].first);
    }
    Apply(applied);
  }

  Labels NewLabels(absl::Span<const std::string> ids) {
    Labels labels;
    for (const std::string& id : ids) labels.push_back({id, Y()});
    return labels;
  }

  double Y() { return std::uniform_real_distribution<double>(-1, 1)(random_); }

  int next_id_ = 0;
  std::vector<std::string> pending_;             // acknowledged, not labelled
  std::vector<std::string> labelled_;            // by an acknowledged label, in any round
  Labels acked_labels_;                          // acknowledged this round, as sent
  Labels in_flight_label_;                       // the Label in flight at the kill
  std::vector<std::string> in_flight_remember_;  // the ids of the Predict in flight
};

// Remembers a few inputs at a time with a short wait, most with a default label, and
// sends no label: the server's background sweep (every 100 ms) ends the waits.
class ExpiryClient final : public EventClient {
 public:
  static constexpr double kWaitSeconds = 0.5;

  using EventClient::EventClient;

  void Run(Stub& stub, int round, const std::atomic<bool>& killed,
           const std::atomic<bool>& stop) {
    while (!stop.load()) {
      Request request;
      const std::vector<v1::Vector> inputs = NewInputs(1 + random_() % 3);
      v1::Remember remember;
      remember.set_wait_seconds(kWaitSeconds);
      for (size_t k = 0; k < inputs.size(); ++k) {
        // The waits of one request end together and are ended in id order: ids sort in
        // the order of the inputs.
        const std::string id = absl::StrFormat("r%02d-%05d-%d", round, next_request_, k);
        remember.add_event_ids(id);
        inputs_[id] = inputs[k];
        request.ids.push_back(id);
      }
      ++next_request_;
      if (random_() % 4 != 0) {
        request.default_label = Y();
        remember.set_default_label(*request.default_label);
      }
      in_flight_ = request;
      v1::PredictResponse response;
      const grpc::Status status = PredictRemembering(stub, ref_, inputs, remember, &response);
      if (!status.ok()) {
        if (!AwaitKill(killed)) {
          ADD_FAILURE() << RefName(ref_) << ": failed before the kill: " << Describe(status);
        }
        return;
      }
      acked_.push_back(std::move(request));
      in_flight_.reset();
      // Now and then a pause, so that some sweeps meet only events without a default.
      absl::SleepFor(absl::Milliseconds(random_() % 120));
    }
  }

  // After the restart: waits (up to 10 s) until no event is pending; then every
  // acknowledged event, and the Predict in flight whole or not at all, has expired once,
  // and the model is the twin fed the default labels in the order the waits ended.
  void Verify(Stub& stub) {
    SCOPED_TRACE(RefName(ref_));
    v1::ModelInfo info;
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (true) {
      ASSERT_TRUE(IsOk(GetModel(stub, ref_, &info)));
      if (info.stats().events_pending() == 0 || absl::Now() > give_up) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(info.stats().events_pending(), 0u)
        << "events are still pending 10 s after the restart: "
        << info.stats().ShortDebugString();
    uint64_t acked = 0;
    for (const Request& request : acked_) acked += request.ids.size();
    const uint64_t in_flight = in_flight_.has_value() ? in_flight_->ids.size() : 0;
    const uint64_t expired = info.stats().events_expired() - expired_;
    EXPECT_TRUE(expired == acked || (in_flight > 0 && expired == acked + in_flight))
        << expired << " events expired this round; acknowledged " << acked << ", in flight "
        << in_flight << ": " << info.stats().ShortDebugString();
    if (expired == acked + in_flight && in_flight > 0) acked_.push_back(*in_flight_);
    if (Verbose()) {
      std::cerr << RefName(ref_) << ": " << expired << " waits ended, " << acked
                << " acknowledged, " << in_flight << " in flight\n";
    }
    for (const Request& request : acked_) {
      if (!request.default_label.has_value()) continue;
      Labels labels;
      for (const std::string& id : request.ids) labels.push_back({id, *request.default_label});
      Apply(labels);
      expired_with_default_ += labels.size();
    }
    expired_ = info.stats().events_expired();
    acked_.clear();
    in_flight_.reset();
    ExpectTwin(stub, /*pending=*/0);
  }

 private:
  struct Request {
    std::vector<std::string> ids;
    std::optional<double> default_label;
  };

  double Y() { return std::uniform_real_distribution<double>(-1, 1)(random_); }

  int next_request_ = 0;
  std::vector<Request> acked_;        // this round, in order
  std::optional<Request> in_flight_;  // the Predict in flight at the kill
  uint64_t expired_ = 0;              // events_expired before this round
};

// The models of both groups: dense and sparse inputs.
struct ModelSpec {
  v1::ModelRef ref;
  v1::ModelConfig config;
  bool sparse;
};

std::vector<ModelSpec> EventModels() {
  return {{Ref("events", "dense"), RegressionConfig(), false},
          {Ref("events", "sparse"), SparseTubeConfig(), true}};
}

// Rounds of: the clients call a server armed to SIGKILL itself at one of `param`'s
// failpoints (the first to third time it is reached), then a restart on the same store
// without it, where each client verifies its model.
template <typename Client>
void RunEventRounds(const FailpointCase& param, int rounds) {
  std::mt19937_64 random(param.seed);
  TempDir dir("okl_label_crash_test");
  // Checkpoints (every 50 examples or 20 ms) race the labels, and truncate the log.
  const std::vector<std::string> flags = {"--checkpoint_every_examples=50",
                                          "--checkpoint_every=20ms"};
  std::vector<std::unique_ptr<Client>> clients;
  {
    std::unique_ptr<ServerProcess> server = StartServer(dir.data_dir(), flags);
    ASSERT_NE(server, nullptr);
    for (const ModelSpec& model : EventModels()) {
      ASSERT_TRUE(IsOk(CreateModel(server->stub(), model.ref, model.config)));
      clients.push_back(
          std::make_unique<Client>(model.ref, model.config, model.sparse, random()));
    }
    StopGracefully(*server);
  }
  std::vector<FailpointClient> calls;
  for (std::unique_ptr<Client>& client : clients) {
    calls.push_back([client = client.get()](Stub& stub, int round,
                                            const std::atomic<bool>& killed,
                                            const std::atomic<bool>& stop) {
      client->Run(stub, round, killed, stop);
    });
  }
  RunFailpointRounds(
      param, rounds, random, dir.data_dir(), flags, calls,
      [&clients](Stub& stub) {
        for (std::unique_ptr<Client>& client : clients) client->Verify(stub);
      },
      absl::Seconds(20));
}

class LabelFailpointCrashTest : public ::testing::TestWithParam<FailpointCase> {};

// 20 rounds: two clients (a dense and a sparse model) remember inputs and label random
// subsets of them, out of order and with duplicates, against a server armed to SIGKILL
// itself at a failpoint of a remember or a label. After the restart each acknowledged
// event is still there and each acknowledged label a duplicate, the call in flight landed
// whole or not at all, and the model is the twin fed the labels in the order applied.
TEST_P(LabelFailpointCrashTest, NoEventOrLabelIsLostAndNoLabelIsAppliedTwice) {
  RunEventRounds<LabelClient>(GetParam(), /*rounds=*/20);
}

INSTANTIATE_TEST_SUITE_P(
    Groups, LabelFailpointCrashTest,
    ::testing::Values(FailpointCase{
        "Label", {"remember.written", "label.checked", "label.applied"}, 41}),
    FailpointCaseName);

class ExpiryFailpointCrashTest : public ::testing::TestWithParam<FailpointCase> {};

// 10 rounds: two clients remember inputs with a wait of 0.5 s, most with a default label,
// and label none, against a server armed to SIGKILL itself at a failpoint of the
// background sweep that ends the waits. After the restart every event expires exactly
// once: each default label is applied once, in the order the waits ended.
TEST_P(ExpiryFailpointCrashTest, EveryWaitEndsOnceAndEachDefaultLabelIsAppliedOnce) {
  RunEventRounds<ExpiryClient>(GetParam(), /*rounds=*/10);
}

INSTANTIATE_TEST_SUITE_P(Groups, ExpiryFailpointCrashTest,
                         ::testing::Values(FailpointCase{
                             "Expiry", {"expiry.applied", "expiry.forgotten"}, 42}),
                         FailpointCaseName);

}  // namespace
}  // namespace okl::testing
