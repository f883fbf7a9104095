// tests/server/event_book_test.cc
//
// EventBook, over each storage (memory, and the model store on a real RocksDB): a label
// is Observe(x_e, y) at the moment it is applied, bit for bit; the first label wins;
// expiry applies a default label once or drops the event; limits and bad requests change
// nothing; the counts (and the served loss) follow, and survive a reopen of the store.

#include "server/events/event_book.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/create_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/snapshot_codec.h"
#include "server/store/event_log.h"
#include "server/events/event_snapshot.h"
#include "server/store/model_store.h"
#include "server/base/work_pool.h"
#include "tests/server/store_test_util.h"

namespace okl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Outcome = LabelOutcome;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// Inputs of dimension 2: input i is (i, -i / 2).
std::vector<double> Inputs(int first, int n) {
  std::vector<double> xs;
  for (int i = first; i < first + n; ++i) {
    xs.push_back(0.1 * i);
    xs.push_back(-0.05 * i);
  }
  return xs;
}

std::shared_ptr<ModelEntry> NewEntry(const ModelConfig& config,
                                     std::shared_ptr<ModelJournal> journal = nullptr) {
  auto learner = CreateModel(config);
  EXPECT_TRUE(learner.ok()) << learner.status();
  return std::make_shared<ModelEntry>("acme", "ads", *std::move(learner), std::move(journal));
}

// The book's model on either storage: GetParam() true puts it in a model store.
class EventBookTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Start(SmallConfig()); }
  void TearDown() override {
    book_.reset();
    storage_.reset();
    entry_.reset();
    log_.reset();
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void Start(const ModelConfig& config, EventBook::Limits limits = {},
             ResourceQuotas* quotas = nullptr) {
    TearDown();
    config_ = config;
    limits_ = limits;
    std::shared_ptr<EventStorage> storage;
    if (GetParam()) {
      dir_ = ScratchDirForTest("okl_event_book_test");
      store_ = *ModelStore::Open(dir_.string(), {});
      log_ = *store_->CreateModel("acme", "ads", config);
      storage = std::make_shared<EventLog>(log_);
    } else {
      storage = std::make_shared<MemoryEvents>();
    }
    entry_ = NewEntry(config, log_);
    storage_ = storage;
    book_ = std::make_unique<EventBook>(storage, config.loss, limits,
                                        EventQuotaAccount{.quotas = quotas, .tenant = "acme"});
    ASSERT_TRUE(book_->Open().ok());
  }

  // Predicts `n` inputs from `first` and remembers them; their ids.
  std::vector<std::string> PredictAndRemember(int first, int n,
                                              EventBook::RememberOptions options = {},
                                              absl::Time now = kT0) {
    const std::vector<double> xs = Inputs(first, n);
    std::vector<double> predictions(n);
    EXPECT_TRUE(entry_->PredictBatch(xs, absl::MakeSpan(predictions)).ok());
    absl::StatusOr<std::vector<std::string>> ids = book_->Remember(
        *entry_, InputBatch::Dense(xs, 2), predictions, options, now);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.value_or(std::vector<std::string>{});
  }

  EventBook::Labelled Label(std::vector<std::pair<std::string, double>> labels,
                            absl::Time now = kT0 + absl::Seconds(1)) {
    absl::StatusOr<EventBook::Labelled> labelled = book_->Label(*entry_, labels, now);
    EXPECT_TRUE(labelled.ok()) << labelled.status();
    return labelled.value_or(EventBook::Labelled{});
  }

  ModelConfig config_;
  EventBook::Limits limits_;
  std::filesystem::path dir_;
  std::unique_ptr<ModelStore> store_;
  std::shared_ptr<ModelLog> log_;
  std::shared_ptr<ModelEntry> entry_;
  std::shared_ptr<EventStorage> storage_;
  std::unique_ptr<EventBook> book_;
};

// Predictions on probe points and the statistics, to the bit.
void ExpectSameModel(const ModelEntry& a, const ModelEntry& b) {
  const std::vector<double> probes = Inputs(-3, 9);
  std::vector<double> pa(9), pb(9);
  ASSERT_TRUE(a.PredictBatch(probes, absl::MakeSpan(pa)).ok());
  ASSERT_TRUE(b.PredictBatch(probes, absl::MakeSpan(pb)).ok());
  for (int i = 0; i < 9; ++i) EXPECT_EQ(pa[i], pb[i]) << "probe " << i;
  EXPECT_EQ(a.Summary()->stats.steps, b.Summary()->stats.steps);
  EXPECT_EQ(a.Summary()->stats.cumulative_loss, b.Summary()->stats.cumulative_loss);
}

