// core/runtime/thread_name.cc

#include "core/runtime/thread_name.h"

#include <pthread.h>

#include <string>

namespace okl {

void NameThisThread(absl::string_view name) {
#if defined(__linux__)
  constexpr size_t kMaxNameBytes = 15;  // the kernel's 16 with the terminating NUL
  const std::string cut(name.substr(0, kMaxNameBytes));
  pthread_setname_np(pthread_self(), cut.c_str());
#else
  (void)name;
#endif
}

}  // namespace okl
