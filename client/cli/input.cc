// client/cli/input.cc

#include "client/cli/input.h"

#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/io/text_fields.h"

namespace okl::cli {
namespace {

using ::okl::text::IsBlank;
using ::okl::text::Trim;

// The error for a LIBSVM index outside [1, dim], empty if inside.
std::string CheckIndex(uint64_t index, uint32_t dim) {
  if (index > dim) return absl::StrCat("index ", index, " exceeds the dimension ", dim);
  return "";
}

}  // namespace

absl::StatusOr<RowFormat> ParseRowFormat(absl::string_view name) {
  if (name == "csv") return RowFormat::kCsv;
  if (name == "libsvm") return RowFormat::kLibsvm;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown input format '", name, "': expected csv or libsvm"));
}

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(
    const std::vector<std::string>& paths) {
  std::vector<Input> inputs;
  std::optional<uint64_t> total = 0;
  auto close_all = [&inputs] {
    for (Input& input : inputs) {
      if (input.owned) std::fclose(input.file);
    }
  };
  for (const std::string& path : paths) {
    Input input;
    if (path == "-") {
      input = {.name = "<stdin>", .file = stdin, .owned = false};
    } else {
      std::FILE* file = std::fopen(path.c_str(), "r");
      if (file == nullptr) {
        const int error = errno;
        close_all();
        return absl::ErrnoToStatus(error, absl::StrCat("cannot open ", path));
      }
      input = {.name = path, .file = file, .owned = true};
    }
    struct stat st;
    if (total.has_value() && ::fstat(fileno(input.file), &st) == 0 && S_ISREG(st.st_mode)) {
      // A redirected stdin may already be positioned past its start.
      const off_t position = ::lseek(fileno(input.file), 0, SEEK_CUR);
      *total += static_cast<uint64_t>(st.st_size) -
                static_cast<uint64_t>(position > 0 ? position : 0);
    } else {
      total.reset();
    }
    inputs.push_back(std::move(input));
  }
  return std::unique_ptr<LineReader>(new LineReader(std::move(inputs), total));
}

LineReader::~LineReader() {
  for (Input& input : inputs_) {
    if (input.owned) std::fclose(input.file);
  }
  std::free(line_buffer_);
}

absl::Status LineReader::Error(absl::string_view what) const {
  const absl::string_view name =
      inputs_.empty() ? absl::string_view("<none>")
                      : absl::string_view(inputs_[std::min(current_, inputs_.size() - 1)].name);
  return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number_, ": ", what));
}

