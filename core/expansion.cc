#include "core/expansion.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "Eigen/Core"

namespace okl {
namespace {

// Rows per sweep block: the block's kernel values (2 KiB) and one column slice stay in
// L1 while the sweep runs down the columns. A multiple of 8 keeps every block aligned.
constexpr size_t kBlockRows = 256;
constexpr size_t kSlotAlignment = Expansion::kSlotAlignment;

using AlignedConstMap = Eigen::Map<const Eigen::ArrayXd, Eigen::Aligned32>;
using AlignedMap = Eigen::Map<Eigen::ArrayXd, Eigen::Aligned32>;

size_t RoundUpToSlotAlignment(size_t n) {
  return (n + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}

}  // namespace

Expansion::Expansion(size_t dim, bool track_average, size_t max_terms, Storage storage)
    : dim_(dim), track_average_(track_average), max_terms_(max_terms), storage_(storage) {}

void Expansion::Reserve(size_t terms) {
  if (terms > capacity_) Grow(terms);
}

void Expansion::Grow(size_t min_capacity) {
  const size_t capacity = RoundUpToSlotAlignment(std::max(min_capacity, kSlotAlignment));
  if (sparse()) {
    sparse_terms_.resize(capacity);
    sparse_squared_norms_.resize(capacity);
  } else {
    AlignedVector<double> columns(capacity * dim_);
    for (size_t j = 0; j < dim_; ++j) {
      std::copy_n(columns_.data() + j * capacity_, size_, columns.data() + j * capacity);
    }
    columns_ = std::move(columns);
  }
  coefficients_.resize(capacity);
  added_at_.resize(capacity);
  if (track_average_) {
    average_base_.resize(capacity);
    average_mark_.resize(capacity);
    average_previous_.resize(capacity);
  }
  by_age_.Resize(capacity);
  capacity_ = capacity;
}

void Expansion::EvaluateBlock(const Kernel& kernel, absl::Span<const double> x,
                              size_t first, size_t rows, double* out) const {
  kernel.EvaluateRows(columns_.data() + first, capacity_, rows, x, out);
}

void Expansion::EvaluateBlock(const Kernel& kernel, const SparseQuery& x, size_t first,
                              size_t rows, double* out) const {
  SparseVectorView terms[kBlockRows];
  for (size_t r = 0; r < rows; ++r) terms[r] = SparseSupport(first + r);
  kernel.EvaluateSparseRows(absl::MakeConstSpan(terms, rows),
                            sparse_squared_norms_.data() + first, x, out);
}

template <typename Input, typename Sweep>
void Expansion::ForEachBlock(const Kernel& kernel, const Input& x, Sweep sweep) const {
  if constexpr (std::is_same_v<Input, SparseVectorView>) {
    if (size_ == 0) return;
    const SparseQuery query(x, dim_);  // once for every block
    SweepBlocks(kernel, query, sweep);
  } else {
    SweepBlocks(kernel, x, sweep);
  }
}

template <typename Query, typename Sweep>
void Expansion::SweepBlocks(const Kernel& kernel, const Query& x, Sweep sweep) const {
  alignas(kCacheLineBytes) double values[kBlockRows];
  for (size_t first = 0; first < size_; first += kBlockRows) {
    const size_t rows = std::min(kBlockRows, size_ - first);
    EvaluateBlock(kernel, x, first, rows, values);
    sweep(first, rows, AlignedConstMap(values, static_cast<Eigen::Index>(rows)));
  }
}

template <typename Input>
double Expansion::DotOf(const Kernel& kernel, const Input& x) const {
  double sum = 0;
  ForEachBlock(kernel, x, [&](size_t first, size_t rows, const AlignedConstMap& k) {
    sum += (k * AlignedConstMap(coefficients_.data() + first,
                                static_cast<Eigen::Index>(rows)))
               .sum();
  });
  return sum;
}

double Expansion::Dot(const Kernel& kernel, absl::Span<const double> x) const {
  return DotOf(kernel, x);
}

double Expansion::Dot(const Kernel& kernel, SparseVectorView x) const {
  return DotOf(kernel, x);
}

template <typename Input>
void Expansion::KernelValuesOf(const Kernel& kernel, const Input& x,
                               absl::Span<double> out) const {
  ForEachBlock(kernel, x, [&](size_t first, size_t rows, const AlignedConstMap& k) {
    std::copy_n(k.data(), rows, out.data() + first);
  });
}

void Expansion::KernelValues(const Kernel& kernel, absl::Span<const double> x,
                             absl::Span<double> out) const {
  KernelValuesOf(kernel, x, out);
}

void Expansion::KernelValues(const Kernel& kernel, SparseVectorView x,
                             absl::Span<double> out) const {
  KernelValuesOf(kernel, x, out);
}

template <typename Input>
double Expansion::AveragedDotOf(const Kernel& kernel, const Input& x,
                                double average_sum) const {
  double sum = 0;
  ForEachBlock(kernel, x, [&](size_t first, size_t rows, const AlignedConstMap& k) {
    const auto n = static_cast<Eigen::Index>(rows);
    const AlignedConstMap a(coefficients_.data() + first, n);
    const AlignedConstMap base(average_base_.data() + first, n);
    const AlignedConstMap mark(average_mark_.data() + first, n);
    const AlignedConstMap previous(average_previous_.data() + first, n);
    sum += (k * (previous + base + a * (average_sum - mark))).sum();
  });
  return sum;
}

double Expansion::AveragedDot(const Kernel& kernel, absl::Span<const double> x,
                              double average_sum) const {
  return AveragedDotOf(kernel, x, average_sum);
}

double Expansion::AveragedDot(const Kernel& kernel, SparseVectorView x,
                              double average_sum) const {
  return AveragedDotOf(kernel, x, average_sum);
}

void Expansion::WriteSlotScalars(size_t slot, double coefficient, uint64_t added_at,
                                 double average_mark) {
  coefficients_[slot] = coefficient;
  added_at_[slot] = added_at;
  if (track_average_) {
    average_base_[slot] = 0.0;
    average_mark_[slot] = average_mark;
    average_previous_[slot] = 0.0;
  }
}

void Expansion::WriteSupport(size_t slot, absl::Span<const double> x) {
  for (size_t j = 0; j < dim_; ++j) columns_[j * capacity_ + slot] = x[j];
}

void Expansion::WriteSupport(size_t slot, SparseVectorView x) {
  SparseTerm& term = sparse_terms_[slot];
  auto bytes = [](const SparseTerm& t) {
    return t.indices.capacity() * sizeof(uint32_t) + t.values.capacity() * sizeof(double);
  };
  sparse_entry_bytes_ -= bytes(term);
  term.indices.assign(x.indices.begin(), x.indices.end());
  term.values.assign(x.values.begin(), x.values.end());
  sparse_entry_bytes_ += bytes(term);
  sparse_squared_norms_[slot] = SquaredNorm(x);
}

void Expansion::SlotRing::Resize(size_t capacity) {
  std::vector<uint32_t> ring(capacity);
  for (size_t i = 0; i < count_; ++i) ring[i] = at(i);
  ring_ = std::move(ring);
  head_ = 0;
}

void Expansion::SlotRing::Insert(size_t i, uint32_t slot) {
  // The entries from i on move one place back (none when `slot` is the newest).
  for (size_t k = count_; k > i; --k) at(k) = at(k - 1);
  ++count_;
  at(i) = slot;
}

void Expansion::SlotRing::Erase(size_t i) {
  if (i == 0) {  // the oldest: O(1)
    head_ = Index(1);
  } else {
    for (size_t k = i; k + 1 < count_; ++k) at(k) = at(k + 1);
  }
  --count_;
}

size_t Expansion::SlotRing::Find(uint32_t slot) const {
  size_t i = 0;
  while (i < count_ && at(i) != slot) ++i;
  return i;
}

void Expansion::InsertByAge(size_t slot) {
  const uint64_t age = added_at_[slot];
  size_t newer = by_age_.size();
  while (newer > 0 && added_at_[by_age_.at(newer - 1)] > age) --newer;
  by_age_.Insert(newer, static_cast<uint32_t>(slot));
}

void Expansion::EraseByAge(size_t slot) {
  by_age_.Erase(by_age_.Find(static_cast<uint32_t>(slot)));
}

template <typename Input>
void Expansion::AppendTerm(const Input& x, double coefficient, uint64_t added_at,
                           double average_mark) {
  if (size_ == capacity_) {
    size_t capacity = std::max(2 * capacity_, size_ + 1);
    if (max_terms_ > 0) capacity = std::max(std::min(capacity, max_terms_), size_ + 1);
    Grow(capacity);
  }
  WriteSupport(size_, x);
  WriteSlotScalars(size_, coefficient, added_at, average_mark);
  InsertByAge(size_);
  ++size_;
}

void Expansion::Append(absl::Span<const double> x, double coefficient, uint64_t added_at,
                       double average_mark) {
  AppendTerm(x, coefficient, added_at, average_mark);
}

void Expansion::Append(SparseVectorView x, double coefficient, uint64_t added_at,
                       double average_mark) {
  AppendTerm(x, coefficient, added_at, average_mark);
}

template <typename Input>
void Expansion::ReplaceTerm(size_t slot, const Input& x, double coefficient,
                            uint64_t added_at, double average_mark) {
  EraseByAge(slot);
  WriteSupport(slot, x);
  WriteSlotScalars(slot, coefficient, added_at, average_mark);
  InsertByAge(slot);
}

void Expansion::Replace(size_t slot, absl::Span<const double> x, double coefficient,
                        uint64_t added_at, double average_mark) {
  ReplaceTerm(slot, x, coefficient, added_at, average_mark);
}

void Expansion::Replace(size_t slot, SparseVectorView x, double coefficient,
                        uint64_t added_at, double average_mark) {
  ReplaceTerm(slot, x, coefficient, added_at, average_mark);
}

void Expansion::MoveSlot(size_t from, size_t to) {
  if (sparse()) {
    // A swap, so that `from` keeps the arrays of the term that left, for reuse.
    std::swap(sparse_terms_[to], sparse_terms_[from]);
    sparse_squared_norms_[to] = sparse_squared_norms_[from];
  } else {
    for (size_t j = 0; j < dim_; ++j) columns_[j * capacity_ + to] = columns_[j * capacity_ + from];
  }
  coefficients_[to] = coefficients_[from];
  added_at_[to] = added_at_[from];
  if (track_average_) {
    average_base_[to] = average_base_[from];
    average_mark_[to] = average_mark_[from];
    average_previous_[to] = average_previous_[from];
  }
}

void Expansion::Remove(size_t slot) {
  const size_t last = size_ - 1;
  EraseByAge(slot);
  if (slot != last) {
    by_age_.at(by_age_.Find(static_cast<uint32_t>(last))) = static_cast<uint32_t>(slot);
    MoveSlot(last, slot);
  }
  --size_;
}

void Expansion::RemoveAddedAtMost(uint64_t step) {
  std::vector<uint32_t> new_slot(size_, UINT32_MAX);
  size_t kept = 0;
  for (size_t slot = 0; slot < size_; ++slot) {
    if (added_at_[slot] <= step) continue;
    if (kept != slot) MoveSlot(slot, kept);
    new_slot[slot] = static_cast<uint32_t>(kept++);
  }
  // The kept slots keep their age order: renumber them in place, dropping the others.
  size_t kept_entries = 0;
  for (size_t i = 0; i < by_age_.size(); ++i) {
    const uint32_t renumbered = new_slot[by_age_.at(i)];
    if (renumbered != UINT32_MAX) by_age_.at(kept_entries++) = renumbered;
  }
  by_age_.Truncate(kept_entries);
  size_ = kept;
}

size_t Expansion::SmallestSlot() const {
  size_t best = 0;
  double best_abs = std::abs(coefficients_[0]);
  for (size_t i = 1; i < size_; ++i) {
    const double v = std::abs(coefficients_[i]);
    if (v < best_abs || (v == best_abs && added_at_[i] < added_at_[best])) {
      best = i;
      best_abs = v;
    }
  }
  return best;
}

size_t Expansion::OldestSlotAtMost(double max_abs) const {
  for (size_t i = 0; i < by_age_.size(); ++i) {
    const uint32_t slot = by_age_.at(i);
    if (std::abs(coefficients_[slot]) <= max_abs) return slot;
  }
  return size_;
}

double Expansion::MinAbsCoefficient() const {
  double m = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < size_; ++i) m = std::min(m, std::abs(coefficients_[i]));
  return m;
}

void Expansion::ScaleCoefficients(double factor) {
  for (size_t i = 0; i < size_; ++i) coefficients_[i] *= factor;
}

void Expansion::FoldAverage(double average_sum) {
  for (size_t i = 0; i < size_; ++i) {
    average_base_[i] = SummedCoefficient(i, average_sum);
    average_mark_[i] = 0.0;
  }
}

void Expansion::StartAverageBlock(double average_sum) {
  for (size_t i = 0; i < size_; ++i) {
    average_previous_[i] = SummedCoefficient(i, average_sum);
    average_base_[i] = 0.0;
    average_mark_[i] = 0.0;
  }
}

bool Expansion::SummedCoefficientsFinite(double average_sum) const {
  const auto n = static_cast<Eigen::Index>(size_);
  const AlignedConstMap a(coefficients_.data(), n);
  const AlignedConstMap base(average_base_.data(), n);
  const AlignedConstMap mark(average_mark_.data(), n);
  return (base + a * (average_sum - mark)).allFinite();
}

void Expansion::CopySupport(size_t slot, double* out) const {
  for (size_t j = 0; j < dim_; ++j) out[j] = columns_[j * capacity_ + slot];
}


}  // namespace okl