TEST_P(EventBookTest, ALabelIsAnObserveOfTheRememberedInputAtTheMomentItIsApplied) {
  const std::vector<std::string> ids = PredictAndRemember(1, 4);
  ASSERT_EQ(ids.size(), 4u);
  // Labels out of order, with an Observe between them.
  EventBook::Labelled first = Label({{ids[2], 0.5}, {ids[0], -1.0}});
  EXPECT_THAT(first.outcomes, ElementsAre(Outcome::kApplied, Outcome::kApplied));
  std::vector<Observation> out;
  ASSERT_TRUE(entry_->ObserveBatch(Inputs(9, 1), {2.0}, &out).ok());
  EXPECT_THAT(Label({{ids[3], 0.25}}).outcomes, ElementsAre(Outcome::kApplied));

  std::shared_ptr<ModelEntry> plain = NewEntry(config_);
  std::vector<Observation> plain_first;
  std::vector<double> xs = Inputs(3, 1);
  const std::vector<double> x1 = Inputs(1, 1);
  xs.insert(xs.end(), x1.begin(), x1.end());
  ASSERT_TRUE(plain->ObserveBatch(xs, {0.5, -1.0}, &plain_first).ok());
  ASSERT_TRUE(plain->ObserveBatch(Inputs(9, 1), {2.0}, &out).ok());
  ASSERT_TRUE(plain->ObserveBatch(Inputs(4, 1), {0.25}, &out).ok());
  ExpectSameModel(*entry_, *plain);
  ASSERT_EQ(first.observations.size(), 2u);
  EXPECT_EQ(first.observations[0].prediction, plain_first[0].prediction);
  EXPECT_EQ(first.observations[1].loss, plain_first[1].loss);
}

// Reads every event a cursor holds, `page` at a time.
std::vector<StoredEvent> ReadAll(EventCursor& cursor, size_t page) {
  std::vector<StoredEvent> all;
  while (true) {
    absl::StatusOr<std::vector<StoredEvent>> next = cursor.Next(page);
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || next->empty()) return all;
    EXPECT_LE(next->size(), page);
    all.insert(all.end(), next->begin(), next->end());
  }
}

