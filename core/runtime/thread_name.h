// core/runtime/thread_name.h
//
// Names the calling thread, so that `top -H`, `ps -L`, perf and gdb tell a server's
// threads apart ("okl-rpc-0", "okl-work-1") instead of showing the process name for all.
#ifndef OKL_CORE_RUNTIME_THREAD_NAME_H_
#define OKL_CORE_RUNTIME_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace okl {

// Linux keeps 15 bytes of a thread's name: a longer `name` is cut there. Does nothing
// where threads cannot be named.
void NameThisThread(absl::string_view name);

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_THREAD_NAME_H_
