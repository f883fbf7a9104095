// tests/server/label_test.cc
//
// Delayed feedback over gRPC against a real okl_server: a Predict with `remember`, then
// Label. A label is the Observe of the remembered input at the moment it is applied (bit
// for bit against a model fed the same examples by Observe); the first label wins; a
// default label is applied once at expiry by the server's background sweep; bad requests
// change nothing; and after a SIGKILL and a restart on the same store, pending events are
// still there and labelled ones still duplicates.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/snapshot_codec.h"
#include "tests/server/server_suite.h"

namespace okl::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kConfig[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 0.5 } }
  loss { squared {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 32 }
)pb";

std::vector<v1::Vector> Inputs(int first, int n) {
  std::vector<v1::Vector> inputs;
  for (int i = first; i < first + n; ++i) inputs.push_back(DenseVector({0.1 * i, -0.05 * i}));
  return inputs;
}

std::vector<v1::LabelOutcome> Outcomes(const v1::LabelResponse& response) {
  std::vector<v1::LabelOutcome> outcomes;
  for (int outcome : response.outcomes()) outcomes.push_back(static_cast<v1::LabelOutcome>(outcome));
  return outcomes;
}

// The examples (x_i, y) as Observe takes them.
std::vector<v1::Example> Examples(const std::vector<std::pair<int, double>>& inputs_and_ys) {
  std::vector<v1::Example> examples;
  for (const auto& [i, y] : inputs_and_ys) {
    v1::Example example;
    *example.mutable_x() = Inputs(i, 1)[0];
    example.set_y(y);
    examples.push_back(std::move(example));
  }
  return examples;
}

// Predictions of both models on probes, to the bit, and their step counts and losses.
void ExpectSameModel(Stub& stub, const v1::ModelRef& a, const v1::ModelRef& b) {
  std::vector<double> pa, pb;
  ASSERT_TRUE(IsOk(Predict(stub, a, Inputs(-3, 9), &pa)));
  ASSERT_TRUE(IsOk(Predict(stub, b, Inputs(-3, 9), &pb)));
  EXPECT_EQ(Bits(pa), Bits(pb));
  v1::ModelInfo ia, ib;
  ASSERT_TRUE(IsOk(GetModel(stub, a, &ia)));
  ASSERT_TRUE(IsOk(GetModel(stub, b, &ib)));
  EXPECT_EQ(ia.stats().steps(), ib.stats().steps());
  EXPECT_EQ(ia.stats().cumulative_loss(), ib.stats().cumulative_loss());
}

TEST_F(ServerE2ETest, ALabelIsTheObserveOfTheRememberedInputWhenItIsApplied) {
  const v1::ModelRef ref = Ref("feedback", "ads");
  const v1::ModelRef plain = Ref("feedback", "ads-plain");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kConfig))));
  ASSERT_TRUE(IsOk(CreateModel(stub(), plain, ParseConfig(kConfig))));
  v1::PredictResponse predicted;
  ASSERT_TRUE(IsOk(PredictRemembering(stub(), ref, Inputs(1, 3), {}, &predicted)));
  ASSERT_EQ(predicted.event_ids_size(), 3);
  ASSERT_EQ(predicted.predictions_size(), 3);

  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub(), ref, {{predicted.event_ids(2), 0.5},
                                       {predicted.event_ids(0), -1.0}},
                         &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_APPLIED, v1::LABEL_APPLIED));
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub(), plain, Examples({{3, 0.5}, {1, -1.0}}), &observed)));
  EXPECT_EQ(Bits(labelled.predictions()), Bits(observed.predictions()));
  EXPECT_EQ(Bits(labelled.losses()), Bits(observed.losses()));
  EXPECT_EQ(labelled.steps(), 2u);
  ExpectSameModel(stub(), ref, plain);

  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().events_pending(), 1u);
  EXPECT_EQ(info.stats().labels_applied(), 2u);
  EXPECT_EQ(info.stats().served_labels(), 2u);
  // The served loss is that of the predictions answered (squared loss: (y - p)^2 / 2).
  const double served = 0.5 * (0.5 - predicted.predictions(2)) * (0.5 - predicted.predictions(2)) +
                        0.5 * (-1.0 - predicted.predictions(0)) * (-1.0 - predicted.predictions(0));
  EXPECT_DOUBLE_EQ(info.stats().served_loss(), served);

  // The same on /metrics, and the label delays in their histogram.
  const int port = server().metrics_port();
  const std::string labels = "{tenant=\"feedback\",model=\"ads\"}";
  EXPECT_NEAR(MetricValue(port, "okl_model_served_loss_total" + labels).value_or(-1), served,
              1e-12 * served);
  EXPECT_EQ(MetricValue(port, "okl_model_served_labels_total" + labels).value_or(-1), 2);
  EXPECT_EQ(MetricValue(port, "okl_model_events_pending" + labels).value_or(-1), 1);
  EXPECT_EQ(MetricValue(port, "okl_model_labels_applied_total" + labels).value_or(-1), 2);
  EXPECT_GE(MetricValue(port, "okl_label_delay_seconds_count").value_or(-1), 2);
  EXPECT_GE(MetricValue(port, "okl_label_delay_seconds_bucket{le=\"+Inf\"}").value_or(-1), 2);
}

