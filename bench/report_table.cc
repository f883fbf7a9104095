#include "bench/report_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace okl::bench {
namespace {

// The columns `text` takes on a terminal: its UTF-8 code points.
size_t DisplayWidth(absl::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// `text` padded with spaces to `width` columns, on the right if `left`, else on the left.
std::string Padded(const std::string& text, size_t width, bool left) {
  const std::string padding(width - std::min(width, DisplayWidth(text)), ' ');
  return left ? text + padding : padding + text;
}

}  // namespace

std::string Grouped(double value) {
  const std::string digits = absl::StrFormat("%.0f", value);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return grouped;
}

void PrintTable(const std::vector<std::vector<std::string>>& cells, size_t left_columns,
                bool markdown, std::FILE* out) {
  std::vector<size_t> widths(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) {
      widths[c] = std::max(widths[c], DisplayWidth(line[c]));
    }
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string text = markdown ? "| " : "";
    for (size_t c = 0; c < line.size(); ++c) {
      absl::StrAppend(&text, Padded(line[c], widths[c], c < left_columns));
      if (c + 1 < line.size()) absl::StrAppend(&text, markdown ? " | " : "  ");
    }
    std::fprintf(out, "%s%s\n", text.c_str(), markdown ? " |" : "");
  };
  print_line(cells[0]);
  std::vector<std::string> rule;
  for (size_t c = 0; c < widths.size(); ++c) {
    rule.push_back(markdown ? std::string(widths[c] - 1, '-') + (c < left_columns ? "-" : ":")
                            : std::string(widths[c], '-'));
  }
  print_line(rule);
  for (size_t r = 1; r < cells.size(); ++r) print_line(cells[r]);
}

}  // namespace okl::bench
