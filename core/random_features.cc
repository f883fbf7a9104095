#include "core/random_features.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/split_mix.h"
#include "core/status_macros.h"

namespace okl {
namespace {

// Standard normal deviates by Box-Muller, both of each pair used (cosine first).
class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) : bits_(seed) {}

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(Uniform()));
    const double angle = 2.0 * std::numbers::pi * Uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  // Uniform on (0, 1): the top 53 bits times 2^-53, redrawn on 0 (log(0) is -inf; the
  // chance is 2^-53). Never 1 either, so the radius is never 0.
  double Uniform() {
    uint64_t k = 0;
    while (k == 0) k = bits_.Next() >> 11;
    return static_cast<double>(k) * 0x1p-53;
  }

  SplitMix64 bits_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Draws the frequencies of `config` in the documented order (frequency by frequency,
// each frequency's coordinates in order; for the laplacian kernel its dim normals, then
// the scalar u) and stores v_j[i] at out[j * frequency_stride + i * coordinate_stride],
// so that both layouts come from one stream without an intermediate copy.
void DrawFrequencies(const ModelConfig& config, size_t frequency_stride,
                     size_t coordinate_stride, double* out) {
  const size_t dim = config.dim;
  const size_t count = config.random_features.dimension / 2;
  const double gamma = config.kernel.gamma;
  NormalGenerator normal(config.random_features.seed);
  if (config.kernel.type == KernelType::kLaplacian) {
    // The spectral density of exp(-gamma |d|_2) is the multivariate Cauchy distribution
    // of scale gamma: a gaussian vector over the modulus of an independent gaussian.
    for (size_t j = 0; j < count; ++j) {
      double* v = out + j * frequency_stride;
      for (size_t i = 0; i < dim; ++i) v[i * coordinate_stride] = normal.Next();
      const double scale = gamma / std::abs(normal.Next());
      for (size_t i = 0; i < dim; ++i) v[i * coordinate_stride] *= scale;
    }
    return;
  }
  // gaussian: exp(-gamma |d|^2) is the characteristic function of N(0, 2 gamma I).
  const double deviation = std::sqrt(2.0 * gamma);
  for (size_t j = 0; j < count; ++j) {
    double* v = out + j * frequency_stride;
    for (size_t i = 0; i < dim; ++i) v[i * coordinate_stride] = deviation * normal.Next();
  }
}

// sin and cos of many values at once. Eigen 3.4 vectorises neither for doubles, and
// libm's scalar calls would cost more than the rest of a step together. A value x is
// reduced to r in [-pi/4, pi/4] by x = r + n pi/2, with pi/2 split in three parts
// (fdlibm's pio2_1, pio2_2, pio2_2t: n pio2_1 and n pio2_2 are exact for |n| < 2^20), and
// sin r, cos r are fdlibm's minimax polynomials (__kernel_sin, __kernel_cos; error below
// 2^-58 relative): within a few ulps of libm, an absolute error of ~2e-16. Beyond
// |x| = 2^19 the reduction loses accuracy; such values (rare: only the laplacian
// kernel's heavy-tailed frequencies reach them) take libm's path.
//
// Written with Eigen's packet primitives rather than Array expressions: at -O2 GCC does
// not inline an expression this long, and the Array version ran 4x slower.
using Packet = Eigen::internal::packet_traits<double>::type;
constexpr size_t kPacketSize = Eigen::internal::packet_traits<double>::size;

constexpr double kTwoOverPi = 6.36619772367581382433e-01;
constexpr double kPio2_1 = 1.57079632673412561417e+00;   // the first 33 bits of pi/2
constexpr double kPio2_2 = 6.07710050630396597660e-11;   // the next 33 bits
constexpr double kPio2_2t = 2.02226624879595063154e-21;  // pi/2 - kPio2_1 - kPio2_2
constexpr double kMaxReducedArgument = 0x1p19;
// Adding and subtracting 1.5 * 2^52 rounds a double of magnitude below 2^51 to an
// integer (in the default rounding mode, to nearest).
constexpr double kRoundingShift = 0x1.8p52;

constexpr double kS1 = -1.66666666666666324348e-01;
constexpr double kS2 = 8.33333333332248946124e-03;
constexpr double kS3 = -1.98412698298579493134e-04;
constexpr double kS4 = 2.75573137070700676789e-06;
constexpr double kS5 = -2.50507602534068634195e-08;
constexpr double kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02;
constexpr double kC2 = -1.38888888888741095749e-03;
constexpr double kC3 = 2.48015872894767294178e-05;
constexpr double kC4 = -2.75573143513906633035e-07;
constexpr double kC5 = 2.08757232129817482790e-09;
constexpr double kC6 = -1.13596475577881948265e-11;

Packet Constant(double value) { return Eigen::internal::pset1<Packet>(value); }

Packet RoundToInteger(const Packet& v) {
  using namespace Eigen::internal;  // NOLINT: the packet primitives
  return psub(padd(v, Constant(kRoundingShift)), Constant(kRoundingShift));
}

// scale sin x and scale cos x; correct for |x| <= kMaxReducedArgument.
void ScaledSinCosPacket(const Packet& x, double scale, Packet* cos_x, Packet* sin_x) {
  using namespace Eigen::internal;  // NOLINT: the packet primitives
  const Packet n = RoundToInteger(pmul(x, Constant(kTwoOverPi)));
  const Packet r = psub(psub(psub(x, pmul(n, Constant(kPio2_1))), pmul(n, Constant(kPio2_2))),
                        pmul(n, Constant(kPio2_2t)));
  const Packet z = pmul(r, r);
  Packet poly = pmadd(z, Constant(kS6), Constant(kS5));
  poly = pmadd(z, poly, Constant(kS4));
  poly = pmadd(z, poly, Constant(kS3));
  poly = pmadd(z, poly, Constant(kS2));
  poly = pmadd(z, poly, Constant(kS1));
  const Packet s = pmadd(pmul(r, z), poly, r);  // r + r^3 (S1 + S2 z + ...)
  poly = pmadd(z, Constant(kC6), Constant(kC5));
  poly = pmadd(z, poly, Constant(kC4));
  poly = pmadd(z, poly, Constant(kC3));
  poly = pmadd(z, poly, Constant(kC2));
  poly = pmadd(z, poly, Constant(kC1));
  const Packet c = pmadd(pmul(z, z), poly, psub(Constant(1.0), pmul(Constant(0.5), z)));
  // The quadrant q = n mod 4 picks (sin x, cos x) = (s, c), (c, -s), (-s, -c), (-c, s):
  // arithmetic on 0/1 factors, each product exactly a value or a zero.
  const Packet quarter = RoundToInteger(pmul(psub(n, Constant(1.5)), Constant(0.25)));
  const Packet q = psub(n, pmul(Constant(4.0), quarter));  // 0, 1, 2 or 3
  const Packet high = RoundToInteger(pmul(psub(q, Constant(0.5)), Constant(0.5)));  // q >= 2
  const Packet odd = psub(q, pmul(Constant(2.0), high));
  const Packet even = psub(Constant(1.0), odd);
  const Packet sign = psub(Constant(scale), pmul(Constant(2.0 * scale), high));  // +-scale
  *sin_x = pmul(sign, padd(pmul(s, even), pmul(c, odd)));
  *cos_x = pmul(sign, psub(pmul(c, even), pmul(s, odd)));
}

// cos_out[j] = scale cos(u[j]) and sin_out[j] = scale sin(u[j]) for j < n.
void ScaledSinCos(const double* u, size_t n, double scale, double* cos_out, double* sin_out) {
  using namespace Eigen::internal;  // NOLINT: the packet primitives
  // One loop body for every value, the last packet zero-padded, so that a value's bits
  // do not depend on its position.
  for (size_t j = 0; j < n; j += kPacketSize) {
    const size_t count = std::min(kPacketSize, n - j);
    alignas(64) double padded[kPacketSize] = {};
    Packet x;
    if (count == kPacketSize) {
      x = ploadu<Packet>(u + j);
    } else {
      std::copy(u + j, u + j + count, padded);
      x = pload<Packet>(padded);
    }
    Packet c;
    Packet s;
    ScaledSinCosPacket(x, scale, &c, &s);
    if (count == kPacketSize) {
      pstoreu(cos_out + j, c);
      pstoreu(sin_out + j, s);
    } else {
      pstore(padded, c);
      std::copy(padded, padded + count, cos_out + j);
      pstore(padded, s);
      std::copy(padded, padded + count, sin_out + j);
    }
  }
  if (Eigen::Map<const Eigen::ArrayXd>(u, static_cast<Eigen::Index>(n)).abs().maxCoeff() <=
      kMaxReducedArgument) {
    return;
  }
  for (size_t j = 0; j < n; ++j) {
    if (std::abs(u[j]) > kMaxReducedArgument) {  // inf too; a NaN stays NaN either way
      cos_out[j] = scale * std::cos(u[j]);
      sin_out[j] = scale * std::sin(u[j]);
    }
  }
}

using AlignedConstVectorMap = Eigen::Map<const Eigen::VectorXd, Eigen::Aligned64>;

template <typename Derived>
bool AllFinite(const Eigen::ArrayBase<Derived>& values) {
  // 0 * v is 0 for a finite v and NaN for inf or NaN: one vectorised sum instead of a
  // scalar test per entry.
  return (values * 0.0).sum() == 0.0;
}

// A gamma near DBL_MAX (which ValidateConfig accepts) overflows a frequency: such a model
// would predict NaN for every input.
absl::Status CheckFrequenciesFinite(const ModelConfig& config,
                                    absl::Span<const double> frequencies) {
  if (AllFinite(Eigen::Map<const Eigen::ArrayXd>(
          frequencies.data(), static_cast<Eigen::Index>(frequencies.size())))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel.", KernelTypeName(config.kernel.type), ".gamma = ", config.kernel.gamma,
      " is too large for random_features: a frequency overflows"));
}

}  // namespace

