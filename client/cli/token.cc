// client/cli/token.cc
//
// `okl token new`: a bearer token and the tokens-file line that lets okl_server accept
// it (proto/bearer_token.h). Runs here alone; the server never sees the token, only its
// hash.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/io/json_writer.h"

namespace okl::cli {

absl::Status RunTokenNew(const Grant& grant, const Output& output) {
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  const std::vector<std::string> tenants =
      grant.all_tenants ? std::vector<std::string>{"*"} : grant.tenants;
  const std::string line = TokensFileLine(*token, grant.role, tenants);
  std::string text;
  if (output.json) {
    JsonObject json;
    json.AddString("token", *token)
        .AddString("role", RoleName(grant.role))
        .AddStrings("tenants", tenants)
        .AddString("line", line);
    text = absl::StrCat(json.str(), "\n");
  } else {
    text = absl::StrCat(*token, "\n", line, "\n");
  }
  std::fwrite(text.data(), 1, text.size(), output.out);
  return absl::OkStatus();
}

}  // namespace okl::cli
