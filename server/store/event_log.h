// server/store/event_log.h
//
// EventLog is one model's remembered events in the model store (the keys of
// server/events/model_events.h, under the incarnation of the model's log): the EventStorage of
// the model's EventBook when the server has a store. Each change, with the counts, is one
// atomic write, made only while the model's log is open, so a Delete or Restore, which
// closes the log, leaves no key behind under the incarnation it removed. A batch of
// labels changes its events through the log instead, in the batch's own write
// (ModelLog::Append with an EventNote); NoteApplied therefore does nothing.
//
// Thread-safe. Its lock is taken before the log's, never the other way around.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::shared_ptr<okl::ModelLog> log,
//                        store->CreateModel("acme", "ads", config));
//   auto events = std::make_shared<okl::EventLog>(log);
//   okl::EventBook book(events, config.loss, limits);
#ifndef OKL_SERVER_STORE_EVENT_LOG_H_
#define OKL_SERVER_STORE_EVENT_LOG_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/runtime/mutex.h"
#include "server/events/event_book.h"
#include "server/events/model_events.h"
#include "server/store/model_store.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace okl {

class EventLog final : public EventStorage {
 public:
  // The events of `log`'s model (not null); the log's store must outlive this.
  explicit EventLog(std::shared_ptr<ModelLog> log);

  absl::Status Remember(absl::Span<const RememberedEvent> events, const EventCounts& counts,
                        KnownIds known = KnownIds::kLookUp) override
      ABSL_LOCKS_EXCLUDED(remember_mu_);
  absl::StatusOr<std::optional<StoredEvent>> FindEvent(absl::string_view id) const override;
  absl::StatusOr<std::vector<StoredEvent>> DueEvents(absl::Time now, size_t max) const override;
  absl::Status ForgetEvents(absl::Span<const StoredEvent> events,
                            const EventCounts& counts) override;
  absl::StatusOr<EventCounts> LoadCounts() const override;
  absl::StatusOr<std::optional<absl::Time>> NextExpiry() const override;
  void NoteApplied(const EventNote&) override {}  // written with the batch's record
  // Over a RocksDB snapshot of the store.
  absl::StatusOr<std::unique_ptr<EventCursor>> CaptureEvents() const override;

 private:
  rocksdb::DB* db() const;
  // The value at `key`, a key of event `id`; nullopt if none.
  absl::StatusOr<std::optional<std::string>> ReadEventKey(absl::string_view id,
                                                          const std::string& key) const;

  const std::shared_ptr<ModelLog> log_;
  const uint64_t incarnation_;  // log_'s
  // Orders Remember's check that its ids are new before its write.
  Mutex remember_mu_;
};

}  // namespace okl

#endif  // OKL_SERVER_STORE_EVENT_LOG_H_
