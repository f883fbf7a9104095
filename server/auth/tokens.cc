// server/auth/tokens.cc

#include "server/auth/tokens.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/runtime/file.h"

namespace okl {
namespace {

constexpr size_t kDigestBytes = std::tuple_size_v<Sha256Digest>;
constexpr absl::string_view kLineFormat =
    "<sha256 hex of the token> <role> <tenant>[,<tenant>...]";

// Enough of a hash to find its line, never enough to matter.
std::string HashPrefix(absl::string_view hash) {
  return absl::StrCat("'", hash.substr(0, 8), hash.size() > 8 ? "...'" : "'");
}

// The 64 lower-case hex digits of the hash column, or what is wrong with it.
absl::StatusOr<std::string> ParseHashColumn(absl::string_view column) {
  if (absl::StartsWith(column, kTokenPrefix)) {
    // Someone pasted the token itself: do not echo any of it.
    return absl::InvalidArgumentError(
        "the first column is a token, not its hash: write the SHA-256 hex of the token "
        "there (okl token new prints the whole line), and treat this token as leaked");
  }
  const bool hex =
      std::all_of(column.begin(), column.end(), [](char c) { return absl::ascii_isxdigit(c); });
  if (column.size() != 2 * kDigestBytes || !hex) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the hash ", HashPrefix(column), " is not SHA-256 hex: expected 64 hex digits, got ",
        column.size(), " characters", hex ? "" : " with some not hex",
        " (okl token new prints the whole line)"));
  }
  std::string hash = absl::AsciiStrToLower(column);
  if (hash == Sha256Hex("")) {
    return absl::InvalidArgumentError(
        "the hash is SHA-256 of the empty string, which is no token: hash the token without "
        "a trailing newline (printf '%s' TOKEN | sha256sum)");
  }
  return hash;
}

// CRYPTO_memcmp does not stop at the first differing byte.
bool DigestsEqual(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::Status NoBearerToken() {
  return absl::UnauthenticatedError(
      "no bearer token: send the metadata 'authorization: Bearer <token>'");
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  std::vector<Entry> entries;
  absl::flat_hash_map<std::string, int> line_of_hash;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", number, ": ", what));
    };
    if (const size_t hash_mark = line.find('#'); hash_mark != absl::string_view::npos) {
      line = line.substr(0, hash_mark);
    }
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::vector<absl::string_view> columns =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty());
    if (columns.size() < 2) {
      return error(
          absl::StrCat("a token line has the columns '", kLineFormat, "', this one only one"));
    }
    if (columns.size() > 3) {
      return error(absl::StrCat(columns.size(), " columns; expected '", kLineFormat,
                                "' (tenants are separated by commas, without spaces)"));
    }
    absl::StatusOr<std::string> hash = ParseHashColumn(columns[0]);
    if (!hash.ok()) return error(hash.status().message());
    absl::StatusOr<Role> role = ParseRole(columns[1]);
    if (!role.ok()) return error(role.status().message());
    absl::StatusOr<Grant> grant =
        ParseGrant(*role, columns.size() == 3 ? columns[2] : absl::string_view());
    if (!grant.ok()) return error(grant.status().message());
    const auto [it, inserted] = line_of_hash.emplace(*hash, number);
    if (!inserted) {
      return error(absl::StrCat("the hash ", HashPrefix(*hash), " is on line ", it->second,
                                " already: a token has one line (list all its tenants "
                                "there, separated by commas)"));
    }
    Entry entry;
    const std::string bytes = absl::HexStringToBytes(*hash);
    std::copy(bytes.begin(), bytes.end(), entry.digest.begin());
    entry.grant = *std::move(grant);
    entries.push_back(std::move(entry));
  }
  return TokenTable(std::move(entries));
}

absl::StatusOr<TokenTable> TokenTable::ReadFile(const std::string& path) {
  absl::StatusOr<std::string> text = okl::ReadFile(path);
  if (!text.ok()) {
    // The server cannot start (or reload) without it, whatever errno said.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the tokens file (--auth_tokens_file): ", text.status().message()));
  }
  return Parse(*text, path);
}

const Grant* TokenTable::Find(absl::string_view token) const {
  if (token.empty()) return nullptr;
  const Sha256Digest digest = Sha256(token);
  // Hashes are distinct, so at most one entry matches; every entry is compared and the
  // match is selected without a branch, so the scan takes the same time wherever it is.
  size_t found = entries_.size();
  for (size_t i = 0; i < entries_.size(); ++i) {
    const size_t mask = -static_cast<size_t>(DigestsEqual(digest, entries_[i].digest));
    found = (found & ~mask) | (i & mask);
  }
  return found < entries_.size() ? &entries_[found].grant : nullptr;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::FromFile(std::string path) {
  absl::StatusOr<TokenTable> table = TokenTable::ReadFile(path);
  if (!table.ok()) return table.status();
  return std::unique_ptr<Authenticator>(new Authenticator(
      std::move(path), std::make_shared<const TokenTable>(*std::move(table))));
}

absl::Status Authenticator::Reload() {
  // Read and parse without the lock: Authenticate never waits for the disk.
  absl::StatusOr<TokenTable> table = TokenTable::ReadFile(path_);
  if (!table.ok()) return table.status();
  auto fresh = std::make_shared<const TokenTable>(*std::move(table));
  std::shared_ptr<const TokenTable> old;
  {
    WriterLock lock(&mu_);
    old = std::exchange(table_, std::move(fresh));
  }
  // `old` is released here, outside the lock (or later, by the last call using it).
  return absl::OkStatus();
}

std::shared_ptr<const TokenTable> Authenticator::table() const {
  ReaderLock lock(&mu_);
  return table_;
}

absl::StatusOr<Grant> Authenticator::Authenticate(absl::string_view authorization) const {
  const absl::string_view value = absl::StripAsciiWhitespace(authorization);
  const size_t space = value.find_first_of(" \t");
  if (space == absl::string_view::npos ||
      !absl::EqualsIgnoreCase(value.substr(0, space), "bearer")) {
    return NoBearerToken();
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(space));
  if (token.empty()) return NoBearerToken();
  const std::shared_ptr<const TokenTable> table = this->table();
  const Grant* grant = table->Find(token);
  if (grant == nullptr) {
    return absl::UnauthenticatedError(
        "the bearer token is not valid: the server's tokens file has no entry for it "
        "(okl token new makes a token and its line)");
  }
  return *grant;
}

size_t Authenticator::tokens() const { return table()->size(); }

}  // namespace okl
