// server/base/work_pool.h
//
// WorkPool runs closures on a fixed set of threads of its own, first queued first run.
// The service hands it the calls too large to run on the completion queues' threads (a
// Predict over many inputs or a large model): those threads also drive the transport, so
// work that holds one for long would stall every other call it carries.
//
// Thread-safe.
//
// Example:
//   okl::WorkPool pool(2);
//   pool.Schedule([call] { call->Reply(grpc::Status::OK); });
#ifndef OKL_SERVER_BASE_WORK_POOL_H_
#define OKL_SERVER_BASE_WORK_POOL_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "core/runtime/mutex.h"
#include "core/runtime/usable_cpus.h"  // UsableCpus, for the pool's size

namespace okl {

class WorkPool {
 public:
  // `threads` < 1 is taken as 1. Its threads are named `name`-0, `name`-1, ...
  explicit WorkPool(int threads, absl::string_view name = "okl-work");
  // Runs everything queued, then joins the threads.
  ~WorkPool();

  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `work` to run on one of the pool's threads.
  void Schedule(absl::AnyInvocable<void() &&> work) ABSL_LOCKS_EXCLUDED(mu_);

  // Closures queued and not yet started.
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable PlainMutex mu_;
  CondVar work_or_stop_;  // signalled when work is queued or the pool stops
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace okl

#endif  // OKL_SERVER_BASE_WORK_POOL_H_
