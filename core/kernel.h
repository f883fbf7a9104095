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
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "core/config.h"
#include "core/sparse_vector.h"

namespace okl {

// A sparse input prepared for a sweep: x_j for any index j in O(1), and |x|^2. For
// dim <= 65536 a per-thread dense array holds x; above, a per-thread bitmap of the
// non-zeros answers most lookups (a sparse term mostly misses a sparse input) and a hash
// table of the non-zeros the rest. Refers to the view it was made from. One thread; costs
// O(non-zeros) to make and to drop.
class SparseQuery {
 public:
  SparseQuery(SparseVectorView x, size_t dim);
  ~SparseQuery();
  SparseQuery(const SparseQuery&) = delete;
  SparseQuery& operator=(const SparseQuery&) = delete;

  double value(uint32_t j) const {
    if (dense_ != nullptr) return dense_[j];
    if ((bits_[j >> 6] >> (j & 63) & 1) == 0) return 0.0;
    uint32_t slot = Hash(j);
    while (keys_[slot] != j) slot = (slot + 1) & mask_;  // j is in the table
    return values_[slot];
  }
  double squared_norm() const { return squared_norm_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;  // above every index (dim <= 2^24)
  uint32_t Hash(uint32_t j) const { return (j * 0x9E3779B1u) >> shift_; }

  SparseVectorView x_;
  double squared_norm_ = 0.0;
  // The thread's arrays, or this query's own when they are in use already (a sweep
  // within a sweep).
  bool owns_thread_arrays_ = false;
  std::vector<double> own_dense_;
  std::vector<uint64_t> own_bits_;
  double* dense_ = nullptr;     // the dense array (dim <= 65536), else null
  uint64_t* bits_ = nullptr;    // the bitmap of the non-zeros (dim > 65536)
  std::vector<uint32_t> keys_;  // the hash table (dim > 65536)
  std::vector<double> values_;
  uint32_t mask_ = 0;
  int shift_ = 32;
};

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

  // k(a, b) for sparse vectors (core/sparse_vector.h), summed over the union of their
  // non-zeros in index order: the same sums as Evaluate on the dense vectors.
  double EvaluateSparse(SparseVectorView a, SparseVectorView b) const;
  // The sparse sweep: out[r] = k(rows[r], x), where row_squared_norms[r] = |rows[r]|^2
  // (summed in index order). It costs the rows' non-zeros, one lookup each into x: the
  // squared distance is |row|^2 + |x|^2 - 2 <row, x> (clamped at 0), exact for identical
  // vectors and for integer-valued data, but within rounding of |row|^2 + |x|^2 of the
  // dense sweep otherwise (a laplacian kernel's square root makes that ~1e-8 for
  // near-duplicate points).
  void EvaluateSparseRows(absl::Span<const SparseVectorView> rows,
                          const double* row_squared_norms, const SparseQuery& x,
                          double* out) const;

  // sup_x sqrt(k(x, x)) when it is finite (X in NORMA's truncation bound): 1 for the
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