TEST_F(ServerE2ETest, TheFirstLabelWinsAndUnknownEventsAreSaidSo) {
  const v1::ModelRef ref = Ref("feedback", "clicks");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kConfig))));
  v1::Remember remember;
  remember.add_event_ids("click-1");
  remember.add_event_ids("click-2");
  v1::PredictResponse predicted;
  ASSERT_TRUE(IsOk(PredictRemembering(stub(), ref, Inputs(1, 2), remember, &predicted)));
  EXPECT_THAT(predicted.event_ids(), ElementsAre("click-1", "click-2"));
  // An id the model knows is refused, and nothing of that request is remembered.
  v1::Remember again;
  again.add_event_ids("click-3");
  again.add_event_ids("click-1");
  v1::PredictResponse refused;
  EXPECT_EQ(PredictRemembering(stub(), ref, Inputs(1, 2), again, &refused).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub(), ref,
                         {{"click-1", 1}, {"click-1", -1}, {"click-3", 1}, {"click-2", 1}},
                         &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_APPLIED, v1::LABEL_DUPLICATE,
                                              v1::LABEL_UNKNOWN, v1::LABEL_APPLIED));
  // The retry of the same request: applied once.
  ASSERT_TRUE(IsOk(Label(stub(), ref, {{"click-1", 1}, {"click-2", 1}}, &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_DUPLICATE, v1::LABEL_DUPLICATE));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), 2u);
  EXPECT_EQ(info.stats().labels_duplicate(), 3u);
  EXPECT_EQ(info.stats().events_pending(), 0u);
}

TEST_F(ServerE2ETest, AtTheEndOfItsWaitAnEventsDefaultLabelIsAppliedOnce) {
  const v1::ModelRef ref = Ref("feedback", "expiry");
  const v1::ModelRef plain = Ref("feedback", "expiry-plain");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kConfig))));
  ASSERT_TRUE(IsOk(CreateModel(stub(), plain, ParseConfig(kConfig))));
  v1::Remember remember;
  remember.set_wait_seconds(0.3);
  remember.set_default_label(-0.5);
  v1::PredictResponse predicted;
  ASSERT_TRUE(IsOk(PredictRemembering(stub(), ref, Inputs(1, 2), remember, &predicted)));
  // The server's background sweep (every 100 ms) ends the wait.
  v1::ModelInfo info;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  } while (info.stats().events_expired() < 2 && absl::Now() < give_up);
  EXPECT_EQ(info.stats().events_expired(), 2u);
  EXPECT_EQ(info.stats().events_pending(), 0u);
  EXPECT_EQ(info.stats().steps(), 2u);
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub(), plain, Examples({{1, -0.5}, {2, -0.5}}), &observed)));
  ExpectSameModel(stub(), ref, plain);
  v1::LabelResponse late;
  ASSERT_TRUE(IsOk(Label(stub(), ref, {{predicted.event_ids(0), 1}}, &late)));
  EXPECT_THAT(Outcomes(late), ElementsAre(v1::LABEL_UNKNOWN));
}

