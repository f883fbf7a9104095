#include "tests/test_paths.h"

#include "absl/strings/str_cat.h"

// Set for this file alone by tests/CMakeLists.txt.
#if !defined(OKL_SOURCE_DIR) || !defined(OKL_SERVER_BINARY) || !defined(OKL_CLI_BINARY)
#error "OKL_SOURCE_DIR, OKL_SERVER_BINARY and OKL_CLI_BINARY are set by tests/CMakeLists.txt"
#endif

namespace okl::testing {

std::string SourcePath(absl::string_view relative) {
  return absl::StrCat(OKL_SOURCE_DIR, "/", relative);
}

std::string DataPath(absl::string_view name) { return SourcePath(absl::StrCat("data/", name)); }

const char* ServerBinary() { return OKL_SERVER_BINARY; }

const char* CliBinary() { return OKL_CLI_BINARY; }

const char* LoadgenBinary() {
#ifdef OKL_LOADGEN_BINARY
  return OKL_LOADGEN_BINARY;
#else
  return nullptr;
#endif
}

}  // namespace okl::testing
