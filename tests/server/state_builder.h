// tests/server/state_builder.h
//
// Large, valid model states made directly, for the tests that need a big snapshot (a
// Restore of hundreds of MiB, a model of 20,000 terms) without training one: training a
// dim 4096 model to 9,000 terms costs minutes, building its state costs a fraction of a
// second. RandomState fills every array NormaModel::FromState checks so that it accepts
// the state: `terms` terms (at most budget.max_terms) with random support in [-1, 1],
// nonzero coefficients, added_at in [1, steps], the averaged sums when the config is
// averaged, and an empty regret window.
//
// Thread-safe (no shared state).
//
// Example:
//   const v1::ModelConfig config = ParseConfig("dim: 4096 ... budget { max_terms: 10000 }");
//   const size_t terms = TermsForSnapshotBytes(config, size_t{300} << 20);
//   absl::StatusOr<std::string> bytes = RandomSnapshot(config, terms, /*seed=*/1);
//   ASSERT_TRUE(bytes.ok()) << bytes.status();
//   EXPECT_TRUE(IsOk(Restore(stub, Ref("a", "big"), *bytes)));
#ifndef OKL_TESTS_SERVER_STATE_BUILDER_H_
#define OKL_TESTS_SERVER_STATE_BUILDER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/norma.h"
#include "okl/v1/okl.pb.h"

namespace okl::testing {

// A state of `terms` terms for `config` from a fixed seed, which NormaModel::FromState
// accepts. InvalidArgument if the config is invalid or `terms` is over its budget.
absl::StatusOr<ModelState> RandomState(const ModelConfig& config, size_t terms, uint64_t seed);

// EncodeSnapshot(RandomState(...)) for a wire config: the bytes a Restore takes.
absl::StatusOr<std::string> RandomSnapshot(const v1::ModelConfig& config, size_t terms,
                                           uint64_t seed);

// The most terms whose snapshot, at `config`'s dim, stays within about `bytes`.
size_t TermsForSnapshotBytes(const v1::ModelConfig& config, size_t bytes);

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_STATE_BUILDER_H_
