// tests/server/tokens_test.cc
//
// server/auth/tokens.h: SHA-256 against NIST's known answers (FIPS 180-2, appendix B), the
// tokens file's grammar and each of its errors, grants, fresh tokens, and the
// Authenticator (reload, a broken reload, calls racing reloads).

#include "server/auth/tokens.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// NIST's SHA-256 examples (FIPS 180-2 appendix B.1-B.3; the empty message from the
// CAVP short-message vectors).
constexpr absl::string_view kSha256Empty =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr absl::string_view kSha256Abc =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr absl::string_view kSha256TwoBlocks =
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
constexpr absl::string_view kSha256MillionA =
    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

std::string TempPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  return absl::StrCat(::testing::TempDir(), "/tokens_test_", ::getpid(), "_", counter++, "_",
                      name);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

std::string Line(absl::string_view token, absl::string_view rest) {
  return absl::StrCat(Sha256Hex(token), " ", rest, "\n");
}

absl::Status ParseError(const std::string& text) {
  return TokenTable::Parse(text, "tokens.txt").status();
}

TEST(Sha256Test, MatchesNistKnownAnswers) {
  EXPECT_EQ(Sha256Hex(""), kSha256Empty);
  EXPECT_EQ(Sha256Hex("abc"), kSha256Abc);
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            kSha256TwoBlocks);
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), kSha256MillionA);
}

TEST(Sha256Test, HashesEveryByteIncludingNul) {
  const std::string with_nul("a\0b", 3);
  EXPECT_NE(Sha256Hex(with_nul), Sha256Hex("a"));
  EXPECT_EQ(Sha256Hex(with_nul).size(), 64u);
}

TEST(RoleTest, NamesRoundTripAndUnknownListsTheThree) {
  for (Role role : {Role::kRead, Role::kWrite, Role::kAdmin}) {
    absl::StatusOr<Role> parsed = ParseRole(RoleName(role));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, role);
  }
  const absl::Status status = ParseRole("Writer").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'Writer'"));
  EXPECT_THAT(status.message(), HasSubstr("read, write or admin"));
  // A long value is not echoed: it may be a secret in the wrong column.
  const std::string secret(40, 'x');
  EXPECT_THAT(ParseRole(secret).status().message(), Not(HasSubstr(secret.substr(0, 17))));
}

TEST(TokenTableTest, ParsesCommentsBlanksTenantListsAndStars) {
  const std::string text =
      absl::StrCat("# okl tokens\n", "\n", Line("reader", "read acme"), "   \t\n",
                   Line("writer", "write\tglobex,acme,acme  # two tenants, one listed twice"),
                   Line("everyone", "read *"), absl::AsciiStrToUpper(Sha256Hex("admin1")),
                   " admin\r\n", Line("admin2", "admin *"), "# the end, without a newline");
  absl::StatusOr<TokenTable> table = TokenTable::Parse(text, "tokens.txt");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 5u);

  const Grant* reader = table->Find("reader");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->role, Role::kRead);
  EXPECT_FALSE(reader->all_tenants);
  EXPECT_THAT(reader->tenants, ::testing::ElementsAre("acme"));

  const Grant* writer = table->Find("writer");
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->role, Role::kWrite);
  EXPECT_THAT(writer->tenants, ::testing::ElementsAre("acme", "globex"));  // sorted, distinct

  const Grant* everyone = table->Find("everyone");
  ASSERT_NE(everyone, nullptr);
  EXPECT_EQ(everyone->role, Role::kRead);
  EXPECT_TRUE(everyone->all_tenants);
  EXPECT_TRUE(everyone->tenants.empty());

  for (absl::string_view admin : {"admin1", "admin2"}) {
    const Grant* grant = table->Find(admin);
    ASSERT_NE(grant, nullptr) << admin;
    EXPECT_EQ(grant->role, Role::kAdmin);
    EXPECT_TRUE(grant->all_tenants);
  }
}

TEST(TokenTableTest, EmptyTextHasNoTokens) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse("# nobody yet\n\n", "tokens.txt");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 0u);
  EXPECT_EQ(table->Find("anything"), nullptr);
}

TEST(TokenTableTest, FindsOnlyTheExactToken) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(
      absl::StrCat(Line("alpha", "read a"), Line("beta", "write b")), "tokens.txt");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_NE(table->Find("alpha"), nullptr);
  EXPECT_THAT(table->Find("alpha")->tenants, ::testing::ElementsAre("a"));
  ASSERT_NE(table->Find("beta"), nullptr);
  EXPECT_THAT(table->Find("beta")->tenants, ::testing::ElementsAre("b"));
  EXPECT_EQ(table->Find("alph"), nullptr);
  EXPECT_EQ(table->Find("alpha "), nullptr);
  EXPECT_EQ(table->Find("Alpha"), nullptr);
  EXPECT_EQ(table->Find(""), nullptr);
  EXPECT_EQ(table->Find(Sha256Hex("alpha")), nullptr);  // the hash is not the token
}