TEST_F(ServerE2ETest, BadRememberAndLabelRequestsAreRefusedAndChangeNothing) {
  const v1::ModelRef ref = Ref("feedback", "bad");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kConfig))));
  v1::PredictResponse response;
  v1::Remember negative;
  negative.set_wait_seconds(-1);
  grpc::Status status = PredictRemembering(stub(), ref, Inputs(1, 1), negative, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("wait_seconds"));
  v1::Remember too_long;
  too_long.set_wait_seconds(8 * 24 * 3600);
  status = PredictRemembering(stub(), ref, Inputs(1, 1), too_long, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("--max_label_wait"));
  v1::Remember one_id;
  one_id.add_event_ids("only-one");
  status = PredictRemembering(stub(), ref, Inputs(1, 2), one_id, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("one per input"));

  ASSERT_TRUE(IsOk(PredictRemembering(stub(), ref, Inputs(1, 1), {}, &response)));
  v1::LabelResponse labelled;
  status = Label(stub(), ref, {{response.event_ids(0), std::nan("")}}, &labelled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Label(stub(), ref, {}, &labelled).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Label(stub(), Ref("feedback", "absent"), {{"x", 1}}, &labelled).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), 0u);
  EXPECT_EQ(info.stats().events_pending(), 1u);
}

// A Label is checked whole: one malformed event id beside a good label refuses the whole
// request, and the good label stays unapplied (its event still pending).
TEST_F(ServerE2ETest, ALabelWithAMalformedEventIdIsRefusedWhole) {
  const v1::ModelRef ref = Ref("feedback", "malformed");
  ASSERT_TRUE(IsOk(CreateModel(stub(), ref, ParseConfig(kConfig))));
  v1::PredictResponse predicted;
  ASSERT_TRUE(IsOk(PredictRemembering(stub(), ref, Inputs(1, 1), {}, &predicted)));
  ASSERT_EQ(predicted.event_ids_size(), 1);
  const std::string good = predicted.event_ids(0);
  struct Case {
    const char* what;
    std::string id;
    const char* message;
  };
  for (const Case& bad : {Case{"empty", "", "labels[1]: an event id is empty"},
                          Case{"over-long", std::string(129, 'a'), "labels[1]: event id"},
                          Case{"bad character", "click 1", "outside [A-Za-z0-9._:-]"}}) {
    SCOPED_TRACE(bad.what);
    v1::LabelResponse labelled;
    const grpc::Status status = Label(stub(), ref, {{good, 1}, {bad.id, -1}}, &labelled);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(bad.message));
    EXPECT_THAT(status.error_message(), HasSubstr("no label applied"));
  }
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub(), ref, &info)));
  EXPECT_EQ(info.stats().steps(), 0u);
  EXPECT_EQ(info.stats().events_pending(), 1u);
  EXPECT_EQ(info.stats().labels_applied(), 0u);
  // The good label alone is then applied.
  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub(), ref, {{good, 1}}, &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_APPLIED));
}

// Remembered events and applied labels are durable: after a SIGKILL the restarted
// server still has the pending event, and the labelled one is still a duplicate.
TEST(DelayedFeedbackRestartTest, PendingEventsAndAppliedLabelsSurviveASigkill) {
  TempDir dir("okl_label_restart");
  const v1::ModelRef ref = Ref("feedback", "durable");
  const v1::ModelRef expiring = Ref("feedback", "expiring");
  v1::PredictResponse predicted;
  {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.data_dir = dir.data_dir()});
    ASSERT_TRUE(server.ok()) << server.status();
    Stub& stub = (*server)->stub();
    ASSERT_TRUE(IsOk(CreateModel(stub, ref, ParseConfig(kConfig))));
    ASSERT_TRUE(IsOk(PredictRemembering(stub, ref, Inputs(1, 2), {}, &predicted)));
    // Another model's event, whose wait ends after the restart: nothing touches that
    // model again, and its default label is applied all the same.
    ASSERT_TRUE(IsOk(CreateModel(stub, expiring, ParseConfig(kConfig))));
    v1::Remember remember;
    remember.set_wait_seconds(1);
    remember.set_default_label(0.5);
    v1::PredictResponse ignored;
    ASSERT_TRUE(IsOk(PredictRemembering(stub, expiring, Inputs(5, 1), remember, &ignored)));
    v1::LabelResponse labelled;
    ASSERT_TRUE(IsOk(Label(stub, ref, {{predicted.event_ids(0), 1.0}}, &labelled)));
    ASSERT_TRUE((*server)->Kill().ok());
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({.data_dir = dir.data_dir()});
  ASSERT_TRUE(server.ok()) << server.status();
  Stub& stub = (*server)->stub();
  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub, ref, {{predicted.event_ids(0), 1.0}, {predicted.event_ids(1), 2.0}},
                         &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_DUPLICATE, v1::LABEL_APPLIED));
  const v1::ModelRef plain = Ref("feedback", "durable-plain");
  ASSERT_TRUE(IsOk(CreateModel(stub, plain, ParseConfig(kConfig))));
  v1::ObserveResponse observed;
  ASSERT_TRUE(IsOk(Observe(stub, plain, Examples({{1, 1.0}}), &observed)));
  ASSERT_TRUE(IsOk(Observe(stub, plain, Examples({{2, 2.0}}), &observed)));
  ExpectSameModel(stub, ref, plain);
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub, ref, &info)));
  EXPECT_EQ(info.stats().labels_applied(), 2u);
  EXPECT_EQ(info.stats().events_pending(), 0u);
  EXPECT_EQ(info.stats().labels_duplicate(), 1u);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    ASSERT_TRUE(IsOk(GetModel(stub, expiring, &info)));
    if (info.stats().events_expired() == 1) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < give_up);
  EXPECT_EQ(info.stats().events_expired(), 1u);
  EXPECT_EQ(info.stats().steps(), 1u);
}

