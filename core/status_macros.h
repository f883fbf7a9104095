// core/status_macros.h
//
// OKL_RETURN_IF_ERROR and OKL_ASSIGN_OR_RETURN: early returns for absl::Status and
// absl::StatusOr. Debian 12's Abseil (20220623) does not ship public equivalents.
//
// Example:
//   absl::StatusOr<int> Parse(absl::string_view s);
//   absl::Status Use(absl::string_view s) {
//     OKL_ASSIGN_OR_RETURN(int n, Parse(s));
//     OKL_RETURN_IF_ERROR(Check(n));
//     return absl::OkStatus();
//   }
#ifndef OKL_CORE_STATUS_MACROS_H_
#define OKL_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OKL_RETURN_IF_ERROR(expr)                                \
  do {                                                           \
    ::absl::Status okl_status_ = (expr);                         \
    if (ABSL_PREDICT_FALSE(!okl_status_.ok())) return okl_status_; \
  } while (0)

#define OKL_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define OKL_STATUS_MACROS_CONCAT_(x, y) OKL_STATUS_MACROS_CONCAT_INNER_(x, y)

#define OKL_ASSIGN_OR_RETURN(lhs, rexpr) \
  OKL_ASSIGN_OR_RETURN_IMPL_(            \
      OKL_STATUS_MACROS_CONCAT_(okl_statusor_, __LINE__), lhs, rexpr)

#define OKL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)           \
  auto statusor = (rexpr);                                         \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) return statusor.status(); \
  lhs = std::move(statusor).value()

#endif  // OKL_CORE_STATUS_MACROS_H_
