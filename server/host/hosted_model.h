// server/host/hosted_model.h
//
// HostedModel is one model as this server hosts it: its entry (core's model under its
// locks, core/runtime/model_registry.h), its log and its stored events in the store (none
// for a server without one), and its event book, made on first use. ModelHost keeps one per (tenant, model)
// and finds it with one lookup; a handler that has it needs nothing else to observe,
// predict, remember or label.
//
// Lifetime. A HostedModel is made when its model is created, restored at start-up, or
// installed by a Restore, and is never reused for another model:
//   - A Restore installs a new HostedModel (a new entry and log; its book over the
//     snapshot's events) and closes the old one. Calls already holding the old one's
//     entry lock finish on it; later ones get NotFound from it and ModelHost::WithModel
//     runs them again on the new one.
//   - A Delete closes it and installs nothing.
//   - Closing marks the entry deleted and closes the book, which gives its events' bytes
//     back to the tenant's quota; the log was closed by the store's write that replaced
//     or deleted the model. The object lives on while a call still holds it.
//
// Thread-safe.
//
// Example:
//   std::shared_ptr<okl::HostedModel> model = ...;  // ModelHost::Find
//   OKL_ASSIGN_OR_RETURN(std::shared_ptr<okl::EventBook> book, model->Book());
//   OKL_ASSIGN_OR_RETURN(auto labelled, book->Label(model->entry(), labels, absl::Now()));
#ifndef OKL_SERVER_HOST_HOSTED_MODEL_H_
#define OKL_SERVER_HOST_HOSTED_MODEL_H_

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/mutex.h"
#include "server/events/event_book.h"
#include "server/store/event_log.h"
#include "server/store/model_store.h"
#include "server/base/quotas.h"

namespace okl {

class HostedModel {
 public:
  // What a model's event book is made with: the server's limits, and the quotas its
  // events' stored bytes count against (may be null: nowhere).
  struct EventSettings {
    EventBook::Limits limits;
    ResourceQuotas* quotas = nullptr;
  };

  // `entry` must not be null; `log` is null for a model kept in memory only, and must be
  // `entry`'s journal otherwise.
  HostedModel(std::shared_ptr<ModelEntry> entry, std::shared_ptr<ModelLog> log,
              EventSettings events);

  HostedModel(const HostedModel&) = delete;
  HostedModel& operator=(const HostedModel&) = delete;

  ModelEntry& entry() const { return *entry_; }
  const std::shared_ptr<ModelEntry>& shared_entry() const { return entry_; }
  // The model's log in the store; null without one.
  ModelLog* log() const { return log_.get(); }
  // The model's remembered events in the store (its book's storage); null without one.
  EventLog* event_log() const { return event_log_.get(); }

  // The model's event book, made on first use: over its log, or in memory for a model
  // without one (`memory_events`, if given, are what that book starts with: a
  // snapshot's). NotFound once the model is closed (deleted or replaced), so that
  // ModelHost::WithModel runs the call again on the model now there.
  absl::StatusOr<std::shared_ptr<EventBook>> Book(
      std::shared_ptr<MemoryEvents> memory_events = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // The book if one was made (a model that never remembered an event has none).
  std::shared_ptr<EventBook> existing_book() const ABSL_LOCKS_EXCLUDED(mu_);
  // Its book's counts; zeros without a book.
  EventCounts event_counts() const ABSL_LOCKS_EXCLUDED(mu_);

  // The model was deleted or replaced: marks the entry deleted and closes the book. Once
  // only, by ModelHost; later Book() calls are NotFound.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::shared_ptr<ModelEntry> entry_;
  const std::shared_ptr<ModelLog> log_;
  const std::shared_ptr<EventLog> event_log_;  // over log_; null without it
  const EventSettings events_;
  mutable PlainMutex mu_;
  std::shared_ptr<EventBook> book_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace okl

#endif  // OKL_SERVER_HOST_HOSTED_MODEL_H_
