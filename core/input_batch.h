// core/input_batch.h
//
// InputBatch is a view of n inputs as the batch calls take them (Model::ObserveBatch,
// ModelEntry, the journal): dense, n * dim values example-major, or sparse, n rows of
// non-zeros (core/sparse_vector.h). A model takes either form whatever its storage (see
// Model). The caller owns the data, which must outlive the view.
//
// Example:
//   okl::SparseRows rows = ...;
//   OKL_RETURN_IF_ERROR(model.ObserveBatch(okl::InputBatch::Sparse(rows), ys, &out));
#ifndef OKL_CORE_INPUT_BATCH_H_
#define OKL_CORE_INPUT_BATCH_H_

#include <cstddef>

#include "absl/types/span.h"
#include "core/sparse_vector.h"

namespace okl {

class InputBatch {
 public:
  // `xs` holds xs.size() / dim inputs of `dim` values each (dim > 0).
  static InputBatch Dense(absl::Span<const double> xs, size_t dim) {
    InputBatch batch;
    batch.dense_ = xs;
    batch.dim_ = dim;
    batch.size_ = xs.size() / dim;
    return batch;
  }
  // Every row of `rows`.
  static InputBatch Sparse(const SparseRows& rows) {
    InputBatch batch;
    batch.rows_ = &rows;
    batch.size_ = rows.size();
    return batch;
  }

  bool sparse() const { return rows_ != nullptr; }
  size_t size() const { return size_; }
  // A dense batch's values (size() * dim); empty for a sparse batch.
  absl::Span<const double> dense_values() const { return dense_; }
  // Input i of a dense batch, of a sparse batch.
  absl::Span<const double> DenseRow(size_t i) const { return dense_.subspan(i * dim_, dim_); }
  SparseVectorView SparseRow(size_t i) const { return rows_->Row(first_ + i); }

  // Inputs [first, first + count) (first + count <= size()).
  InputBatch Subrange(size_t first, size_t count) const {
    InputBatch batch = *this;
    batch.size_ = count;
    if (sparse()) {
      batch.first_ = first_ + first;
    } else {
      batch.dense_ = dense_.subspan(first * dim_, count * dim_);
    }
    return batch;
  }

 private:
  InputBatch() = default;

  absl::Span<const double> dense_;
  size_t dim_ = 0;
  const SparseRows* rows_ = nullptr;
  size_t first_ = 0;  // of a sparse batch, in rows_
  size_t size_ = 0;
};

}  // namespace okl

#endif  // OKL_CORE_INPUT_BATCH_H_
