// client/data_reader.cc
//
// The file is read at once and scanned in place: one pass, no per-line allocation,
// std::from_chars for the numbers (several times faster than strtod, and locale-free).

#include "client/data_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/text_fields.h"

namespace okl {
namespace {

using ::okl::text::IsBlank;
using ::okl::text::Quote;
using ::okl::text::Trim;

// Inferred dimensions above this are taken for a corrupt file rather than allocated.
constexpr size_t kMaxInferredDim = size_t{1} << 24;

absl::StatusOr<std::string> ReadWholeFile(absl::string_view path) {
  const std::string name(path);
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat("cannot open ", path));
  }
  std::string contents;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    contents.reserve(static_cast<size_t>(st.st_size));
  }
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

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

enum class NumberError { kNone, kMalformed, kNonFinite };

// Parses all of `token` as a double. Accepts a leading '+' (LIBSVM labels are often
// written "+1"), which std::from_chars does not.
NumberError ParseDouble(absl::string_view token, double* value) {
  if (token.size() > 1 && token.front() == '+' && token[1] != '-' && token[1] != '+') {
    token.remove_prefix(1);
  }
  const char* first = token.data();
  const char* last = token.data() + token.size();
  const std::from_chars_result result = std::from_chars(first, last, *value);
  if (result.ec != std::errc() || result.ptr != last || token.empty()) {
    return NumberError::kMalformed;
  }
  if (!std::isfinite(*value)) return NumberError::kNonFinite;
  return NumberError::kNone;
}

// Builds the "path:line: what" errors of one file.
class ErrorReporter {
 public:
  explicit ErrorReporter(absl::string_view path) : path_(path) {}

  absl::Status At(size_t line, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", what));
  }

  // The error for a ParseDouble failure on `token`, described by `where`
  // (e.g. "in column 3").
  absl::Status BadNumber(size_t line, NumberError error, absl::string_view token,
                         absl::string_view where) const {
    return At(line, absl::StrCat(error == NumberError::kNonFinite ? "non-finite number "
                                                                  : "bad number ",
                                 Quote(token), where.empty() ? "" : " ", where));
  }

  absl::Status Whole(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  }

 private:
  absl::string_view path_;
};

}  // namespace

absl::StatusOr<Dataset> ReadCsv(absl::string_view path, size_t dim) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
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
      const NumberError error = ParseDouble(field, &value);
      if (error != NumberError::kNone) {
        return errors.BadNumber(lines.number(), error, field,
                                absl::StrCat("in column ", column));
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
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
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
    bool first = true;
    while (!line.empty()) {
      size_t end = 0;
      while (end < line.size() && !IsBlank(line[end])) ++end;
      const absl::string_view token = line.substr(0, end);
      line = Trim(line.substr(end));
      if (first) {
        first = false;
        double label;
        const NumberError error = ParseDouble(token, &label);
        if (error != NumberError::kNone) {
          return errors.BadNumber(lines.number(), error, token, "as the label");
        }
        labels.push_back(label);
        continue;
      }
      const size_t colon = token.find(':');
      if (colon == absl::string_view::npos) {
        return errors.At(lines.number(),
                         absl::StrCat("expected index:value, got ", Quote(token)));
      }
      const absl::string_view index_text = token.substr(0, colon);
      const absl::string_view value_text = token.substr(colon + 1);
      uint64_t index = 0;
      const char* index_end = index_text.data() + index_text.size();
      const std::from_chars_result parsed =
          std::from_chars(index_text.data(), index_end, index);
      if (parsed.ec != std::errc() || parsed.ptr != index_end || index_text.empty()) {
        return errors.At(lines.number(), absl::StrCat("bad index ", Quote(index_text)));
      }
      if (index == 0) {
        return errors.At(lines.number(), "index 0: indices are 1-based");
      }
      if (dim > 0 && index > dim) {
        return errors.At(lines.number(),
                         absl::StrCat("index ", index, " exceeds the dimension ", dim));
      }
      if (index > kMaxInferredDim) {
        return errors.At(lines.number(),
                         absl::StrCat("index ", index, " exceeds ", kMaxInferredDim));
      }
      double value;
      const NumberError error = ParseDouble(value_text, &value);
      if (error != NumberError::kNone) {
        return errors.BadNumber(lines.number(), error, value_text,
                                absl::StrCat("at index ", index));
      }
      if (index > seen.size()) seen.resize(index);
      if (seen[index - 1] == row_number + 1) {
        return errors.At(lines.number(), absl::StrCat("duplicate index ", index));
      }
      seen[index - 1] = row_number + 1;
      if (index > max_index) max_index = index;
      indices.push_back(static_cast<uint32_t>(index - 1));
      values.push_back(value);
    }
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
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) return contents.status();
  const ErrorReporter errors(path);

  std::vector<double> series;
  LineScanner lines(*contents);
  absl::string_view line;
  while (lines.Next(&line)) {
    double value;
    const NumberError error = ParseDouble(line, &value);
    if (error != NumberError::kNone) {
      const bool several = line.find_first_of(" \t,") != absl::string_view::npos;
      if (several && error == NumberError::kMalformed) {
        return errors.At(lines.number(),
                         absl::StrCat("expected one value per line, got ", Quote(line)));
      }
      return errors.BadNumber(lines.number(), error, line, "");
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
