// core/sparse_vector.h
//
// Sparse inputs: a vector of dimension dim given by its non-zeros, indices strictly
// increasing and below dim. SparseVectorView is what Model's sparse calls take;
// SparseRows holds many such vectors back to back (a batch, or a sparse-storage model's
// terms in its exported state).
//
// Example:
//   okl::SparseRows rows;
//   rows.Append({.indices = {3, 70000}, .values = {1.0, -2.0}});
//   okl::SparseVectorView x = rows.Row(0);  // x_3 = 1, x_70000 = -2, every other 0
#ifndef OKL_CORE_SPARSE_VECTOR_H_
#define OKL_CORE_SPARSE_VECTOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace okl {

struct SparseVectorView {
  absl::Span<const uint32_t> indices;  // strictly increasing, < dim
  absl::Span<const double> values;     // one per index
};

// Vectors stored back to back: row r holds the entries [start(r), ends[r]) of indices
// and values, where start(0) = 0 and start(r) = ends[r - 1].
struct SparseRows {
  std::vector<uint32_t> indices;
  std::vector<double> values;
  std::vector<uint64_t> ends;

  size_t size() const { return ends.size(); }
  // No rows and no entries: a state's rows are absent only when all three arrays are
  // (a state that sets any of them is not one a dense model restores and exports alike:
  // tests/fuzz/regressions/snapshot/*_stray_sparse_support_*.snap).
  bool empty() const { return ends.empty() && indices.empty() && values.empty(); }
  SparseVectorView Row(size_t r) const {
    const size_t start = r == 0 ? 0 : ends[r - 1];
    return {.indices = absl::MakeConstSpan(indices).subspan(start, ends[r] - start),
            .values = absl::MakeConstSpan(values).subspan(start, ends[r] - start)};
  }
  void Append(SparseVectorView row) {
    indices.insert(indices.end(), row.indices.begin(), row.indices.end());
    values.insert(values.end(), row.values.begin(), row.values.end());
    ends.push_back(indices.size());
  }
  void clear() {
    indices.clear();
    values.clear();
    ends.clear();
  }

  friend bool operator==(const SparseRows&, const SparseRows&) = default;
};

// InvalidArgument, with a message that names `name` and says what to fix, unless x has as
// many values as indices, its indices strictly increase and are below `dim`, its values are
// finite, and it has at most `max_nonzeros` entries.
absl::Status ValidateSparseVector(absl::string_view name, SparseVectorView x, uint64_t dim,
                                  uint64_t max_nonzeros);

// InvalidArgument unless `rows` is well formed: ends non-decreasing up to the size of
// indices, which values matches. Says nothing of the rows' contents.
absl::Status ValidateSparseRowsShape(absl::string_view name, const SparseRows& rows);

// |x|^2, summed in index order. The sparse sweep relies on every squared norm (a stored
// term's, an input's) being summed the same way: identical vectors then cancel exactly.
inline double SquaredNorm(SparseVectorView x) {
  double sum = 0;
  for (const double v : x.values) sum += v * v;
  return sum;
}

// Writes x densely into out (size dim, every entry overwritten).
void Densify(SparseVectorView x, absl::Span<double> out);
// Appends the non-zeros of the dense x to rows as one row.
void AppendNonZeros(absl::Span<const double> x, SparseRows* rows);

}  // namespace okl

#endif  // OKL_CORE_SPARSE_VECTOR_H_
