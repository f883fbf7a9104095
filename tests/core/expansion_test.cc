// Tests of Expansion: slot bookkeeping (append, replace, remove-by-swap), the oldest and
// smallest slot queries, coefficient scaling, the averaged sums' fold, the kernel sums
// against hand-computed and naive values, growth and memory accounting.

#include "core/expansion.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/kernel.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

std::vector<double> SupportOf(const Expansion& expansion, size_t slot) {
  std::vector<double> out(expansion.dim());
  expansion.CopySupport(slot, out.data());
  return out;
}

// The support vector of term number i in the tests below: distinct in every coordinate.
std::vector<double> PointFor(size_t i, size_t dim) {
  std::vector<double> x(dim);
  for (size_t j = 0; j < dim; ++j) x[j] = static_cast<double>(i) * 100.0 + j;
  return x;
}

TEST(ExpansionTest, StartsEmpty) {
  Expansion expansion(3, /*track_average=*/true);
  EXPECT_EQ(expansion.size(), 0u);
  EXPECT_EQ(expansion.dim(), 3u);
  EXPECT_TRUE(expansion.tracks_average());
  EXPECT_FALSE(Expansion(3, false).tracks_average());
  EXPECT_EQ(expansion.MinAbsCoefficient(), std::numeric_limits<double>::infinity());
  Kernel kernel({.type = KernelType::kGaussian, .gamma = 1.0}, 3);
  EXPECT_EQ(expansion.Dot(kernel, {1.0, 2.0, 3.0}), 0.0);
  EXPECT_EQ(expansion.AveragedDot(kernel, {1.0, 2.0, 3.0}, 5.0), 0.0);
}

TEST(ExpansionTest, AppendStoresEveryField) {
  Expansion expansion(3, /*track_average=*/true);
  expansion.Append({1.0, 2.0, 3.0}, 0.5, /*added_at=*/7, /*average_mark=*/0.25);
  expansion.Append({-4.0, 5.0, -6.0}, -1.5, /*added_at=*/8, /*average_mark=*/0.75);
  ASSERT_EQ(expansion.size(), 2u);
  EXPECT_EQ(expansion.coefficient(0), 0.5);
  EXPECT_EQ(expansion.added_at(0), 7u);
  EXPECT_EQ(expansion.average_mark(0), 0.25);
  EXPECT_EQ(expansion.average_base(0), 0.0);
  EXPECT_EQ(expansion.coefficient(1), -1.5);
  EXPECT_EQ(expansion.added_at(1), 8u);
  EXPECT_EQ(expansion.average_mark(1), 0.75);
  EXPECT_EQ(expansion.average_base(1), 0.0);
  EXPECT_EQ(SupportOf(expansion, 0), (std::vector<double>{1.0, 2.0, 3.0}));
  EXPECT_EQ(SupportOf(expansion, 1), (std::vector<double>{-4.0, 5.0, -6.0}));
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(expansion.support(0, j), SupportOf(expansion, 0)[j]);
    EXPECT_EQ(expansion.support(1, j), SupportOf(expansion, 1)[j]);
  }
}

