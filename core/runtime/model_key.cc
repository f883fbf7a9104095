#include "core/runtime/model_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

}  // namespace

absl::Status ValidateName(absl::string_view what, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength ||
      !std::all_of(name.begin(), name.end(), IsNameChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " name \"", name.substr(0, 2 * kMaxNameLength),
        "\" is invalid: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelKey> ModelKey::Make(absl::string_view tenant, absl::string_view model) {
  OKL_RETURN_IF_ERROR(ValidateName("tenant", tenant));
  OKL_RETURN_IF_ERROR(ValidateName("model", model));
  return ModelKey(tenant, model);
}

std::string ModelKey::Describe() const {
  return absl::StrCat("model \"", model_, "\" of tenant \"", tenant_, "\"");
}

}  // namespace okl
