// server/auth/tokens.h
//
// Bearer tokens, the server's side: who may call okl_server, with which role, on which
// tenants (the token, its grant and its line are proto/bearer_token.h). The server
// keeps no secrets: its tokens file (--auth_tokens_file) holds one line per token with the
// SHA-256 of the token, never the token itself:
//
//   # <sha256 hex of the token> <role> <tenant>[,<tenant>...]
//   a5fe4efd4b4bdf74f2033d41017be73acc8f1c6bda6763c6ab8430caeac7e91a read  acme
//   52d0603435b528b7a094deaf9d1dc03507919eb1a61e0d04da8153dc6091dc76 write acme,globex
//   2cc677bc27f54366a36e6b8dc285f7d347d7b15c87289bbb76a76927458ad8c0 admin *  # ops
//
// `#` starts a comment (a whole line or the rest of one); blank lines are ignored; the
// hash is 64 hex digits (upper case is accepted and normalised). Roles, each including
// the ones before it:
//   read   Predict, GetModel, ListModels, Snapshot;
//   write  read, plus Observe, ObserveStream, CreateModel, DeleteModel, Restore;
//   admin  write on every tenant (its tenant column is `*` or left out).
// A tenant `*` means every tenant. `okl token new` makes a token and its line.
//
// A presented token is hashed and compared with every entry by CRYPTO_memcmp, without
// stopping at a match, so the time taken does not depend on which entry (if any) it is.
// Neither tokens nor whole hashes appear in any message returned from here.
//
// Thread safety: TokenTable is immutable after Parse and safe to share. Authenticator is
// thread-safe: Authenticate may run on any number of threads while Reload swaps the table.
// No gRPC here: the server maps the metadata and the statuses.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Authenticator> auth,
//                        okl::Authenticator::FromFile("/etc/okl/tokens"));
//   OKL_ASSIGN_OR_RETURN(okl::Grant grant, auth->Authenticate("Bearer okl_..."));
//   if (!grant.Allows(okl::Role::kWrite, "acme")) return absl::PermissionDeniedError(...);
//   // On SIGHUP: if the file is broken, the old tokens stay in force.
//   if (absl::Status reloaded = auth->Reload(); !reloaded.ok()) LOG(ERROR) << reloaded;
#ifndef OKL_SERVER_AUTH_TOKENS_H_
#define OKL_SERVER_AUTH_TOKENS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/runtime/mutex.h"
#include "proto/bearer_token.h"

namespace okl {

// A parsed tokens file. Immutable, thread-safe.
class TokenTable {
 public:
  // `source` names the text in messages ("path:line: ..."). An empty text has no tokens.
  // InvalidArgument for the first bad line: a hash that is not 64 hex digits, an unknown
  // role, a bad tenant column (see ParseGrant), a missing or extra column, or a hash
  // that an earlier line has already.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, absl::string_view source);
  // Parse of the file at `path`. FailedPrecondition, naming the path and
  // --auth_tokens_file, if it cannot be read.
  static absl::StatusOr<TokenTable> ReadFile(const std::string& path);

  // The grant of `token`, or nullptr if no entry matches (or `token` is empty). Compares
  // with every entry in constant time. The pointer lives as long as the table.
  const Grant* Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Sha256Digest digest;  // SHA-256 of the token
    Grant grant;
  };

  explicit TokenTable(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  std::vector<Entry> entries_;
};

// The tokens file of a running server. Reload() re-reads it (on SIGHUP); a failed reload
// keeps the previous table and returns the error. Thread-safe: Authenticate runs
// concurrently with Reload, and a call sees either the old table or the new one, whole.
class Authenticator {
 public:
  // InvalidArgument or FailedPrecondition as TokenTable::ReadFile.
  static absl::StatusOr<std::unique_ptr<Authenticator>> FromFile(std::string path);

  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // Reads path() again and, if it parses, serves its tokens from now on.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // `authorization` is the value of the authorization metadata (empty if absent).
  // Unauthenticated, without ever including the token: "no bearer token: ..." if it is
  // not "Bearer <token>" (the scheme in any case), "the bearer token is not valid: ..." if
  // the token is not in the file.
  absl::StatusOr<Grant> Authenticate(absl::string_view authorization) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The number of tokens in the table in force.
  size_t tokens() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& path() const { return path_; }

 private:
  Authenticator(std::string path, std::shared_ptr<const TokenTable> table)
      : path_(std::move(path)), table_(std::move(table)) {}

  std::shared_ptr<const TokenTable> table() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  mutable Mutex mu_;
  // Swapped whole by Reload; callers keep the table they took for the length of a call.
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace okl

#endif  // OKL_SERVER_AUTH_TOKENS_H_