TEST(TokenTableTest, AnEntryForTheEmptyHashIsRejected) {
  const absl::Status status = ParseError(absl::StrCat(kSha256Empty, " read a\n"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokens.txt:1: "));
  EXPECT_THAT(status.message(), HasSubstr("empty string"));
}

struct BadLine {
  std::string line;
  std::string expected;  // in the message after "tokens.txt:3: "
};

TEST(TokenTableTest, EachErrorNamesTheLineAndWhatToFix) {
  const std::string hash = Sha256Hex("t");
  const std::vector<BadLine> cases = {
      {absl::StrCat(hash.substr(0, 63), " read a"), "expected 64 hex digits, got 63"},
      {absl::StrCat(hash, "0 read a"), "expected 64 hex digits, got 65"},
      {absl::StrCat("g", hash.substr(1), " read a"), "some not hex"},
      {absl::StrCat(hash, " reader a"), "unknown role 'reader'"},
      {absl::StrCat(hash, " read bad/name"), "tenant name \"bad/name\" is invalid"},
      {absl::StrCat(hash, " read ", std::string(65, 'a')), "is invalid"},
      {absl::StrCat(hash, " read a,,b"), "empty tenant name"},
      {absl::StrCat(hash, " read a,*"), "stands alone"},
      {absl::StrCat(hash, " read"), "a read token needs its tenants"},
      {absl::StrCat(hash, " write"), "a write token needs its tenants"},
      {absl::StrCat(hash, " admin acme"), "an admin token covers every tenant"},
      {absl::StrCat(hash, " read a b"), "4 columns"},
      {absl::StrCat(hash, " read a, b"), "4 columns"},
      {hash, "this one only one"},
  };
  for (const BadLine& bad : cases) {
    const std::string text = absl::StrCat("# header\n", Line("ok", "read a"), bad.line, "\n",
                                          Line("later", "read a"));
    const absl::Status status = ParseError(text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.line;
    EXPECT_THAT(status.message(), HasSubstr("tokens.txt:3: ")) << bad.line;
    EXPECT_THAT(status.message(), HasSubstr(bad.expected)) << bad.line;
    // At most the hash's first 8 characters are shown.
    EXPECT_THAT(status.message(), Not(HasSubstr(hash.substr(0, 9)))) << bad.line;
  }
}

TEST(TokenTableTest, ADuplicateHashNamesBothLines) {
  const std::string text = absl::StrCat(Line("same", "read a"), "\n", Line("other", "read a"),
                                        absl::AsciiStrToUpper(Sha256Hex("same")), " write b\n");
  const absl::Status status = ParseError(text);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokens.txt:4: "));
  EXPECT_THAT(status.message(), HasSubstr("on line 1 already"));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", Sha256Hex("same").substr(0, 8))));
  EXPECT_THAT(status.message(), Not(HasSubstr(Sha256Hex("same").substr(0, 9))));
}

TEST(TokenTableTest, ATokenPastedForItsHashIsNotEchoed) {
  absl::StatusOr<std::string> token = NewToken();
  ASSERT_TRUE(token.ok()) << token.status();
  const absl::Status status = ParseError(absl::StrCat(*token, " read a\n"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokens.txt:1: the first column is a token"));
  EXPECT_THAT(status.message(), Not(HasSubstr(token->substr(4, 4))));
}

TEST(TokenTableTest, ReadFileNamesAnUnreadablePathAndTheFlag) {
  const std::string missing = TempPath("missing");
  const absl::Status status = TokenTable::ReadFile(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(missing));
  EXPECT_THAT(status.message(), HasSubstr("--auth_tokens_file"));
  // A directory opens but does not read.
  const absl::Status directory = TokenTable::ReadFile(::testing::TempDir()).status();
  EXPECT_EQ(directory.code(), absl::StatusCode::kFailedPrecondition) << directory;

  const std::string path = TempPath("tokens");
  WriteFile(path, absl::StrCat(Line("a", "read x"), "oops\n"));
  const absl::Status bad = TokenTable::ReadFile(path).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr(absl::StrCat(path, ":2: ")));
}

TEST(GrantTest, AllowsFollowsRoleOrderAndTenants) {
  const Role roles[] = {Role::kRead, Role::kWrite, Role::kAdmin};
  for (Role role : roles) {
    for (bool star : {false, true}) {
      absl::StatusOr<Grant> grant = ParseGrant(role, star ? "*" : "own");
      if (role == Role::kAdmin && !star) {
        EXPECT_FALSE(grant.ok());  // admin has no tenant list
        grant = ParseGrant(role, "");
      }
      ASSERT_TRUE(grant.ok()) << grant.status();
      const bool every_tenant = star || role == Role::kAdmin;
      EXPECT_EQ(grant->all_tenants, every_tenant);
      for (Role needed : roles) {
        const bool role_enough = static_cast<int>(role) >= static_cast<int>(needed);
        SCOPED_TRACE(
            absl::StrCat(RoleName(role), star ? " *" : " own", " needs ", RoleName(needed)));
        EXPECT_EQ(grant->Allows(needed, "own"), role_enough);
        EXPECT_EQ(grant->Allows(needed, "other"), role_enough && every_tenant);
        EXPECT_EQ(grant->Allows(needed, ""), role_enough && every_tenant);
      }
    }
  }
}

TEST(GrantTest, CoversOnlyListedTenants) {
  absl::StatusOr<Grant> grant = ParseGrant(Role::kWrite, "b,a,c");
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_THAT(grant->tenants, ::testing::ElementsAre("a", "b", "c"));
  EXPECT_TRUE(grant->CoversTenant("a"));
  EXPECT_TRUE(grant->CoversTenant("c"));
  EXPECT_FALSE(grant->CoversTenant("d"));
  EXPECT_FALSE(grant->CoversTenant("A"));
  EXPECT_FALSE(grant->CoversTenant("*"));  // a tenant named * is no wildcard
}

TEST(NewTokenTest, IsPrefixedBase64UrlOf32BytesAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::string> token = NewToken();
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_EQ(token->size(), 4u + 43u) << *token;
    EXPECT_EQ(token->substr(0, 4), "okl_");
    for (char c : token->substr(4)) {
      EXPECT_TRUE(absl::ascii_isalnum(c) || c == '-' || c == '_') << *token;
    }
    // 43 characters hold 258 bits: the last one carries 4 bits of the 256 and 2 zero
    // bits, so it is one of the 16 characters whose value's low 2 bits are zero.
    EXPECT_THAT("AEIMQUYcgkosw048", HasSubstr(std::string(1, token->back()))) << *token;
    EXPECT_TRUE(seen.insert(*token).second) << "repeated " << *token;
  }
}

TEST(TokensFileLineTest, RoundTripsThroughParseAndFind) {
  absl::StatusOr<std::string> writer = NewToken();
  absl::StatusOr<std::string> reader = NewToken();
  absl::StatusOr<std::string> admin = NewToken();
  ASSERT_TRUE(writer.ok() && reader.ok() && admin.ok());
  const std::vector<std::string> tenants = {"acme", "globex"};
  const std::vector<std::string> star = {"*"};
  const std::string writer_line = TokensFileLine(*writer, Role::kWrite, tenants);
  EXPECT_EQ(writer_line, absl::StrCat(Sha256Hex(*writer), " write acme,globex"));
  const std::string text =
      absl::StrCat(writer_line, "\n", TokensFileLine(*reader, Role::kRead, star), "\n",
                   TokensFileLine(*admin, Role::kAdmin, {}), "\n");
  absl::StatusOr<TokenTable> table = TokenTable::Parse(text, "generated");
  ASSERT_TRUE(table.ok()) << table.status() << "\n" << text;
  ASSERT_EQ(table->size(), 3u);
  const Grant* w = table->Find(*writer);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->role, Role::kWrite);
  EXPECT_EQ(w->tenants, tenants);
  const Grant* r = table->Find(*reader);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->role, Role::kRead);
  EXPECT_TRUE(r->all_tenants);
  const Grant* a = table->Find(*admin);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->role, Role::kAdmin);
  // Tokens never appear in the file, only their hashes.
  EXPECT_THAT(text, Not(HasSubstr(writer->substr(4))));
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("auth_tokens");
    WriteFile(path_, absl::StrCat(Line("okl_first", "write acme"), Line("okl_root", "admin")));
    absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::FromFile(path_);
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  std::unique_ptr<Authenticator> auth_;
};

