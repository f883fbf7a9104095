// core/runtime/model_key.h
//
// A model's key, (tenant, model name), and the rule every name follows: what the
// registry, the store, the tokens file and the okl tool check a name against, without
// the registry itself.
#ifndef OKL_CORE_RUNTIME_MODEL_KEY_H_
#define OKL_CORE_RUNTIME_MODEL_KEY_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl {

inline constexpr size_t kMaxNameLength = 64;

// OK if `name` is 1-64 characters of [A-Za-z0-9._-]; else InvalidArgument naming `what`
// ("tenant" or "model").
absl::Status ValidateName(absl::string_view what, absl::string_view name);

// A model's key: its tenant's name and its own within the tenant. Made only by Make,
// which checks both names (ValidateName), so code holding a ModelKey never checks again:
// a name is validated once, where it comes in (a request, a store key). The client
// library's ModelId is the plain pair a caller fills in; the server makes a ModelKey of
// it on arrival.
class ModelKey {
 public:
  // InvalidArgument naming the bad name ("tenant" or "model").
  static absl::StatusOr<ModelKey> Make(absl::string_view tenant, absl::string_view model);

  const std::string& tenant() const { return tenant_; }
  const std::string& model() const { return model_; }
  // For messages: `model "churn" of tenant "acme"`.
  std::string Describe() const;

  friend bool operator==(const ModelKey& a, const ModelKey& b) {
    return a.tenant_ == b.tenant_ && a.model_ == b.model_;
  }
  friend bool operator!=(const ModelKey& a, const ModelKey& b) { return !(a == b); }

 private:
  ModelKey(absl::string_view tenant, absl::string_view model)
      : tenant_(tenant), model_(model) {}

  std::string tenant_;
  std::string model_;
};

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_MODEL_KEY_H_
