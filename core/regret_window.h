// core/regret_window.h
//
// RegretWindowBuffer keeps the last `capacity` examples a model observed, with the online
// loss of each, in a ring: what the windowed regret (core/regret.h) is computed over.
// Recording costs a copy of one input; Copy() returns them oldest first.
//
// Not thread-safe (NormaModel owns one and is serialised by its caller).
//
// Example:
//   okl::RegretWindowBuffer window(/*capacity=*/100, /*dim=*/2);
//   window.Record({0.5, 1.0}, /*y=*/1.0, /*online_loss=*/0.3, /*step=*/1);
//   okl::RegretWindow copy = window.Copy();  // copy.size() == 1
#ifndef OKL_CORE_REGRET_WINDOW_H_
#define OKL_CORE_REGRET_WINDOW_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/regret.h"

namespace okl {

class RegretWindowBuffer {
 public:
  RegretWindowBuffer(size_t capacity, size_t dim) : capacity_(capacity), dim_(dim) {}

  // Appends an example, dropping the oldest once `capacity` are held. x has dim values.
  void Record(absl::Span<const double> x, double y, double online_loss, uint64_t step) {
    if (capacity_ == 0) return;
    if (ys_.size() < capacity_) {
      // The whole ring at once: growth by doubling would hold more than the capacity that
      // WorstCaseMemoryBytes counts.
      ReserveCapacity();
      xs_.insert(xs_.end(), x.begin(), x.end());
      ys_.push_back(y);
      losses_.push_back(online_loss);
    } else {
      std::copy(x.begin(), x.end(), xs_.begin() + oldest_ * dim_);
      ys_[oldest_] = y;
      losses_[oldest_] = online_loss;
      oldest_ = (oldest_ + 1) % capacity_;
    }
    last_step_ = step;
  }

  // The examples oldest first.
  RegretWindow Copy() const {
    RegretWindow window;
    const size_t n = ys_.size();
    window.xs.reserve(n * dim_);
    window.ys.reserve(n);
    window.online_losses.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t slot = (oldest_ + k) % n;
      window.xs.insert(window.xs.end(), xs_.begin() + slot * dim_,
                       xs_.begin() + (slot + 1) * dim_);
      window.ys.push_back(ys_[slot]);
      window.online_losses.push_back(losses_[slot]);
    }
    window.last_step = last_step_;
    return window;
  }

  // Replaces the contents with `window` (oldest first; at most capacity examples, the
  // caller has checked the sizes).
  void Assign(const RegretWindow& window) {
    xs_ = window.xs;
    ys_ = window.ys;
    losses_ = window.online_losses;
    oldest_ = 0;
    last_step_ = window.last_step;
  }

  size_t size() const { return ys_.size(); }
  size_t capacity() const { return capacity_; }
  size_t MemoryBytes() const {
    return (xs_.capacity() + ys_.capacity() + losses_.capacity()) * sizeof(double);
  }

 private:
  void ReserveCapacity() {
    xs_.reserve(capacity_ * dim_);
    ys_.reserve(capacity_);
    losses_.reserve(capacity_);
  }

  size_t capacity_;
  size_t dim_;
  std::vector<double> xs_;  // example-major, slot k at [k*dim, (k+1)*dim)
  std::vector<double> ys_;
  std::vector<double> losses_;
  size_t oldest_ = 0;  // the slot of the oldest example once the ring is full
  uint64_t last_step_ = 0;
};

}  // namespace okl

#endif  // OKL_CORE_REGRET_WINDOW_H_
