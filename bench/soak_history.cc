// bench/soak_history.cc

#include "bench/soak_history.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model.h"
#include "core/split_mix.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace okl::soak {
namespace {

// Examples are generated and fed to a twin this many at a time.
constexpr uint64_t kReplayChunk = 1024;

// A double uniform in [-1, 1) from 53 random bits, the same on every platform.
double Uniform(SplitMix64& bits) {
  return static_cast<double>(bits.Next() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

bool SameBits(absl::Span<const double> a, absl::Span<const double> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

ModelConfig SoakConfig(int kind) {
  ModelConfig config;
  config.dim = kDim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  switch (kind % kConfigKinds) {
    case 0:  // the plain case: NORMA's truncation
      config.loss = {.type = LossType::kSquared};
      config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
      config.lambda = 0.01;
      config.budget = {.max_terms = 64, .policy = BudgetPolicy::kOldest};
      break;
    case 1:  // the most state: averaged sums, retired terms, an offset, a learned epsilon
      config.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1, .nu = 0.2};
      config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 0.5};
      config.lambda = 0.01;
      config.offset = true;
      config.budget = {.max_terms = 96, .policy = BudgetPolicy::kSmallest};
      config.averaged = true;
      break;
    default:  // merging, a power schedule and the regret window (and its background work)
      config.loss = {.type = LossType::kHuber, .delta = 0.5};
      config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.4, .theta = 0.6};
      config.lambda = 0.02;
      config.budget = {.max_terms = 48, .policy = BudgetPolicy::kMerge};
      config.regret_window = 64;
      break;
  }
  return config;
}

void GenerateExamples(uint64_t stream, uint64_t first, uint64_t count, std::vector<double>* xs,
                      std::vector<double>* ys) {
  xs->reserve(xs->size() + count * kDim);
  ys->reserve(ys->size() + count);
  for (uint64_t k = first; k < first + count; ++k) {
    // A generator per example, so that any example is found without its predecessors;
    // the seed spreads (stream, k) over 64 bits before SplitMix64 hashes it again.
    SplitMix64 bits(SplitMix64(stream * 0x9e3779b97f4a7c15u ^ k).Next());
    double sum = 0;
    for (uint32_t j = 0; j < kDim; ++j) {
      const double value = Uniform(bits);
      xs->push_back(value);
      sum += value * (j % 2 == 0 ? 1.0 : 0.5);
    }
    ys->push_back(std::sin(sum) + 0.1 * Uniform(bits));
  }
}

void History::Append(uint64_t stream, uint64_t first, uint64_t count) {
  if (count == 0) return;
  size_ += count;
  if (!segments_.empty()) {
    Segment& last = segments_.back();
    if (last.stream == stream && last.first + last.count == first) {
      last.count += count;
      return;
    }
  }
  segments_.push_back({.stream = stream, .first = first, .count = count});
}

absl::StatusOr<std::unique_ptr<NormaModel>> Replay(const History& history, uint64_t limit) {
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<NormaModel> twin,
                       NormaModel::Create(SoakConfig(history.config_kind())));
  std::vector<double> xs, ys;
  std::vector<Observation> observations;
  uint64_t fed = 0;
  for (const Segment& segment : history.segments()) {
    for (uint64_t done = 0; done < segment.count && fed < limit;) {
      const uint64_t n = std::min({kReplayChunk, segment.count - done, limit - fed});
      xs.clear();
      ys.clear();
      observations.clear();
      GenerateExamples(segment.stream, segment.first + done, n, &xs, &ys);
      OKL_RETURN_IF_ERROR(twin->ObserveBatch(xs, ys, &observations));
      done += n;
      fed += n;
    }
  }
  return twin;
}

ModelCheck CheckModel(const Client& client, const ModelId& id, const History& history,
                      absl::Span<const double> probes) {
  ModelCheck check;
  check.expected_steps = history.size();
  const std::string name = absl::StrCat(id.tenant, "/", id.model);
  absl::StatusOr<std::unique_ptr<NormaModel>> twin = Replay(history);
  if (!twin.ok()) {
    check.lost_examples = check.expected_steps;
    check.detail = absl::StrCat(name, ": the core twin failed: ", twin.status().ToString());
    return check;
  }
  absl::StatusOr<std::string> bytes = client.Snapshot(id);
  if (!bytes.ok()) {
    check.lost_examples = check.expected_steps;
    check.detail = absl::StrCat(name, bytes.status().code() == absl::StatusCode::kNotFound
                                          ? ": missing"
                                          : ": Snapshot failed",
                                ": ", bytes.status().ToString());
    return check;
  }
  check.present = true;
  absl::StatusOr<ModelState> served = DecodeSnapshot(*bytes);
  if (!served.ok()) {
    check.lost_examples = check.expected_steps;
    check.detail = absl::StrCat(name, ": its snapshot does not decode: ",
                                served.status().ToString());
    return check;
  }
  check.served_steps = served->steps;
  check.state_equal = *served == (*twin)->ExportState();

  std::vector<double> expected(probes.size() / kDim);
  absl::StatusOr<std::vector<double>> predicted = client.Predict(id, probes, kDim);
  if (absl::Status status = (*twin)->PredictBatch(probes, absl::MakeSpan(expected));
      !status.ok()) {
    check.detail = absl::StrCat(name, ": the core twin cannot predict: ", status.ToString());
  } else if (!predicted.ok()) {
    check.detail = absl::StrCat(name, ": Predict failed: ", predicted.status().ToString());
  } else {
    check.predictions_equal = SameBits(*predicted, expected);
  }
  if (check.exact()) return check;

  // Not exact: how much of the ledger does the model still verifiably hold? (An equal
  // state with other predictions is a fault of Predict, not a loss.)
  if (check.served_steps > check.expected_steps) {
    check.extra_examples = check.served_steps - check.expected_steps;
  }
  check.lost_examples = check.state_equal ? 0 : check.expected_steps;
  if (!check.state_equal && check.served_steps < check.expected_steps) {
    absl::StatusOr<std::unique_ptr<NormaModel>> prefix = Replay(history, check.served_steps);
    if (prefix.ok() && *served == (*prefix)->ExportState()) {
      check.lost_examples = check.expected_steps - check.served_steps;
    }
  }
  if (check.detail.empty()) {
    check.detail = absl::StrCat(
        name, ": holds ", check.served_steps, " steps against ", check.expected_steps,
        " acknowledged; state ", check.state_equal ? "equal" : "differs", ", predictions ",
        check.predictions_equal ? "equal" : "differ", "; counted as ", check.lost_examples,
        " lost and ", check.extra_examples, " extra");
  }
  return check;
}

}  // namespace okl::soak
