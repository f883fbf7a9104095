// proto/bearer_token.cc

#include "proto/bearer_token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/runtime/model_key.h"

namespace okl {
namespace {

constexpr size_t kTokenBytes = 32;

}  // namespace

Sha256Digest Sha256(absl::string_view bytes) {
  Sha256Digest digest;
  if (SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
             digest.data()) == nullptr) {
    // Only a broken OpenSSL installation fails here; authenticating on would be worse.
    std::fputs("okl: OpenSSL's SHA256() failed\n", stderr);
    std::abort();
  }
  return digest;
}

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kWrite:
      return "write";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  if (name == "read") return Role::kRead;
  if (name == "write") return Role::kWrite;
  if (name == "admin") return Role::kAdmin;
  // A long "role" is more likely a misplaced secret than a typo: do not echo it.
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role ",
                   name.size() <= 16 ? absl::StrCat("'", name, "'")
                                     : absl::StrCat("of ", name.size(), " characters"),
                   ": expected read, write or admin"));
}

std::string Sha256Hex(absl::string_view bytes) {
  const Sha256Digest digest = Sha256(bytes);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[kTokenBytes];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      return absl::InternalError(absl::StrCat("getrandom(2) failed: ", std::strerror(error)));
    }
    filled += static_cast<size_t>(got);
  }
  std::string token =
      absl::StrCat(kTokenPrefix, absl::WebSafeBase64Escape(absl::string_view(
                                     reinterpret_cast<char*>(bytes), sizeof(bytes))));
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return token;
}

bool Grant::CoversTenant(absl::string_view tenant) const {
  if (all_tenants) return true;
  return std::binary_search(tenants.begin(), tenants.end(), tenant,
                            [](absl::string_view a, absl::string_view b) { return a < b; });
}

bool Grant::Allows(Role needed, absl::string_view tenant) const {
  return static_cast<int>(role) >= static_cast<int>(needed) && CoversTenant(tenant);
}

absl::StatusOr<Grant> ParseGrant(Role role, absl::string_view tenants) {
  Grant grant;
  grant.role = role;
  if (role == Role::kAdmin) {
    if (!tenants.empty() && tenants != "*") {
      return absl::InvalidArgumentError(
          absl::StrCat("an admin token covers every tenant: write * for its tenants or leave "
                       "them out, not '",
                       tenants.substr(0, 2 * kMaxNameLength),
                       "' (for some tenants only, use the write role)"));
    }
    grant.all_tenants = true;
    return grant;
  }
  if (tenants.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", RoleName(role),
                     " token needs its tenants: a comma-separated list of tenant "
                     "names (no spaces), or * for every tenant"));
  }
  std::vector<std::string> names = absl::StrSplit(tenants, ',');
  for (const std::string& name : names) {
    if (name == "*") {
      if (names.size() > 1) {
        return absl::InvalidArgumentError(
            "* (every tenant) stands alone: write * or a list of tenant names, not both");
      }
      grant.all_tenants = true;
      return grant;
    }
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("an empty tenant name in '",
                                                     tenants.substr(0, 4 * kMaxNameLength),
                                                     "': separate the names by single commas"));
    }
    if (absl::Status valid = ValidateName("tenant", name); !valid.ok()) return valid;
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  grant.tenants = std::move(names);
  return grant;
}

std::string TokensFileLine(absl::string_view token, Role role,
                           absl::Span<const std::string> tenants) {
  return absl::StrCat(Sha256Hex(token), " ", RoleName(role), " ",
                      role == Role::kAdmin ? "*" : absl::StrJoin(tenants, ","));
}

}  // namespace okl
