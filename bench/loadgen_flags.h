// bench/loadgen_flags.h
//
// okl_loadgen's flags (loadgen_flags.cc defines them all) and the Settings they make.
#ifndef OKL_BENCH_LOADGEN_FLAGS_H_
#define OKL_BENCH_LOADGEN_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "bench/loadgen_report.h"

// Read by main() itself, not through Settings.
ABSL_DECLARE_FLAG(std::string, spawn_server);
ABSL_DECLARE_FLAG(std::string, server_args);
ABSL_DECLARE_FLAG(bool, pin_cpus);
ABSL_DECLARE_FLAG(bool, mutex_deadlock_detection);

namespace okl::loadgen {

// The settings the flags give; InvalidArgument naming the flag for a value out of range.
absl::StatusOr<Settings> ReadFlags();

}  // namespace okl::loadgen

#endif  // OKL_BENCH_LOADGEN_FLAGS_H_