// A Snapshot's capture: the events as they were when the model was copied (later changes
// unseen), in id order; their pages decode, after a model's section, to the same events.
TEST_P(EventBookTest, ACaptureHoldsTheEventsOfItsMomentAndItsPagesDecodeToThem) {
  const std::vector<std::string> ids = PredictAndRemember(
      1, 5, {.event_ids = {"e3", "e1", "e5", "e2", "e4"}, .default_label = 0.5});
  Label({{"e1", 1.0}, {"e4", -1.0}, {"e1", 2.0}});
  int exports = 0;
  absl::StatusOr<EventBook::Captured> captured = book_->Capture([&] {
    ++exports;
    return absl::OkStatus();
  });
  ASSERT_TRUE(captured.ok()) << captured.status();
  EXPECT_EQ(exports, 1);
  EXPECT_EQ(captured->counts, book_->counts());
  // Changes after the capture do not show in it.
  Label({{"e2", 1.0}});
  PredictAndRemember(7, 1, {.event_ids = {"e0"}});

  const std::vector<StoredEvent> events = ReadAll(*captured->events, 2);
  std::vector<std::string> read_ids;
  for (const StoredEvent& stored : events) read_ids.push_back(stored.event.id);
  EXPECT_THAT(read_ids, ElementsAre("e1", "e2", "e3", "e4", "e5"));
  for (const StoredEvent& stored : events) {
    const bool labelled = stored.event.id == "e1" || stored.event.id == "e4";
    EXPECT_EQ(stored.state, labelled ? EventState::kLabelled : EventState::kPending)
        << stored.event.id;
    EXPECT_EQ(stored.event.values.size(), labelled ? 0u : 2u) << stored.event.id;
    EXPECT_EQ(stored.event.default_label, 0.5);
  }

  // The pages (counts in the first) after a model's section decode to what was captured.
  absl::StatusOr<std::string> bytes = EncodeSnapshot(*entry_->ExportState());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  *bytes += EncodeEventPage(&captured->counts, absl::MakeConstSpan(events).subspan(0, 3));
  *bytes += EncodeEventPage(nullptr, absl::MakeConstSpan(events).subspan(3));
  absl::StatusOr<SnapshotSections> sections = SplitSnapshot(*bytes);
  ASSERT_TRUE(sections.ok()) << sections.status();
  ASSERT_EQ(sections->event_pages.size(), 2u);
  EXPECT_TRUE(DecodeSnapshot(*bytes).ok());
  absl::StatusOr<SnapshotEvents> decoded = DecodeEventPages(sections->event_pages, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->events, events);
  EXPECT_EQ(decoded->counts, captured->counts);

  // What a Restore refuses: an input of another dim, an event twice, counts past page 1.
  ModelConfig wider = config_;
  wider.dim = 3;
  EXPECT_THAT(DecodeEventPages(sections->event_pages, wider).status().message(),
              HasSubstr("the model's dim is 3"));
  const std::vector<absl::string_view> twice = {sections->event_pages[1],
                                                sections->event_pages[1]};
  EXPECT_THAT(DecodeEventPages(twice, config_).status().message(), HasSubstr("twice"));
  const std::vector<absl::string_view> counts_second = {sections->event_pages[1],
                                                        sections->event_pages[0]};
  EXPECT_EQ(DecodeEventPages(counts_second, config_).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_P(EventBookTest, TheFirstLabelWinsAndUnknownIdsChangeNothing) {
  const std::vector<std::string> ids =
      PredictAndRemember(1, 2, {.event_ids = {"click-1", "click-2"}});
  EXPECT_THAT(ids, ElementsAre("click-1", "click-2"));
  // A malformed id refuses the whole request: the good label beside it is not applied.
  for (const std::string& malformed : {std::string(""), std::string("bad id"),
                                       std::string(kMaxEventIdBytes + 1, 'x')}) {
    const absl::StatusOr<EventBook::Labelled> refused =
        book_->Label(*entry_, {{"click-2", 1}, {malformed, 1}}, kT0 + absl::Seconds(1));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << malformed;
    EXPECT_THAT(refused.status().message(), HasSubstr("labels[1]"));
  }
  EXPECT_EQ(entry_->Summary()->stats.steps, 0u);
  EXPECT_EQ(book_->counts().pending, 2u);
  EXPECT_THAT(Label({{"click-1", 1}, {"click-1", -1}, {"nope", 1}}).outcomes,
              ElementsAre(Outcome::kApplied, Outcome::kDuplicate, Outcome::kUnknown));
  // A retried Label: applied once, however often it is sent.
  EXPECT_THAT(Label({{"click-1", 1}, {"click-2", 1}}).outcomes,
              ElementsAre(Outcome::kDuplicate, Outcome::kApplied));
  EXPECT_EQ(entry_->Summary()->stats.steps, 2u);
  const EventCounts counts = book_->counts();
  EXPECT_EQ(counts.pending, 0u);
  EXPECT_EQ(counts.applied, 2u);
  EXPECT_EQ(counts.duplicates, 2u);
  EXPECT_EQ(counts.served_labels, 2u);
}

// The served loss is the loss of the prediction the model served, not of the one it would
// make when the label arrives.
TEST_P(EventBookTest, TheServedLossIsTheLossOfThePredictionServed) {
  const std::vector<std::string> ids = PredictAndRemember(1, 1);
  std::vector<double> served(1);
  ASSERT_TRUE(entry_->PredictBatch(Inputs(1, 1), absl::MakeSpan(served)).ok());
  std::vector<Observation> out;
  // The model learns meanwhile, so its prediction at the label differs from the served one.
  ASSERT_TRUE(entry_->ObserveBatch(Inputs(1, 1), {3.0}, &out).ok());
  EventBook::Labelled labelled = Label({{ids[0], 2.0}});
  ASSERT_EQ(labelled.observations.size(), 1u);
  const double served_loss = 0.5 * (2.0 - served[0]) * (2.0 - served[0]);  // squared loss
  EXPECT_DOUBLE_EQ(book_->counts().served_loss, served_loss);
  EXPECT_NE(labelled.observations[0].loss, served_loss);
}

TEST_P(EventBookTest, AtExpiryADefaultLabelIsAppliedOnceAndAnEventWithoutOneIsDropped) {
  const std::vector<std::string> with_default =
      PredictAndRemember(1, 2, {.wait = absl::Seconds(30), .default_label = -1.0});
  const std::vector<std::string> without = PredictAndRemember(3, 1, {.wait = absl::Seconds(30)});
  const std::vector<std::string> labelled = PredictAndRemember(4, 1, {.wait = absl::Seconds(30)});
  EXPECT_THAT(Label({{labelled[0], 1.0}}).outcomes, ElementsAre(Outcome::kApplied));
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(29), 100), 0u);
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(30), 100), 4u);
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(31), 100), 0u);  // once
  // The label, then the two defaults, as Observe.
  std::shared_ptr<ModelEntry> plain = NewEntry(config_);
  std::vector<Observation> out;
  ASSERT_TRUE(plain->ObserveBatch(Inputs(4, 1), {1.0}, &out).ok());
  ASSERT_TRUE(plain->ObserveBatch(Inputs(1, 2), {-1.0, -1.0}, &out).ok());
  ExpectSameModel(*entry_, *plain);
  // Every id is unknown after its wait, the labelled one included.
  EXPECT_THAT(Label({{with_default[0], 1}, {without[0], 1}, {labelled[0], 1}},
                    kT0 + absl::Seconds(31))
                  .outcomes,
              ElementsAre(Outcome::kUnknown, Outcome::kUnknown, Outcome::kUnknown));
  const EventCounts counts = book_->counts();
  EXPECT_EQ(counts.pending, 0u);
  EXPECT_EQ(counts.expired, 3u);
  EXPECT_EQ(counts.applied, 1u);
  // A round with default labels only: the counts are stored with their write.
  PredictAndRemember(5, 1, {.wait = absl::Seconds(1), .default_label = 0.5},
                     kT0 + absl::Minutes(1));
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Minutes(2), 100), 1u);
  EXPECT_EQ(book_->counts().expired, 4u);
  if (log_ != nullptr) {
    EXPECT_EQ(EventLog(log_).LoadCounts().value_or(EventCounts{}), book_->counts());
  }
}

