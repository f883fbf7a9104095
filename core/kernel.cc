#include "core/kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "Eigen/Core"
#include "core/aligned_allocator.h"

namespace okl {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXd>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXd>;

// Eigen's vectorised exp() returns DBL_MIN rather than 0 (or a subnormal) for arguments
// below log(DBL_MIN). Flushing those to exactly 0 keeps far-away terms from contributing
// anything, so that e.g. a prediction of exactly 0 stays 0 however many terms there are.
// A plain loop after the vector exp: Eigen 3.4's select() has no vector path and would
// turn every exp into a libm call (3x slower).
void FlushUnderflowToZero(ArrayMap values) {
  double* v = values.data();
  for (Eigen::Index i = 0; i < values.size(); ++i) {
    v[i] = v[i] > std::numeric_limits<double>::min() ? v[i] : 0.0;
  }
}

bool UsesDistance(KernelType type) {
  return type == KernelType::kGaussian || type == KernelType::kLaplacian ||
         type == KernelType::kHeat;
}

// sum over the union of a's and b's non-zeros, in index order, of term(a_j, b_j), where a
// coordinate absent from one side is 0 there. `both_needed` false skips the coordinates
// only one side has (a dot product's terms are 0 there).
template <typename Term>
double SumOverUnion(SparseVectorView a, SparseVectorView b, bool both_needed, Term term) {
  const size_t na = a.indices.size();
  const size_t nb = b.indices.size();
  size_t i = 0;
  size_t j = 0;
  double s = 0;
  while (i < na && j < nb) {
    const uint32_t ia = a.indices[i];
    const uint32_t ib = b.indices[j];
    if (ia == ib) {
      s += term(a.values[i++], b.values[j++]);
    } else if (ia < ib) {
      if (both_needed) s += term(a.values[i], 0.0);
      ++i;
    } else {
      if (both_needed) s += term(0.0, b.values[j]);
      ++j;
    }
  }
  for (; both_needed && i < na; ++i) s += term(a.values[i], 0.0);
  for (; both_needed && j < nb; ++j) s += term(0.0, b.values[j]);
  return s;
}

// |a - b|^2, summed as the dense sweep sums it.
double SparseSquaredDistance(SparseVectorView a, SparseVectorView b) {
  return SumOverUnion(a, b, /*both_needed=*/true, [](double u, double v) {
    const double d = u - v;
    return d * d;
  });
}

double SparseDot(SparseVectorView a, SparseVectorView b) {
  return SumOverUnion(a, b, /*both_needed=*/false, [](double u, double v) { return u * v; });
}

// Each thread's lookup arrays for SparseQuery: zero outside a live query, and grown to
// the largest dim seen (the dense array to at most kMaxDimension doubles, 512 KiB; the
// bitmap to 2^24 bits, 2 MiB).
struct ThreadArrays {
  std::vector<double> dense;
  std::vector<uint64_t> bits;
  bool in_use = false;
};
thread_local ThreadArrays thread_arrays;

}  // namespace

SparseQuery::SparseQuery(SparseVectorView x, size_t dim)
    : x_(x), squared_norm_(SquaredNorm(x)) {
  const bool use_thread_arrays = !thread_arrays.in_use;
  owns_thread_arrays_ = use_thread_arrays;
  if (use_thread_arrays) thread_arrays.in_use = true;
  if (dim <= kMaxDimension) {
    std::vector<double>& dense = use_thread_arrays ? thread_arrays.dense : own_dense_;
    if (dense.size() < dim) dense.resize(dim);
    dense_ = dense.data();
    for (size_t k = 0; k < x.indices.size(); ++k) dense_[x.indices[k]] = x.values[k];
    return;
  }
  std::vector<uint64_t>& bits = use_thread_arrays ? thread_arrays.bits : own_bits_;
  if (bits.size() < (dim + 63) / 64) bits.resize((dim + 63) / 64);
  bits_ = bits.data();
  // A table at most half full: 2^b >= 2 * non-zeros.
  int b = 1;
  while ((size_t{1} << b) < 2 * x.indices.size()) ++b;
  shift_ = 32 - b;
  mask_ = (uint32_t{1} << b) - 1;
  keys_.assign(size_t{1} << b, kEmpty);
  values_.resize(size_t{1} << b);
  for (size_t k = 0; k < x.indices.size(); ++k) {
    const uint32_t j = x.indices[k];
    bits_[j >> 6] |= uint64_t{1} << (j & 63);
    uint32_t slot = Hash(j);
    while (keys_[slot] != kEmpty) slot = (slot + 1) & mask_;
    keys_[slot] = j;
    values_[slot] = x.values[k];
  }
}

SparseQuery::~SparseQuery() {
  for (const uint32_t j : x_.indices) {
    if (dense_ != nullptr) {
      dense_[j] = 0.0;
    } else {
      bits_[j >> 6] = 0;
    }
  }
  if (owns_thread_arrays_) thread_arrays.in_use = false;
}

