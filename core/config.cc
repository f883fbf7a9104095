#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {
namespace {

absl::Status Invalid(absl::string_view field, double value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be ", expected, ", got ", value));
}

absl::Status CheckFinite(absl::string_view field, double value) {
  if (!std::isfinite(value)) return Invalid(field, value, "finite");
  return absl::OkStatus();
}

absl::Status CheckPositive(absl::string_view field, double value) {
  OKL_RETURN_IF_ERROR(CheckFinite(field, value));
  if (!(value > 0)) return Invalid(field, value, "positive");
  return absl::OkStatus();
}

absl::Status CheckNonNegative(absl::string_view field, double value) {
  OKL_RETURN_IF_ERROR(CheckFinite(field, value));
  if (!(value >= 0)) return Invalid(field, value, "non-negative");
  return absl::OkStatus();
}

absl::Status CheckNu(absl::string_view field, double value) {
  OKL_RETURN_IF_ERROR(CheckFinite(field, value));
  if (!(value >= 0 && value <= 1)) return Invalid(field, value, "in [0, 1]");
  return absl::OkStatus();
}

absl::Status ValidateKernel(const KernelConfig& kernel, uint32_t dim) {
  switch (kernel.type) {
    case KernelType::kGaussian:
      return CheckPositive("kernel.gaussian.gamma", kernel.gamma);
    case KernelType::kLaplacian:
      return CheckPositive("kernel.laplacian.gamma", kernel.gamma);
    case KernelType::kLinear:
      return CheckNonNegative("kernel.linear.c", kernel.c);
    case KernelType::kPolynomial:
      OKL_RETURN_IF_ERROR(CheckPositive("kernel.polynomial.gamma", kernel.gamma));
      OKL_RETURN_IF_ERROR(CheckNonNegative("kernel.polynomial.c", kernel.c));
      if (kernel.degree < 1 || kernel.degree > kMaxPolynomialDegree) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel.polynomial.degree must be in [1, ", kMaxPolynomialDegree,
                         "], got ", kernel.degree));
      }
      return absl::OkStatus();
    case KernelType::kHeat: {
      OKL_RETURN_IF_ERROR(CheckPositive("kernel.heat.t", kernel.t));
      // The normaliser (4 pi t)^(-d/2) must be a normal double, or every kernel value
      // rounds to 0 (or overflows) and the model cannot learn.
      const double normaliser = std::pow(4 * std::numbers::pi * kernel.t, -0.5 * dim);
      if (!std::isnormal(normaliser)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel.heat.t = ", kernel.t, " makes the normaliser (4 pi t)^(-dim/2) = ",
            normaliser, " at dim ", dim,
            ", which is not a usable double; choose t closer to 1/(4 pi) ~ 0.0796"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("kernel type ",
                                                 static_cast<int>(kernel.type),
                                                 " is not one of gaussian, laplacian, "
                                                 "linear, polynomial, heat"));
}

absl::Status ValidateLoss(const LossConfig& loss) {
  switch (loss.type) {
    case LossType::kSquared:
    case LossType::kLogistic:
      return absl::OkStatus();
    case LossType::kHinge:
      OKL_RETURN_IF_ERROR(CheckNonNegative("loss.hinge.rho", loss.rho));
      return CheckNu("loss.hinge.nu", loss.nu);
    case LossType::kEpsilonInsensitive:
      OKL_RETURN_IF_ERROR(
          CheckNonNegative("loss.epsilon_insensitive.epsilon", loss.epsilon));
      return CheckNu("loss.epsilon_insensitive.nu", loss.nu);
    case LossType::kHuber:
      return CheckPositive("loss.huber.delta", loss.delta);
    case LossType::kNovelty:
      OKL_RETURN_IF_ERROR(CheckFinite("loss.novelty.rho", loss.rho));
      return CheckNu("loss.novelty.nu", loss.nu);
    case LossType::kMulticlassHinge:
      OKL_RETURN_IF_ERROR(CheckNonNegative("loss.multiclass_hinge.rho", loss.rho));
      if (loss.nu != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "loss.multiclass_hinge.nu must be 0 (the nu-trick learns a binary margin), got ",
            loss.nu));
      }
      return absl::OkStatus();
    case LossType::kSoftmax:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("loss type ", static_cast<int>(loss.type),
                   " is not one of squared, hinge, epsilon_insensitive, logistic, huber, "
                   "novelty, multiclass_hinge, softmax"));
}