// The stored bytes follow the events (a label frees the input, the end of the wait the
// rest), are stored with the counts, and count against the tenant's event quota, which
// refuses a whole request past it.
TEST_P(EventBookTest, StoredBytesFollowTheEventsAndTheTenantsQuotaBoundsThem) {
  // Server-made ids are 33 hex digits while the book's counter is under 16, and their
  // records are at their expiry keys; each input 2 doubles.
  RememberedEvent like;
  like.expires = kT0;
  like.id = ServerEventId(like.expires, 0, 0);
  like.values = {0, 0};
  const uint64_t pending = StoredEventBytes(EventState::kPending, like);
  const uint64_t labelled = StoredEventBytes(EventState::kLabelled, like);
  ResourceQuotas quotas({.max_event_bytes_per_tenant = 3 * pending});
  Start(SmallConfig(), {}, &quotas);
  auto stored = [&] {
    if (log_ != nullptr) {
      EXPECT_EQ(EventLog(log_).LoadCounts().value_or(EventCounts{}), book_->counts());
    }
    EXPECT_EQ(quotas.TenantEventBytes("acme"), book_->counts().stored_bytes);
    return book_->counts().stored_bytes;
  };
  const std::vector<std::string> ids = PredictAndRemember(1, 2, {.wait = absl::Seconds(30)});
  EXPECT_EQ(stored(), 2 * pending);
  // Two more would pass the quota: refused whole.
  const std::vector<double> xs = Inputs(3, 2);
  absl::StatusOr<std::vector<std::string>> over =
      book_->Remember(*entry_, InputBatch::Dense(xs, 2), {0.0, 0.0}, {}, kT0);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("--max_event_bytes_per_tenant"));
  EXPECT_EQ(book_->counts().pending, 2u);
  EXPECT_EQ(stored(), 2 * pending);
  // A label frees its event's input; the id stays until the wait ends.
  EXPECT_THAT(Label({{ids[0], 1.0}}).outcomes, ElementsAre(Outcome::kApplied));
  EXPECT_EQ(stored(), pending + labelled);
  PredictAndRemember(5, 1, {.wait = absl::Seconds(60)});
  EXPECT_EQ(stored(), 2 * pending + labelled);
  // A closed book (its model deleted or replaced) returns its bytes; a book opened on the
  // same events counts them again.
  book_->Close();
  EXPECT_EQ(quotas.TenantEventBytes("acme"), 0u);
  book_ = std::make_unique<EventBook>(storage_, config_.loss, limits_,
                                      EventQuotaAccount{.quotas = &quotas, .tenant = "acme"});
  ASSERT_TRUE(book_->Open().ok());
  EXPECT_EQ(stored(), 2 * pending + labelled);
  // The end of the wait frees the rest.
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(30), 100), 2u);
  EXPECT_EQ(stored(), pending);
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(60), 100), 1u);
  EXPECT_EQ(stored(), 0u);
}