// A small Predict is answered on the queue's thread and its events written later,
// batched; a large one (here every one: --max_inline_work=0) runs on the offload pool and
// remembers as it predicts. Its events are the same.
TEST(DelayedFeedbackOffloadedTest, APredictOnTheOffloadPoolRemembersAsAnInlineOneDoes) {
  auto server = ServerProcess::Start({.flags = {"--max_inline_work=0"}});
  ASSERT_TRUE(server.ok()) << server.status();
  Stub& stub = (*server)->stub();
  const v1::ModelRef ref = Ref("feedback", "offloaded");
  ASSERT_TRUE(IsOk(CreateModel(stub, ref, ParseConfig(kConfig))));
  v1::PredictResponse made;
  ASSERT_TRUE(IsOk(PredictRemembering(stub, ref, Inputs(1, 3), {}, &made)));
  ASSERT_EQ(made.event_ids_size(), 3);
  v1::Remember given;
  given.add_event_ids("a");
  given.add_event_ids("b");
  v1::PredictResponse named;
  ASSERT_TRUE(IsOk(PredictRemembering(stub, ref, Inputs(4, 2), given, &named)));
  EXPECT_THAT(named.event_ids(), ElementsAre("a", "b"));
  EXPECT_EQ(PredictRemembering(stub, ref, Inputs(4, 2), given, &named).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub, ref, {{made.event_ids(1), 1.0}, {"b", -1.0}}, &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_APPLIED, v1::LABEL_APPLIED));
  ASSERT_TRUE(IsOk(Label(stub, ref, {{"b", 1.0}}, &labelled)));
  EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_DUPLICATE));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(stub, ref, &info)));
  EXPECT_EQ(info.stats().events_pending(), 3u);
  EXPECT_EQ(info.stats().steps(), 2u);
}

