// tests/fuzz/fuzz_bodies.h
//
// The bodies of okl's fuzz targets, one per kind of bytes a peer can hand the server: a
// snapshot (RestoreModel), a text-format config (the `okl` tool's --config), and an
// Observe or Predict request. Each body runs the same code the server runs on those bytes
// and then checks what must hold for every input, accepted or rejected: error codes as
// documented, round trips that give the same bytes back, and that every state a model
// reaches is one ModelFromState accepts again (else a server restart would lose
// the model).
//
// Each body returns 0 for every input. A broken invariant prints what broke to stderr
// and traps (__builtin_trap): libFuzzer reports that as a crash and saves the input, a
// GoogleTest binary dies with the message. The libFuzzer binaries (*_fuzz.cc) and
// okl_fuzz_regression_test both call these functions, so a reproducer stays fixed in the
// ordinary sanitizer builds. Thread-safe.
//
// Example:
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     return okl::fuzz::FuzzSnapshot(data, size);
//   }
#ifndef OKL_TESTS_FUZZ_FUZZ_BODIES_H_
#define OKL_TESTS_FUZZ_FUZZ_BODIES_H_

#include <cstddef>
#include <cstdint>

namespace okl::fuzz {

// `data` is snapshot bytes, as DecodeSnapshot reads them. A mutated input almost never
// keeps its checksum right, so when the bytes fail to decode they are also tried with
// the last 10 bytes replaced by a correct checksum field: both the check and what lies
// behind it are fuzzed. A decoded state goes through FromState and, if accepted (and
// small enough: dim x terms at most 1e6), through a restore-exactness check, Predict,
// PredictBatch, SquaredNorm, the windowed regret, an Encode/Decode round trip that must
// reproduce the bytes, and one Observe whose result must restore again.
int FuzzSnapshot(const uint8_t* data, size_t size);

// `data` is a text-format okl.v1.ModelConfig, as ParseModelConfigText reads it. A parsed
// config must be valid and survive ToProto/FromProto, the wire and the text format with
// the same CanonicalConfigBytes; a model of it must take a few steps and restore.
int FuzzConfigText(const uint8_t* data, size_t size);

// data[0] chooses the request type (bit 0: 0 Observe, 1 Predict) and the model's config
// (bits 1-7: kernel, loss, averaging, regret window, budget policy, offset and
// schedule); data[1..] is the serialized okl.v1.ObserveRequest or PredictRequest. For
// models of dim 1, 7 and 4096 the request is converted as the server does, bounded at
// 16 MiB of dense values (the unbounded overloads run only within that bound), and, if
// that succeeds, validated and applied to a small trained model (max_terms 16).
int FuzzRequest(const uint8_t* data, size_t size);

}  // namespace okl::fuzz

#endif  // OKL_TESTS_FUZZ_FUZZ_BODIES_H_
