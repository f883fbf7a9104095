// tests/core/test_model_key.h
//
// TestKey("acme", "churn"): the ModelKey of names a test knows to be valid (it aborts on an
// invalid one, which is a bug in the test).
#ifndef OKL_TESTS_CORE_TEST_MODEL_KEY_H_
#define OKL_TESTS_CORE_TEST_MODEL_KEY_H_

#include "absl/strings/string_view.h"
#include "core/runtime/model_key.h"

namespace okl {

inline ModelKey TestKey(absl::string_view tenant, absl::string_view model) {
  return ModelKey::Make(tenant, model).value();
}

}  // namespace okl

#endif  // OKL_TESTS_CORE_TEST_MODEL_KEY_H_