TEST(ExpansionTest, ReplaceOverwritesOnlyThatSlot) {
  Expansion expansion(2, /*track_average=*/true);
  expansion.Append({1.0, 2.0}, 1.0, 1, 0.0);
  expansion.Append({3.0, 4.0}, 2.0, 2, 0.5);
  expansion.FoldAverage(1.0);  // gives slot 1 a non-zero base, which Replace must reset
  expansion.Replace(1, {5.0, 6.0}, -3.0, 9, 0.125);
  ASSERT_EQ(expansion.size(), 2u);
  EXPECT_EQ(SupportOf(expansion, 1), (std::vector<double>{5.0, 6.0}));
  EXPECT_EQ(expansion.coefficient(1), -3.0);
  EXPECT_EQ(expansion.added_at(1), 9u);
  EXPECT_EQ(expansion.average_mark(1), 0.125);
  EXPECT_EQ(expansion.average_base(1), 0.0);
  EXPECT_EQ(SupportOf(expansion, 0), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(expansion.coefficient(0), 1.0);
  EXPECT_EQ(expansion.added_at(0), 1u);
}

TEST(ExpansionTest, RemoveMovesTheLastTermIntoTheHole) {
  Expansion expansion(2, /*track_average=*/true);
  for (size_t i = 0; i < 4; ++i) {
    expansion.Append(PointFor(i, 2), 1.0 + i, /*added_at=*/10 + i,
                     /*average_mark=*/0.5 * i);
  }
  expansion.FoldAverage(2.0);  // base_i = (1 + i)(2 - 0.5 i): 2, 3, 3, 2
  expansion.Remove(1);
  ASSERT_EQ(expansion.size(), 3u);
  // Slot 1 now holds what was in slot 3, every field of it.
  EXPECT_EQ(SupportOf(expansion, 1), PointFor(3, 2));
  EXPECT_EQ(expansion.coefficient(1), 4.0);
  EXPECT_EQ(expansion.added_at(1), 13u);
  EXPECT_EQ(expansion.average_base(1), 2.0);
  EXPECT_EQ(expansion.average_mark(1), 0.0);
  // The others are untouched.
  EXPECT_EQ(SupportOf(expansion, 0), PointFor(0, 2));
  EXPECT_EQ(SupportOf(expansion, 2), PointFor(2, 2));
  EXPECT_EQ(expansion.coefficient(2), 3.0);
  EXPECT_EQ(expansion.average_base(2), 3.0);
  // Removing the last slot just shortens the expansion.
  expansion.Remove(2);
  ASSERT_EQ(expansion.size(), 2u);
  EXPECT_EQ(SupportOf(expansion, 0), PointFor(0, 2));
  EXPECT_EQ(SupportOf(expansion, 1), PointFor(3, 2));
  expansion.Remove(0);
  expansion.Remove(0);
  EXPECT_EQ(expansion.size(), 0u);
}

TEST(ExpansionTest, OldestSlotIsTheEarliestAdded) {
  Expansion expansion(1, /*track_average=*/false);
  const uint64_t added[] = {5, 2, 9, 3};
  for (size_t i = 0; i < 4; ++i) expansion.Append({1.0 * i}, 1.0, added[i], 0.0);
  EXPECT_EQ(expansion.OldestSlot(), 1u);
  expansion.Remove(1);  // the term added at 3 moves into slot 1
  EXPECT_EQ(expansion.OldestSlot(), 1u);
  EXPECT_EQ(expansion.added_at(1), 3u);
  expansion.Remove(1);  // left: added at 5 (slot 0) and 9 (slot 1)
  EXPECT_EQ(expansion.OldestSlot(), 0u);
}

// The age order against a plain scan of added_at, through thousands of random appends
// (mostly the newest, sometimes older), replaces, removes, prunes and growths, so that
// the ring that keeps it wraps around many times.
TEST(ExpansionTest, OldestSlotsMatchAScanOfAddedAtThroughRandomChurn) {
  std::mt19937_64 rng(7);
  Expansion expansion(1, /*track_average=*/false);
  // Ages are unique (the oldest is one slot); older ones are drawn below the first new.
  uint64_t next_age = 1000000;
  std::vector<bool> used_age(next_age + 20000, false);
  auto fresh_age = [&] {
    uint64_t age = next_age;
    if (rng() % 4 == 0) {  // an older age (a restored or merged term's)
      do age = rng() % next_age; while (used_age[age]);
    } else {
      ++next_age;
    }
    used_age[age] = true;
    return age;
  };
  auto scan_oldest = [&](double max_abs) {
    size_t best = expansion.size();
    for (size_t i = 0; i < expansion.size(); ++i) {
      if (std::abs(expansion.coefficient(i)) > max_abs) continue;
      if (best == expansion.size() || expansion.added_at(i) < expansion.added_at(best)) best = i;
    }
    return best;
  };
  for (int op = 0; op < 20000; ++op) {
    const uint64_t choice = rng() % 10;
    const double coefficient = static_cast<double>(rng() % 100) / 10.0;
    if (expansion.size() == 0 || choice < 5) {
      if (expansion.size() < 40) expansion.Append({0.0}, coefficient, fresh_age(), 0.0);
    } else if (choice < 7) {
      expansion.Replace(rng() % expansion.size(), {0.0}, coefficient, fresh_age(), 0.0);
    } else if (choice < 9) {
      expansion.Remove(choice == 7 ? expansion.OldestSlot() : rng() % expansion.size());
    } else {
      expansion.RemoveAddedAtMost(expansion.added_at(expansion.OldestSlot()) + rng() % 4);
    }
    if (expansion.size() == 0) continue;
    ASSERT_EQ(expansion.OldestSlot(), scan_oldest(INFINITY)) << "after operation " << op;
    const double max_abs = static_cast<double>(rng() % 100) / 10.0;
    ASSERT_EQ(expansion.OldestSlotAtMost(max_abs), scan_oldest(max_abs)) << "after " << op;
  }
}

TEST(ExpansionTest, SmallestSlotIgnoresSignAndPrefersTheEarliestAddedOnATie) {
  Expansion expansion(1, /*track_average=*/false);
  // |a| = 0.5 twice: slot 0 added at 5, slot 1 added at 3; slot 3 is larger.
  expansion.Append({0.0}, -0.5, 5, 0.0);
  expansion.Append({1.0}, 0.5, 3, 0.0);
  expansion.Append({2.0}, 2.0, 4, 0.0);
  expansion.Append({3.0}, -0.75, 1, 0.0);
  EXPECT_EQ(expansion.SmallestSlot(), 1u);
  EXPECT_EQ(expansion.MinAbsCoefficient(), 0.5);
  // A strictly smaller coefficient wins whatever its age.
  expansion.Append({4.0}, 0.25, 99, 0.0);
  EXPECT_EQ(expansion.SmallestSlot(), 4u);
  EXPECT_EQ(expansion.MinAbsCoefficient(), 0.25);
  expansion.Remove(4);
  expansion.Remove(1);  // slot 1 now holds -0.75 (added at 1); 0.5 tie broken by 5 alone
  EXPECT_EQ(expansion.SmallestSlot(), 0u);
}

TEST(ExpansionTest, ScaleCoefficientsMultipliesEveryCoefficientOnly) {
  Expansion expansion(2, /*track_average=*/false);
  expansion.Append({1.0, 2.0}, 3.0, 1, 0.0);
  expansion.Append({3.0, 4.0}, -0.5, 2, 0.0);
  expansion.ScaleCoefficients(0.25);
  EXPECT_EQ(expansion.coefficient(0), 0.75);
  EXPECT_EQ(expansion.coefficient(1), -0.125);
  EXPECT_EQ(expansion.MinAbsCoefficient(), 0.125);
  EXPECT_EQ(SupportOf(expansion, 0), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(expansion.added_at(1), 2u);
}

TEST(ExpansionTest, FoldAverageAddsCoefficientTimesElapsedSumToBase) {
  Expansion expansion(1, /*track_average=*/true);
  expansion.Append({1.0}, 2.0, 1, /*average_mark=*/1.5);
  expansion.Append({2.0}, -1.0, 2, /*average_mark=*/0.0);
  // base += a (u - mark): 2 * (4 - 1.5) = 5 and -1 * 4 = -4; marks reset to 0.
  expansion.FoldAverage(4.0);
  EXPECT_EQ(expansion.average_base(0), 5.0);
  EXPECT_EQ(expansion.average_base(1), -4.0);
  EXPECT_EQ(expansion.average_mark(0), 0.0);
  EXPECT_EQ(expansion.average_mark(1), 0.0);
  // Again from mark 0: 5 + 2 * 1 = 7 and -4 - 1 = -5.
  expansion.FoldAverage(1.0);
  EXPECT_EQ(expansion.average_base(0), 7.0);
  EXPECT_EQ(expansion.average_base(1), -5.0);
  // Folding leaves the coefficients themselves alone.
  EXPECT_EQ(expansion.coefficient(0), 2.0);
  EXPECT_EQ(expansion.coefficient(1), -1.0);
}

TEST(ExpansionTest, DotEqualsHandComputedSum) {
  // Linear kernel <x, x'> + 1 at x = (2, -1):
  //   (1, 2):  2 - 2 + 1 = 1,  a = 0.5  -> 0.5
  //   (-1, 0): -2 + 0 + 1 = -1, a = 2   -> -2
  //   (3, 1):  6 - 1 + 1 = 6,  a = -1   -> -6
  // sum = -7.5 (small dyadic numbers: exact).
  Kernel kernel({.type = KernelType::kLinear, .c = 1.0}, 2);
  Expansion expansion(2, /*track_average=*/false);
  expansion.Append({1.0, 2.0}, 0.5, 1, 0.0);
  expansion.Append({-1.0, 0.0}, 2.0, 2, 0.0);
  expansion.Append({3.0, 1.0}, -1.0, 3, 0.0);
  EXPECT_EQ(expansion.Dot(kernel, {2.0, -1.0}), -7.5);
}

TEST(ExpansionTest, AveragedDotWeighsEachTermByItsSummedCoefficient) {
  // Linear kernel, c = 0, at x = (2, 5): k((1, 0), x) = 2, k((0, 1), x) = 5.
  Kernel kernel({.type = KernelType::kLinear, .c = 0.0}, 2);
  Expansion expansion(2, /*track_average=*/true);
  expansion.Append({1.0, 0.0}, 2.0, 1, /*average_mark=*/1.0);
  expansion.Append({0.0, 1.0}, -1.0, 2, /*average_mark=*/0.0);
  // u = 3: (0 + 2 (3 - 1)) * 2 + (0 - 1 (3 - 0)) * 5 = 8 - 15 = -7.
  EXPECT_EQ(expansion.AveragedDot(kernel, {2.0, 5.0}, 3.0), -7.0);
  // Folding at u = 3 moves the sums into the bases without changing the value ...
  expansion.FoldAverage(3.0);
  EXPECT_EQ(expansion.AveragedDot(kernel, {2.0, 5.0}, 0.0), -7.0);
  // ... and the sum continues from there: (4 + 2) * 2 + (-3 - 1) * 5 = -8.
  EXPECT_EQ(expansion.AveragedDot(kernel, {2.0, 5.0}, 1.0), -8.0);
}

// Dot and AveragedDot sweep the terms in blocks; a naive sum over Kernel::Evaluate must
// agree for sizes on both sides of any plausible block size, and after removals (which
// leave size < capacity). Terms are O(1) and there are at most 1000 of them: the
// summation orders may differ, so the tolerance is 1e-12 * (1 + sum |term|).
TEST(ExpansionTest, DotAgreesWithNaiveSumAcrossBlockBoundaries) {
  constexpr size_t kDim = 4;
  std::mt19937_64 rng(31337);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (const KernelConfig& config :
       {KernelConfig{.type = KernelType::kGaussian, .gamma = 0.5},
        KernelConfig{.type = KernelType::kLaplacian, .gamma = 0.5},
        KernelConfig{.type = KernelType::kPolynomial, .gamma = 1.0, .c = 1.0, .degree = 2}}) {
    Kernel kernel(config, kDim);
    for (size_t n : {1, 7, 255, 256, 257, 513, 1000}) {
      for (bool remove_some : {false, true}) {
        SCOPED_TRACE(std::string(KernelTypeName(config.type)) + " n=" + std::to_string(n) +
                     (remove_some ? " with removals" : ""));
        Expansion expansion(kDim, /*track_average=*/true);
        for (size_t i = 0; i < n + (remove_some ? 5 : 0); ++i) {
          std::vector<double> x(kDim);
          for (double& e : x) e = uniform(rng);
          expansion.Append(x, uniform(rng), i + 1, 2.0 + uniform(rng));
        }
        if (remove_some) {
          for (int r = 0; r < 5; ++r) expansion.Remove(expansion.size() / 3);
        }
        ASSERT_EQ(expansion.size(), n);
        expansion.FoldAverage(3.0);
        std::vector<double> x(kDim);
        for (double& e : x) e = uniform(rng);
        const double u = 1.5;
        double dot = 0.0, dot_scale = 1.0, averaged = 0.0, averaged_scale = 1.0;
        for (size_t slot = 0; slot < n; ++slot) {
          const double k = kernel.Evaluate(SupportOf(expansion, slot), x);
          const double a = expansion.coefficient(slot);
          const double summed =
              expansion.average_base(slot) + a * (u - expansion.average_mark(slot));
          dot += a * k;
          dot_scale += std::abs(a * k);
          averaged += summed * k;
          averaged_scale += std::abs(summed * k);
        }
        EXPECT_NEAR(expansion.Dot(kernel, x), dot, 1e-12 * dot_scale);
        EXPECT_NEAR(expansion.AveragedDot(kernel, x, u), averaged, 1e-12 * averaged_scale);
      }
    }
  }
}

void ExpectTermsIntact(const Expansion& expansion, size_t n, size_t dim) {
  ASSERT_EQ(expansion.size(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(SupportOf(expansion, i), PointFor(i, dim)) << "slot " << i;
    ASSERT_EQ(expansion.coefficient(i), 0.5 + i) << "slot " << i;
    ASSERT_EQ(expansion.added_at(i), 1000 + i) << "slot " << i;
    if (expansion.tracks_average()) {
      ASSERT_EQ(expansion.average_mark(i), 0.25 * i) << "slot " << i;
      ASSERT_EQ(expansion.average_base(i), 0.0) << "slot " << i;
    }
    for (size_t j = 0; j < dim; ++j) {
      ASSERT_EQ(expansion.support(i, j), PointFor(i, dim)[j]);
    }
  }
}

TEST(ExpansionTest, GrowthPastReservedCapacityKeepsEveryTerm) {
  constexpr size_t kDim = 3;
  for (bool track : {false, true}) {
    for (size_t reserved : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
      SCOPED_TRACE("track " + std::to_string(track) + " reserved " + std::to_string(reserved));
      Expansion expansion(kDim, track);
      if (reserved > 0) expansion.Reserve(reserved);
      // Column-major storage re-lays out every column on growth: check after each append
      // near the interesting sizes and at the end.
      for (size_t i = 0; i < 300; ++i) {
        expansion.Append(PointFor(i, kDim), 0.5 + i, 1000 + i, 0.25 * i);
        if (i < 10 || i == reserved || i == reserved + 1) {
          ExpectTermsIntact(expansion, i + 1, kDim);
        }
      }
      ExpectTermsIntact(expansion, 300, kDim);
    }
  }
}

TEST(ExpansionTest, ReserveAfterAppendsKeepsEveryTerm) {
  Expansion expansion(5, /*track_average=*/true);
  for (size_t i = 0; i < 7; ++i) expansion.Append(PointFor(i, 5), 0.5 + i, 1000 + i, 0.25 * i);
  expansion.Reserve(100);
  ExpectTermsIntact(expansion, 7, 5);
  // Reserving less than the size is harmless.
  expansion.Reserve(2);
  ExpectTermsIntact(expansion, 7, 5);
}

TEST(ExpansionTest, MemoryBytesOfAFullBudgetedExpansionIsCloseToTheTermArrays) {
  // Per term: dim coordinates + coefficient + added_at = (dim + 2) * 8 bytes, and two more
  // doubles when the average is tracked. A reserved expansion should not over-allocate by
  // more than 10%.
  constexpr size_t kBudget = 1000;
  constexpr size_t kDim = 16;
  for (bool track : {false, true}) {
    SCOPED_TRACE("track " + std::to_string(track));
    Expansion expansion(kDim, track);
    expansion.Reserve(kBudget);
    for (size_t i = 0; i < kBudget; ++i) expansion.Append(PointFor(i, kDim), 1.0, i, 0.0);
    const double per_term = (kDim + 2 + (track ? 2 : 0)) * 8.0;
    const double payload = kBudget * per_term;
    EXPECT_GE(static_cast<double>(expansion.MemoryBytes()), payload);
    EXPECT_LE(static_cast<double>(expansion.MemoryBytes()), 1.1 * payload);
  }
}

TEST(ExpansionTest, MemoryBytesGrowsWithTheTerms) {
  Expansion expansion(8, /*track_average=*/false);
  const size_t empty = expansion.MemoryBytes();
  for (size_t i = 0; i < 100; ++i) expansion.Append(PointFor(i, 8), 1.0, i, 0.0);
  EXPECT_GE(expansion.MemoryBytes(), empty + 100 * (8 + 2) * 8);
}

}  // namespace
}  // namespace okl
