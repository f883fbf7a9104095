// client/cli/config_flags.cc

#include "client/cli/config_flags.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/enum_names.h"

ABSL_FLAG(int64_t, dim, 0, "input dimension (required without --config)");
ABSL_FLAG(std::string, kernel, "gaussian",
          "gaussian exp(-gamma|x-x'|^2), laplacian exp(-gamma|x-x'|), linear <x,x'>+c, "
          "polynomial (gamma<x,x'>+c)^degree, or heat (4 pi t)^(-d/2) exp(-|x-x'|^2/(4t))");
ABSL_FLAG(double, gamma, 1.0, "gaussian, laplacian, polynomial: gamma > 0");
ABSL_FLAG(double, c, 0.0, "linear, polynomial: c >= 0");
ABSL_FLAG(int64_t, degree, 2, "polynomial: the degree, 1..64");
ABSL_FLAG(double, t, 1.0, "heat: t > 0");
ABSL_FLAG(std::string, loss, "squared",
          "squared, hinge (labels -1/+1), epsilon_insensitive, logistic (labels -1/+1), "
          "huber, novelty (one-class; labels ignored), or the multi-class multiclass_hinge "
          "and softmax (named classes; needs --max_classes)");
ABSL_FLAG(double, rho, 1.0,
          "hinge, novelty, multiclass_hinge: the margin (with --nu > 0, its start value)");
ABSL_FLAG(int64_t, max_classes, 0,
          "multiclass_hinge, softmax: the most classes the model learns, 2 up to the "
          "server's --max_classes (1000 unless set)");
ABSL_FLAG(double, epsilon, 0.1,
          "epsilon_insensitive: the tube's half-width (with --nu > 0, its start value)");
ABSL_FLAG(double, delta, 1.0, "huber: where the loss turns from quadratic to linear");
ABSL_FLAG(double, nu, 0.0, "hinge, novelty, epsilon_insensitive: > 0 learns rho or epsilon");
ABSL_FLAG(double, eta0, 0.1,
          "the learning rate eta0 > 0 (eta0 * lambda < 1; <= 1 for INVERSE_SQRT, POWER)");
ABSL_FLAG(std::string, schedule, "constant",
          "constant (eta0), inverse_sqrt (eta0/sqrt(t)) or power (eta0 t^-theta)");
ABSL_FLAG(double, theta, 0.5, "power schedule: the exponent, in (0, 1]");
ABSL_FLAG(double, lambda, 0.0, "the regulariser >= 0: each step shrinks f by (1 - eta lambda)");
ABSL_FLAG(
    int64_t, max_terms, 1000,
    "the budget: at most this many terms (okl_server requires one, up to its --max_terms)");
ABSL_FLAG(std::string, policy, "oldest",
          "which term the budget removes: oldest, smallest |alpha|, or merge (the smallest "
          "into its best same-sign partner; gaussian kernel only)");
ABSL_FLAG(double, drop_below, 0.0, "> 0: remove every term whose |alpha| falls below it");
ABSL_FLAG(bool, offset, false, "learn an unregularised offset b");
ABSL_FLAG(bool, averaged, false,
          "predict with the averaged hypothesis: the mean of the last W to 2W hypotheses");
ABSL_FLAG(int64_t, averaging_window, 0,
          "the averaged hypothesis' block W in steps (0: max_terms; without a budget, every "
          "step since the first)");
ABSL_FLAG(int64_t, random_features, 0,
          "> 0: learn on this many random Fourier features (even, at most 65536) instead of a "
          "kernel expansion; gaussian or laplacian kernel, no budget");
ABSL_FLAG(uint64_t, feature_seed, 0, "random features: the seed their frequencies come from");
ABSL_FLAG(int64_t, max_nonzeros, 0,
          "> 0: sparse storage: each term keeps its non-zeros, and every input may have at "
          "most this many (dim may then be up to 16777216 on the wire)");
ABSL_FLAG(int64_t, max_basis, 0,
          "> 0: the kernel recursive least-squares tracker (KRLS-T) with a dictionary of at "
          "most this many bases instead of NORMA; squared loss, no learning rate, lambda or "
          "budget");
ABSL_FLAG(double, noise_variance, 1e-3,
          "KRLS tracker: the label noise's variance relative to the signal's, > 0 (small for "
          "clean series, e.g. 1e-6)");