absl::Status ValidateLearningRate(const LearningRateConfig& rate, double lambda) {
  OKL_RETURN_IF_ERROR(CheckPositive("learning_rate.eta0", rate.eta0));
  switch (rate.schedule) {
    case Schedule::kConstant:
    case Schedule::kInverseSqrt:
      break;
    case Schedule::kPower:
      OKL_RETURN_IF_ERROR(CheckFinite("learning_rate.theta", rate.theta));
      if (!(rate.theta > 0 && rate.theta <= 1)) {
        return Invalid("learning_rate.theta", rate.theta, "in (0, 1] for POWER");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("learning_rate.schedule ", static_cast<int>(rate.schedule),
                       " is not one of CONSTANT, INVERSE_SQRT, POWER"));
  }
  // Every schedule is non-increasing in t, so eta_1 = eta0 is the largest rate and
  // eta0 * lambda <= 1 gives eta_t * lambda <= 1 for every t: the shrink factor
  // (1 - eta_t lambda) never goes negative. It may be 0 only at t = 1 of a decreasing
  // schedule (Pegasos: POWER, theta 1, eta0 = 1 / lambda), where it multiplies the
  // still-empty model by 0; a constant rate would wipe the model on every step.
  const bool decreasing = rate.schedule != Schedule::kConstant;
  if (decreasing ? !(rate.eta0 * lambda <= 1) : !(rate.eta0 * lambda < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning_rate.eta0 * lambda must be ", decreasing ? "at most 1" : "below 1",
        " (the shrink factor 1 - eta_t lambda must not go negative",
        decreasing ? "" : ", nor be 0 on every step of a CONSTANT rate", "), got ",
        rate.eta0, " * ", lambda, " = ", rate.eta0 * lambda));
  }
  return absl::OkStatus();
}

absl::Status ValidateBudget(const BudgetConfig& budget) {
  if (budget.max_terms > kMaxTerms) {
    return absl::InvalidArgumentError(absl::StrCat("budget.max_terms must be at most ",
                                                   kMaxTerms, " (0: no budget), got ",
                                                   budget.max_terms));
  }
  if (budget.policy != BudgetPolicy::kOldest && budget.policy != BudgetPolicy::kSmallest &&
      budget.policy != BudgetPolicy::kMerge) {
    return absl::InvalidArgumentError(absl::StrCat("budget.policy ",
                                                   static_cast<int>(budget.policy),
                                                   " is not one of OLDEST, SMALLEST, MERGE"));
  }
  return CheckNonNegative("budget.drop_below", budget.drop_below);
}

absl::Status ValidateRandomFeatures(const ModelConfig& config) {
  const uint32_t d = config.random_features.dimension;
  if (d == 0) {
    // A seed alone would be dropped on the wire (random_features is written only with a
    // dimension), so the config would not survive a round trip
    // (tests/fuzz/regressions/config_text/random_features_seed_without_dimension.textproto).
    if (config.random_features.seed != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "random_features.seed is ", config.random_features.seed,
          " but random_features.dimension is 0: set an even dimension up to ",
          kMaxRandomFeatures, ", or remove random_features for the exact kernel expansion"));
    }
    return absl::OkStatus();
  }
  if (d % 2 != 0 || d > kMaxRandomFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(
        "random_features.dimension must be even and at most ", kMaxRandomFeatures,
        " (0: exact kernel expansion), got ", d));
  }
  if (config.kernel.type != KernelType::kGaussian &&
      config.kernel.type != KernelType::kLaplacian) {
    return absl::InvalidArgumentError(absl::StrCat(
        "random_features needs the gaussian or laplacian kernel (features are drawn from "
        "its spectral density), got ", KernelTypeName(config.kernel.type)));
  }
  if (config.budget.max_terms != 0 || config.budget.drop_below != 0) {
    return absl::InvalidArgumentError(
        "budget must be unset for random_features: the model's size is fixed at "
        "random_features.dimension weights");
  }
  if (config.averaging_window != 0) {
    return absl::InvalidArgumentError(
        "averaging_window must be 0 for random_features: such a model removes nothing, "
        "so its averaged hypothesis averages every step since the first");
  }
  return absl::OkStatus();
}

