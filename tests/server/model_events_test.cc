// tests/server/model_events_test.cc
//
// Remembered events in the model store (server/events/model_events.h, server/store/event_log.h)
// against a real RocksDB in a temporary directory: the record's round trip, id validation, Remember's all-or-nothing
// write, a label batch's note written atomically with its log record (through a real
// ModelEntry), the expiry index's order, and events going with their model.

#include "server/events/model_events.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/create_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/event_log.h"
#include "server/store/model_store.h"
#include "tests/server/store_test_util.h"

namespace okl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

RememberedEvent DenseEvent(std::string id, absl::Time expires, double x0, double x1) {
  RememberedEvent event;
  event.id = std::move(id);
  event.expires = expires;
  event.prediction = x0 + x1;
  event.values = {x0, x1};
  return event;
}

TEST(EventRecordTest, RoundTripsDenseSparseAndDefaultsAndALabelledOneDropsItsInput) {
  RememberedEvent dense = DenseEvent("click-1", kT0 + absl::Microseconds(7), 0.5, -1e300);
  dense.default_label = -1;
  RememberedEvent sparse;
  sparse.id = "s";
  sparse.expires = kT0;
  sparse.prediction = -0.25;
  sparse.sparse = true;
  sparse.indices = {3, 70000};
  sparse.values = {1.5, 2.5};
  for (const RememberedEvent& event : {dense, sparse}) {
    absl::StatusOr<StoredEvent> decoded =
        DecodeEvent(event.id, EncodeEvent(EventState::kPending, event));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->state, EventState::kPending);
    EXPECT_EQ(decoded->event, event);
  }
  absl::StatusOr<StoredEvent> labelled =
      DecodeEvent("s", EncodeEvent(EventState::kLabelled, sparse));
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_EQ(labelled->state, EventState::kLabelled);
  EXPECT_TRUE(labelled->event.values.empty());
  EXPECT_TRUE(labelled->event.indices.empty());
  EXPECT_EQ(labelled->event.expires, sparse.expires);
  EXPECT_EQ(labelled->event.prediction, sparse.prediction);
}

// What the tenant's event quota counts is what the store holds: the keys and the record,
// as written (one key for a server-made id, whose record is at its expiry key).
TEST(EventRecordTest, StoredBytesAreTheKeysAndTheRecordAsWritten) {
  RememberedEvent dense = DenseEvent("click-1", kT0, 0.5, 1.5);
  dense.default_label = 1;
  RememberedEvent sparse = DenseEvent(std::string(kMaxEventIdBytes, 'z'), kT0, 1, 2);
  sparse.sparse = true;
  sparse.indices = {3, 9};
  RememberedEvent wide = DenseEvent("0123456789abcdef0123456789abcdef", kT0, 0, 0);
  wide.values.assign(16, 0.25);
  RememberedEvent served = wide;
  served.id = ServerEventId(kT0, 0x0123456789abcdef, 41);
  const uint64_t incarnation = 0xfedcba9876543210;
  for (const RememberedEvent* event_ptr : {&dense, &sparse, &wide, &served}) {
    const RememberedEvent& event = *event_ptr;
    const size_t keys = event_ptr == &served
                            ? EventExpiryKey(incarnation, kT0, event.id).size()
                            : EventKey(incarnation, event.id).size() +
                                  EventExpiryKey(incarnation, kT0, event.id).size();
    for (EventState state : {EventState::kPending, EventState::kLabelled}) {
      EXPECT_EQ(StoredEventBytes(state, event), keys + EncodeEvent(state, event).size())
          << event.id << " in state " << static_cast<int>(state);
    }
  }
  // A d = 16 event with a server-made id of 34 digits: 38 + 34 bytes of key, 39 + 128 of
  // record.
  EXPECT_EQ(StoredEventBytes(EventState::kPending, served), 38 + 34 + 39 + 128u);
  // A labelled event keeps no input: it frees the input's bytes.
  EXPECT_EQ(StoredEventBytes(EventState::kPending, wide) -
                StoredEventBytes(EventState::kLabelled, wide),
            16 * sizeof(double));
  EXPECT_EQ(StoredEventBytes(EventState::kPending, sparse) -
                StoredEventBytes(EventState::kLabelled, sparse),
            2 * (sizeof(double) + sizeof(uint32_t)));
}

