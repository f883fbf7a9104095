// core/runtime/regret_scheduler.h
//
// RegretScheduler recomputes models' windowed regret (core/regret.h) off the request
// path, on a small fixed pool of background threads at idle CPU priority (SCHED_IDLE: they
// run on CPU time the request threads leave unused). A model
// asks for a computation after its first batch and then once every `every_steps` examples
// (ModelEntry::ObserveBatch decides); a model already queued is not queued twice, so the
// queue never holds more than one job per model. A worker copies the model's window under
// the model's reader lock (a memcpy of W (dim + 2) doubles), releases it, and solves the
// comparator without any lock; Observe and Predict of every model go on meanwhile.
// The reported regret therefore lags: its staleness is steps - RegretResult::last_step.
//
// Thread-safe.
//
// Example:
//   okl::RegretScheduler scheduler({.threads = 1, .every_steps = 1000});
//   okl::ModelRegistry registry({.max_models = 100, .regret_scheduler = &scheduler});
//   // ... models with regret_window > 0 now report stats().regret ...
#ifndef OKL_CORE_RUNTIME_REGRET_SCHEDULER_H_
#define OKL_CORE_RUNTIME_REGRET_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "core/runtime/mutex.h"

namespace okl {

class ModelEntry;

class RegretScheduler {
 public:
  struct Options {
    int threads = 1;              // background workers; >= 1
    uint64_t every_steps = 1000;  // a model is recomputed after this many more examples
    int niceness = 10;            // the workers' nice value if the kernel refuses SCHED_IDLE
  };

  struct Stats {
    uint64_t computations = 0;  // finished, successful or not
    uint64_t failures = 0;      // computations that returned an error (a deleted model)
    double busy_seconds = 0.0;  // wall time the workers spent computing
    size_t queued = 0;          // models waiting now
  };

  explicit RegretScheduler(Options options);
  // Stops the workers after their current computation; queued work is dropped.
  ~RegretScheduler();

  RegretScheduler(const RegretScheduler&) = delete;
  RegretScheduler& operator=(const RegretScheduler&) = delete;

  // Queues a computation for `entry` unless one is queued already.
  void Schedule(std::shared_ptr<ModelEntry> entry) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until nothing is queued or running, or the scheduler stops (tests).
  void WaitIdle() ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t every_steps() const { return options_.every_steps; }

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable PlainMutex mu_;
  CondVar work_or_stop_;  // signalled when a job is queued or the scheduler stops
  CondVar idle_;          // signalled when the queue empties and no job runs
  std::deque<std::shared_ptr<ModelEntry>> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<const ModelEntry*> queued_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_REGRET_SCHEDULER_H_
