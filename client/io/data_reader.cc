// client/io/data_reader.cc
//
// The file is read at once (okl::ReadFile) and scanned in place: one pass, no per-line
// allocation, std::from_chars for the numbers (several times faster than strtod, and
// locale-free; see client/io/text_fields.h).

#include "client/io/data_reader.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/io/text_fields.h"
#include "core/runtime/file.h"

namespace okl {
namespace {

using ::okl::text::Quote;
using ::okl::text::Trim;

// Inferred dimensions above this are taken for a corrupt file rather than allocated.
constexpr size_t kMaxInferredDim = size_t{1} << 24;

// Walks the lines of a buffer, numbering them from 1 and trimming each; skips blank
// lines and '#' comments.
class LineScanner {
 public:
  explicit LineScanner(absl::string_view text) : rest_(text) {}

  // Sets *line to the next data line, trimmed; false at the end.
  bool Next(absl::string_view* line) {
    while (!rest_.empty()) {
      const size_t end = rest_.find('\n');
      absl::string_view raw = rest_.substr(0, end);
      rest_.remove_prefix(end == absl::string_view::npos ? rest_.size() : end + 1);
      ++number_;
      raw = Trim(raw);
      if (raw.empty() || raw.front() == '#') continue;
      *line = raw;
      return true;
    }
    return false;
  }

  // The 1-based number of the line Next() returned last.
  size_t number() const { return number_; }

 private:
  absl::string_view rest_;
  size_t number_ = 0;
};

// Builds the "path:line: what" errors of one file.
class ErrorReporter {
 public:
  explicit ErrorReporter(absl::string_view path) : path_(path) {}

  absl::Status At(size_t line, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", what));
  }

  absl::Status Whole(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  }

 private:
  absl::string_view path_;
};

}  // namespace

absl::StatusOr<Dataset> ReadCsv(absl::string_view path, size_t dim) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  const ErrorReporter errors(path);

  Dataset data;
  data.dim = dim;
  bool dim_known = dim > 0;
  LineScanner lines(*contents);
  absl::string_view line;
  std::vector<double> row;
  while (lines.Next(&line)) {
    row.clear();
    size_t column = 0;
    for (;;) {
      const size_t comma = line.find(',');
      const absl::string_view field = Trim(line.substr(0, comma));
      ++column;
      double value;
      const std::string error = text::ParseNumber(field, &value);
      if (!error.empty()) {
        return errors.At(lines.number(), absl::StrCat(error, " in column ", column));
      }
      row.push_back(value);
      if (comma == absl::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (!dim_known) {
      if (row.size() < 2) {
        return errors.At(lines.number(),
                         "a row needs at least one input and a label, got 1 column");
      }
      data.dim = row.size() - 1;
      dim_known = true;
    } else if (row.size() != data.dim + 1) {
      return errors.At(lines.number(),
                       absl::StrCat("expected ", data.dim + 1, " columns (", data.dim,
                                    " inputs and a label), got ", row.size()));
    }
    data.x.insert(data.x.end(), row.begin(), row.end() - 1);
    data.y.push_back(row.back());
  }
  if (!dim_known) return errors.Whole("no data rows to infer the dimension from");
  return data;
}

absl::StatusOr<Dataset> ReadLibsvm(absl::string_view path, size_t dim) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  const ErrorReporter errors(path);

  // First pass: the sparse rows. The dense matrix is built once the dimension is known.
  std::vector<size_t> row_start;  // into indices/values; one past the end is appended
  std::vector<uint32_t> indices;  // 0-based
  std::vector<double> values;
  std::vector<double> labels;
  // seen[j] == row number + 1 when index j was set in that row: duplicates in O(1).
  std::vector<size_t> seen(dim);
  size_t max_index = 0;

  LineScanner lines(*contents);
  absl::string_view line;
  while (lines.Next(&line)) {
    const size_t row_number = labels.size();
    row_start.push_back(indices.size());
    const std::string error = text::ParseLibsvmLine(
        line, /*labelled=*/true,
        [&](double label) {
          labels.push_back(label);
          return std::string();
        },
        [&](uint64_t index, double value) {
          if (dim > 0 && index > dim) {
            return absl::StrCat("index ", index, " exceeds the dimension ", dim);
          }
          if (index > kMaxInferredDim) {
            return absl::StrCat("index ", index, " exceeds ", kMaxInferredDim);
          }
          if (index > seen.size()) seen.resize(index);
          if (seen[index - 1] == row_number + 1) {
            return absl::StrCat("duplicate index ", index);
          }
          seen[index - 1] = row_number + 1;
          if (index > max_index) max_index = index;
          indices.push_back(static_cast<uint32_t>(index - 1));
          values.push_back(value);
          return std::string();
        });
    if (!error.empty()) return errors.At(lines.number(), error);
  }
  row_start.push_back(indices.size());

  Dataset data;
  data.dim = dim > 0 ? dim : max_index;
  if (data.dim == 0) {
    return errors.Whole(labels.empty() ? "no data rows to infer the dimension from"
                                       : "no nonzero input to infer the dimension from");
  }
  data.y = std::move(labels);
  data.x.assign(data.y.size() * data.dim, 0.0);
  for (size_t i = 0; i < data.y.size(); ++i) {
    double* row = data.x.data() + i * data.dim;
    for (size_t k = row_start[i]; k < row_start[i + 1]; ++k) row[indices[k]] = values[k];
  }
  return data;
}

absl::StatusOr<Dataset> ReadSeries(absl::string_view path, size_t embedding) {
  if (embedding == 0) {
    return absl::InvalidArgumentError("the series embedding must be at least 1, got 0");
  }
  if (embedding > kMaxInferredDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("the series embedding ", embedding, " exceeds ", kMaxInferredDim));
  }
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  const ErrorReporter errors(path);

  std::vector<double> series;
  LineScanner lines(*contents);
  absl::string_view line;
  while (lines.Next(&line)) {
    double value;
    const std::string error = text::ParseNumber(line, &value);
    if (!error.empty()) {
      // No number holds a blank or a comma: the line has several fields.
      if (line.find_first_of(" \t,") != absl::string_view::npos) {
        return errors.At(lines.number(),
                         absl::StrCat("expected one value per line, got ", Quote(line)));
      }
      return errors.At(lines.number(), error);
    }
    series.push_back(value);
  }

  Dataset data;
  data.dim = embedding;
  if (series.size() < 2) return data;
  const size_t rows = series.size() - 1;
  data.x.assign(rows * embedding, 0.0);
  data.y.reserve(rows);
  for (size_t n = 0; n < rows; ++n) {
    double* row = data.x.data() + n * embedding;
    const size_t lags = std::min(embedding, n + 1);
    for (size_t k = 0; k < lags; ++k) row[k] = series[n - k];
    data.y.push_back(series[n + 1]);
  }
  return data;
}

}  // namespace okl