// RememberLater: Predicts queued before the writer runs are written by one writer, each
// answered with its own ids or its own refusal; caller ids are written alone.
TEST_P(EventBookTest, RemembersQueuedForLaterAreWrittenByOneWriterAndEachAnswered) {
  Start(SmallConfig(), {.max_pending = 4});
  auto book = std::make_shared<EventBook>(storage_, config_.loss, limits_);
  ASSERT_TRUE(book->Open().ok());
  std::vector<absl::AnyInvocable<void() &&>> scheduled;  // a fake pool: run by hand
  const EventBook::Scheduler schedule = [&](absl::AnyInvocable<void() &&> work) {
    scheduled.push_back(std::move(work));
  };
  std::vector<absl::StatusOr<std::vector<std::string>>> answers(3);
  for (int r = 0; r < 3; ++r) {
    const std::vector<double> xs = Inputs(2 * r, 2);
    absl::StatusOr<EventBook::Checked> checked =
        book->Check(*entry_, InputBatch::Dense(xs, 2), {0.5, 0.25}, {}, kT0);
    ASSERT_TRUE(checked.ok()) << checked.status();
    book->RememberLater(*std::move(checked), schedule,
                        [&answers, r](absl::StatusOr<std::vector<std::string>> ids) {
                          answers[r] = std::move(ids);
                        });
  }
  ASSERT_EQ(scheduled.size(), 1u);  // one writer for the three
  EXPECT_EQ(book->counts().pending, 0u);
  std::move(scheduled[0])();
  // The first two fit under max_pending = 4; the third is refused alone.
  ASSERT_TRUE(answers[0].ok() && answers[1].ok()) << answers[0].status() << answers[1].status();
  EXPECT_EQ(answers[0]->size(), 2u);
  EXPECT_NE((*answers[0])[0], (*answers[1])[0]);
  EXPECT_EQ(answers[2].status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(book->counts().pending, 4u);
  // Their events are the inputs remembered, labelled as any.
  absl::StatusOr<EventBook::Labelled> labelled =
      book->Label(*entry_, {{(*answers[1])[1], 1.0}}, kT0 + absl::Seconds(1));
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_THAT(labelled->outcomes, ElementsAre(Outcome::kApplied));
  std::shared_ptr<ModelEntry> plain = NewEntry(config_);
  std::vector<Observation> out;
  ASSERT_TRUE(plain->ObserveBatch(Inputs(3, 1), {1.0}, &out).ok());
  ExpectSameModel(*entry_, *plain);

  // A new writer for what queues after one ran; caller ids get a write of their own, and
  // a known one is refused.
  ASSERT_TRUE(book->Label(*entry_, {{(*answers[0])[0], 1.0}, {(*answers[0])[1], 1.0}},
                          kT0 + absl::Seconds(1))
                  .ok());
  for (const char* id : {"mine", "mine"}) {
    const std::vector<double> xs = Inputs(9, 1);
    absl::StatusOr<EventBook::Checked> checked =
        book->Check(*entry_, InputBatch::Dense(xs, 2), {0.5}, {.event_ids = {id}}, kT0);
    ASSERT_TRUE(checked.ok()) << checked.status();
    book->RememberLater(*std::move(checked), schedule,
                        [&answers](absl::StatusOr<std::vector<std::string>> ids) {
                          answers.push_back(std::move(ids));
                        });
  }
  ASSERT_EQ(scheduled.size(), 3u);
  std::move(scheduled[1])();
  std::move(scheduled[2])();
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_THAT(answers[3].value_or(std::vector<std::string>{}), ElementsAre("mine"));
  EXPECT_EQ(answers[4].status().code(), absl::StatusCode::kAlreadyExists);
  // A book not held by a shared_ptr writes at once, on the caller's thread.
  const std::vector<double> xs = Inputs(11, 1);
  bool answered = false;
  book_->RememberLater(
      *book_->Check(*entry_, InputBatch::Dense(xs, 2), {0.5}, {}, kT0), schedule,
      [&](absl::StatusOr<std::vector<std::string>> ids) { answered = ids.ok(); });
  EXPECT_TRUE(answered);
  EXPECT_EQ(scheduled.size(), 3u);
}

// The model deleted or replaced between a Predict's handler and its write: the book is
// closed, and the queued Predict is answered NotFound (which the service sends as a
// retryable UNAVAILABLE) with nothing remembered.
TEST_P(EventBookTest, APredictQueuedWhenItsBookClosesIsRefusedAndRemembersNothing) {
  Start(SmallConfig());
  auto book = std::make_shared<EventBook>(storage_, config_.loss, limits_);
  ASSERT_TRUE(book->Open().ok());
  std::vector<absl::AnyInvocable<void() &&>> scheduled;  // a fake pool: run by hand
  const EventBook::Scheduler schedule = [&](absl::AnyInvocable<void() &&> work) {
    scheduled.push_back(std::move(work));
  };
  const std::vector<double> xs = Inputs(0, 1);
  absl::StatusOr<EventBook::Checked> checked =
      book->Check(*entry_, InputBatch::Dense(xs, 2), {0.5}, {}, kT0);
  ASSERT_TRUE(checked.ok()) << checked.status();
  std::optional<absl::StatusOr<std::vector<std::string>>> answer;
  book->RememberLater(
      *std::move(checked), schedule,
      [&answer](absl::StatusOr<std::vector<std::string>> ids) { answer = std::move(ids); });
  ASSERT_EQ(scheduled.size(), 1u);
  book->Close();
  std::move(scheduled[0])();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(book->counts().pending, 0u);
  absl::StatusOr<std::vector<StoredEvent>> stored =
      storage_->DueEvents(absl::InfiniteFuture(), 10);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());  // nothing stored
}

