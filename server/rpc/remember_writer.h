// server/rpc/remember_writer.h
//
// RememberWriter writes what remembering Predicts ask to keep (PredictRequest.remember)
// into their models' event books, and owns all of that write: where it runs, the tenant's
// write ticket it holds, and the reply it ends with. A Predict's events are checked and
// copied first (Check), while the handler still runs; the write itself comes after the
// Predict's handler has returned (Write), and its end calls the caller's `done`.
//
// Where the write runs: the book's group commit writes every Predict queued until its
// writer runs in one storage write (server/events/event_book.h). On a completion queue's thread
// (a Predict answered inline) the writer waits until the queue has nothing ready
// (CompletionQueueThreads::RunWhenIdle): by then every Predict the queues read meanwhile
// is queued in the book, and one write and their answers cost no hand-off to another
// thread. But a Label or an expiry may hold the book long, and that thread serves every
// tenant's calls: then the writer runs on a pool of its own. Off a queue's thread (an
// offloaded Predict) it runs at once, on the calling thread.
//
// Thread-safe.
#ifndef OKL_SERVER_RPC_REMEMBER_WRITER_H_
#define OKL_SERVER_RPC_REMEMBER_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/input_batch.h"
#include "core/runtime/model_registry.h"
#include "server/events/event_book.h"
#include "server/host/hosted_model.h"
#include "server/host/model_host.h"
#include "server/base/work_pool.h"

namespace okl {

class RememberWriter {
 public:
  // `host` must outlive the writer. `threads`: the pool where a writer waits for a book
  // that a Label or an expiry holds. A pool of its own: the write holds its tenant's
  // write ticket, and a FenceTenant waiting for the ticket on the service's offload pool
  // must never be what keeps it from running.
  RememberWriter(ModelHost* host, int threads);

  // One Predict's events, checked and copied, until Write.
  class Pending {
   private:
    friend class RememberWriter;
    std::string tenant_;
    std::shared_ptr<EventBook> book_;
    EventBook::Checked checked_;
  };
  // Checks what `model` is asked to remember of `inputs` (with the predictions answered,
  // one per input) and copies it: EventBook::Check's errors, with nothing remembered.
  absl::StatusOr<Pending> Check(HostedModel& model, const InputBatch& inputs,
                                absl::Span<const double> predictions,
                                const EventBook::RememberOptions& options);

  // Writes `pending` under a write ticket of its tenant, and calls `done` with its event
  // ids (one per input), from the thread that wrote them. Unavailable, with nothing
  // written, while the tenant is fenced, or if its model was deleted or replaced before
  // the write (the client may send the Predict again, to the model now there).
  using Done = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>) &&>;
  void Write(Pending pending, Done done);

 private:
  ModelHost* const host_;
  // Declared last: destroyed first, running what is queued while the rest still lives.
  WorkPool pool_;
};

}  // namespace okl

#endif  // OKL_SERVER_RPC_REMEMBER_WRITER_H_
