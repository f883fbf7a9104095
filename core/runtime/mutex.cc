#include "core/runtime/mutex.h"

#include <cerrno>
#include <cstdlib>

namespace okl {

Mutex::Mutex() {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  if (pthread_rwlock_init(&lock_, &attr) != 0) std::abort();
  pthread_rwlockattr_destroy(&attr);
}

Mutex::~Mutex() { pthread_rwlock_destroy(&lock_); }

// A failing lock call means a corrupted or misused lock; continuing would be worse.
void Mutex::Lock() {
  if (pthread_rwlock_wrlock(&lock_) != 0) std::abort();
}
void Mutex::Unlock() { pthread_rwlock_unlock(&lock_); }
void Mutex::ReaderLock() {
  if (pthread_rwlock_rdlock(&lock_) != 0) std::abort();
}
void Mutex::ReaderUnlock() { pthread_rwlock_unlock(&lock_); }

PlainMutex::PlainMutex() {
  if (pthread_mutex_init(&mutex_, nullptr) != 0) std::abort();
}
PlainMutex::~PlainMutex() { pthread_mutex_destroy(&mutex_); }
void PlainMutex::Lock() {
  if (pthread_mutex_lock(&mutex_) != 0) std::abort();
}
void PlainMutex::Unlock() { pthread_mutex_unlock(&mutex_); }

CondVar::CondVar() {
  if (pthread_cond_init(&cond_, nullptr) != 0) std::abort();
}
CondVar::~CondVar() { pthread_cond_destroy(&cond_); }
void CondVar::Wait(PlainMutex* mu) {
  if (pthread_cond_wait(&cond_, &mu->mutex_) != 0) std::abort();
}
bool CondVar::WaitUntil(PlainMutex* mu, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {
    Wait(mu);
    return true;
  }
  // The condition variable's clock is CLOCK_REALTIME (its default attributes), as absl::Time.
  const timespec until = absl::ToTimespec(deadline);
  const int result = pthread_cond_timedwait(&cond_, &mu->mutex_, &until);
  if (result != 0 && result != ETIMEDOUT) std::abort();
  return result == 0;
}
void CondVar::Signal() { pthread_cond_signal(&cond_); }
void CondVar::SignalAll() { pthread_cond_broadcast(&cond_); }

}  // namespace okl
