#include "core/runtime/regret_scheduler.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/model_registry.h"
#include "core/runtime/thread_name.h"

namespace okl {

RegretScheduler::RegretScheduler(Options options) : options_(options) {
  const int threads = options_.threads < 1 ? 1 : options_.threads;
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this, i] {
      NameThisThread(absl::StrCat("okl-regret-", i));
      WorkerLoop();
    });
  }
}

RegretScheduler::~RegretScheduler() {
  {
    PlainLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    queued_.clear();
  }
  work_or_stop_.SignalAll();
  idle_.SignalAll();
  for (std::thread& worker : workers_) worker.join();
}

void RegretScheduler::Schedule(std::shared_ptr<ModelEntry> entry) {
  {
    PlainLock lock(&mu_);
    if (stopping_ || !queued_.insert(entry.get()).second) return;
    queue_.push_back(std::move(entry));
  }
  work_or_stop_.Signal();
}

void RegretScheduler::WaitIdle() {
  PlainLock lock(&mu_);
  while (!stopping_ && (!queue_.empty() || running_ > 0)) idle_.Wait(&mu_);
}

RegretScheduler::Stats RegretScheduler::stats() const {
  PlainLock lock(&mu_);
  Stats stats = stats_;
  stats.queued = queue_.size();
  return stats;
}

void RegretScheduler::WorkerLoop() {
  // Below the request threads: SCHED_IDLE runs a comparator solve only on CPU time that
  // Observe and Predict leave unused (nice 10 would still take ~10% of a busy core).
  // Best effort: an unprivileged thread may always lower its own priority; if the
  // kernel refuses SCHED_IDLE, the nice value is the fallback.
  sched_param param{};
  param.sched_priority = 0;
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) != 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.niceness);
  }
  while (true) {
    std::shared_ptr<ModelEntry> entry;
    {
      PlainLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_or_stop_.Wait(&mu_);
      if (stopping_) return;
      entry = std::move(queue_.front());
      queue_.pop_front();
      // Unmarked before the computation starts, so that a batch arriving meanwhile
      // queues the model again rather than being lost.
      queued_.erase(entry.get());
      ++running_;
    }
    const auto start = std::chrono::steady_clock::now();
    const bool ok = entry->ComputeRegret().ok();
    const std::chrono::duration<double> busy = std::chrono::steady_clock::now() - start;
    entry.reset();  // a deleted model's memory goes now, not at the next job
    PlainLock lock(&mu_);
    --running_;
    ++stats_.computations;
    if (!ok) ++stats_.failures;
    stats_.busy_seconds += busy.count();
    if (queue_.empty() && running_ == 0) idle_.SignalAll();
  }
}

}  // namespace okl
