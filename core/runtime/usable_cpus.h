// core/runtime/usable_cpus.h
//
// How many CPUs this thread may run on, for sizing thread pools: the server's offload
// pool, the load generator's completion-queue threads.
#ifndef OKL_CORE_RUNTIME_USABLE_CPUS_H_
#define OKL_CORE_RUNTIME_USABLE_CPUS_H_

namespace okl {

// The CPUs the calling thread may run on: its affinity mask, which a cpuset (a container's
// CPU limit) or taskset narrows and std::thread::hardware_concurrency ignores. At least 1.
int UsableCpus();

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_USABLE_CPUS_H_
