// core/config.h
//
// ModelConfig is the complete, plain-C++ description of one NORMA model: input dimension,
// kernel, loss, learning-rate schedule, regulariser, offset, budget and prediction mode;
// or, for the KRLS tracker, its dictionary size, noise variance and forgetting.
// It mirrors okl.v1.ModelConfig on the wire (proto/convert.h converts) and is validated
// by ValidateConfig() before any model is built from it.
//
// Example:
//   okl::ModelConfig config;
//   config.dim = 7;
//   config.kernel = {.type = okl::KernelType::kGaussian, .gamma = 1.0};
//   config.loss = {.type = okl::LossType::kSquared};
//   config.learning_rate = {.schedule = okl::Schedule::kConstant, .eta0 = 0.5};
//   config.lambda = 0.01;
//   config.budget = {.max_terms = 512, .policy = okl::BudgetPolicy::kOldest};
//   OKL_RETURN_IF_ERROR(okl::ValidateConfig(config));
#ifndef OKL_CORE_CONFIG_H_
#define OKL_CORE_CONFIG_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/enum_names.h"

namespace okl {

// Limits that keep one model's memory and per-step cost bounded. A full expansion holds
// max_terms * dim doubles, so these two together bound a model at 32 GiB in theory; the
// server applies tighter, configurable limits on top.
inline constexpr uint32_t kMaxDimension = 65536;
inline constexpr uint32_t kMaxTerms = 1u << 22;
inline constexpr uint32_t kMaxPolynomialDegree = 64;
// The regret comparator solves a |W| x |W| system; beyond this it is too slow to be
// recomputed in the background.
inline constexpr uint32_t kMaxRegretWindow = 8192;
// A random-feature model holds D weights and dim * D / 2 frequencies.
inline constexpr uint32_t kMaxRandomFeatures = 65536;
// The averaged hypothesis' window, in steps (see ModelConfig::averaging_window).
inline constexpr uint32_t kMaxAveragingWindow = 1u << 24;
// A sparse-storage model (SparseStorageConfig) stores only its terms' non-zeros, so its
// dim may be far larger; its memory is bounded by max_terms * max_nonzeros instead.
inline constexpr uint32_t kMaxSparseDimension = 1u << 24;
inline constexpr uint32_t kMaxNonZeros = 65536;
// A KRLS tracker holds up to three (M + 1) x (M + 1) matrices: 4096 bases take ~400 MB.
inline constexpr uint32_t kMaxBasis = 4096;
// A multi-class model holds a coefficient per class for each of its terms (the server may
// set a lower limit).
inline constexpr uint32_t kMaxClasses = 65536;

enum class KernelType { kGaussian, kLaplacian, kLinear, kPolynomial, kHeat };
inline constexpr std::array<EnumName<KernelType>, 5> kKernelTypeNames = {{
    {KernelType::kGaussian, "gaussian"},
    {KernelType::kLaplacian, "laplacian"},
    {KernelType::kLinear, "linear"},
    {KernelType::kPolynomial, "polynomial"},
    {KernelType::kHeat, "heat"},
}};

// Which fields are read depends on `type`:
//   gaussian   exp(-gamma |x - x'|^2)           gamma > 0
//   laplacian  exp(-gamma |x - x'|)             gamma > 0
//   linear     <x, x'> + c                      c >= 0
//   polynomial (gamma <x, x'> + c)^degree       gamma > 0, c >= 0, 1 <= degree <= 64
//   heat       (4 pi t)^(-d/2) exp(-|x - x'|^2 / (4 t))   t > 0
struct KernelConfig {
  KernelType type = KernelType::kGaussian;
  double gamma = 1.0;
  double c = 0.0;
  uint32_t degree = 2;
  double t = 1.0;

