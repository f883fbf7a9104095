// core/expansion.h
//
// Expansion stores the terms of a kernel expansion sum_i a_i k(x_i, .): the support
// vectors x_i, their *unscaled* coefficients a_i (NormaModel keeps the common scale
// factor), the step each term was added at, and, when the averaged hypothesis is tracked,
// three numbers per term for its coefficient summed over the hypotheses of the current
// and the previous averaging block (see NormaModel).
//
// Storage is column-major: coordinate j of every term is one contiguous column, so a
// kernel sweep over all terms runs down columns with the vector unit. Terms occupy slots
// [0, size()); removing a term moves the last one into its slot, so the slot order is not
// the insertion order (added_at() gives that). Sums run in slot order, which is part of a
// model's exported state: a model rebuilt from it sums identically.
//
// Sparse storage (Storage::kSparse) keeps each term's non-zeros instead: its indices and
// values, in one pair of arrays per slot that a removed term leaves to the next one
// written there, and its squared norm. A sweep then costs the terms' non-zeros, one
// lookup each into the input (see Kernel::EvaluateSparseRows), rather than dim per term.
// Its calls take SparseVectorView inputs; the dense calls take spans. Each storage
// accepts only its own kind of input.
//
// Not thread-safe for writes; const methods may run concurrently with each other.
//
// Example:
//   okl::Expansion expansion(/*dim=*/2, /*track_average=*/false);
//   expansion.Append({0.0, 1.0}, /*coefficient=*/0.5, /*added_at=*/1, /*average_mark=*/0);
//   double f = expansion.Dot(kernel, x);  // 0.5 * k((0, 1), x)
#ifndef OKL_CORE_EXPANSION_H_
#define OKL_CORE_EXPANSION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/aligned_allocator.h"
#include "core/kernel.h"
#include "core/sparse_vector.h"

namespace okl {

class Expansion {
 public:
  // Slots are allocated in groups of this many (one cache line of doubles), so a full
  // expansion may hold up to this many slots more than its terms.
  static constexpr size_t kSlotAlignment = kCacheLineBytes / sizeof(double);

  enum class Storage { kDense, kSparse };

  // `max_terms` > 0 caps the capacity that appends grow to (0: unbounded), so that a
  // full budgeted expansion holds no slack beyond rounding to a cache line.
  Expansion(size_t dim, bool track_average, size_t max_terms = 0,
            Storage storage = Storage::kDense);

  // Reserves room for `terms` terms so that appending up to that many never reallocates.
  void Reserve(size_t terms);

  size_t size() const { return size_; }
  size_t dim() const { return dim_; }
  bool tracks_average() const { return track_average_; }
  bool sparse() const { return storage_ == Storage::kSparse; }

  // sum_i a_i k(x_i, x) over all terms, in slot order.
  double Dot(const Kernel& kernel, absl::Span<const double> x) const;
  double Dot(const Kernel& kernel, SparseVectorView x) const;

  // out[i] = k(x_i, x) for every slot i; out.size() must be size().
  void KernelValues(const Kernel& kernel, absl::Span<const double> x,
                    absl::Span<double> out) const;
  void KernelValues(const Kernel& kernel, SparseVectorView x, absl::Span<double> out) const;

  // sum_i (previous_i + base_i + a_i (average_sum - mark_i)) k(x_i, x): the summed
  // coefficients of the averaged hypothesis (see NormaModel). Requires tracks_average().
  double AveragedDot(const Kernel& kernel, absl::Span<const double> x,
                     double average_sum) const;
  double AveragedDot(const Kernel& kernel, SparseVectorView x, double average_sum) const;

  // Adds a term in slot size(). `average_mark` is ignored unless tracks_average().
  void Append(absl::Span<const double> x, double coefficient, uint64_t added_at,
              double average_mark);
  void Append(SparseVectorView x, double coefficient, uint64_t added_at,
              double average_mark);
  // Overwrites the term in `slot` with a new one.
  void Replace(size_t slot, absl::Span<const double> x, double coefficient,
               uint64_t added_at, double average_mark);
  void Replace(size_t slot, SparseVectorView x, double coefficient, uint64_t added_at,
               double average_mark);
  // Removes the term in `slot`; the last term moves into it.
  void Remove(size_t slot);
  // Removes every term with added_at <= step, keeping the others in their slot order.
  // O(size * dim), however many go.
  void RemoveAddedAtMost(uint64_t step);

