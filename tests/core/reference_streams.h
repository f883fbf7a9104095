// tests/core/reference_streams.h
//
// What the reference tests of every model kind share: the seeded synthetic streams they
// feed both core and the plain reference, the agreement check, and the loss cases.
//
// Example:
//   const Stream stream = MakeStream(Labels::kClassification, /*steps=*/400, kSeed);
//   ASSERT_TRUE(Agrees(core_prediction, reference.prediction, reference.magnitude));
#ifndef OKL_TESTS_CORE_REFERENCE_STREAMS_H_
#define OKL_TESTS_CORE_REFERENCE_STREAMS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/model.h"
#include "gtest/gtest.h"

namespace okl::testing {

// Core and the reference sum in different orders; they must agree to this fraction of the
// sum of the absolute values of the numbers added up.
inline constexpr double kRelativeTolerance = 1e-9;
// The streams' input dimension.
inline constexpr size_t kStreamDim = 3;

// |actual - expected| <= kRelativeTolerance * magnitude, where `magnitude` is the sum of
// the absolute values of the numbers `expected` was added up from.
::testing::AssertionResult Agrees(double actual, double expected, double magnitude);

// Uniform in [lo, hi) from the top 53 bits, written out so that the streams do not depend
// on the standard library's distribution implementations.
double Uniform(std::mt19937_64& rng, double lo, double hi);
std::vector<double> UniformVector(std::mt19937_64& rng, size_t n, double lo, double hi);

enum class Labels { kRegression, kClassification, kOneClass };

// Inputs uniform in [-1/2, 1/2]^3, so |x|^2 <= 3/4: with the kernel parameters of the
// tests every kernel has k(x, x) <= 1 on the data, and eta_t <= 1 keeps even the squared
// loss's SGD contracting. Targets are a smooth function plus noise, or its sign with 5%
// flipped, or 1 (one-class).
struct Stream {
  std::vector<double> x;  // steps * kStreamDim, row-major
  std::vector<double> y;
  absl::Span<const double> row(size_t i) const {
    return absl::MakeConstSpan(x).subspan(i * kStreamDim, kStreamDim);
  }
};
Stream MakeStream(Labels labels, size_t steps, uint64_t seed);

struct KernelCase {
  const char* name;
  KernelConfig config;
};

struct LossCase {
  const char* name;
  LossConfig config;
  Labels labels;
};

// gtest prints parameters of failing tests with these.
inline void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name; }
inline void PrintTo(const LossCase& c, std::ostream* os) { *os << c.name; }

// Feeds `stream` to `model` and to `reference` (a plain reference model: Observe(x, y)
// returning {prediction, magnitude, loss}, and margin()), asserting that every
// prequential prediction and loss agree; after_step(t) runs after step t (1-based) for
// the caller's checks. Use with ASSERT_NO_FATAL_FAILURE.
template <typename Reference, typename AfterStep>
void ExpectStepsAgree(Model& model, Reference& reference, const Stream& stream,
                      AfterStep after_step) {
  for (size_t t = 0; t < stream.y.size(); ++t) {
    const absl::Span<const double> x = stream.row(t);
    const double y = stream.y[t];
    const double margin = reference.margin();
    const auto expected = reference.Observe(x, y);
    const absl::StatusOr<Observation> o = model.Observe(x, y);
    ASSERT_TRUE(o.ok()) << "step " << t + 1 << ": " << o.status();
    ASSERT_TRUE(Agrees(o->prediction, expected.prediction, expected.magnitude))
        << "prediction at step " << t + 1;
    // Every loss moves by at most max(1, |f - y|) (the squared loss) or 1 (the others)
    // times a change in f or in the margin, which both agree to 1e-9 M.
    ASSERT_TRUE(Agrees(o->loss, expected.loss,
                       (expected.magnitude + std::abs(margin)) *
                           std::max(1.0, std::abs(expected.prediction - y))))
        << "loss at step " << t + 1;
    after_step(t + 1);
  }
}

// Every loss ValidateConfig accepts, and the nu-trick of each that has one; the sixth
// (index 6) is NuHinge.
extern const LossCase kReferenceLosses[9];

}  // namespace okl::testing

#endif  // OKL_TESTS_CORE_REFERENCE_STREAMS_H_
