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
// LabelReader streams `okl label`'s lines, "event_id,y", the same way.
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
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl::cli {

enum class RowFormat { kCsv, kLibsvm };

// "csv" or "libsvm"; InvalidArgument otherwise.
absl::StatusOr<RowFormat> ParseRowFormat(absl::string_view name);

// The data lines of files or stdin, in order: blank lines and lines starting with '#'
// skipped, surrounding blanks trimmed. What RowReader and LabelReader share.
class LineReader {
 public:
  // Reads `paths` in order; "-" is stdin. Every file is opened here, so a missing one
  // fails before any line is read.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::vector<std::string>& paths);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Sets *line to the next data line (valid until the next call); false after the last.
  absl::StatusOr<bool> Next(absl::string_view* line);
  // InvalidArgument "path:line: what", about the line Next returned last.
  absl::Status Error(absl::string_view what) const;

  uint64_t bytes_read() const { return bytes_read_; }
  std::optional<uint64_t> total_bytes() const { return total_bytes_; }

 private:
  struct Input {
    std::string name;
    std::FILE* file = nullptr;
    bool owned = false;  // closed by the reader (not stdin)
  };

  LineReader(std::vector<Input> inputs, std::optional<uint64_t> total_bytes)
      : inputs_(std::move(inputs)), total_bytes_(total_bytes) {}

  std::vector<Input> inputs_;
  const std::optional<uint64_t> total_bytes_;
  size_t current_ = 0;        // index into inputs_
  uint64_t line_number_ = 0;  // in the current input, 1-based
  uint64_t bytes_read_ = 0;
  char* line_buffer_ = nullptr;  // getline's
  size_t line_capacity_ = 0;
};

class RowReader {
 public:
  // Reads `paths` in order; "-" is stdin. Every file is opened here, so a missing one
  // fails before any row is read. Each row must have dimension `dim` (> 0); `labelled`
  // rows end (csv) or start (libsvm) with their label: with `class_labels` (a multi-class
  // model's rows) a class, the field's text as it is (csv: trimmed of spaces; libsvm: the
  // line's first word), else a number.
  static absl::StatusOr<std::unique_ptr<RowReader>> Open(const std::vector<std::string>& paths,
                                                         RowFormat format, uint32_t dim,
                                                         bool labelled, bool class_labels = false);
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  // Replaces *x with the next row's dim inputs and sets *y to its label (0 if
  // unlabelled); false after the last row.
  absl::StatusOr<bool> Next(std::vector<double>* x, double* y);
  // The same for rows with class labels: *class_label gets the row's class (and *y 0).
  absl::StatusOr<bool> Next(std::vector<double>* x, double* y, std::string* class_label);

  // Rows returned so far.
  uint64_t rows() const { return rows_; }
  // Bytes consumed so far, over all inputs.
  uint64_t bytes_read() const { return lines_->bytes_read(); }
  // The inputs' total size if every one is a regular file (stdin redirected from a file
  // counts), for progress and ETA; empty for a pipe or terminal.
  std::optional<uint64_t> total_bytes() const { return lines_->total_bytes(); }

 private:
  RowReader(std::unique_ptr<LineReader> lines, RowFormat format, uint32_t dim, bool labelled,
            bool class_labels);

  // Parses one trimmed data line of the current input; class_label is set (and may be
  // null) only with class labels.
  absl::Status ParseLine(absl::string_view line, std::vector<double>* x, double* y,
                         std::string* class_label);

  std::unique_ptr<LineReader> lines_;
  const RowFormat format_;
  const uint32_t dim_;
  const bool labelled_;
  const bool class_labels_;
  uint64_t rows_ = 0;
  std::vector<uint64_t> seen_;  // libsvm: seen_[j] == rows_ + 1 when index j was set
};

// `okl label`'s input: one label a line, "event_id,y" (the id as the server takes it, y a
// finite number). A malformed line is InvalidArgument "path:line: what is wrong".
class LabelReader {
 public:
  static absl::StatusOr<std::unique_ptr<LabelReader>> Open(
      const std::vector<std::string>& paths);

  // Sets the next line's id and label; false after the last line.
  absl::StatusOr<bool> Next(std::string* event_id, double* y);

  uint64_t labels() const { return labels_; }  // returned so far

 private:
  explicit LabelReader(std::unique_ptr<LineReader> lines) : lines_(std::move(lines)) {}

  std::unique_ptr<LineReader> lines_;
  uint64_t labels_ = 0;
};

// One input of dimension `dim` written as "v1,v2,...,vd" (dense) or "i:v,j:w,..." (sparse,
// 1-based indices as in LIBSVM, the rest 0; blanks may separate pairs instead of commas).
// InvalidArgument saying what is wrong.
absl::StatusOr<std::vector<double>> ParseInputVector(absl::string_view text, uint32_t dim);

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_INPUT_H_