  // The slot of the term added earliest, in O(1). Requires size() > 0.
  size_t OldestSlot() const { return by_age_.at(0); }
  // The slot of smallest |a_i|, the earliest added on a tie. Requires size() > 0.
  size_t SmallestSlot() const;
  // The slot of the earliest added term with |a_i| <= max_abs; size() if there is none.
  size_t OldestSlotAtMost(double max_abs) const;
  // min_i |a_i|, +infinity when empty.
  double MinAbsCoefficient() const;

  // a_i *= factor for every term (the model folds its scale in before it underflows).
  void ScaleCoefficients(double factor);
  // Folds the averaged sums at running sum `average_sum` into the per-term base:
  // base_i += a_i (average_sum - mark_i), mark_i = 0. Requires tracks_average().
  void FoldAverage(double average_sum);
  // Starts a new averaging block at running sum `average_sum`: previous_i becomes the
  // summed coefficient base_i + a_i (average_sum - mark_i), and base_i = mark_i = 0.
  // Requires tracks_average().
  void StartAverageBlock(double average_sum);
  // Whether every summed coefficient base_i + a_i (average_sum - mark_i) is finite: what a
  // fold or a block start at `average_sum` would store. Requires tracks_average().
  bool SummedCoefficientsFinite(double average_sum) const;

  double coefficient(size_t slot) const { return coefficients_[slot]; }
  uint64_t added_at(size_t slot) const { return added_at_[slot]; }
  double average_base(size_t slot) const { return average_base_[slot]; }
  double average_mark(size_t slot) const { return average_mark_[slot]; }
  double average_previous(size_t slot) const { return average_previous_[slot]; }
  // base_i + a_i (average_sum - mark_i): the term's coefficient summed over the
  // hypotheses so far, at running sum `average_sum`. Requires tracks_average().
  double SummedCoefficient(size_t slot, double average_sum) const {
    return average_base_[slot] + coefficients_[slot] * (average_sum - average_mark_[slot]);
  }
  // Restores a term's averaged base (Append starts it at 0). Requires tracks_average().
  void set_average_base(size_t slot, double base) { average_base_[slot] = base; }
  // Restores a term's previous-block sum (Append starts it at 0). Requires tracks_average().
  void set_average_previous(size_t slot, double previous) { average_previous_[slot] = previous; }
  // Coordinate j of the term in `slot`. Dense storage only.
  double support(size_t slot, size_t j) const { return columns_[j * capacity_ + slot]; }
  // Copies the support vector in `slot` to out[0, dim()). Dense storage only.
  void CopySupport(size_t slot, double* out) const;
  // The non-zeros of the term in `slot`, valid until the expansion changes. Sparse
  // storage only.
  SparseVectorView SparseSupport(size_t slot) const {
    const SparseTerm& term = sparse_terms_[slot];
    return {.indices = term.indices, .values = term.values};
  }

  // Bytes held by the term arrays (what a full expansion costs in memory).
  size_t MemoryBytes() const {
    return sparse() ? capacity_ * SparseBytesPerSlot(0, track_average_) + sparse_entry_bytes_
                    : capacity_ * BytesPerSlot(dim_, track_average_);
  }
  // What one slot of an expansion of `dim` costs: its column entries, coefficient, step,
  // age-order entry and, if averaged, its three sums.
  static size_t BytesPerSlot(size_t dim, bool track_average) {
    return (dim + 1) * sizeof(double) + sizeof(uint64_t) + sizeof(uint32_t) +
           (track_average ? 3 * sizeof(double) : 0);
  }
  // The same for sparse storage, whose terms have at most `max_nonzeros` non-zeros: the
  // slot's pair of arrays and their entries instead of the columns.
  static size_t SparseBytesPerSlot(size_t max_nonzeros, bool track_average) {
    return sizeof(SparseTerm) + sizeof(double) +
           max_nonzeros * (sizeof(uint32_t) + sizeof(double)) + BytesPerSlot(0, track_average);
  }

 private:
  void Grow(size_t min_capacity);
  // One slot's inputs under sparse storage; the arrays stay allocated when the term
  // leaves, for the next term written there.
  struct SparseTerm {
    std::vector<uint32_t> indices;
    std::vector<double> values;
  };