absl::Status ValidateKrlsTracker(const ModelConfig& config) {
  const KrlsTrackerConfig& krls = config.krls_tracker;
  if (!config.krls_tracker_kind()) {
    if (krls != KrlsTrackerConfig{}) {
      return absl::InvalidArgumentError(
          "krls_tracker.max_basis is 0 but its other fields are set: set max_basis to 1.." +
          std::to_string(kMaxBasis) + ", or remove krls_tracker");
    }
    return absl::OkStatus();
  }
  if (krls.max_basis > kMaxBasis) {
    return absl::InvalidArgumentError(absl::StrCat("krls_tracker.max_basis must be at most ",
                                                   kMaxBasis, ", got ", krls.max_basis));
  }
  OKL_RETURN_IF_ERROR(CheckPositive("krls_tracker.noise_variance", krls.noise_variance));
  OKL_RETURN_IF_ERROR(CheckPositive("krls_tracker.jitter", krls.jitter));
  if (!(krls.forgetting > 0 && krls.forgetting <= 1)) {
    return Invalid("krls_tracker.forgetting", krls.forgetting, "in (0, 1] (1: no forgetting)");
  }
  if (config.loss.type != LossType::kSquared) {
    return absl::InvalidArgumentError(absl::StrCat(
        "krls_tracker needs the squared loss (it is a least-squares regressor), got ",
        LossTypeName(config.loss.type)));
  }
  // The tracker has no step size, regulariser, offset or budget of its own: the noise
  // variance regularises it and max_basis bounds it. A value here would be ignored, so it
  // is refused instead.
  auto unset = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be unset for krls_tracker (", why, ")"));
  };
  if (config.learning_rate != LearningRateConfig{}) {
    return unset("learning_rate", "it takes exact second-order steps, with no step size");
  }
  if (config.lambda != 0) return unset("lambda", "krls_tracker.noise_variance regularises it");
  if (config.offset) return unset("offset", "the Gaussian process has no offset");
  if (config.budget != BudgetConfig{}) {
    return unset("budget", "krls_tracker.max_basis bounds its dictionary");
  }
  if (config.averaged || config.averaging_window != 0) {
    return unset("averaged", "its posterior mean already averages the stream");
  }
  if (config.random_features.dimension != 0) {
    return unset("random_features", "it is a model kind of its own");
  }
  if (config.sparse_storage()) return unset("sparse", "its dictionary is stored dense");
  return absl::OkStatus();
}

// Every number of the config must be finite, including those the chosen kernel, loss or
// schedule does not read: a stored config is compared and re-validated on every start,
// and a NaN hidden in an unread field would make it unequal to itself.
absl::Status CheckAllFinite(const ModelConfig& config) {
  const std::pair<absl::string_view, double> fields[] = {
      {"kernel.gamma", config.kernel.gamma},
      {"kernel.c", config.kernel.c},
      {"kernel.t", config.kernel.t},
      {"loss.rho", config.loss.rho},
      {"loss.epsilon", config.loss.epsilon},
      {"loss.delta", config.loss.delta},
      {"loss.nu", config.loss.nu},
      {"learning_rate.eta0", config.learning_rate.eta0},
      {"learning_rate.theta", config.learning_rate.theta},
      {"lambda", config.lambda},
      {"budget.drop_below", config.budget.drop_below},
      {"krls_tracker.noise_variance", config.krls_tracker.noise_variance},
      {"krls_tracker.forgetting", config.krls_tracker.forgetting},
      {"krls_tracker.jitter", config.krls_tracker.jitter},
  };
  for (const auto& [field, value] : fields) OKL_RETURN_IF_ERROR(CheckFinite(field, value));
  return absl::OkStatus();
}

absl::Status ValidateSparseStorage(const ModelConfig& config) {
  if (!config.sparse_storage()) return absl::OkStatus();
  const uint32_t max_nonzeros = std::min(config.dim, kMaxNonZeros);
  if (config.sparse.max_nonzeros > max_nonzeros) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse.max_nonzeros must be in [1, ", max_nonzeros, "] (at most dim and ",
        kMaxNonZeros, "), got ", config.sparse.max_nonzeros));
  }
  if (config.random_features.dimension > 0) {
    return absl::InvalidArgumentError(
        "sparse storage is for kernel expansions; a random-feature model stores no terms "
        "(it already costs only an input's non-zeros): set sparse.max_nonzeros = 0 or "
        "random_features.dimension = 0");
  }
  if (config.budget.policy == BudgetPolicy::kMerge) {
    return absl::InvalidArgumentError(
        "budget.policy MERGE is not available with sparse storage: a merged point holds "
        "the non-zeros of both its terms, more than sparse.max_nonzeros; use OLDEST or "
        "SMALLEST");
  }
  return absl::OkStatus();
}

