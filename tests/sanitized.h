#ifndef OKL_TESTS_SANITIZED_H_
#define OKL_TESTS_SANITIZED_H_

// Whether this test binary runs under AddressSanitizer or ThreadSanitizer (gcc defines
// __SANITIZE_*__, clang answers __has_feature). Instrumentation slows every byte a test
// touches several times, so a few long tests run shorter streams or smaller snapshots
// there: the sanitizer checks each path, which a short stream reaches; the optimised
// build checks the numbers and the timing at full length.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OKL_TESTS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define OKL_TESTS_SANITIZED 1
#endif
#endif
#ifndef OKL_TESTS_SANITIZED
#define OKL_TESTS_SANITIZED 0
#endif

namespace okl::testing {

inline constexpr bool kSanitized = OKL_TESTS_SANITIZED != 0;

}  // namespace okl::testing

#endif  // OKL_TESTS_SANITIZED_H_