std::vector<double> RandomFeatureFrequencies(const ModelConfig& config) {
  std::vector<double> frequencies(size_t{config.random_features.dimension} / 2 * config.dim);
  DrawFrequencies(config, /*frequency_stride=*/config.dim, /*coordinate_stride=*/1,
                  frequencies.data());
  return frequencies;
}

RandomFeatureModel::RandomFeatureModel(const ModelConfig& config)
    : Model(config) {
  const size_t d = config.random_features.dimension;
  projection_rows_.resize(d / 2 * config.dim);
  DrawFrequencies(config, /*frequency_stride=*/1, /*coordinate_stride=*/d / 2,
                  projection_rows_.data());
  weights_.assign(d, 0.0);
  if (config.averaged) weight_sums_.assign(d, 0.0);
  projections_.resize(d / 2);
  features_.resize(d);
  next_weights_.resize(d);
}

size_t RandomFeatureModel::WorstCaseMemoryBytes(const ModelConfig& config) {
  const uint64_t d = config.random_features.dimension;
  const uint64_t dim = config.dim;
  // The frequencies; the weights, Step's features and candidate weights, the sums if
  // averaged; Step's projections.
  const uint64_t vectors = 3 + (config.averaged ? 1 : 0);
  const uint64_t doubles = dim * (d / 2) + vectors * d + d / 2;
  const uint64_t window = config.regret_window;
  const uint64_t window_bytes = window * (dim + 2) * sizeof(double);
  const uint64_t gram_bytes = window * window * sizeof(double);
  return doubles * sizeof(double) + window_bytes + gram_bytes;
}