Kernel::Kernel(const KernelConfig& config, size_t dim)
    : config_(config), dim_(dim), uses_distance_(UsesDistance(config.type)),
      heat_scale_(1.0), distance_gain_(0.0) {
  switch (config.type) {
    case KernelType::kGaussian:
    case KernelType::kLaplacian:
      distance_gain_ = -config.gamma;
      break;
    case KernelType::kHeat:
      heat_scale_ = std::pow(4 * std::numbers::pi * config.t, -0.5 * static_cast<double>(dim));
      distance_gain_ = -1.0 / (4 * config.t);
      break;
    case KernelType::kLinear:
    case KernelType::kPolynomial:
      break;
  }
}

double Kernel::Evaluate(absl::Span<const double> a, absl::Span<const double> b) const {
  double s = 0;
  if (uses_distance_) {
    for (size_t j = 0; j < dim_; ++j) {
      const double d = a[j] - b[j];
      s += d * d;
    }
  } else {
    for (size_t j = 0; j < dim_; ++j) s += a[j] * b[j];
  }
  Finish(&s, 1);
  return s;
}

void Kernel::EvaluateRows(const double* columns, size_t stride, size_t rows,
                          absl::Span<const double> x, double* out) const {
  const Eigen::Index n = static_cast<Eigen::Index>(rows);
  ArrayMap acc(out, n);
  // Squared distances by direct differences rather than |a|^2 - 2<a,b> + |b|^2: the
  // expanded form cancels catastrophically for near-duplicate points, which the
  // laplacian kernel's square root would amplify to ~1e-8 errors.
  if (uses_distance_) {
    acc = (ConstArrayMap(columns, n) - x[0]).square();
    for (size_t j = 1; j < dim_; ++j) {
      acc += (ConstArrayMap(columns + j * stride, n) - x[j]).square();
    }
  } else {
    acc = ConstArrayMap(columns, n) * x[0];
    for (size_t j = 1; j < dim_; ++j) {
      acc += ConstArrayMap(columns + j * stride, n) * x[j];
    }
  }
  Finish(out, rows);
}

double Kernel::EvaluateSparse(SparseVectorView a, SparseVectorView b) const {
  double s = uses_distance_ ? SparseSquaredDistance(a, b) : SparseDot(a, b);
  Finish(&s, 1);
  return s;
}

void Kernel::EvaluateSparseRows(absl::Span<const SparseVectorView> rows,
                                const double* row_squared_norms, const SparseQuery& x,
                                double* out) const {
  for (size_t r = 0; r < rows.size(); ++r) {
    const SparseVectorView row = rows[r];
    double dot = 0;
    for (size_t k = 0; k < row.indices.size(); ++k) {
      dot += row.values[k] * x.value(row.indices[k]);
    }
    out[r] = uses_distance_
                 ? std::max(0.0, row_squared_norms[r] + x.squared_norm() - 2 * dot)
                 : dot;
  }
  Finish(out, rows.size());
}

void Kernel::Finish(double* values, size_t n) const {
  ArrayMap v(values, static_cast<Eigen::Index>(n));
  switch (config_.type) {
    case KernelType::kGaussian:
      v = (distance_gain_ * v).exp();
      FlushUnderflowToZero(v);
      return;
    case KernelType::kLaplacian:
      v = (distance_gain_ * v.sqrt()).exp();
      FlushUnderflowToZero(v);
      return;
    case KernelType::kHeat:
      v = (distance_gain_ * v).exp();
      FlushUnderflowToZero(v);
      v *= heat_scale_;
      return;
    case KernelType::kLinear:
      v += config_.c;
      return;
    case KernelType::kPolynomial: {
      // (gamma <x, x'> + c)^degree by binary powering: exact integer powers, vectorised,
      // in blocks so the base lives on the stack.
      v = config_.gamma * v + config_.c;
      if (config_.degree == 1) return;
      constexpr Eigen::Index kBlock = 256;
      alignas(kCacheLineBytes) double base_storage[kBlock];
      for (Eigen::Index i0 = 0; i0 < v.size(); i0 += kBlock) {
        const Eigen::Index m = std::min(kBlock, v.size() - i0);
        ArrayMap base(base_storage, m);
        auto power = v.segment(i0, m);
        base = power;
        power.setOnes();
        for (uint32_t e = config_.degree; e != 0; e >>= 1) {
          if (e & 1) power *= base;
          if (e > 1) base = base.square();
        }
      }
      return;
    }
  }
}

std::optional<double> Kernel::FeatureNormBound() const {
  switch (config_.type) {
    case KernelType::kGaussian:
    case KernelType::kLaplacian:
      return 1.0;
    case KernelType::kHeat:
      return std::sqrt(heat_scale_);
    case KernelType::kLinear:
    case KernelType::kPolynomial:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace okl