  friend bool operator==(const KernelConfig&, const KernelConfig&) = default;
};

enum class LossType {
  kSquared,             // 1/2 (f - y)^2
  kHinge,               // max(0, rho - y f), labels +-1
  kEpsilonInsensitive,  // max(0, |f - y| - epsilon)
  kLogistic,            // log(1 + exp(-y f)), labels +-1
  kHuber,               // 1/2 r^2 for |r| <= delta, else delta (|r| - delta/2); r = f - y
  kNovelty,             // max(0, rho - f), one-class: the label is ignored
  // The multi-class losses, over a score f_c per class and a true class y (a class label,
  // not a number; core/multiclass.h):
  kMulticlassHinge,  // max(0, rho + max_{r != y} f_r - f_y) (Crammer and Singer)
  kSoftmax,          // -log(exp(f_y) / sum_c exp(f_c)), multinomial logistic
};
inline constexpr std::array<EnumName<LossType>, 8> kLossTypeNames = {{
    {LossType::kSquared, "squared"},
    {LossType::kHinge, "hinge"},
    {LossType::kEpsilonInsensitive, "epsilon_insensitive"},
    {LossType::kLogistic, "logistic"},
    {LossType::kHuber, "huber"},
    {LossType::kNovelty, "novelty"},
    {LossType::kMulticlassHinge, "multiclass_hinge"},
    {LossType::kSoftmax, "softmax"},
}};

// `rho` is the margin of hinge, novelty and multiclass_hinge, `epsilon` the tube of epsilon-insensitive,
// `delta` Huber's threshold. `nu` > 0 turns on NORMA's nu-trick for hinge, novelty and
// epsilon-insensitive: rho (or epsilon) starts at the value given and is then learned.
struct LossConfig {
  LossType type = LossType::kSquared;
  double rho = 1.0;
  double epsilon = 0.1;
  double delta = 1.0;
  double nu = 0.0;

  friend bool operator==(const LossConfig&, const LossConfig&) = default;
};

enum class Schedule {
  kConstant,     // eta_t = eta0
  kInverseSqrt,  // eta_t = eta0 / sqrt(t)
  kPower,        // eta_t = eta0 * t^(-theta), 0 < theta <= 1 (Smale and Yao)
};
inline constexpr std::array<EnumName<Schedule>, 3> kScheduleNames = {{
    {Schedule::kConstant, "constant"},
    {Schedule::kInverseSqrt, "inverse_sqrt"},
    {Schedule::kPower, "power"},
}};

struct LearningRateConfig {
  Schedule schedule = Schedule::kConstant;
  double eta0 = 0.1;
  double theta = 0.5;  // read only by kPower

  friend bool operator==(const LearningRateConfig&, const LearningRateConfig&) = default;
};

enum class BudgetPolicy {
  kOldest,    // drop the oldest term (NORMA's truncation)
  kSmallest,  // drop the term of smallest |alpha|, the newest included; oldest on a tie
  // Merge the term of smallest |alpha| into the same-sign term whose merge loses the least
  // RKHS norm (Wang, Crammer and Vucetic 2012); gaussian kernel only. See core/merge.h.
  kMerge,
};
inline constexpr std::array<EnumName<BudgetPolicy>, 3> kBudgetPolicyNames = {{
    {BudgetPolicy::kOldest, "oldest"},
    {BudgetPolicy::kSmallest, "smallest"},
    {BudgetPolicy::kMerge, "merge"},
}};

struct BudgetConfig {
  uint32_t max_terms = 0;  // 0: no budget, the expansion may grow without bound
  BudgetPolicy policy = BudgetPolicy::kOldest;
  double drop_below = 0.0;  // > 0: drop every term whose |alpha| falls below it

  friend bool operator==(const BudgetConfig&, const BudgetConfig&) = default;
};

// Random Fourier features (Rahimi and Recht 2007; Lu et al. 2016): instead of a kernel
// expansion, the model learns f(x) = <w, z(x)> + b on D random features
// z(x) = sqrt(2 / D) [cos(w_j . x), sin(w_j . x)]_{j < D/2}, whose inner product
// approximates the kernel: <z(x), z(x')> ~ k(x, x'). The frequencies w_j are drawn from
// the kernel's spectral density by a generator seeded with `seed`, so the model's state is
// the seed plus D weights. gaussian and laplacian kernels only; no budget (the model's
// size is fixed at D).
struct RandomFeaturesConfig {
  uint32_t dimension = 0;  // D: 0 keeps the exact kernel expansion; else even, <= 65536
  uint64_t seed = 0;

