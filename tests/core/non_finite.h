#ifndef OKL_TESTS_CORE_NON_FINITE_H_
#define OKL_TESTS_CORE_NON_FINITE_H_

// The non-finite doubles that core's tests feed to validation and arithmetic, defined once
// for every test file of okl_core_test (a unity build compiles several in one unit).

#include <limits>

namespace okl {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace okl

#endif  // OKL_TESTS_CORE_NON_FINITE_H_