absl::StatusOr<std::unique_ptr<RandomFeatureModel>> RandomFeatureModel::Create(
    const ModelConfig& config) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  if (config.random_features.dimension == 0) {
    return absl::InvalidArgumentError(
        "random_features.dimension is 0: that config describes a kernel expansion "
        "(NormaModel), not a random-feature model");
  }
  std::unique_ptr<RandomFeatureModel> model(new RandomFeatureModel(config));
  OKL_RETURN_IF_ERROR(CheckFrequenciesFinite(config, model->projection_rows_));
  return model;
}

absl::StatusOr<std::unique_ptr<RandomFeatureModel>> RandomFeatureModel::FromState(
    const ModelState& state) {
  const ModelConfig& config = state.config;
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
  };
  const size_t d = config.random_features.dimension;
  if (d == 0) {
    return inconsistent("random_features.dimension is 0 in a random-feature model's state");
  }
  if (state.weights.size() != d) {
    return inconsistent(absl::StrCat("weights has ", state.weights.size(),
                                     " entries, expected random_features.dimension ", d));
  }
  const size_t sums = config.averaged ? d : 0;
  if (state.weight_sums.size() != sums) {
    return inconsistent(absl::StrCat("weight_sums has ", state.weight_sums.size(),
                                     " entries, expected ", sums,
                                     config.averaged ? "" : " (the model is not averaged)"));
  }
  if (!state.support.empty() || !state.coefficients.empty() || !state.added_at.empty() ||
      !state.average_base.empty() || !state.average_mark.empty() ||
      !state.average_previous.empty() || !state.retired_support.empty() ||
      !state.retired_sums.empty() || !state.retired_previous_sums.empty() ||
      !state.retired_at.empty() || !state.sparse_support.empty() ||
      !state.retired_sparse_support.empty()) {
    return inconsistent(
        "a random-feature model has no expansion terms, but the state lists some");
  }
  if (HasTrackerFields(state)) {
    return inconsistent(
        "a random-feature model has no KRLS tracker posterior, but the state "
        "sets some of its fields");
  }
  // The fields of the kernel expansion's lazy scaling and windowed average have no
  // meaning here; anything but their defaults means the state is not this model's.
  if (state.scale != 1.0 || state.average_sum != 0.0 || state.average_block_start != 0 ||
      state.average_previous_start != 0 || state.average_previous_offset_sum != 0.0 ||
      state.terms_removed != 0) {
    return inconsistent(absl::StrCat(
        "a random-feature model has scale 1 and no averaging blocks or removed terms, got "
        "scale ", state.scale, ", average_sum ", state.average_sum, ", average_block_start ",
        state.average_block_start, ", average_previous_start ", state.average_previous_start,
        ", average_previous_offset_sum ", state.average_previous_offset_sum,
        ", terms_removed ", state.terms_removed));
  }
  OKL_RETURN_IF_ERROR(CheckFiniteValues("weights", state.weights));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("weight_sums", state.weight_sums));
  OKL_RETURN_IF_ERROR(ValidateStateScalars(state));

  std::unique_ptr<RandomFeatureModel> model(new RandomFeatureModel(config));
  OKL_RETURN_IF_ERROR(CheckFrequenciesFinite(config, model->projection_rows_));
  const size_t half = d / 2;
  for (size_t j = 0; j < half; ++j) {
    model->weights_[j] = state.weights[2 * j];
    model->weights_[half + j] = state.weights[2 * j + 1];
    if (config.averaged) {
      model->weight_sums_[j] = state.weight_sums[2 * j];
      model->weight_sums_[half + j] = state.weight_sums[2 * j + 1];
    }
  }
  model->RestoreStateScalars(state);
  model->average_offset_sum_ = state.average_offset_sum;
  return model;
}