absl::Status ValidateSelect(const ModelConfig& config) {
  const SelectConfig& select = config.select;
  if (!config.select_kind()) {
    if (select != SelectConfig{}) {
      return absl::InvalidArgumentError(
          "select.enabled is false but select's other fields are set: set enabled, or "
          "remove select");
    }
    return absl::OkStatus();
  }
  // The outer config of a selection holds the stream's shape (dim, loss) only: every
  // candidate has its own kernel, step and budget, and a value here would be ignored.
  const ModelConfig defaults;
  const std::pair<absl::string_view, bool> own_fields[] = {
      {"kernel", config.kernel != defaults.kernel},
      {"learning_rate", config.learning_rate != defaults.learning_rate},
      {"lambda", config.lambda != defaults.lambda},
      {"offset", config.offset != defaults.offset},
      {"budget", config.budget != defaults.budget},
      {"averaged", config.averaged != defaults.averaged},
      {"averaging_window", config.averaging_window != defaults.averaging_window},
      {"regret_window", config.regret_window != defaults.regret_window},
      {"random_features", config.random_features != defaults.random_features},
      {"sparse", config.sparse != defaults.sparse},
      {"krls_tracker", config.krls_tracker != defaults.krls_tracker},
  };
  for (const auto& [field, set] : own_fields) {
    if (set) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          " must be left unset beside select: each candidate has its own (set it in "
          "select.candidates; a selection tracks no regret window)"));
    }
  }
  if (select.live > kMaxLiveCandidates) {
    return absl::InvalidArgumentError(absl::StrCat("select.live must be at most ",
                                                   kMaxLiveCandidates, " (0: up to 8), got ",
                                                   select.live));
  }
  if (select.candidates.size() > kMaxCandidates) {
    return absl::InvalidArgumentError(absl::StrCat("select.candidates may list at most ",
                                                   kMaxCandidates, " configs, got ",
                                                   select.candidates.size()));
  }
  for (size_t i = 0; i < select.candidates.size(); ++i) {
    const ModelConfig& candidate = select.candidates[i];
    const std::string name = absl::StrCat("select.candidates[", i, "]");
    if (candidate.select_kind() || candidate.select != SelectConfig{}) {
      return absl::InvalidArgumentError(name + " sets select: a candidate cannot select");
    }
    if (candidate.dim != config.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".dim is ", candidate.dim, " but the model's dim is ", config.dim,
                       ": leave it unset (it inherits dim) or make them equal"));
    }
    if (candidate.loss != config.loss) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".loss differs from the model's loss (", LossTypeName(config.loss.type),
          "): candidates are compared on one loss; leave it unset (it inherits the loss)"));
    }
    if (candidate.sparse_storage() || candidate.regret_window != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " sets ", candidate.sparse_storage() ? "sparse" : "regret_window",
                       ": a candidate has dense storage and no regret window; remove it"));
    }
    const absl::Status status = ValidateConfig(candidate);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

