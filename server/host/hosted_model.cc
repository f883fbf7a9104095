// server/host/hosted_model.cc

#include "server/host/hosted_model.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "core/status_macros.h"

namespace okl {

HostedModel::HostedModel(std::shared_ptr<ModelEntry> entry, std::shared_ptr<ModelLog> log,
                         EventSettings events)
    : entry_(std::move(entry)),
      log_(std::move(log)),
      event_log_(log_ != nullptr ? std::make_shared<EventLog>(log_) : nullptr),
      events_(std::move(events)) {}

absl::StatusOr<std::shared_ptr<EventBook>> HostedModel::Book(
    std::shared_ptr<MemoryEvents> memory_events) {
  {
    PlainLock lock(&mu_);
    if (closed_) return absl::NotFoundError("the model was deleted or replaced");
    if (book_ != nullptr) return book_;
  }
  std::shared_ptr<EventStorage> storage = event_log_;
  if (storage == nullptr) {
    storage = memory_events != nullptr ? std::move(memory_events)
                                       : std::make_shared<MemoryEvents>();
  }
  auto book = std::make_shared<EventBook>(
      std::move(storage), entry_->config().loss, events_.limits,
      EventQuotaAccount{.quotas = events_.quotas, .tenant = entry_->tenant()});
  OKL_RETURN_IF_ERROR(book->Open());  // the stored counts: a read, outside mu_
  std::shared_ptr<EventBook> kept;
  {
    PlainLock lock(&mu_);
    // Another caller may have made one meanwhile: the first one stays. A model closed
    // meanwhile keeps none.
    if (book_ == nullptr && !closed_) book_ = book;
    kept = closed_ ? nullptr : book_;
  }
  if (kept != book) book->Close();  // so that its events are counted once
  if (kept == nullptr) return absl::NotFoundError("the model was deleted or replaced");
  return kept;
}

std::shared_ptr<EventBook> HostedModel::existing_book() const {
  PlainLock lock(&mu_);
  return book_;
}

EventCounts HostedModel::event_counts() const {
  std::shared_ptr<EventBook> book = existing_book();
  return book == nullptr ? EventCounts{} : book->counts();
}

void HostedModel::Close() {
  std::shared_ptr<EventBook> book;
  {
    PlainLock lock(&mu_);
    closed_ = true;
    book = book_;
  }
  entry_->MarkDeleted();
  if (book != nullptr) book->Close();  // outside mu_: it may wait for a Label
}

}  // namespace okl
