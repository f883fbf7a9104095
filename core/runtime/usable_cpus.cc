// core/runtime/usable_cpus.cc

#include "core/runtime/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace okl {

int UsableCpus() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  return std::max(1, CPU_COUNT(&cpus));
}

}  // namespace okl