// A tenant's remembered events are bounded in bytes (--max_event_bytes_per_tenant) over
// all its models: a Predict past it is refused whole; a label gives back its event's
// input, a deleted model its events; another tenant has its own; a Restore whose events
// would pass it is refused; and a restart counts what is stored.
TEST(DelayedFeedbackQuotaTest, ATenantsEventBytesAreBoundedAndGivenBack) {
  // One event of d = 2 with a server-made id (33 hex digits while a model's counter is
  // under 16) in the store: its expiry key "i/<16>/x/<16>/<id>", which holds its record
  // (39 fixed bytes and 2 doubles), as server/events/model_events.h lays them out.
  constexpr int kEventBytes = (38 + 33) + 39 + 2 * 8;
  TempDir dir("okl_label_quota");
  const std::vector<std::string> flags = {
      absl::StrCat("--max_event_bytes_per_tenant=", 4 * kEventBytes)};
  auto server = ServerProcess::Start({.flags = flags, .data_dir = dir.data_dir()});
  ASSERT_TRUE(server.ok()) << server.status();
  const v1::ModelRef a = Ref("acme", "a"), b = Ref("acme", "b"), other = Ref("other", "a");
  v1::Remember remember;
  remember.set_wait_seconds(3600);
  auto remember_in = [&](Stub& stub, const v1::ModelRef& ref, int n) {
    v1::PredictResponse predicted;
    grpc::Status status = PredictRemembering(stub, ref, Inputs(1, n), remember, &predicted);
    return std::make_pair(status, std::vector<std::string>(predicted.event_ids().begin(),
                                                           predicted.event_ids().end()));
  };
  {
    Stub& stub = (*server)->stub();
    for (const v1::ModelRef& ref : {a, b, other}) {
      ASSERT_TRUE(IsOk(CreateModel(stub, ref, ParseConfig(kConfig))));
    }
    const auto [remembered, ids] = remember_in(stub, a, 3);
    ASSERT_TRUE(IsOk(remembered));
    const grpc::Status over = remember_in(stub, b, 2).first;
    EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(over.error_message(), HasSubstr("--max_event_bytes_per_tenant"));
    EXPECT_TRUE(IsOk(remember_in(stub, b, 1).first));      // up to the quota
    EXPECT_TRUE(IsOk(remember_in(stub, other, 4).first));  // its own quota
    const int port = (*server)->metrics_port();
    EXPECT_EQ(MetricValue(port, "okl_model_events_stored_bytes{tenant=\"acme\",model=\"a\"}")
                  .value_or(-1),
              3 * kEventBytes);
    EXPECT_EQ(MetricValue(port, "okl_quota_event_bytes").value_or(-1), 8 * kEventBytes);
    EXPECT_EQ(
        MetricValue(port, "okl_quota_limit{quota=\"event_bytes_per_tenant\"}").value_or(-1),
        4 * kEventBytes);
    EXPECT_EQ(MetricValue(port, "okl_quota_rejections_total{quota=\"event_bytes_per_tenant\"}")
                  .value_or(-1),
              1);

    // Labels give back their events' inputs only: the ids stay until the wait ends.
    v1::LabelResponse labelled;
    ASSERT_TRUE(IsOk(Label(stub, a, {{ids[0], 1.0}, {ids[1], 1.0}}, &labelled)));
    EXPECT_EQ(MetricValue(port, "okl_model_events_stored_bytes{tenant=\"acme\",model=\"a\"}")
                  .value_or(-1),
              3 * kEventBytes - 2 * 2 * 8);
    EXPECT_EQ(remember_in(stub, b, 1).first.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    // A deleted model gives back all of its events.
    ASSERT_TRUE(IsOk(DeleteModel(stub, a)));
    EXPECT_TRUE(IsOk(remember_in(stub, b, 2).first));
    EXPECT_EQ(MetricValue(port, "okl_quota_event_bytes").value_or(-1), 7 * kEventBytes);

    // b's 3 events restored beside it would be 6 events' bytes: refused, nothing made.
    std::string bytes;
    ASSERT_TRUE(IsOk(Snapshot(stub, b, &bytes)));
    const v1::ModelRef copy = Ref("acme", "copy");
    EXPECT_EQ(Restore(stub, copy, bytes).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    v1::ModelInfo info;
    EXPECT_EQ(GetModel(stub, copy, &info).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(MetricValue(port, "okl_quota_event_bytes").value_or(-1), 7 * kEventBytes);
    // Restored over b itself, the same events replace b's own: no more bytes are held.
    ASSERT_TRUE(IsOk(Restore(stub, b, bytes)));
    EXPECT_EQ(MetricValue(port, "okl_quota_event_bytes").value_or(-1), 7 * kEventBytes);
    ASSERT_TRUE((*server)->Kill().ok());
  }
  // After a SIGKILL the stored events count again.
  server = ServerProcess::Start({.flags = flags, .data_dir = dir.data_dir()});
  ASSERT_TRUE(server.ok()) << server.status();
  Stub& stub = (*server)->stub();
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "okl_quota_event_bytes").value_or(-1),
            7 * kEventBytes);
  EXPECT_EQ(remember_in(stub, b, 2).first.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(IsOk(remember_in(stub, b, 1).first));
}

// A snapshot carries the model's events after its state: a Restore (and so okl move)
// takes them along, to a server with a store or one in memory, and labels sent there find
// them, as they would have on the source.
TEST(DelayedFeedbackMoveTest, EventsTravelWithSnapshotAndRestore) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> source = ServerProcess::Start({});
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::unique_ptr<ServerProcess>> in_memory =
      ServerProcess::Start({.flags = {"--data_dir="}});
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  const v1::ModelRef ref = Ref("feedback", "moving");
  Stub& stub = (*source)->stub();
  ASSERT_TRUE(IsOk(CreateModel(stub, ref, ParseConfig(kConfig))));
  v1::Remember remember;
  for (const char* id : {"e1", "e2", "e3"}) remember.add_event_ids(id);
  remember.set_wait_seconds(3600);
  remember.set_default_label(0.25);
  v1::PredictResponse predicted;
  ASSERT_TRUE(IsOk(PredictRemembering(stub, ref, Inputs(1, 3), remember, &predicted)));
  // And one the server names (its record kept at its expiry key in a store).
  remember.clear_event_ids();
  ASSERT_TRUE(IsOk(PredictRemembering(stub, ref, Inputs(4, 1), remember, &predicted)));
  ASSERT_EQ(predicted.event_ids_size(), 1);
  const std::string served_id = predicted.event_ids(0);
  v1::LabelResponse labelled;
  ASSERT_TRUE(IsOk(Label(stub, ref, {{"e1", 1.0}}, &labelled)));
  std::string bytes;
  ASSERT_TRUE(IsOk(Snapshot(stub, ref, &bytes)));
  absl::StatusOr<SnapshotSections> sections = SplitSnapshot(bytes);
  ASSERT_TRUE(sections.ok()) << sections.status();
  ASSERT_EQ(sections->event_pages.size(), 1u);
  const std::string model_only(sections->model);

  // The source goes on with the labels each target gets below.
  const std::vector<std::pair<std::string, double>> labels = {
      {"e1", 1.0}, {"e2", -1.0}, {"e4", 1.0}, {served_id, 0.5}};
  ASSERT_TRUE(IsOk(Label(stub, ref, labels, &labelled)));
  std::string source_after;
  ASSERT_TRUE(IsOk(Snapshot(stub, ref, &source_after)));
  std::vector<double> source_predictions;
  ASSERT_TRUE(IsOk(Predict(stub, ref, Inputs(-3, 9), &source_predictions)));

  struct Target {
    const char* what;
    Stub& stub;
    v1::ModelRef ref;
  };
  for (const Target& target : {Target{"in memory", (*in_memory)->stub(), ref},
                               Target{"on the store", stub, Ref("feedback", "copy")}}) {
    SCOPED_TRACE(target.what);
    ASSERT_TRUE(IsOk(Restore(target.stub, target.ref, bytes)));
    ASSERT_TRUE(IsOk(Label(target.stub, target.ref, labels, &labelled)));
    EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_DUPLICATE, v1::LABEL_APPLIED,
                                                v1::LABEL_UNKNOWN, v1::LABEL_APPLIED));
    // The same model, events and counts as the source's, to the byte (the events in id
    // order, whichever keys held them).
    std::string moved;
    ASSERT_TRUE(IsOk(Snapshot(target.stub, target.ref, &moved)));
    EXPECT_TRUE(moved == source_after)
        << "the moved model's snapshot differs from the source's";
    std::vector<double> predictions;
    ASSERT_TRUE(IsOk(Predict(target.stub, target.ref, Inputs(-3, 9), &predictions)));
    EXPECT_EQ(Bits(predictions), Bits(source_predictions));
    v1::ModelInfo info;
    ASSERT_TRUE(IsOk(GetModel(target.stub, target.ref, &info)));
    EXPECT_EQ(info.stats().events_pending(), 1u);
    EXPECT_EQ(info.stats().labels_applied(), 3u);
    EXPECT_EQ(info.stats().labels_duplicate(), 1u);
    EXPECT_EQ(info.stats().served_labels(), 3u);

    // A corrupted event page: DATA_LOSS, and the model keeps its events.
    std::string corrupted = bytes;
    corrupted[model_only.size() + 20] ^= 0x40;
    EXPECT_EQ(Restore(target.stub, target.ref, corrupted).error_code(),
              grpc::StatusCode::DATA_LOSS);
    // Garbage after the model's section: DATA_LOSS.
    EXPECT_EQ(Restore(target.stub, target.ref, model_only + "junk").error_code(),
              grpc::StatusCode::DATA_LOSS);
    ASSERT_TRUE(IsOk(Label(target.stub, target.ref, {{"e2", 5.0}}, &labelled)));
    EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_DUPLICATE));

    // A snapshot without events replaces the model's events with none.
    ASSERT_TRUE(IsOk(Restore(target.stub, target.ref, model_only)));
    ASSERT_TRUE(IsOk(Label(target.stub, target.ref, {{"e3", 1.0}}, &labelled)));
    EXPECT_THAT(Outcomes(labelled), ElementsAre(v1::LABEL_UNKNOWN));
    ASSERT_TRUE(IsOk(GetModel(target.stub, target.ref, &info)));
    EXPECT_EQ(info.stats().events_pending(), 0u);
    EXPECT_EQ(info.stats().labels_applied(), 0u);
  }
}

}  // namespace
}  // namespace okl::testing
