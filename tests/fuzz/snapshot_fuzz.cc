// tests/fuzz/snapshot_fuzz.cc
//
// libFuzzer entry point of okl_fuzz_snapshot: snapshot bytes (RestoreModel's payload).
// The body is okl::fuzz::FuzzSnapshot (tests/fuzz/fuzz_bodies.h), which
// okl_fuzz_regression_test also runs on the seed corpus and the regressions.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/fuzz_bodies.h"

// Protobuf logs every string field with invalid UTF-8 it parses; the fuzzer makes many.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return okl::fuzz::FuzzSnapshot(data, size);
}