ModelState RandomFeatureModel::ExportState() const {
  ModelState state;
  state.config = config_;
  const size_t d = weights_.size();
  const size_t half = d / 2;
  state.weights.resize(d);
  state.weight_sums.resize(weight_sums_.size());
  for (size_t j = 0; j < half; ++j) {
    state.weights[2 * j] = weights_[j];
    state.weights[2 * j + 1] = weights_[half + j];
    if (config_.averaged) {
      state.weight_sums[2 * j] = weight_sums_[j];
      state.weight_sums[2 * j + 1] = weight_sums_[half + j];
    }
  }
  ExportStateScalars(&state);
  state.scale = 1.0;
  state.average_offset_sum = average_offset_sum_;
  return state;
}

void RandomFeatureModel::BlockFeatures(absl::Span<const double> x, double* projections,
                                       double* features) const {
  const size_t half = weights_.size() / 2;
  Eigen::Map<Eigen::ArrayXd> v_dot_x(projections, static_cast<Eigen::Index>(half));
  v_dot_x.setZero();
  // Coordinates in order, zeros skipped: a sparse input costs its nonzeros only, and a
  // skipped x_i v_j[i] is a zero, which adds nothing to a sum that starts at +0.
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 0.0) continue;
    v_dot_x += x[i] * Eigen::Map<const Eigen::ArrayXd>(projection_rows_.data() + i * half,
                                                        static_cast<Eigen::Index>(half));
  }
  const double scale = std::sqrt(2.0 / static_cast<double>(weights_.size()));
  ScaledSinCos(projections, half, scale, /*cos_out=*/features, /*sin_out=*/features + half);
}