TEST(EventCountsTest, RoundTripAndAnOlderRecordReadsNoStoredBytes) {
  const EventCounts counts{.pending = 1,
                           .applied = 2,
                           .expired = 3,
                           .duplicates = 4,
                           .served_loss = 0.5,
                           .served_labels = 5,
                           .stored_bytes = 6};
  const std::string value = EncodeEventCounts(counts);
  EXPECT_EQ(DecodeEventCounts(value).value_or(EventCounts{}), counts);
  // The counts record's first version, 48 bytes, has no stored_bytes.
  EventCounts older = counts;
  older.stored_bytes = 0;
  EXPECT_EQ(DecodeEventCounts(value.substr(0, value.size() - 8)).value_or(EventCounts{}),
            older);
  for (size_t cut : {size_t{1}, size_t{9}}) {
    EXPECT_EQ(DecodeEventCounts(value.substr(0, value.size() - cut)).status().code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(DecodeEventCounts(value + "x").status().code(), absl::StatusCode::kDataLoss);
}

TEST(EventRecordTest, ADamagedRecordIsDataLossNamingTheEvent) {
  const std::string good = EncodeEvent(EventState::kPending, DenseEvent("e", kT0, 1, 2));
  for (const std::string& bad :
       {good.substr(0, 10), good.substr(0, good.size() - 1), std::string(1, '\x07') +
                                                                  good.substr(1)}) {
    absl::StatusOr<StoredEvent> decoded = DecodeEvent("e", bad);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(decoded.status().message(), HasSubstr("\"e\""));
  }
}

TEST(EventIdTest, AcceptsTheDocumentedCharactersAndLengths) {
  EXPECT_TRUE(ValidateEventId("a").ok());
  EXPECT_TRUE(ValidateEventId("user-7:ad.3_x").ok());
  EXPECT_TRUE(ValidateEventId(std::string(kMaxEventIdBytes, 'z')).ok());
  for (const std::string& bad :
       {std::string(), std::string(kMaxEventIdBytes + 1, 'z'), std::string("a/b"),
        std::string("a b"), std::string("caf\xc3\xa9")}) {
    absl::Status status = ValidateEventId(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

class ModelEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ScratchDirForTest("okl_model_events_test");
    store_ = OpenStore();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<ModelStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<ModelStore>> store = ModelStore::Open(dir_.string(), {});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Closes and reopens the store; returns the log of its one model.
  std::shared_ptr<ModelLog> Reopen() {
    store_.reset();
    store_ = OpenStore();
    std::vector<StoredModel> models;
    absl::Status status = store_->LoadModels(
        [&](StoredModel model) {
          models.push_back(std::move(model));
          return absl::OkStatus();
        },
        [&](absl::string_view, absl::string_view, absl::string_view what) {
          return absl::DataLossError(what);
        });
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(models.size(), 1u);
    return models.empty() ? nullptr : store_->OpenLog(models[0]);
  }

  // The remembered events of `log`'s model.
  static std::unique_ptr<EventLog> Events(std::shared_ptr<ModelLog> log) {
    return std::make_unique<EventLog>(std::move(log));
  }

  std::optional<StoredEvent> Find(const std::shared_ptr<ModelLog>& log, absl::string_view id) {
    absl::StatusOr<std::optional<StoredEvent>> found = Events(log)->FindEvent(id);
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? *found : std::nullopt;
  }

  std::filesystem::path dir_;
  std::unique_ptr<ModelStore> store_;
};

TEST_F(ModelEventsTest, RememberedEventsSurviveAReopenBesideTheModelsLog) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  ASSERT_TRUE(log->Append(Valid(InputBatch::Dense({1, 2}, 2), {0.5}), nullptr).ok());
  const std::vector<RememberedEvent> events = {DenseEvent("a", kT0, 1, 2),
                                               DenseEvent("b", kT0, 3, 4)};
  ASSERT_TRUE(Events(log)->Remember(events, EventCounts{.pending = 2}).ok());
  log = Reopen();  // LoadModels reads the model as before, its events beside it
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->position().seq, 1u);
  for (const RememberedEvent& event : events) {
    std::optional<StoredEvent> found = Find(log, event.id);
    ASSERT_TRUE(found.has_value()) << event.id;
    EXPECT_EQ(found->state, EventState::kPending);
    EXPECT_EQ(found->event, event);
  }
  EXPECT_FALSE(Find(log, "c").has_value());
  EXPECT_EQ(Events(log)->LoadCounts().value_or(EventCounts{}), EventCounts{.pending = 2});
}

TEST_F(ModelEventsTest, RememberRefusesAKnownOrRepeatedIdAndStoresNothingOfTheRequest) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  ASSERT_TRUE(Events(log)->Remember({DenseEvent("a", kT0, 1, 2)}, {}).ok());
  absl::Status known =
      Events(log)->Remember({DenseEvent("new", kT0, 1, 2), DenseEvent("a", kT0, 5, 6)}, {});
  EXPECT_EQ(known.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(known.message(), HasSubstr("\"a\""));
  absl::Status repeated =
      Events(log)->Remember({DenseEvent("new", kT0, 1, 2), DenseEvent("new", kT0, 5, 6)}, {});
  EXPECT_EQ(repeated.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(Find(log, "new").has_value());
  EXPECT_EQ(Find(log, "a")->event, DenseEvent("a", kT0, 1, 2));
}

// A batch of labels through a real ModelEntry: its log record and its events' new state
// are one write, so after a reopen the record is there to replay and the events are
// labelled; a batch the entry refuses changes no event.
TEST_F(ModelEventsTest, ALabelBatchsEventsChangeInTheSameWriteAsItsLogRecord) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  ASSERT_TRUE(Events(log)->Remember({DenseEvent("a", kT0, 1, 2), DenseEvent("b", kT0, 3, 4),
                             DenseEvent("c", kT0 - absl::Seconds(1), 5, 6)},
                            {})
                  .ok());
  auto learner = CreateModel(SmallConfig());
  ASSERT_TRUE(learner.ok()) << learner.status();
  auto entry = std::make_shared<ModelEntry>("acme", "ads", *std::move(learner), log);

  EventNote note;
  note.counts = {
      .pending = 0, .applied = 2, .expired = 1, .served_loss = 0.5, .served_labels = 2};
  note.labelled = {*Find(log, "a"), *Find(log, "b")};
  note.forgotten = {*Find(log, "c")};  // an expired event's default label
  std::vector<Observation> out;
  ASSERT_TRUE(entry->ObserveBatch(InputBatch::Dense({1, 2, 3, 4, 5, 6}, 2), {1, -1, 0}, &out,
                                  nullptr, &note)
                  .ok());
  // A batch that fails validation (a non-finite label) is not logged: its note is not
  // written.
  EventNote refused;
  refused.forgotten = {*Find(log, "a")};
  EXPECT_FALSE(entry->ObserveBatch(InputBatch::Dense({1, 2}, 2), {NAN}, &out, nullptr,
                                   &refused)
                   .ok());

  log = Reopen();
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->position().seq, 1u);
  EXPECT_EQ(Events(log)->LoadCounts().value_or(EventCounts{}), note.counts);
  for (const char* id : {"a", "b"}) {
    std::optional<StoredEvent> found = Find(log, id);
    ASSERT_TRUE(found.has_value()) << id;
    EXPECT_EQ(found->state, EventState::kLabelled) << id;
    EXPECT_TRUE(found->event.values.empty()) << id;
  }
  EXPECT_FALSE(Find(log, "c").has_value());
  // "c"'s index entry went with it: only a and b are ever due.
  absl::StatusOr<std::vector<StoredEvent>> due = Events(log)->DueEvents(kT0 + absl::Hours(1), 10);
  ASSERT_TRUE(due.ok()) << due.status();
  ASSERT_EQ(due->size(), 2u);
}

TEST_F(ModelEventsTest, DueEventsComeEarliestFirstUpToNowAndForgottenOnesAreGone) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  ASSERT_TRUE(
      Events(log)->Remember({DenseEvent("late", kT0 + absl::Seconds(30), 1, 1),
                     DenseEvent("early", kT0 + absl::Seconds(10), 2, 2),
                     DenseEvent("middle", kT0 + absl::Seconds(20), 3, 3),
                     DenseEvent("edge", kT0 + absl::Seconds(20) + absl::Microseconds(1), 4, 4)},
                    {})
          .ok());
  auto ids = [&](absl::Time now, size_t max) {
    std::vector<std::string> out;
    absl::StatusOr<std::vector<StoredEvent>> due = Events(log)->DueEvents(now, max);
    EXPECT_TRUE(due.ok()) << due.status();
    if (due.ok()) {
      for (const StoredEvent& event : *due) out.push_back(event.event.id);
    }
    return out;
  };
  EXPECT_EQ(Events(log)->NextExpiry().value_or(std::nullopt), kT0 + absl::Seconds(10));
  EXPECT_THAT(ids(kT0, 10), ElementsAre());
  EXPECT_THAT(ids(kT0 + absl::Seconds(20), 10), ElementsAre("early", "middle"));
  EXPECT_THAT(ids(kT0 + absl::Seconds(40), 3), ElementsAre("early", "middle", "edge"));
  ASSERT_TRUE(Events(log)->ForgetEvents({*Find(log, "early"), *Find(log, "middle")}, {}).ok());
  EXPECT_THAT(ids(kT0 + absl::Seconds(40), 10), ElementsAre("edge", "late"));
  EXPECT_EQ(Events(log)->NextExpiry().value_or(std::nullopt),
            kT0 + absl::Seconds(20) + absl::Microseconds(1));
  ASSERT_TRUE(Events(log)->ForgetEvents({*Find(log, "edge"), *Find(log, "late")}, {}).ok());
  EXPECT_EQ(Events(log)->NextExpiry().value_or(kT0), std::nullopt);
  EXPECT_FALSE(Find(log, "early").has_value());
}