// Busy tells a queue's thread not to wait for the book: true while a Label, an expiry, a
// capture or a Remember holds the lock, and not for the expiry sweep's look before any
// wait ends.
TEST_P(EventBookTest, BusyWhileWhatMayHoldTheBookLongHoldsIt) {
  Start(SmallConfig());
  EXPECT_FALSE(book_->Busy());
  bool busy_inside = false;
  ASSERT_TRUE(book_
                  ->Capture([&] {
                    busy_inside = book_->Busy();
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_TRUE(busy_inside);
  EXPECT_FALSE(book_->Busy());
  // Seen from another thread too, while a capture holds the book.
  PlainMutex mu;
  CondVar changed;
  bool inside = false;
  bool release = false;
  std::thread capture([&] {
    ASSERT_TRUE(book_
                    ->Capture([&] {
                      PlainLock lock(&mu);
                      inside = true;
                      changed.SignalAll();
                      while (!release) changed.Wait(&mu);
                      return absl::OkStatus();
                    })
                    .ok());
  });
  {
    PlainLock lock(&mu);
    while (!inside) changed.Wait(&mu);
  }
  EXPECT_TRUE(book_->Busy());
  {
    PlainLock lock(&mu);
    release = true;
    changed.SignalAll();
  }
  capture.join();
  EXPECT_FALSE(book_->Busy());
  EXPECT_EQ(PredictAndRemember(0, 1, {.wait = absl::Seconds(30)}).size(), 1u);
  EXPECT_FALSE(book_->Busy());
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(1), 100), 0u);  // nothing due
  EXPECT_FALSE(book_->Busy());
}

// A counts record of the first version holds no stored bytes: the events it counts
// give back nothing when they end, rather than bytes the tenant's other models hold.
TEST_P(EventBookTest, EventsOfCountsWithoutStoredBytesGiveBackNoneOfOtherModels) {
  ResourceQuotas quotas({});
  Start(SmallConfig(), {}, &quotas);
  const std::vector<std::string> ids = PredictAndRemember(1, 2, {.wait = absl::Seconds(30)});
  EventCounts older = book_->counts();
  older.stored_bytes = 0;
  ASSERT_TRUE(storage_->ForgetEvents({}, older).ok());  // as a first-version record reads
  book_->Close();
  quotas.AddEventBytes("acme", 1000);  // another model's events
  book_ = std::make_unique<EventBook>(storage_, config_.loss, limits_,
                                      EventQuotaAccount{.quotas = &quotas, .tenant = "acme"});
  ASSERT_TRUE(book_->Open().ok());
  EXPECT_THAT(Label({{ids[0], 1.0}}).outcomes, ElementsAre(Outcome::kApplied));
  EXPECT_EQ(*book_->Expire(*entry_, kT0 + absl::Seconds(30), 100), 2u);
  EXPECT_EQ(book_->counts().stored_bytes, 0u);
  EXPECT_EQ(quotas.TenantEventBytes("acme"), 1000u);
}

TEST_P(EventBookTest, ALabelAfterTheWaitIsUnknownEvenBeforeTheSweep) {
  const std::vector<std::string> ids = PredictAndRemember(1, 1, {.wait = absl::Seconds(5)});
  EXPECT_THAT(Label({{ids[0], 1}}, kT0 + absl::Seconds(5)).outcomes,
              ElementsAre(Outcome::kUnknown));
  EXPECT_EQ(entry_->Summary()->stats.steps, 0u);
}

TEST_P(EventBookTest, BadRequestsAreRefusedWholeAndRememberNothing) {
  Start(SmallConfig(), {.max_wait = absl::Hours(1), .max_pending = 4});
  const std::vector<double> xs = Inputs(1, 2);
  const std::vector<double> predictions = {0, 0};
  auto remember = [&](EventBook::RememberOptions options) {
    return book_->Remember(*entry_, InputBatch::Dense(xs, 2), predictions, options, kT0)
        .status();
  };
  EXPECT_THAT(remember({.event_ids = {"a"}}).message(), HasSubstr("one per input"));
  EXPECT_EQ(remember({.event_ids = {"a", "b/c"}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(remember({.wait = absl::Hours(2)}).message(), HasSubstr("--max_label_wait"));
  EXPECT_EQ(remember({.wait = -absl::Seconds(1)}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(remember({.default_label = NAN}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(remember({.event_ids = {"a", "b"}}).ok());
  EXPECT_EQ(remember({.event_ids = {"c", "a"}}).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(remember({.event_ids = {"c", "d"}}).ok());
  const absl::Status full = remember({.event_ids = {"e", "f"}});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("--max_pending_events"));
  // A label that is not finite refuses the whole request.
  absl::StatusOr<EventBook::Labelled> bad =
      book_->Label(*entry_, {{"a", 1.0}, {"b", INFINITY}}, kT0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(book_->counts().pending, 4u);
  EXPECT_EQ(entry_->Summary()->stats.steps, 0u);
  EXPECT_THAT(Label({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}}).outcomes,
              ElementsAre(Outcome::kApplied, Outcome::kApplied, Outcome::kApplied,
                          Outcome::kApplied, Outcome::kUnknown));
}

// A classifier's default label must be one its loss accepts, checked when remembered.
TEST_P(EventBookTest, ADefaultLabelTheLossRefusesIsRefusedWhenRemembered) {
  ModelConfig config = SmallConfig();
  config.loss = {.type = LossType::kHinge};
  Start(config);
  const std::vector<double> xs = Inputs(1, 1);
  absl::StatusOr<std::vector<std::string>> ids = book_->Remember(
      *entry_, InputBatch::Dense(xs, 2), {0.0}, {.default_label = 0.5}, kT0);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("default_label"));
  // And a label the loss refuses refuses its request.
  const std::vector<std::string> kept = PredictAndRemember(1, 1, {.default_label = -1.0});
  EXPECT_EQ(book_->Label(*entry_, {{kept[0], 0.5}}, kT0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(book_->counts().pending, 1u);
}

TEST_P(EventBookTest, ServerMadeIdsAreDistinctAcrossRequests) {
  std::vector<std::string> ids = PredictAndRemember(1, 3);
  const std::vector<std::string> more = PredictAndRemember(1, 3);
  ids.insert(ids.end(), more.begin(), more.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());
  for (const std::string& id : ids) EXPECT_TRUE(ValidateEventId(id).ok()) << id;
}

// Remembering Predicts from many threads at once are group-committed: every event is
// stored once under its own id, the counts are the sum, and --max_pending_events holds
// across the groups (each request is remembered whole or refused whole).
TEST_P(EventBookTest, ConcurrentRemembersAreEachStoredOnceAndTheCapHolds) {
  constexpr int kThreads = 8;
  constexpr int kRequests = 40;  // per thread, of 3 inputs each
  constexpr uint64_t kCap = 600;  // of the 960 events asked for
  Start(SmallConfig(), {.max_pending = kCap});
  // Half the threads remember as an inline Predict does (RememberLater, written by a
  // pool's writer), half as an offloaded one (Remember, which may write the others').
  auto book = std::make_shared<EventBook>(storage_, config_.loss, limits_);
  ASSERT_TRUE(book->Open().ok());
  WorkPool pool(2, "okl-test");
  const EventBook::Scheduler schedule = [&pool](absl::AnyInvocable<void() &&> work) {
    pool.Schedule(std::move(work));
  };
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<int> refused(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<double> xs = Inputs(t, 3);
      const std::vector<double> predictions = {0.5, 0.25, 0.125};
      for (int r = 0; r < kRequests; ++r) {
        absl::StatusOr<std::vector<std::string>> made;
        if (t % 2 == 0) {
          made = book->Remember(*entry_, InputBatch::Dense(xs, 2), predictions, {}, kT0);
        } else {
          // Waited for with pthread primitives, which TSan sees (core/runtime/mutex.h).
          PlainMutex mu;
          CondVar answered;
          bool done = false;
          book->RememberLater(
              *book->Check(*entry_, InputBatch::Dense(xs, 2), predictions, {}, kT0), schedule,
              [&](absl::StatusOr<std::vector<std::string>> later) {
                PlainLock lock(&mu);
                made = std::move(later);
                done = true;
                answered.Signal();
              });
          PlainLock lock(&mu);
          while (!done) answered.Wait(&mu);
        }
        if (made.ok()) {
          EXPECT_EQ(made->size(), 3u);
          ids[t].insert(ids[t].end(), made->begin(), made->end());
        } else {
          EXPECT_EQ(made.status().code(), absl::StatusCode::kResourceExhausted)
              << made.status();
          ++refused[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<std::string> all;
  int refusals = 0;
  for (int t = 0; t < kThreads; ++t) {
    all.insert(all.end(), ids[t].begin(), ids[t].end());
    refusals += refused[t];
  }
  EXPECT_EQ(all.size(), kCap);  // 200 requests fit exactly; the other 120 were refused
  EXPECT_EQ(refusals, kThreads * kRequests - static_cast<int>(kCap / 3));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(book->counts().pending, kCap);
  for (const std::string& id : all) {
    absl::StatusOr<std::optional<StoredEvent>> stored = storage_->FindEvent(id);
    ASSERT_TRUE(stored.ok() && stored->has_value()) << id;
  }
  absl::StatusOr<EventCounts> stored_counts = storage_->LoadCounts();
  ASSERT_TRUE(stored_counts.ok());
  EXPECT_EQ(*stored_counts, book->counts());
}

INSTANTIATE_TEST_SUITE_P(Storage, EventBookTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Store" : "Memory";
                         });

// In the store, the events and their counts outlive the process: a reopened book finds
// them, and a label's record replays.
TEST(EventBookStoreTest, EventsAndCountsSurviveAReopen) {
  const std::filesystem::path dir = ScratchDirForTest("okl_event_book_store_test");
  std::vector<std::string> ids;
  {
    auto store = *ModelStore::Open(dir.string(), {});
    std::shared_ptr<ModelLog> log = *store->CreateModel("acme", "ads", SmallConfig());
    auto entry = NewEntry(SmallConfig(), log);
    EventBook book(std::make_shared<EventLog>(log), SmallConfig().loss, {});
    ASSERT_TRUE(book.Open().ok());
    const std::vector<double> xs = Inputs(1, 3);
    ids = *book.Remember(*entry, InputBatch::Dense(xs, 2), {0.1, 0.2, 0.3}, {}, kT0);
    ASSERT_TRUE(book.Label(*entry, {{ids[1], 1.0}}, kT0).ok());
  }
  auto store = *ModelStore::Open(dir.string(), {});
  std::vector<StoredModel> models;
  ASSERT_TRUE(store
                  ->LoadModels(
                      [&](StoredModel model) {
                        models.push_back(std::move(model));
                        return absl::OkStatus();
                      },
                      [](absl::string_view, absl::string_view, absl::string_view what) {
                        return absl::DataLossError(what);
                      })
                  .ok());
  ASSERT_EQ(models.size(), 1u);
  ASSERT_EQ(models[0].log.size(), 1u);  // the label's record, to replay
  EXPECT_EQ(models[0].log[0].xs, Inputs(2, 1));
  std::shared_ptr<ModelLog> log = store->OpenLog(models[0]);
  EventBook book(std::make_shared<EventLog>(log), SmallConfig().loss, {});
  ASSERT_TRUE(book.Open().ok());
  EXPECT_EQ(book.counts().pending, 2u);
  EXPECT_EQ(book.counts().applied, 1u);
  auto entry = NewEntry(SmallConfig(), log);
  EXPECT_THAT(book.Label(*entry, {{ids[1], 1.0}, {ids[2], 1.0}}, kT0)->outcomes,
              ElementsAre(Outcome::kDuplicate, Outcome::kApplied));
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okl