  friend bool operator==(const RandomFeaturesConfig&, const RandomFeaturesConfig&) = default;
};

// Sparse storage: the expansion stores each term's non-zeros (index and value) instead of
// all dim coordinates, and a kernel sweep costs the non-zeros of the term and the input
// rather than dim. For inputs with few non-zeros (text, one-hot features); dim may then be
// up to 2^24. Every input, dense or sparse, may have at most max_nonzeros non-zeros.
// Kernel expansions only (not random features), and not with the MERGE budget, whose
// merged points gather their pair's non-zeros.
struct SparseStorageConfig {
  uint32_t max_nonzeros = 0;  // 0: dense storage; else 1..min(dim, 65536)

  friend bool operator==(const SparseStorageConfig&, const SparseStorageConfig&) = default;
};

// The kernel recursive least-squares tracker (Van Vaerenbergh, Lazaro-Gredilla and
// Santamaria 2012; core/krls_tracker.h): a Gaussian-process posterior over a dictionary of
// at most max_basis bases, O(max_basis^2) per step, for regression with the squared loss.
// Chosen by max_basis > 0; it then replaces the learning rate, lambda, the offset and the
// budget, which must be left at their defaults.
struct KrlsTrackerConfig {
  uint32_t max_basis = 0;       // M: 0 keeps NORMA; else 1..kMaxBasis
  double noise_variance = 0.0;  // sigma_n^2 > 0, relative to the prior's signal power
  double forgetting = 1.0;      // lambda in (0, 1]: back-off to the prior; 1: stationary
  double jitter = 1e-6;         // > 0, added to k(x, x) so the kernel matrix stays invertible

  friend bool operator==(const KrlsTrackerConfig&, const KrlsTrackerConfig&) = default;
};

// True for multiclass_hinge and softmax, whose labels are classes.
constexpr bool IsMulticlassLoss(LossType type) {
  return type == LossType::kMulticlassHinge || type == LossType::kSoftmax;
}

struct ModelConfig;

// Online model selection (core/select.h): several candidate models learn from the same
// stream, and the champion is the candidate whose progressive loss (each example's loss
// before the candidate learns it) is lowest by a sequential test; predictions come from
// it or from the leaders around it (SelectPrediction).
// Chosen by enabled; the outer config then holds only dim, the loss and this (every other
// field at its default). Each candidate is a complete config of any kind but select, with
// the outer dim and loss and dense storage. No candidates: okl's default set, scaled to
// the data (core/select.h, DefaultCandidates).
inline constexpr uint32_t kMaxCandidates = 64;
inline constexpr uint32_t kMaxLiveCandidates = 16;

// What a selection predicts with (core/select.h, "Predictions").
enum class SelectPrediction {
  kDefault,   // leaders for the classification losses (hinge, logistic), else champion
  kChampion,  // the champion's prediction, and its predictive variance if it has one
  kLeaders,   // the mean of the leaders' predictions: the champion and every live
              // candidate not significantly worse than it
};
inline constexpr std::array<EnumName<SelectPrediction>, 3> kSelectPredictionNames = {{
    {SelectPrediction::kDefault, "default"},
    {SelectPrediction::kChampion, "champion"},
    {SelectPrediction::kLeaders, "leaders"},
}};

struct SelectConfig {
  bool enabled = false;
  // How many candidates learn at once, 1..kMaxLiveCandidates; 0: all of them, at most 8.
  // The others wait, in order, for a live one that is significantly worse than the
  // champion to be retired.
  uint32_t live = 0;
  std::vector<ModelConfig> candidates;
  SelectPrediction prediction = SelectPrediction::kDefault;