// The server's ids name their expiry: 16 hex digits of it, the book's 16, then its counter.
TEST(ServerEventIdTest, NamesItsExpiryAndOnlyItsOwnEventIsKeptAtTheExpiryKey) {
  const absl::Time expires = kT0 + absl::Microseconds(123'456);
  const std::string first = ServerEventId(expires, 0xfeedface, 0);
  const std::string last = ServerEventId(expires, 0xfeedface, ~uint64_t{0});
  EXPECT_EQ(first, absl::StrCat(absl::StrFormat("%016x", absl::ToUnixMicros(expires)),
                                "00000000feedface", "0"));
  EXPECT_EQ(last.size(), 48u);
  EXPECT_TRUE(ValidateEventId(last).ok());
  EXPECT_EQ(ServerEventIdExpiry(first), expires);
  EXPECT_EQ(ServerEventIdExpiry(last), expires);
  // Not of the form: the first form of server-made ids (32 digits), capitals, other
  // characters, more than 48 digits.
  for (const std::string& id :
       {std::string("0123456789abcdef0123456789abcdef"), absl::AsciiStrToUpper(first),
        first + "-", last + "0", std::string("click-1")}) {
    EXPECT_EQ(ServerEventIdExpiry(id), std::nullopt) << id;
  }
  RememberedEvent event = DenseEvent(first, expires, 1, 2);
  EXPECT_TRUE(KeptAtExpiryKey(event));
  EXPECT_EQ(EventRecordKey(7, event), EventExpiryKey(7, expires, first));
  // Sub-microsecond parts do not count: the store keeps microseconds.
  event.expires = expires + absl::Nanoseconds(999);
  EXPECT_TRUE(KeptAtExpiryKey(event));
  // A caller's id of the same form that names another expiry keeps its record at EventKey.
  event.expires = expires + absl::Microseconds(1);
  EXPECT_FALSE(KeptAtExpiryKey(event));
  EXPECT_EQ(EventRecordKey(7, event), EventKey(7, first));
}

// Server ids' records are at their expiry keys, callers' at EventKey (one of the server's
// form naming another expiry, and one of the first form of server-made ids, 32 digits,
// among them): every kind is found, labelled, due in expiry order, captured in id order,
// and forgotten with all its keys.
TEST_F(ModelEventsTest, ServerIdsAreKeptAtTheirExpiryKeysBesideCallerIds) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  const uint64_t prefix = 0x0123456789abcdef;
  auto served = [&](absl::Duration wait, uint64_t counter, double x) {
    RememberedEvent event = DenseEvent("", kT0 + wait, x, x);
    event.id = ServerEventId(event.expires, prefix, counter);
    return event;
  };
  const RememberedEvent first = served(absl::Seconds(10), 0, 1);
  const RememberedEvent second = served(absl::Seconds(30), 1, 2);
  const RememberedEvent lookalike = DenseEvent(ServerEventId(kT0 + absl::Seconds(5), prefix, 2),
                                               kT0 + absl::Seconds(20), 3, 3);
  const RememberedEvent caller = DenseEvent("zz-caller", kT0 + absl::Seconds(15), 4, 4);
  const RememberedEvent older =
      DenseEvent("0123456789abcdef0000000000000007", kT0 + absl::Seconds(25), 5, 5);
  const std::vector<RememberedEvent> events = {first, second, lookalike, caller, older};
  ASSERT_TRUE(Events(log)->Remember(events, EventCounts{.pending = 5}).ok());
  // Known, whatever key holds it.
  for (const RememberedEvent& event : events) {
    EXPECT_EQ(Events(log)->Remember({event}, {}).code(), absl::StatusCode::kAlreadyExists) << event.id;
  }
  log = Reopen();
  ASSERT_NE(log, nullptr);
  for (const RememberedEvent& event : events) {
    std::optional<StoredEvent> found = Find(log, event.id);
    ASSERT_TRUE(found.has_value()) << event.id;
    EXPECT_EQ(found->event, event);
  }
  auto captured_ids = [&] {
    std::vector<std::string> ids;
    absl::StatusOr<std::unique_ptr<EventCursor>> cursor = Events(log)->CaptureEvents();
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    if (!cursor.ok()) return ids;
    for (;;) {
      absl::StatusOr<std::vector<StoredEvent>> page = (*cursor)->Next(2);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok() || page->empty()) return ids;
      for (const StoredEvent& stored : *page) ids.push_back(stored.event.id);
    }
  };
  std::vector<std::string> sorted_ids;
  for (const RememberedEvent& event : events) sorted_ids.push_back(event.id);
  std::sort(sorted_ids.begin(), sorted_ids.end());
  EXPECT_EQ(captured_ids(), sorted_ids);

  // Labelled in place: the record changes at the key that holds it.
  EventNote note;
  note.counts = {.pending = 3, .applied = 2};
  note.labelled = {*Find(log, first.id), *Find(log, lookalike.id)};
  ASSERT_TRUE(log->Append(Valid(InputBatch::Dense({1, 1, 3, 3}, 2), {1, -1}), &note).ok());
  for (const RememberedEvent& event : {first, lookalike}) {
    std::optional<StoredEvent> found = Find(log, event.id);
    ASSERT_TRUE(found.has_value()) << event.id;
    EXPECT_EQ(found->state, EventState::kLabelled) << event.id;
    EXPECT_TRUE(found->event.values.empty()) << event.id;
  }
  EXPECT_EQ(captured_ids(), sorted_ids);

  absl::StatusOr<std::vector<StoredEvent>> due = Events(log)->DueEvents(kT0 + absl::Seconds(40), 10);
  ASSERT_TRUE(due.ok()) << due.status();
  std::vector<std::string> due_ids;
  for (const StoredEvent& stored : *due) due_ids.push_back(stored.event.id);
  EXPECT_THAT(due_ids, ElementsAre(first.id, caller.id, lookalike.id, older.id, second.id));
  EXPECT_EQ((*due)[4].event, second);
  ASSERT_TRUE(Events(log)->ForgetEvents(*due, {}).ok());
  EXPECT_EQ(Events(log)->NextExpiry().value_or(kT0), std::nullopt);
  EXPECT_THAT(captured_ids(), ElementsAre());
  for (const RememberedEvent& event : events) EXPECT_FALSE(Find(log, event.id).has_value());
}

TEST_F(ModelEventsTest, EventsGoWithTheirModelAndAClosedLogRemembersNothing) {
  std::shared_ptr<ModelLog> log = *store_->CreateModel("acme", "ads", SmallConfig());
  ASSERT_TRUE(Events(log)->Remember({DenseEvent("a", kT0, 1, 2)}, {}).ok());
  ASSERT_TRUE(store_->DeleteModel(log.get()).ok());
  EXPECT_EQ(Events(log)->Remember({DenseEvent("b", kT0, 1, 2)}, {}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Events(log)->ForgetEvents({}, {}).code(), absl::StatusCode::kNotFound);
  // The same name again is a new model, with none of the old one's events.
  std::shared_ptr<ModelLog> again = *store_->CreateModel("acme", "ads", SmallConfig());
  EXPECT_FALSE(Find(again, "a").has_value());
  EXPECT_FALSE(Find(again, "b").has_value());
}

}  // namespace
}  // namespace okl
