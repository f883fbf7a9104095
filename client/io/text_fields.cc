// client/io/text_fields.cc

#include "client/io/text_fields.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace okl::text {

std::string ParseNumber(absl::string_view token, double* value) {
  absl::string_view digits = token;
  if (digits.size() > 1 && digits.front() == '+' && digits[1] != '-' && digits[1] != '+') {
    digits.remove_prefix(1);
  }
  const char* last = digits.data() + digits.size();
  const std::from_chars_result result = std::from_chars(digits.data(), last, *value);
  if (digits.empty() || result.ec != std::errc() || result.ptr != last) {
    return absl::StrCat("bad number ", Quote(token));
  }
  if (!std::isfinite(*value)) return absl::StrCat("non-finite number ", Quote(token));
  return "";
}

std::string ParseIndexValue(absl::string_view token, uint64_t* index, double* value) {
  const size_t colon = token.find(':');
  if (colon == absl::string_view::npos) {
    return absl::StrCat("expected index:value, got ", Quote(token));
  }
  const absl::string_view index_text = token.substr(0, colon);
  const char* end = index_text.data() + index_text.size();
  const std::from_chars_result parsed = std::from_chars(index_text.data(), end, *index);
  if (index_text.empty() || parsed.ec != std::errc() || parsed.ptr != end) {
    return absl::StrCat("bad index ", Quote(index_text));
  }
  if (*index == 0) return "index 0: indices are 1-based";
  const std::string error = ParseNumber(token.substr(colon + 1), value);
  if (!error.empty()) return absl::StrCat(error, " at index ", *index);
  return "";
}

bool NextToken(absl::string_view* line, absl::string_view* token) {
  if (line->empty()) return false;
  size_t end = 0;
  while (end < line->size() && !IsBlank((*line)[end])) ++end;
  *token = line->substr(0, end);
  *line = Trim(line->substr(end));
  return true;
}

}  // namespace okl::text
