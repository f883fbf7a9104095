// tests/server/work_pool_test.cc: WorkPool runs every closure once, on its own threads,
// in parallel, and its destructor runs what is still queued.

#include "server/base/work_pool.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/runtime/mutex.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

// A thread confined to one CPU (as taskset or a cpuset would) sees one usable CPU, however
// many the machine has.
TEST(UsableCpusTest, FollowsTheThreadsAffinityNotTheMachine) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(UsableCpus(), CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(UsableCpus(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
}

TEST(WorkPoolTest, RunsEveryClosureOnceOffTheCallersThread) {
  constexpr int kClosures = 1000;
  std::atomic<int> runs[kClosures] = {};
  std::atomic<int> on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  {
    WorkPool pool(3);
    for (int i = 0; i < kClosures; ++i) {
      pool.Schedule([&, i] {
        runs[i].fetch_add(1);
        if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
      });
    }
  }  // the destructor runs what is queued
  for (int i = 0; i < kClosures; ++i) EXPECT_EQ(runs[i].load(), 1) << "closure " << i;
  EXPECT_EQ(on_caller.load(), 0);
}

// Each thread carries the pool's name and its index (top -H, perf and gdb show it); a
// name past Linux's 15 bytes is cut, not refused.
TEST(WorkPoolTest, NamesItsThreads) {
  constexpr int kThreads = 2;
  std::set<std::string> names;
  PlainMutex mu;
  absl::Notification all_named;
  {
    WorkPool pool(kThreads, "test-pool");
    for (int i = 0; i < kThreads; ++i) {
      // Each closure holds its thread until both threads have one, so both names are seen.
      pool.Schedule([&] {
        char name[16] = {};
        pthread_getname_np(pthread_self(), name, sizeof(name));
        {
          PlainLock lock(&mu);
          names.insert(name);
          if (names.size() == kThreads) all_named.Notify();
        }
        all_named.WaitForNotificationWithTimeout(absl::Seconds(30));
      });
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"test-pool-0", "test-pool-1"}));
  std::string seen;
  {
    WorkPool pool(1, "a-name-longer-than-fifteen-bytes");
    pool.Schedule([&] {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof(name));
      seen = name;
    });
  }  // joined: `seen` is written
  EXPECT_EQ(seen, "a-name-longer-t");
}

TEST(WorkPoolTest, ItsThreadsRunClosuresInParallel) {
  // Two closures that each wait for the other to start: they finish only if two threads
  // run them at once.
  WorkPool pool(2);
  absl::Notification first_started, second_started, both_done_first, both_done_second;
  pool.Schedule([&] {
    first_started.Notify();
    if (second_started.WaitForNotificationWithTimeout(absl::Seconds(30))) both_done_first.Notify();
  });
  pool.Schedule([&] {
    second_started.Notify();
    if (first_started.WaitForNotificationWithTimeout(absl::Seconds(30))) both_done_second.Notify();
  });
  EXPECT_TRUE(both_done_first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(both_done_second.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

TEST(WorkPoolTest, OneThreadRunsClosuresInTheOrderTheyWereQueued) {
  std::vector<int> order;  // only the pool's one thread writes it
  {
    WorkPool pool(1);
    absl::Notification started, release;
    pool.Schedule([&] {
      started.Notify();
      release.WaitForNotification();
    });
    started.WaitForNotification();  // the thread is busy: what follows stays queued
    for (int i = 0; i < 100; ++i) pool.Schedule([&order, i] { order.push_back(i); });
    EXPECT_EQ(pool.queued(), 100u);
    release.Notify();
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(WorkPoolTest, AClosureOwnsWhatItCaptures) {
  std::weak_ptr<int> watched;
  {
    WorkPool pool(1);
    auto owned = std::make_unique<int>(7);
    auto shared = std::make_shared<int>(8);
    watched = shared;
    std::atomic<int> seen{0};
    pool.Schedule([owned = std::move(owned), shared = std::move(shared), &seen] {
      seen.store(*owned + *shared);
    });
    pool.Schedule([] {});
    while (pool.queued() > 0) absl::SleepFor(absl::Milliseconds(1));
    // The closure may still be running; once the pool is gone it has run.
  }
  EXPECT_TRUE(watched.expired()) << "the closure's captures outlived the pool";
}

}  // namespace
}  // namespace okl
