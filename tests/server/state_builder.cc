// tests/server/state_builder.cc

#include "tests/server/state_builder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/loss.h"
#include "core/split_mix.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace okl::testing {
namespace {

// core's SplitMix64: a few nanoseconds per value, so that a 300 MiB state takes a fraction
// of a second (std::mt19937_64 with a distribution is several times slower), and as
// deterministic for a seed.
class Random : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double low, double high) { return low + (high - low) * Unit(); }
};

}  // namespace

absl::StatusOr<ModelState> RandomState(const ModelConfig& config, size_t terms, uint64_t seed) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (config.budget.max_terms > 0 && terms > config.budget.max_terms) {
    return absl::InvalidArgumentError(
        absl::StrCat(terms, " terms are over budget.max_terms ", config.budget.max_terms));
  }
  Random random(seed);
  ModelState state;
  state.config = config;
  // As if every one of the last `terms` of `steps` examples had added a term.
  state.steps = terms + 1000;
  state.support.resize(terms * config.dim);
  for (double& value : state.support) value = random.Uniform(-1.0, 1.0);
  state.coefficients.resize(terms);
  state.added_at.resize(terms);
  for (size_t i = 0; i < terms; ++i) {
    const double magnitude = random.Uniform(0.01, 0.1);
    state.coefficients[i] = (random.Next() & 1) != 0 ? magnitude : -magnitude;
    state.added_at[i] = state.steps - terms + 1 + i;  // oldest first, as the slots fill
  }
  state.scale = 0.5;
  state.offset = config.offset ? 0.25 : 0.0;
  state.margin = Loss(config.loss).InitialMargin();
  state.cumulative_loss = 0.125 * static_cast<double>(state.steps);
  state.mistakes = IsClassificationLoss(config.loss.type) ? state.steps / 4 : 0;
  if (config.averaged) {
    state.average_sum = 10.0;
    state.average_offset_sum = state.offset * 10.0;
    state.average_base.resize(terms);
    state.average_mark.resize(terms);
    for (size_t i = 0; i < terms; ++i) {
      state.average_base[i] = random.Uniform(-0.1, 0.1);
      state.average_mark[i] = random.Uniform(0.0, state.average_sum);
    }
  }
  return state;
}

absl::StatusOr<std::string> RandomSnapshot(const v1::ModelConfig& config, size_t terms,
                                           uint64_t seed) {
  OKL_ASSIGN_OR_RETURN(ModelConfig core_config, FromProto(config));
  OKL_ASSIGN_OR_RETURN(ModelState state, RandomState(core_config, terms, seed));
  return EncodeSnapshot(state);
}

size_t TermsForSnapshotBytes(const v1::ModelConfig& config, size_t bytes) {
  // MaxSnapshotBytes's own accounting: a fixed part, then a bound per term.
  ModelConfig one;
  one.dim = config.dim();
  one.averaged = config.averaged();
  one.budget.max_terms = 1;
  ModelConfig two = one;
  two.budget.max_terms = 2;
  const size_t per_term = MaxSnapshotBytes(two) - MaxSnapshotBytes(one);
  const size_t fixed = MaxSnapshotBytes(one) - per_term;
  return bytes > fixed ? (bytes - fixed) / per_term : 0;
}

}  // namespace okl::testing