  // Writes the term's scalars; the input is written by the caller.
  void WriteSlotScalars(size_t slot, double coefficient, uint64_t added_at,
                        double average_mark);
  void WriteSupport(size_t slot, absl::Span<const double> x);
  void WriteSupport(size_t slot, SparseVectorView x);
  template <typename Input>
  void AppendTerm(const Input& x, double coefficient, uint64_t added_at, double average_mark);
  template <typename Input>
  void ReplaceTerm(size_t slot, const Input& x, double coefficient, uint64_t added_at,
                   double average_mark);
  // Moves the term in slot `from` to slot `to` (whose term is gone).
  void MoveSlot(size_t from, size_t to);
  // out[r] = k(x_{first + r}, x) for r < rows (<= the sweep's block).
  void EvaluateBlock(const Kernel& kernel, absl::Span<const double> x, size_t first,
                     size_t rows, double* out) const;
  void EvaluateBlock(const Kernel& kernel, const SparseQuery& x, size_t first, size_t rows,
                     double* out) const;
  template <typename Input>
  double DotOf(const Kernel& kernel, const Input& x) const;
  template <typename Input>
  void KernelValuesOf(const Kernel& kernel, const Input& x, absl::Span<double> out) const;
  template <typename Input>
  double AveragedDotOf(const Kernel& kernel, const Input& x, double average_sum) const;
  // Keep by_age_ sorted by added_at as slots are written and removed.
  void InsertByAge(size_t slot);
  void EraseByAge(size_t slot);
  // Calls sweep(first_row, rows, kernel_values) for consecutive blocks of rows.
  template <typename Input, typename Sweep>
  void ForEachBlock(const Kernel& kernel, const Input& x, Sweep sweep) const;
  template <typename Query, typename Sweep>
  void SweepBlocks(const Kernel& kernel, const Query& x, Sweep sweep) const;

  size_t dim_;
  bool track_average_;
  size_t max_terms_;
  Storage storage_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  template <typename T>
  using AlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

  // capacity_ is a multiple of 8, so every column starts on a cache line.
  AlignedVector<double> columns_;  // dim_ columns of capacity_ rows each; dense storage
  std::vector<SparseTerm> sparse_terms_;  // capacity_ slots; sparse storage
  AlignedVector<double> sparse_squared_norms_;  // |x_i|^2 per slot; sparse storage
  size_t sparse_entry_bytes_ = 0;  // the bytes sparse_terms_' arrays hold
  AlignedVector<double> coefficients_;
  std::vector<uint64_t> added_at_;
  AlignedVector<double> average_base_;  // empty unless track_average_
  AlignedVector<double> average_mark_;  // empty unless track_average_
  AlignedVector<double> average_previous_;  // empty unless track_average_
  // A sequence of slot numbers in a ring of fixed size: pushes at the back, pops at the
  // front and a few entries shifted for the rare insert or erase in the middle. 4 bytes
  // a slot of capacity and nothing more (a std::deque held 576 bytes even when empty,
  // a third of a small model's fixed overhead).
  class SlotRing {
   public:
    size_t size() const { return count_; }
    // Entry i from the front. Requires i < size().
    uint32_t at(size_t i) const { return ring_[Index(i)]; }
    uint32_t& at(size_t i) { return ring_[Index(i)]; }
    // Keeps the entries, in order, in a ring of `capacity` >= size().
    void Resize(size_t capacity);
    // Inserts `slot` before entry `i` (i <= size() < capacity).
    void Insert(size_t i, uint32_t slot);
    // Erases entry i.
    void Erase(size_t i);
    // Keeps the first n <= size() entries.
    void Truncate(size_t n) { count_ = n; }
    // The position of `slot`; size() if absent.
    size_t Find(uint32_t slot) const;

   private:
    size_t Index(size_t i) const {
      const size_t k = head_ + i;
      return k < ring_.size() ? k : k - ring_.size();
    }
    std::vector<uint32_t> ring_;
    size_t head_ = 0;
    size_t count_ = 0;
  };

  // The occupied slots ordered by added_at, oldest first: the OLDEST budget's victim is
  // the front, with no scan. New terms are the newest, so updates are O(1) except where
  // a term leaves from the middle (drop_below, SMALLEST), which scans anyway.
  SlotRing by_age_;
};

}  // namespace okl

#endif  // OKL_CORE_EXPANSION_H_
