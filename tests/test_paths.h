// tests/test_paths.h
//
// Where the tests find the checkout's files and the programs they run: the source folder,
// okl_server, the okl tool and okl_loadgen, as CMake configured this build tree. The paths
// are compiled into tests/test_paths.cc alone, so that every other test file compiles the
// same in any checkout and a compiler cache shared between checkouts can reuse it
// (scripts/test.sh).
//
// Example:
//   std::string data = okl::testing::SourcePath("data/mg30.dat");
//   SpawnedServer::Start({.binary = okl::testing::ServerBinary(), ...});
#ifndef OKL_TESTS_TEST_PATHS_H_
#define OKL_TESTS_TEST_PATHS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace okl::testing {

// `relative` (a path inside the checkout, e.g. "data/mg30.dat") under the source folder.
std::string SourcePath(absl::string_view relative);

// `name` in the checkout's data/ (data/README.md): SourcePath("data/" + name).
std::string DataPath(absl::string_view name);

// The programs this build tree makes; each is built before the tests that run it.
const char* ServerBinary();  // server/okl_server
const char* CliBinary();     // client/okl

// bench/okl_loadgen, or nullptr when the benchmarks are not built (OKL_BUILD_BENCHMARKS=OFF).
const char* LoadgenBinary();

}  // namespace okl::testing

#endif  // OKL_TESTS_TEST_PATHS_H_
