// core/kernel.h
//
// Kernel evaluates k(x, x') for one KernelConfig, both for a single pair and, the hot
// path, for every row of a block of stored support vectors at once. The block sweep is
// what prediction and training cost, so it is written for the vector unit: support
// vectors are stored column-major (one contiguous column per input coordinate), and the
// sweep works in chunks that stay in L1.
// A Kernel is immutable and safe to use from any number of threads.
//
// Example:
//   okl::Kernel kernel(config.kernel, config.dim);
//   double k = kernel.Evaluate(x, x_prime);
#ifndef OKL_CORE_KERNEL_H_
#define OKL_CORE_KERNEL_H_

#include <cstddef>
#include <optional>

#include "absl/types/span.h"
#include "core/config.h"
#include "core/sparse_vector.h"

namespace okl {

class Kernel {
 public:
  // `config` must have passed ValidateConfig for a model of dimension `dim`.
  Kernel(const KernelConfig& config, size_t dim);

  // k(a, b); both of size dim().
  double Evaluate(absl::Span<const double> a, absl::Span<const double> b) const;

  // out[r] = k(row r, x) for r in [0, rows). Row r of the support block has its j-th
  // coordinate at columns[j * stride + r]; `stride` >= rows. `out` holds `rows` values.
  void EvaluateRows(const double* columns, size_t stride, size_t rows,
                    absl::Span<const double> x, double* out) const;

  // The same for sparse vectors (core/sparse_vector.h): k(a, b), and out[r] = k(rows[r], x).
  // The sums run over the union of the non-zeros in index order, so they equal the dense
  // sums of the same vectors (a coordinate zero in both adds exactly 0). The squared
  // distance is summed from differences, not as |a|^2 + |b|^2 - 2 <a, b>, for the same
  // reason as EvaluateRows: that form cancels for near-duplicate points.
  double EvaluateSparse(SparseVectorView a, SparseVectorView b) const;
  void EvaluateSparseRows(absl::Span<const SparseVectorView> rows, SparseVectorView x,
                          double* out) const;

  // sup_x sqrt(k(x, x)) when it is finite (X in seed 003's truncation bound): 1 for the
  // gaussian and laplacian kernels, (4 pi t)^(-d/4) for the heat kernel; nullopt for the
  // linear and polynomial kernels, which are unbounded.
  std::optional<double> FeatureNormBound() const;

  size_t dim() const { return dim_; }
  const KernelConfig& config() const { return config_; }

 private:
  // Maps the accumulated squared distance (or inner product) to the kernel value, in place.
  void Finish(double* values, size_t n) const;

  KernelConfig config_;
  size_t dim_;
  bool uses_distance_;    // gaussian, laplacian, heat: accumulate |x - x'|^2
  double heat_scale_;     // (4 pi t)^(-d/2) for the heat kernel, else 1
  double distance_gain_;  // gaussian: -gamma; heat: -1/(4t); laplacian: -gamma
};

}  // namespace okl

#endif  // OKL_CORE_KERNEL_H_