TEST_F(AuthenticatorTest, AcceptsBearerInAnyCase) {
  EXPECT_EQ(auth_->path(), path_);
  EXPECT_EQ(auth_->tokens(), 2u);
  for (absl::string_view header :
       {"Bearer okl_first", "bearer okl_first", "BEARER   okl_first", " Bearer okl_first \t"}) {
    absl::StatusOr<Grant> grant = auth_->Authenticate(header);
    ASSERT_TRUE(grant.ok()) << header << ": " << grant.status();
    EXPECT_EQ(grant->role, Role::kWrite);
    EXPECT_TRUE(grant->Allows(Role::kWrite, "acme"));
    EXPECT_FALSE(grant->Allows(Role::kRead, "globex"));
  }
  absl::StatusOr<Grant> root = auth_->Authenticate("Bearer okl_root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_TRUE(root->Allows(Role::kAdmin, "anyone"));
}

TEST_F(AuthenticatorTest, MissingOrMalformedHeaderAsksForABearerToken) {
  for (absl::string_view header : {"", "   ", "okl_first", "Bearer", "Bearer   ",
                                   "Basic okl_first", "Bearerokl_first", "Token okl_first"}) {
    const absl::Status status = auth_->Authenticate(header).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << header;
    EXPECT_THAT(status.message(), HasSubstr("no bearer token: send the metadata "
                                            "'authorization: Bearer <token>'"))
        << header;
    EXPECT_THAT(status.message(), Not(HasSubstr("okl_first")));
  }
}

TEST_F(AuthenticatorTest, UnknownTokenIsNotValidAndNotEchoed) {
  for (absl::string_view header :
       {"Bearer okl_second", "Bearer OKL_FIRST", "Bearer okl_first x"}) {
    const absl::Status status = auth_->Authenticate(header).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << header;
    EXPECT_THAT(status.message(), HasSubstr("the bearer token is not valid")) << header;
    EXPECT_THAT(status.message(), Not(HasSubstr("okl_"))) << status;
    EXPECT_THAT(status.message(), Not(HasSubstr("OKL_"))) << status;
  }
}

TEST_F(AuthenticatorTest, ReloadPicksUpANewFile) {
  WriteFile(path_, absl::StrCat(Line("okl_second", "read globex"), Line("okl_third", "read *"),
                                Line("okl_root", "admin *")));
  ASSERT_TRUE(auth_->Reload().ok());
  EXPECT_EQ(auth_->tokens(), 3u);
  EXPECT_EQ(auth_->Authenticate("Bearer okl_first").status().code(),
            absl::StatusCode::kUnauthenticated);  // removed
  absl::StatusOr<Grant> second = auth_->Authenticate("Bearer okl_second");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->Allows(Role::kRead, "globex"));
  EXPECT_FALSE(second->Allows(Role::kWrite, "globex"));
}

