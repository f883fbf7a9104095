// server/base/work_pool.cc

#include "server/base/work_pool.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/thread_name.h"

namespace okl {

WorkPool::WorkPool(int threads, absl::string_view name) {
  if (threads < 1) threads = 1;
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this, i, prefix = std::string(name)] {
      NameThisThread(absl::StrCat(prefix, "-", i));
      WorkerLoop();
    });
  }
}

WorkPool::~WorkPool() {
  {
    PlainLock lock(&mu_);
    stopping_ = true;
  }
  work_or_stop_.SignalAll();
  for (std::thread& worker : workers_) worker.join();
}

void WorkPool::Schedule(absl::AnyInvocable<void() &&> work) {
  {
    PlainLock lock(&mu_);
    queue_.push_back(std::move(work));
  }
  work_or_stop_.Signal();
}

size_t WorkPool::queued() const {
  PlainLock lock(&mu_);
  return queue_.size();
}

void WorkPool::WorkerLoop() {
  while (true) {
    absl::AnyInvocable<void() &&> work;
    {
      PlainLock lock(&mu_);
      while (queue_.empty() && !stopping_) work_or_stop_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(work)();
  }
}

}  // namespace okl
