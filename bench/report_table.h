// bench/report_table.h
//
// The text tables the accuracy benchmarks print: aligned columns for a terminal, or a
// Markdown table for docs/learning-quality.md, and numbers with thousands separators.
//
// Example:
//   okl::bench::PrintTable({{"config", "MSE"}, {"mg30", "0.0039"}}, /*left_columns=*/1,
//                          /*markdown=*/true, stdout);
#ifndef OKL_BENCH_REPORT_TABLE_H_
#define OKL_BENCH_REPORT_TABLE_H_

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace okl::bench {

// 1234567 -> "1,234,567" (rounded; non-negative).
std::string Grouped(double value);

// Prints `cells` (the header first, every row as wide) with padded columns, the first
// `left_columns` left-aligned and the rest right-aligned, measured in UTF-8 code points
// ("µs" is two columns); as a Markdown table if `markdown`.
void PrintTable(const std::vector<std::vector<std::string>>& cells, size_t left_columns,
                bool markdown, std::FILE* out);

}  // namespace okl::bench

#endif  // OKL_BENCH_REPORT_TABLE_H_
