#include "core/mutex.h"

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
void CondVar::Signal() { pthread_cond_signal(&cond_); }
void CondVar::SignalAll() { pthread_cond_broadcast(&cond_); }

}  // namespace okl
