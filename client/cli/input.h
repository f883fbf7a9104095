// client/cli/input.h
//
// RowReader streams the rows of `okl observe` and `okl predict` from files or stdin, one
// line at a time, so that an input of any length (a pipe that never ends, too) streams in
// constant memory. Two formats, parsed as client/io/data_reader.h parses whole files:
//   csv     x_1,...,x_d,y per line (labelled) or x_1,...,x_d (unlabelled: predict);
//   libsvm  "y idx:val ..." with 1-based indices; unlabelled, a leading label is optional
//           and ignored.
// Blank lines and lines starting with '#' are skipped; surrounding blanks are trimmed.
// A malformed row is InvalidArgument "path:line: what is wrong".
//
// ParseInputVector reads one input written on the command line (`okl predict --x=...`).
//
// Not thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::cli::RowReader> reader,
//                        okl::cli::RowReader::Open({"a9a_test.txt"}, RowFormat::kLibsvm,
//                                                  /*dim=*/123, /*labelled=*/true));
//   std::vector<double> x;
//   double y;
//   for (;;) {
//     OKL_ASSIGN_OR_RETURN(bool more, reader->Next(&x, &y));
//     if (!more) break;
//     ...
//   }
#ifndef OKL_CLIENT_CLI_INPUT_H_
#define OKL_CLIENT_CLI_INPUT_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl::cli {

enum class RowFormat { kCsv, kLibsvm };

// "csv" or "libsvm"; InvalidArgument otherwise.
absl::StatusOr<RowFormat> ParseRowFormat(absl::string_view name);

class RowReader {
 public:
  // Reads `paths` in order; "-" is stdin. Every file is opened here, so a missing one
  // fails before any row is read. Each row must have dimension `dim` (> 0); `labelled`
  // rows end (csv) or start (libsvm) with their label.
  static absl::StatusOr<std::unique_ptr<RowReader>> Open(const std::vector<std::string>& paths,
                                                         RowFormat format, uint32_t dim,
                                                         bool labelled);
  ~RowReader();
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  // Replaces *x with the next row's dim inputs and sets *y to its label (0 if
  // unlabelled); false after the last row.
  absl::StatusOr<bool> Next(std::vector<double>* x, double* y);

  // Rows returned so far.
  uint64_t rows() const { return rows_; }
  // Bytes consumed so far, over all inputs.
  uint64_t bytes_read() const { return bytes_read_; }
  // The inputs' total size if every one is a regular file (stdin redirected from a file
  // counts), for progress and ETA; empty for a pipe or terminal.
  std::optional<uint64_t> total_bytes() const { return total_bytes_; }

 private:
  struct Input {
    std::string name;
    std::FILE* file = nullptr;
    bool owned = false;  // closed by the reader (not stdin)
  };

  RowReader(std::vector<Input> inputs, RowFormat format, uint32_t dim, bool labelled,
            std::optional<uint64_t> total_bytes);

  // Parses one trimmed data line of the current input.
  absl::Status ParseLine(absl::string_view line, std::vector<double>* x, double* y);
  absl::Status Error(absl::string_view what) const;

  std::vector<Input> inputs_;
  const RowFormat format_;
  const uint32_t dim_;
  const bool labelled_;
  const std::optional<uint64_t> total_bytes_;
  size_t current_ = 0;        // index into inputs_
  uint64_t line_number_ = 0;  // in the current input, 1-based
  uint64_t rows_ = 0;
  uint64_t bytes_read_ = 0;
  char* line_buffer_ = nullptr;  // getline's
  size_t line_capacity_ = 0;
  std::vector<uint64_t> seen_;  // libsvm: seen_[j] == rows_ + 1 when index j was set
};

// One input of dimension `dim` written as "v1,v2,...,vd" (dense) or "i:v,j:w,..." (sparse,
// 1-based indices as in LIBSVM, the rest 0; blanks may separate pairs instead of commas).
// InvalidArgument saying what is wrong.
absl::StatusOr<std::vector<double>> ParseInputVector(absl::string_view text, uint32_t dim);

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_INPUT_H_
