// core/runtime/mutex.h
//
// okl::Mutex is a reader-writer lock with Abseil's thread-safety annotations, built on a
// writer-preferring pthread_rwlock_t. Why not absl::Mutex: Debian's Abseil is a shared
// library compiled without ThreadSanitizer, so TSan cannot see absl::Mutex's hand-offs
// and reports every guarded access as a race; pthread locks are intercepted by TSan
// itself. Writer preference keeps a stream of Predicts (readers) from starving Observes.
// Thread-safe, as a lock must be.
//
// Example:
//   okl::Mutex mu;
//   int value ABSL_GUARDED_BY(mu);
//   { okl::WriterLock lock(&mu); ++value; }
//   { okl::ReaderLock lock(&mu); Use(value); }
//
// okl::PlainMutex is an exclusive pthread mutex, for the rare state a thread must wait
// on with okl::CondVar (a work queue); the same reasons keep it off absl::Mutex.
#ifndef OKL_CORE_RUNTIME_MUTEX_H_
#define OKL_CORE_RUNTIME_MUTEX_H_

#include <pthread.h>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace okl {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex();
  ~Mutex();
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void Unlock() ABSL_UNLOCK_FUNCTION();
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION();
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION();

 private:
  pthread_rwlock_t lock_;
};

// Holds `mu` exclusively for the scope.
class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` shared for the scope.
class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_LOCKABLE PlainMutex {
 public:
  PlainMutex();
  ~PlainMutex();
  PlainMutex(const PlainMutex&) = delete;
  PlainMutex& operator=(const PlainMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void Unlock() ABSL_UNLOCK_FUNCTION();

 private:
  friend class CondVar;
  pthread_mutex_t mutex_;
};

class ABSL_SCOPED_LOCKABLE PlainLock {
 public:
  explicit PlainLock(PlainMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~PlainLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  PlainLock(const PlainLock&) = delete;
  PlainLock& operator=(const PlainLock&) = delete;

 private:
  PlainMutex* const mu_;
};

class CondVar {
 public:
  CondVar();
  ~CondVar();
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Atomically releases `mu` and waits for a Signal or SignalAll (or a spurious wakeup:
  // callers re-check their condition in a loop); holds `mu` again on return.
  void Wait(PlainMutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Wait, but returns false without a wakeup once `deadline` (wall-clock time) passed.
  bool WaitUntil(PlainMutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Signal();
  void SignalAll();

 private:
  pthread_cond_t cond_;
};

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_MUTEX_H_