// The classes of a multi-class loss, and what a multi-class model does not offer: each
// refused field is named with the value that works.
absl::Status ValidateClasses(const ModelConfig& config) {
  const LossType loss = config.loss.type;
  if (!IsMulticlassLoss(loss)) {
    if (config.max_classes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_classes is for the multi-class losses (multiclass_hinge, softmax); leave it 0 "
          "with the ", LossTypeName(loss), " loss, got ", config.max_classes));
    }
    return absl::OkStatus();
  }
  if (config.max_classes < 2 || config.max_classes > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_classes must be in [2, ", kMaxClasses, "] with the ", LossTypeName(loss),
        " loss (the most classes the model will learn), got ", config.max_classes));
  }
  const auto refuse = [&](absl::string_view field, absl::string_view fix) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is not offered for a multi-class model (", LossTypeName(loss), " loss); ",
        fix));
  };
  if (config.select_kind()) return refuse("select", "configure one kernel model instead");
  if (config.krls_tracker_kind()) {
    return refuse("krls_tracker", "it is a regression model; set krls_tracker.max_basis = 0");
  }
  if (config.random_features.dimension > 0) {
    return refuse("random_features", "set random_features.dimension = 0");
  }
  if (config.sparse_storage()) return refuse("sparse", "set sparse.max_nonzeros = 0");
  if (config.averaged) return refuse("averaged", "set averaged = false");
  if (config.offset) return refuse("offset", "set offset = false");
  if (config.regret_window > 0) return refuse("regret_window", "set regret_window = 0");
  if (config.budget.drop_below > 0) {
    return refuse("budget.drop_below", "set budget.drop_below = 0 and bound the model with "
                                       "budget.max_terms");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const ModelConfig& config) {
  if (config.select_kind()) {
    if (config.dim < 1 || config.dim > kMaxDimension) {
      return absl::InvalidArgumentError(absl::StrCat("dim must be in [1, ", kMaxDimension,
                                                     "] with select, got ", config.dim));
    }
    OKL_RETURN_IF_ERROR(CheckAllFinite(config));
    OKL_RETURN_IF_ERROR(ValidateLoss(config.loss));
    OKL_RETURN_IF_ERROR(ValidateClasses(config));
    return ValidateSelect(config);
  }
  OKL_RETURN_IF_ERROR(ValidateSelect(config));
  const uint32_t max_dim = config.sparse_storage() ? kMaxSparseDimension : kMaxDimension;
  if (config.dim < 1 || config.dim > max_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim must be in [1, ", max_dim, "]", config.sparse_storage() ? "" :
        " (up to 2^24 with sparse storage)", ", got ", config.dim));
  }
  OKL_RETURN_IF_ERROR(ValidateSparseStorage(config));
  OKL_RETURN_IF_ERROR(CheckAllFinite(config));
  OKL_RETURN_IF_ERROR(ValidateKernel(config.kernel, config.dim));
  OKL_RETURN_IF_ERROR(ValidateLoss(config.loss));
  OKL_RETURN_IF_ERROR(ValidateClasses(config));
  OKL_RETURN_IF_ERROR(CheckNonNegative("lambda", config.lambda));
  OKL_RETURN_IF_ERROR(ValidateLearningRate(config.learning_rate, config.lambda));
  OKL_RETURN_IF_ERROR(ValidateBudget(config.budget));
  if (config.budget.policy == BudgetPolicy::kMerge && config.kernel.type != KernelType::kGaussian) {
    return absl::InvalidArgumentError(absl::StrCat(
        "budget.policy MERGE needs the gaussian kernel (merging two terms into one point "
        "relies on its form), got ", KernelTypeName(config.kernel.type),
        "; use OLDEST or SMALLEST"));
  }
  if (config.loss.type == LossType::kNovelty && config.offset) {
    return absl::InvalidArgumentError(
        "offset must be false for the novelty loss: its margin rho already plays the "
        "offset's role (f(x) < rho flags a novelty), and b and rho would drift together");
  }
  if (config.averaging_window > kMaxAveragingWindow) {
    return absl::InvalidArgumentError(absl::StrCat("averaging_window must be at most ",
                                                   kMaxAveragingWindow, " steps, got ",
                                                   config.averaging_window));
  }
  OKL_RETURN_IF_ERROR(ValidateRandomFeatures(config));
  OKL_RETURN_IF_ERROR(ValidateKrlsTracker(config));
  if (config.regret_window > kMaxRegretWindow) {
    return absl::InvalidArgumentError(absl::StrCat("regret_window must be at most ",
                                                   kMaxRegretWindow, " (0: off), got ",
                                                   config.regret_window));
  }
  if (config.regret_window > 0 && config.dim > kMaxDimension) {
    return absl::InvalidArgumentError(absl::StrCat(
        "regret_window needs dim <= ", kMaxDimension, " (its examples and the comparator's "
        "kernel are dense), got dim ", config.dim, "; set regret_window = 0"));
  }
  if (config.regret_window > 0 && config.lambda <= 0 && !config.krls_tracker_kind()) {
    return absl::InvalidArgumentError(
        "regret_window needs lambda > 0: the regret's comparator minimises the regularised "
        "risk, which has no unique minimiser at lambda = 0; set lambda or regret_window = 0");
  }
  return absl::OkStatus();
}

MarginKind MarginKindOf(LossType type) {
  switch (type) {
    case LossType::kHinge:
    case LossType::kNovelty:
    case LossType::kMulticlassHinge:
      return MarginKind::kRho;
    case LossType::kEpsilonInsensitive:
      return MarginKind::kEpsilon;
    case LossType::kSquared:
    case LossType::kLogistic:
    case LossType::kHuber:
    case LossType::kSoftmax:
      break;
  }
  return MarginKind::kNone;
}

absl::string_view MarginName(MarginKind kind) {
  switch (kind) {
    case MarginKind::kRho: return "rho";
    case MarginKind::kEpsilon: return "epsilon";
    case MarginKind::kNone: break;
  }
  return "";
}

uint64_t EffectiveAveragingWindow(const ModelConfig& config) {
  if (!config.averaged) return 0;
  if (config.averaging_window > 0) return config.averaging_window;
  return config.budget.max_terms;
}

double ComparatorLambda(const ModelConfig& config, size_t n) {
  if (!config.krls_tracker_kind()) return config.lambda;
  return config.krls_tracker.noise_variance / static_cast<double>(n == 0 ? 1 : n);
}

bool IsClassificationLoss(LossType type) {
  return type == LossType::kHinge || type == LossType::kLogistic;
}

}  // namespace okl