ABSL_FLAG(double, forgetting, 1.0,
          "KRLS tracker: back-off to the prior per step, in (0, 1] (1: a stationary target; "
          "0.999: a memory of ~1,000 steps)");
ABSL_FLAG(int64_t, regret_window, 0,
          "track the regret over the last N examples (0: no; at most 8192; needs lambda > 0)");

namespace okl::cli {
namespace {

// A --flag's value as one of an enum's names (the table beside the enum in core/config.h).
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseFlagName(absl::string_view flag, absl::string_view value,
                                   const std::array<EnumName<Enum>, N>& names) {
  if (std::optional<Enum> parsed = ParseName(names, value)) return *parsed;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": expected ", NameList(names)));
}

absl::StatusOr<uint32_t> NonNegative32(absl::string_view name, int64_t value) {
  if (value < 0 || value > 0xffffffffLL) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " is out of range"));
  }
  return static_cast<uint32_t>(value);
}

}  // namespace

absl::Status ApplyConfigFlags(const CommandLine& line, bool all, ModelConfig* config) {
  const auto use = [&](absl::string_view name) { return all || line.Given(name); };
  if (use("dim")) {
    absl::StatusOr<uint32_t> dim = NonNegative32("dim", absl::GetFlag(FLAGS_dim));
    if (!dim.ok()) return dim.status();
    config->dim = *dim;
  }
  if (use("kernel")) {
    absl::StatusOr<KernelType> kernel =
        ParseFlagName("kernel", absl::GetFlag(FLAGS_kernel), kKernelTypeNames);
    if (!kernel.ok()) return kernel.status();
    config->kernel.type = *kernel;
  }
  if (use("gamma")) config->kernel.gamma = absl::GetFlag(FLAGS_gamma);
  if (use("c")) config->kernel.c = absl::GetFlag(FLAGS_c);
  if (use("degree")) {
    absl::StatusOr<uint32_t> degree = NonNegative32("degree", absl::GetFlag(FLAGS_degree));
    if (!degree.ok()) return degree.status();
    config->kernel.degree = *degree;
  }
  if (use("t")) config->kernel.t = absl::GetFlag(FLAGS_t);
  if (use("loss")) {
    absl::StatusOr<LossType> loss =
        ParseFlagName("loss", absl::GetFlag(FLAGS_loss), kLossTypeNames);
    if (!loss.ok()) return loss.status();
    config->loss.type = *loss;
  }
  if (use("rho")) config->loss.rho = absl::GetFlag(FLAGS_rho);
  if (use("max_classes")) {
    absl::StatusOr<uint32_t> max_classes =
        NonNegative32("max_classes", absl::GetFlag(FLAGS_max_classes));
    if (!max_classes.ok()) return max_classes.status();
    config->max_classes = *max_classes;
  }
  if (use("epsilon")) config->loss.epsilon = absl::GetFlag(FLAGS_epsilon);
  if (use("delta")) config->loss.delta = absl::GetFlag(FLAGS_delta);
  if (use("nu")) config->loss.nu = absl::GetFlag(FLAGS_nu);
  if (use("eta0")) config->learning_rate.eta0 = absl::GetFlag(FLAGS_eta0);
  if (use("schedule")) {
    absl::StatusOr<Schedule> schedule =
        ParseFlagName("schedule", absl::GetFlag(FLAGS_schedule), kScheduleNames);
    if (!schedule.ok()) return schedule.status();
    config->learning_rate.schedule = *schedule;
  }
  if (use("theta")) config->learning_rate.theta = absl::GetFlag(FLAGS_theta);
  if (use("lambda")) config->lambda = absl::GetFlag(FLAGS_lambda);
  if (use("max_terms")) {
    absl::StatusOr<uint32_t> max_terms =
        NonNegative32("max_terms", absl::GetFlag(FLAGS_max_terms));
    if (!max_terms.ok()) return max_terms.status();
    config->budget.max_terms = *max_terms;
  }
  if (use("policy")) {
    absl::StatusOr<BudgetPolicy> policy =
        ParseFlagName("policy", absl::GetFlag(FLAGS_policy), kBudgetPolicyNames);
    if (!policy.ok()) return policy.status();
    config->budget.policy = *policy;
  }
  if (use("drop_below")) config->budget.drop_below = absl::GetFlag(FLAGS_drop_below);
  if (use("offset")) config->offset = absl::GetFlag(FLAGS_offset);
  if (use("averaged")) config->averaged = absl::GetFlag(FLAGS_averaged);
  if (use("averaging_window")) {
    absl::StatusOr<uint32_t> window =
        NonNegative32("averaging_window", absl::GetFlag(FLAGS_averaging_window));
    if (!window.ok()) return window.status();
    config->averaging_window = *window;
  }
  if (use("random_features")) {
    absl::StatusOr<uint32_t> features =
        NonNegative32("random_features", absl::GetFlag(FLAGS_random_features));
    if (!features.ok()) return features.status();
    config->random_features.dimension = *features;
    // A random-feature model takes no budget: --max_terms' default is for expansions.
    if (*features > 0 && !line.Given("max_terms")) config->budget.max_terms = 0;
  }
  if (use("feature_seed")) config->random_features.seed = absl::GetFlag(FLAGS_feature_seed);
  if (use("max_basis")) {
    absl::StatusOr<uint32_t> max_basis =
        NonNegative32("max_basis", absl::GetFlag(FLAGS_max_basis));
    if (!max_basis.ok()) return max_basis.status();
    config->krls_tracker.max_basis = *max_basis;
    // A tracker takes no budget: --max_terms' default is for expansions.
    if (*max_basis > 0 && !line.Given("max_terms")) config->budget.max_terms = 0;
  }
  // The tracker's other fields are read only with max_basis > 0 (else they must stay at
  // their defaults, which ValidateConfig checks).
  if (config->krls_tracker_kind()) {
    if (use("noise_variance")) {
      config->krls_tracker.noise_variance = absl::GetFlag(FLAGS_noise_variance);
    }
    if (use("forgetting")) config->krls_tracker.forgetting = absl::GetFlag(FLAGS_forgetting);
  }
  if (use("max_nonzeros")) {
    absl::StatusOr<uint32_t> max_nonzeros =
        NonNegative32("max_nonzeros", absl::GetFlag(FLAGS_max_nonzeros));
    if (!max_nonzeros.ok()) return max_nonzeros.status();
    config->sparse.max_nonzeros = *max_nonzeros;
  }
  if (use("regret_window")) {
    absl::StatusOr<uint32_t> window =
        NonNegative32("regret_window", absl::GetFlag(FLAGS_regret_window));
    if (!window.ok()) return window.status();
    config->regret_window = *window;
  }

  // A parameter the chosen kernel, loss or schedule does not read is a mistake to point out.
  const KernelType kernel = config->kernel.type;
  const LossType loss = config->loss.type;
  const struct {
    absl::string_view flag;
    bool applies;
    absl::string_view owner;
  } checks[] = {
      {"gamma",
       kernel == KernelType::kGaussian || kernel == KernelType::kLaplacian ||
           kernel == KernelType::kPolynomial,
       "kernel"},
      {"c", kernel == KernelType::kLinear || kernel == KernelType::kPolynomial, "kernel"},
      {"degree", kernel == KernelType::kPolynomial, "kernel"},
      {"t", kernel == KernelType::kHeat, "kernel"},
      {"rho",
       loss == LossType::kHinge || loss == LossType::kNovelty ||
           loss == LossType::kMulticlassHinge,
       "loss"},
      {"max_classes", IsMulticlassLoss(loss), "loss"},
      {"epsilon", loss == LossType::kEpsilonInsensitive, "loss"},
      {"delta", loss == LossType::kHuber, "loss"},
      {"nu",
       loss == LossType::kHinge || loss == LossType::kNovelty ||
           loss == LossType::kEpsilonInsensitive,
       "loss"},
      {"theta", config->learning_rate.schedule == Schedule::kPower, "schedule"},
  };
  for (const absl::string_view flag : {"noise_variance", "forgetting"}) {
    if (line.Given(flag) && !config->krls_tracker_kind()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " applies only to the KRLS tracker: give --max_basis too"));
    }
  }
  for (const auto& check : checks) {
    if (line.Given(check.flag) && !check.applies) {
      const absl::string_view owner_name = check.owner == "kernel" ? KernelTypeName(kernel)
                                           : check.owner == "loss"
                                               ? LossTypeName(loss)
                                               : ScheduleName(config->learning_rate.schedule);
      return absl::InvalidArgumentError(absl::StrCat(
          "--", check.flag, " does not apply to the ", owner_name, " ", check.owner));
    }
  }
  return absl::OkStatus();
}

}  // namespace okl::cli