void RandomFeatureModel::Features(absl::Span<const double> x, absl::Span<double> out) const {
  const size_t d = weights_.size();
  const size_t half = d / 2;
  AlignedVector buffer(d + half);  // the features in block order, then the projections
  BlockFeatures(x, buffer.data() + d, buffer.data());
  for (size_t j = 0; j < half; ++j) {
    out[2 * j] = buffer[j];
    out[2 * j + 1] = buffer[half + j];
  }
}

absl::StatusOr<Observation> RandomFeatureModel::Step(absl::Span<const double> x, double y) {
  OKL_RETURN_IF_ERROR(CheckStepCounter());
  const Eigen::Index d = static_cast<Eigen::Index>(weights_.size());
  BlockFeatures(x, projections_.data(), features_.data());
  const AlignedConstVectorMap w(weights_.data(), d);
  const AlignedConstVectorMap z(features_.data(), d);
  const StepScalars step = ComputeStepScalars(w.dot(z) + offset_, y);
  const double eta = step.eta;
  // The update goes to a scratch buffer first: a step that would make the model
  // non-finite must change nothing.
  Eigen::Map<Eigen::ArrayXd, Eigen::Aligned64> next(next_weights_.data(), d);
  next = (1.0 - eta * config_.lambda) * w.array() + (-eta * step.at.derivative) * z.array();
  const bool sums_finite =
      !config_.averaged ||
      (std::isfinite(average_offset_sum_ + offset_) &&
       AllFinite(Eigen::Map<const Eigen::ArrayXd, Eigen::Aligned64>(weight_sums_.data(), d) +
                 w.array()));
  OKL_RETURN_IF_ERROR(CheckStepFinite(step, AllFinite(next) && sums_finite));

  if (config_.averaged) {
    // f_t, which made this step's prediction, joins the running sum of hypotheses.
    Eigen::Map<Eigen::ArrayXd, Eigen::Aligned64>(weight_sums_.data(), d) += w.array();
    average_offset_sum_ += offset_;
  }
  weights_.swap(next_weights_);
  return CommitStepScalars(step, x, y);
}

double RandomFeatureModel::PredictUnchecked(absl::Span<const double> x,
                                            PredictionMode mode) const {
  const bool current = mode == PredictionMode::kCurrent ||
                       (mode == PredictionMode::kConfigured && !config_.averaged);
  if (!current && steps_ == 0) return 0.0;  // the average of no hypotheses: f_1 = 0
  const Eigen::Index d = static_cast<Eigen::Index>(weights_.size());
  // Its own buffer: a const method may run concurrently with others. The features come
  // first, at the 64-byte boundary the dot product needs; the projections after them.
  AlignedVector buffer(weights_.size() + weights_.size() / 2);
  BlockFeatures(x, buffer.data() + weights_.size(), buffer.data());
  const AlignedConstVectorMap z(buffer.data(), d);
  if (current) return AlignedConstVectorMap(weights_.data(), d).dot(z) + offset_;
  const double sum = AlignedConstVectorMap(weight_sums_.data(), d).dot(z) + average_offset_sum_;
  return sum / static_cast<double>(steps_);
}

double RandomFeatureModel::SquaredNorm() const {
  return AlignedConstVectorMap(weights_.data(), static_cast<Eigen::Index>(weights_.size()))
      .squaredNorm();
}

ModelStats RandomFeatureModel::stats() const {
  ModelStats stats = ScalarStats();
  stats.expansion_size = static_cast<uint32_t>(weights_.size());
  return stats;
}

size_t RandomFeatureModel::MemoryBytes() const {
  const size_t doubles = projection_rows_.capacity() + weights_.capacity() +
                         weight_sums_.capacity() + projections_.capacity() +
                         features_.capacity() + next_weights_.capacity();
  return doubles * sizeof(double) + regret_window_.MemoryBytes();
}

}  // namespace okl
