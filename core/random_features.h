// core/random_features.h
//
// RandomFeatureModel learns f(x) = <w, z(x)> + b on D random Fourier features (Rahimi and
// Recht 2007; "Fourier online gradient descent" in Lu, Hoi, Wang, Zhao and Liu, "Large
// scale online kernel learning", JMLR 2016):
//   z(x) = sqrt(2 / D) [cos(v_1 . x), sin(v_1 . x), ..., cos(v_{D/2} . x), sin(v_{D/2} . x)]
// whose inner product <z(x), z(x')> = (2 / D) sum_j cos(v_j . (x - x')) is an unbiased
// estimate of a shift-invariant kernel k(x - x') when the frequencies v_j are drawn from
// its spectral density (Bochner):
//   gaussian  exp(-gamma |x - x'|^2)  v_j ~ N(0, 2 gamma I)
//   laplacian exp(-gamma |x - x'|)    v_j = gamma g / |u|, g ~ N(0, I), u ~ N(0, 1)
//                                     (the multivariate Cauchy distribution)
// The frequencies come from RandomFeatureFrequencies(config), a generator seeded with
// config.random_features.seed, so a model's state is the seed plus the D weights.
//
// Each step is NORMA's in the feature space: p_t = f_t(x_t), g_t = d loss / d f at p_t,
// w <- (1 - eta_t lambda) w - eta_t g_t z(x_t), b <- b - eta_t g_t (with config.offset),
// the margin by the nu-trick, exactly as NormaModel (core/norma.h) does. The averaged
// hypothesis is (1/T) sum_{t=1..T} f_t; the model never forgets a term, so it needs no
// window. A step or a prediction costs O(nnz(x) D + D), independent of the stream's
// length: the projections v_j . x take D / 2 multiply-adds per nonzero input coordinate
// (a sparse input is cheap), then come D / 2 sines and cosines and O(D) for the rest.
// The same state and input give the same bits, so a restored model continues exactly
// (within one build: another -march may round differently).
//
// Not thread-safe: const methods may run concurrently with each other, but not with
// Observe.
//
// Example:
//   okl::ModelConfig config = ...;  // gaussian kernel
//   config.random_features = {.dimension = 400, .seed = 1};
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));
#ifndef OKL_CORE_RANDOM_FEATURES_H_
#define OKL_CORE_RANDOM_FEATURES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/aligned_allocator.h"
#include "core/config.h"
#include "core/learning_rate.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/regret_window.h"

namespace okl {

// The D / 2 frequencies of `config` (random_features.dimension = D > 0, a gaussian or
// laplacian kernel), frequency-major: v_j is [j * dim, (j + 1) * dim). The same config
// gives the same frequencies on every run and platform with the same libm: the generator
// (SplitMix64 seeded with random_features.seed, uniforms in (0, 1) from its top 53 bits,
// Box-Muller normals) is written out in core/random_features.cc, not taken from <random>,
// whose distributions differ between standard libraries. The normals are used in order:
// v_1's dim coordinates (then, for the laplacian kernel, its u), then v_2's, and so on.
std::vector<double> RandomFeatureFrequencies(const ModelConfig& config);

class RandomFeatureModel : public Model {
 public:
  // The dim * D / 2 frequencies, the D weights (and their sums if averaged), Step's
  // buffers (3 D / 2 projections and features, D candidate weights), and the regret
  // window with the W x W Gram matrix its comparator allocates. A Predict call holds
  // 3 D / 2 more while it runs.
  static size_t WorstCaseMemoryBytes(const ModelConfig& config);

  // InvalidArgument if ValidateConfig(config) fails, config.random_features.dimension
  // is 0, or kernel.gamma is so large (near DBL_MAX) that a frequency overflows.
  static absl::StatusOr<std::unique_ptr<RandomFeatureModel>> Create(const ModelConfig& config);
  // InvalidArgument if the state is inconsistent: a config Create rejects, weights not
  // D entries, weight_sums not D entries when averaged (else empty), any expansion term
  // or a kernel expansion's field off its default (scale 1, average_sum, the averaging
  // blocks, terms_removed 0), non-finite numbers, mistakes above steps, a regret window
  // that does not fit.
  static absl::StatusOr<std::unique_ptr<RandomFeatureModel>> FromState(const ModelState& state);

  ModelState ExportState() const override;

  // |w|^2.
  double SquaredNorm() const override;
  ModelStats stats() const override;
  // D.
  size_t expansion_size() const override { return weights_.size(); }
  // The frequencies, the weights and sums, Step's buffers and the regret window.
  size_t MemoryBytes() const override;

  // z(x) into out (D entries), bit for bit the features Step and Predict use; x must
  // have dim entries.
  void Features(absl::Span<const double> x, absl::Span<double> out) const;

 protected:
  absl::StatusOr<Observation> Step(absl::Span<const double> x, double y) override;
  double PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const override;

 private:
  // Aligned so that Eigen's reductions (the dot products) never peel a varying number of
  // leading elements: their summation order, and so their bits, must not depend on where
  // the heap put a buffer (a restored model continues bit-identically).
  using AlignedVector = std::vector<double, CacheAlignedAllocator<double>>;

  explicit RandomFeatureModel(const ModelConfig& config);

  // z(x) in block order (see weights_) into `features` (D entries, 64-byte aligned),
  // through `projections` (D / 2 entries of scratch).
  void BlockFeatures(absl::Span<const double> x, double* projections, double* features) const;

  // The frequencies transposed, coordinate-major: v_1[i], ..., v_{D/2}[i] at
  // [i * D/2, (i + 1) * D/2). The projections v_j . x are then a sum, over the nonzero
  // x_i only, of x_i times one contiguous row. (The frequency-major copy
  // RandomFeatureFrequencies returns is not kept: nothing reads it.)
  AlignedVector projection_rows_;
  // w and the features in block order, [the D/2 cosine terms | the D/2 sine terms], not
  // z(x)'s interleaved order: each half is then written by whole vector stores. Entry j
  // of the first half and entry j of the second are z(x)'s entries 2j and 2j + 1;
  // ExportState, FromState and Features convert.
  AlignedVector weights_;
  AlignedVector weight_sums_;  // sum_t w_t if averaged, else empty; block order
  double average_offset_sum_ = 0.0;  // sum_t b_t
  // Step's buffers: the projections v_j . x, the features, and the candidate weights,
  // which replace weights_ only once they are known to be finite. Predict uses its own
  // (a const method may run concurrently).
  AlignedVector projections_;
  AlignedVector features_;
  AlignedVector next_weights_;
};

}  // namespace okl

#endif  // OKL_CORE_RANDOM_FEATURES_H_
