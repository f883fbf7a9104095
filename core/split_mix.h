// core/split_mix.h
//
// SplitMix64 (Steele, Lea and Flood 2014; the generator java.util.SplittableRandom and
// xoshiro's seeding use): a 64-bit state stepped by a constant and hashed. Every seed,
// 0 included, gives a full-period stream, which a hand-made seed needs, and the stream is
// the same on every platform (std's distributions are not). A few nanoseconds a value.
//
// Example:
//   okl::SplitMix64 bits(/*seed=*/42);
//   uint64_t k = bits.Next();
#ifndef OKL_CORE_SPLIT_MIX_H_
#define OKL_CORE_SPLIT_MIX_H_

#include <cstdint>

namespace okl {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace okl

#endif  // OKL_CORE_SPLIT_MIX_H_
