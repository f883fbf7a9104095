// client/text_fields.h
//
// The small text helpers the data readers share (client/data_reader.cc, client/cli_input.cc):
// blanks, trimming, and quoting a token in an error message.
//
// Example:
//   absl::string_view field = okl::text::Trim("  1.5\r");  // "1.5"
//   std::string shown = okl::text::Quote(field);            // "'1.5'"
#ifndef OKL_CLIENT_TEXT_FIELDS_H_
#define OKL_CLIENT_TEXT_FIELDS_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace okl::text {

// The longest token an error message quotes whole; longer ones are cut with "...".
inline constexpr size_t kMaxQuoted = 40;

// Space, tab, CR, VT, FF (not newline: readers split lines first).
inline bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

inline absl::string_view Trim(absl::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

// 's' in single quotes, cut to kMaxQuoted characters.
inline std::string Quote(absl::string_view s) {
  if (s.size() <= kMaxQuoted) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kMaxQuoted), "...'");
}

}  // namespace okl::text

#endif  // OKL_CLIENT_TEXT_FIELDS_H_