absl::StatusOr<bool> LineReader::Next(absl::string_view* line) {
  while (current_ < inputs_.size()) {
    Input& input = inputs_[current_];
    errno = 0;
    const ssize_t n = ::getline(&line_buffer_, &line_capacity_, input.file);
    if (n < 0) {
      if (std::ferror(input.file)) {
        const int error = errno;
        return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", input.name));
      }
      ++current_;
      line_number_ = 0;
      continue;
    }
    bytes_read_ += static_cast<uint64_t>(n);
    ++line_number_;
    absl::string_view text(line_buffer_, static_cast<size_t>(n));
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    text = Trim(text);
    if (text.empty() || text.front() == '#') continue;
    *line = text;
    return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<RowReader>> RowReader::Open(
    const std::vector<std::string>& paths, RowFormat format, uint32_t dim, bool labelled,
    bool class_labels) {
  if (dim == 0) return absl::InvalidArgumentError("the input dimension must be positive");
  absl::StatusOr<std::unique_ptr<LineReader>> lines = LineReader::Open(paths);
  if (!lines.ok()) return lines.status();
  return std::unique_ptr<RowReader>(
      new RowReader(*std::move(lines), format, dim, labelled, labelled && class_labels));
}

RowReader::RowReader(std::unique_ptr<LineReader> lines, RowFormat format, uint32_t dim,
                     bool labelled, bool class_labels)
    : lines_(std::move(lines)),
      format_(format),
      dim_(dim),
      labelled_(labelled),
      class_labels_(class_labels) {
  if (format_ == RowFormat::kLibsvm) seen_.assign(dim_, 0);
}

absl::StatusOr<bool> RowReader::Next(std::vector<double>* x, double* y) {
  return Next(x, y, nullptr);
}

absl::StatusOr<bool> RowReader::Next(std::vector<double>* x, double* y,
                                     std::string* class_label) {
  absl::string_view line;
  absl::StatusOr<bool> more = lines_->Next(&line);
  if (!more.ok() || !*more) return more;
  if (absl::Status parsed = ParseLine(line, x, y, class_label); !parsed.ok()) return parsed;
  ++rows_;
  return true;
}

absl::Status RowReader::ParseLine(absl::string_view line, std::vector<double>* x, double* y,
                                  std::string* class_label) {
  x->assign(dim_, 0.0);
  *y = 0.0;
  if (class_label != nullptr) class_label->clear();
  if (format_ == RowFormat::kCsv) {
    const size_t want = dim_ + (labelled_ ? 1 : 0);
    size_t column = 0;
    for (;;) {
      const size_t comma = line.find(',');
      const absl::string_view field = Trim(line.substr(0, comma));
      ++column;
      if (column <= want && column > dim_ && class_labels_) {
        if (field.empty()) return lines_->Error(absl::StrCat("no class in column ", column));
        if (class_label != nullptr) class_label->assign(field.data(), field.size());
      } else if (column <= want) {
        double value = 0;
        const std::string error = text::ParseNumber(field, &value);
        if (!error.empty()) return lines_->Error(absl::StrCat(error, " in column ", column));
        if (column <= dim_) {
          (*x)[column - 1] = value;
        } else {
          *y = value;
        }
      }
      if (comma == absl::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (column != want) {
      const absl::string_view label = !labelled_       ? ""
                                      : class_labels_ ? " and a class"
                                                      : " and a label";
      return lines_->Error(
          absl::StrCat("expected ", want, " columns (", dim_, " inputs", label, "), got ", column));
    }
    return absl::OkStatus();
  }

  // libsvm
  if (class_labels_) {  // the first word is the class; the rest, index:value pairs
    const size_t end = line.find_first_of(" \t");
    const absl::string_view word = line.substr(0, end);
    if (class_label != nullptr) class_label->assign(word.data(), word.size());
    line = end == absl::string_view::npos ? absl::string_view() : line.substr(end + 1);
  }
  const uint64_t mark = rows_ + 1;
  const std::string error = text::ParseLibsvmLine(
      line, labelled_ && !class_labels_,
      [&](double label) {
        if (labelled_) *y = label;
        return std::string();
      },
      [&](uint64_t index, double value) {
        std::string range = CheckIndex(index, dim_);
        if (!range.empty()) return range;
        if (seen_[index - 1] == mark) return absl::StrCat("index ", index, " appears twice");
        seen_[index - 1] = mark;
        (*x)[index - 1] = value;
        return std::string();
      });
  if (!error.empty()) return lines_->Error(error);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LabelReader>> LabelReader::Open(
    const std::vector<std::string>& paths) {
  absl::StatusOr<std::unique_ptr<LineReader>> lines = LineReader::Open(paths);
  if (!lines.ok()) return lines.status();
  return std::unique_ptr<LabelReader>(new LabelReader(*std::move(lines)));
}

absl::StatusOr<bool> LabelReader::Next(std::string* event_id, double* y) {
  absl::string_view line;
  absl::StatusOr<bool> more = lines_->Next(&line);
  if (!more.ok() || !*more) return more;
  const size_t comma = line.find(',');
  if (comma == absl::string_view::npos) {
    return lines_->Error(
        absl::StrCat("expected event_id,y, got ", text::Quote(line), " (no comma)"));
  }
  const absl::string_view id = Trim(line.substr(0, comma));
  const absl::string_view label = Trim(line.substr(comma + 1));
  if (id.empty()) return lines_->Error("the event id before the comma is empty");
  const std::string error = text::ParseNumber(label, y);
  if (!error.empty()) return lines_->Error(absl::StrCat(error, " as the label y"));
  event_id->assign(id.data(), id.size());
  ++labels_;
  return true;
}

absl::StatusOr<std::vector<double>> ParseInputVector(absl::string_view text, uint32_t dim) {
  std::vector<double> x(dim, 0.0);
  std::vector<absl::string_view> tokens;
  absl::string_view rest = Trim(text);
  while (!rest.empty()) {
    size_t end = 0;
    while (end < rest.size() && rest[end] != ',' && !IsBlank(rest[end])) ++end;
    tokens.push_back(rest.substr(0, end));
    rest = rest.substr(end);
    while (!rest.empty() && (rest.front() == ',' || IsBlank(rest.front())))
      rest.remove_prefix(1);
  }
  const auto invalid = [text](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("input '", text, "': ", what));
  };
  if (tokens.empty()) return invalid("no values");
  const bool sparse = tokens.front().find(':') != absl::string_view::npos;
  if (!sparse && tokens.size() != dim) {
    return invalid(absl::StrCat("expected ", dim, " values (the model's dim), got ",
                                tokens.size(), "; or write index:value pairs, 1-based"));
  }
  std::vector<bool> seen(sparse ? dim : 0, false);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!sparse) {
      const std::string error = text::ParseNumber(tokens[i], &x[i]);
      if (!error.empty()) return invalid(error);
      continue;
    }
    uint64_t index = 0;
    double value = 0;
    std::string error = text::ParseIndexValue(tokens[i], &index, &value);
    if (error.empty()) error = CheckIndex(index, dim);
    if (!error.empty()) return invalid(error);
    if (seen[index - 1]) return invalid(absl::StrCat("index ", index, " appears twice"));
    seen[index - 1] = true;
    x[index - 1] = value;
  }
  return x;
}

}  // namespace okl::cli