TEST_F(AuthenticatorTest, ABrokenFileKeepsTheOldTokensAndReturnsTheError) {
  WriteFile(path_, absl::StrCat(Line("okl_second", "read globex"), Line("okl_bad", "owner x")));
  const absl::Status reloaded = auth_->Reload();
  EXPECT_EQ(reloaded.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reloaded.message(), HasSubstr(absl::StrCat(path_, ":2: unknown role 'owner'")));
  EXPECT_EQ(auth_->tokens(), 2u);
  EXPECT_TRUE(auth_->Authenticate("Bearer okl_first").ok());
  EXPECT_FALSE(auth_->Authenticate("Bearer okl_second").ok());

  ASSERT_EQ(std::remove(path_.c_str()), 0);
  const absl::Status gone = auth_->Reload();
  EXPECT_EQ(gone.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(auth_->Authenticate("Bearer okl_first").ok());
}

TEST(AuthenticatorFromFileTest, FailsOnAMissingOrBrokenFile) {
  const std::string path = TempPath("absent");
  EXPECT_EQ(Authenticator::FromFile(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  WriteFile(path, "not a token line\n");
  EXPECT_EQ(Authenticator::FromFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

// Callers see the old table or the new one, never neither: "okl_root" is in both files,
// so it must always authenticate while the files alternate under it.
TEST_F(AuthenticatorTest, AuthenticateRacesReloadSafely) {
  const std::string file_a = absl::StrCat(Line("okl_root", "admin"), Line("okl_a", "read a"));
  const std::string file_b = absl::StrCat(Line("okl_b", "read b"), Line("okl_root", "admin *"));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::atomic<int> calls{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 20000 && !done.load(); ++i) {
        if (!auth_->Authenticate("Bearer okl_root").ok()) failures.fetch_add(1);
        const absl::StatusOr<Grant> a = auth_->Authenticate("Bearer okl_a");
        if (a.ok() && !a->CoversTenant("a")) failures.fetch_add(1);
        const size_t tokens = auth_->tokens();
        if (tokens != 2) failures.fetch_add(1);
        calls.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    // Write beside and rename over, as an operator's editor or config manager would, so
    // that a reload never reads a half-written file.
    const std::string next = path_ + ".next";
    WriteFile(next, i % 2 == 0 ? file_a : file_b);
    ASSERT_EQ(std::rename(next.c_str(), path_.c_str()), 0);
    const absl::Status reloaded = auth_->Reload();
    ASSERT_TRUE(reloaded.ok()) << reloaded;
  }
  done.store(true);
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(calls.load(), 0);
}

}  // namespace
}  // namespace okl
