#include "server/rpc/remember_writer.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/rpc/async_rpc.h"

namespace okl {

RememberWriter::RememberWriter(ModelHost* host, int threads)
    : host_(host), pool_(threads, "okl-remember") {}

absl::StatusOr<RememberWriter::Pending> RememberWriter::Check(
    HostedModel& model, const InputBatch& inputs, absl::Span<const double> predictions,
    const EventBook::RememberOptions& options) {
  Pending pending;
  pending.tenant_ = model.entry().tenant();
  OKL_ASSIGN_OR_RETURN(pending.book_, model.Book());
  OKL_ASSIGN_OR_RETURN(pending.checked_, pending.book_->Check(model.entry(), inputs, predictions,
                                                              options, absl::Now()));
  return pending;
}

void RememberWriter::Write(Pending pending, Done done) {
  // Held until `done` has run, so that a fence waits for the write.
  auto ticket = std::make_shared<ModelHost::WriteTicket>(host_, pending.tenant_);
  if (!ticket->status().ok()) return std::move(done)(ticket->status());
  std::shared_ptr<EventBook> book = pending.book_;
  book->RememberLater(
      std::move(pending.checked_),
      [this, book](absl::AnyInvocable<void() &&> work) {
        absl::AnyInvocable<void() &&> write = [this, book, work = std::move(work)]() mutable {
          if (book->Busy()) return pool_.Schedule(std::move(work));
          std::move(work)();
        };
        if (!CompletionQueueThreads::RunWhenIdle(write)) std::move(write)();
      },
      [ticket = std::move(ticket),
       done = std::move(done)](absl::StatusOr<std::vector<std::string>> ids) mutable {
        if (absl::IsNotFound(ids.status())) {
          // Deleted or replaced before the write: nothing was remembered.
          ids = absl::UnavailableError(absl::StrCat(
              ids.status().message(),
              " while its events were written; nothing was remembered: retry"));
        }
        std::move(done)(std::move(ids));
      });
}

}  // namespace okl