  friend bool operator==(const SelectConfig&, const SelectConfig&) = default;
};

struct ModelConfig {
  uint32_t dim = 0;
  KernelConfig kernel;
  LossConfig loss;
  LearningRateConfig learning_rate;
  double lambda = 0.0;  // regulariser; every step shrinks f by (1 - eta_t lambda)
  bool offset = false;  // learn an unregularised offset b
  BudgetConfig budget;
  bool averaged = false;  // Predict with the averaged hypothesis
  // The averaged hypothesis averages the hypotheses of the last W to 2W steps (suffix
  // averaging in blocks of W steps; see NormaModel). 0: W = budget.max_terms with a
  // budget, else every hypothesis since step 1. Read only when averaged.
  uint32_t averaging_window = 0;
  uint32_t regret_window = 0;   // 0: no regret tracking
  RandomFeaturesConfig random_features;
  SparseStorageConfig sparse;
  KrlsTrackerConfig krls_tracker;
  SelectConfig select;
  // A multi-class loss's most classes, 2..kMaxClasses; 0 for every other loss. Classes
  // are added as they are first seen, up to this many.
  uint32_t max_classes = 0;

  bool sparse_storage() const { return sparse.max_nonzeros > 0; }
  bool krls_tracker_kind() const { return krls_tracker.max_basis > 0; }
  bool select_kind() const { return select.enabled; }
  bool multiclass() const { return IsMulticlassLoss(loss.type); }

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// Returns InvalidArgument naming the offending field, its value and the accepted range
// when `config` cannot be run; OK otherwise.
absl::Status ValidateConfig(const ModelConfig& config);

// The margin a loss has: rho (hinge, novelty), epsilon (epsilon-insensitive) or none.
// ModelStats::margin holds it whatever its kind; the wire and the tools name it by kind.
enum class MarginKind { kNone, kRho, kEpsilon };
MarginKind MarginKindOf(LossType type);
// "rho", "epsilon", or "" for kNone.
absl::string_view MarginName(MarginKind kind);

// The averaged hypothesis' block length W in steps, 0 for "since step 1": the config's
// averaging_window, or budget.max_terms when that is 0. 0 unless config.averaged.
uint64_t EffectiveAveragingWindow(const ModelConfig& config);

// The regulariser of the regret's batch comparator on a window of n examples (core/regret.h):
// config.lambda; for the KRLS tracker sigma_n^2 / n, for which the comparator
// (K + n lambda I) c = y is the Gaussian-process posterior mean on the window.
double ComparatorLambda(const ModelConfig& config, size_t n);

// True for the losses whose labels must be -1 or +1 and for which mistakes are counted
// (the binary ones; IsMulticlassLoss for the others).
bool IsClassificationLoss(LossType type);

// Names and parsers, from the tables beside each enum (core/enum_names.h).
inline absl::string_view KernelTypeName(KernelType type) {
  return NameOf(kKernelTypeNames, type);
}
inline absl::string_view LossTypeName(LossType type) { return NameOf(kLossTypeNames, type); }
inline absl::string_view ScheduleName(Schedule schedule) {
  return NameOf(kScheduleNames, schedule);
}
inline absl::string_view BudgetPolicyName(BudgetPolicy policy) {
  return NameOf(kBudgetPolicyNames, policy);
}
inline absl::string_view SelectPredictionName(SelectPrediction prediction) {
  return NameOf(kSelectPredictionNames, prediction);
}
inline std::optional<KernelType> ParseKernelType(absl::string_view name) {
  return ParseName(kKernelTypeNames, name);
}
inline std::optional<LossType> ParseLossType(absl::string_view name) {
  return ParseName(kLossTypeNames, name);
}
inline std::optional<Schedule> ParseSchedule(absl::string_view name) {
  return ParseName(kScheduleNames, name);
}
inline std::optional<BudgetPolicy> ParseBudgetPolicy(absl::string_view name) {
  return ParseName(kBudgetPolicyNames, name);
}

}  // namespace okl

#endif  // OKL_CORE_CONFIG_H_
