// proto/config_text.cc

#include "proto/config_text.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"

namespace okl {
namespace {

// Keeps the first error with its position; protobuf's positions are 0-based.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (has_error_) return;
    has_error_ = true;
    line_ = line + 1;
    column_ = column + 1;
    message_ = message;
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {}

  bool has_error() const { return has_error_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  bool has_error_ = false;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text,
                                                 absl::string_view source) {
  v1::ModelConfig proto;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &proto)) {
    if (!errors.has_error()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": not a text-format okl.v1.ModelConfig"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", errors.line(), ":", errors.column(), ": ", errors.message()));
  }
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", config.status().message()));
  }
  return config;
}

}  // namespace okl
