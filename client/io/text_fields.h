// client/io/text_fields.h
//
// The text parsing the data readers share (client/io/data_reader.cc reads whole files,
// client/cli/input.cc streams rows and command-line inputs): blanks and trimming, finite
// numbers, and LIBSVM lines "y idx:val ...". Parsers return what is wrong with the text as
// a message ("bad number 'x' at index 3"), empty on success; each reader adds where
// ("path:line: ") and the status code. Thread-compatible: no state.
//
// Example:
//   absl::string_view line = okl::text::Trim("+1 3:0.5 7:1\r");
//   std::string error = okl::text::ParseLibsvmLine(
//       line, /*labelled=*/true,
//       [&](double label) { y = label; return std::string(); },
//       [&](uint64_t index, double value) { x[index - 1] = value; return std::string(); });
#ifndef OKL_CLIENT_IO_TEXT_FIELDS_H_
#define OKL_CLIENT_IO_TEXT_FIELDS_H_

#include <cstddef>
#include <cstdint>
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

// Parses all of `token` as a finite double. A leading '+' is accepted (LIBSVM labels are
// often "+1"; std::from_chars alone refuses it). Returns "bad number 'token'" or
// "non-finite number 'token'" on failure, empty on success.
std::string ParseNumber(absl::string_view token, double* value);

// Parses a LIBSVM "idx:val" token: *index is the 1-based index as written (>= 1), *value
// finite. Range checks are the caller's (it knows the dimension).
std::string ParseIndexValue(absl::string_view token, uint64_t* index, double* value);

// Splits the next blank-separated token off the front of a trimmed `*line`; false when
// *line is empty.
bool NextToken(absl::string_view* line, absl::string_view* token);

// Parses one trimmed LIBSVM line "y idx:val idx:val ...": calls on_label(y) for its label
// and on_pair(index, value) (1-based index) for each pair, in order. With `labelled` the
// first token is the label; without, a first token with no ':' is taken for a label and
// handed to on_label too. The callbacks return an error message (empty to go on); the
// first error, the line's or a callback's, is returned.
template <typename OnLabel, typename OnPair>
std::string ParseLibsvmLine(absl::string_view line, bool labelled, OnLabel on_label,
                            OnPair on_pair) {
  absl::string_view token;
  bool first = true;
  while (NextToken(&line, &token)) {
    if (first) {
      first = false;
      if (labelled || token.find(':') == absl::string_view::npos) {
        double label = 0;
        std::string error = ParseNumber(token, &label);
        if (!error.empty()) return absl::StrCat(error, " as the label");
        error = on_label(label);
        if (!error.empty()) return error;
        continue;
      }
    }
    uint64_t index = 0;
    double value = 0;
    std::string error = ParseIndexValue(token, &index, &value);
    if (error.empty()) error = on_pair(index, value);
    if (!error.empty()) return error;
  }
  return "";
}

}  // namespace okl::text

#endif  // OKL_CLIENT_IO_TEXT_FIELDS_H_
