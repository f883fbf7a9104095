// proto/bearer_token.h
//
// The bearer token okl's clients send (metadata `authorization: Bearer <token>`) and the
// line of okl_server's tokens file that grants it: the credential half of the contract
// between clients and servers, beside the wire contract. The `okl` tool makes tokens and
// their lines (`okl token new`); the server reads the lines (server/auth/tokens.h, whose
// comment has the file's format) and checks presented tokens against them. A token is
// "okl_" and 43 base64url characters of 32 random bytes; a line holds its SHA-256 (hex),
// a role and the tenants it covers. Every function is thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::Grant grant, okl::ParseGrant(okl::Role::kWrite, "acme"));
//   OKL_ASSIGN_OR_RETURN(std::string token, okl::NewToken());
//   std::string line = okl::TokensFileLine(token, grant.role, grant.tenants);
#ifndef OKL_PROTO_BEARER_TOKEN_H_
#define OKL_PROTO_BEARER_TOKEN_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace okl {

// Ordered: a higher role includes every lower one.
enum class Role { kRead = 0, kWrite = 1, kAdmin = 2 };

// "read", "write" or "admin".
absl::string_view RoleName(Role role);
// The role named `name` (exactly, lower case); InvalidArgument listing the three.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// SHA-256 of `bytes`: its 32 bytes, and as 64 lower-case hex digits.
using Sha256Digest = std::array<uint8_t, 32>;
Sha256Digest Sha256(absl::string_view bytes);
std::string Sha256Hex(absl::string_view bytes);

// Every token okl makes starts with this, so that a token pasted where its hash belongs
// is recognised (and not echoed).
inline constexpr absl::string_view kTokenPrefix = "okl_";

// A fresh random token: "okl_" and 43 base64url characters (RFC 4648 section 5, no
// padding) of 32 bytes from getrandom(2). Internal if the kernel gives no randomness.
absl::StatusOr<std::string> NewToken();

// What one token grants.
struct Grant {
  Role role = Role::kRead;
  bool all_tenants = false;          // the tenant column was `*`, or the role is admin
  std::vector<std::string> tenants;  // sorted and distinct, when !all_tenants

  bool CoversTenant(absl::string_view tenant) const;
  // True if this grant allows an RPC that needs `needed` on `tenant`.
  bool Allows(Role needed, absl::string_view tenant) const;
};

// The grant of `role` on the tenant column `tenants` ("a,b", "*", or "" when left out),
// checked as the tokens file is: read and write need at least one tenant, each a valid
// name (okl::ValidateName) or `*` alone; admin takes only "" or "*". InvalidArgument
// saying what to fix; the message does not name a file, so callers add where it came from.
absl::StatusOr<Grant> ParseGrant(Role role, absl::string_view tenants);

// The line to append to a tokens file for `token` (no newline): its hash, the role and
// the tenants joined by commas. `tenants` may be {"*"}; for admin they are ignored and
// the line says `*`. The tenants must be valid (see ParseGrant).
std::string TokensFileLine(absl::string_view token, Role role,
                           absl::Span<const std::string> tenants);

}  // namespace okl

#endif  // OKL_PROTO_BEARER_TOKEN_H_
