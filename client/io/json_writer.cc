// client/io/json_writer.cc

#include "client/io/json_writer.h"

#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace okl {

std::string JsonString(absl::string_view value) {
  std::string out = "\"";
  for (const char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void JsonObject::Key(absl::string_view key) {
  absl::StrAppend(&body_, body_.empty() ? "" : ",", JsonString(key), ":");
}

JsonObject& JsonObject::AddString(absl::string_view key, absl::string_view value) {
  Key(key);
  absl::StrAppend(&body_, JsonString(value));
  return *this;
}

JsonObject& JsonObject::AddDouble(absl::string_view key, double value) {
  Key(key);
  absl::StrAppend(&body_, JsonNumber(value));
  return *this;
}

JsonObject& JsonObject::AddInt(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonObject& JsonObject::AddUint(absl::string_view key, uint64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonObject& JsonObject::AddBool(absl::string_view key, bool value) {
  Key(key);
  absl::StrAppend(&body_, value ? "true" : "false");
  return *this;
}

JsonObject& JsonObject::AddNull(absl::string_view key) {
  Key(key);
  absl::StrAppend(&body_, "null");
  return *this;
}

template <typename T, typename Format>
JsonObject& JsonObject::AddArray(absl::string_view key, absl::Span<const T> values,
                                 Format format) {
  Key(key);
  body_ += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StrAppend(&body_, i == 0 ? "" : ",", format(values[i]));
  }
  body_ += ']';
  return *this;
}

JsonObject& JsonObject::AddDoubles(absl::string_view key, absl::Span<const double> values) {
  return AddArray(key, values, [](double value) { return JsonNumber(value); });
}

JsonObject& JsonObject::AddStrings(absl::string_view key,
                                   absl::Span<const std::string> values) {
  return AddArray(key, values, [](const std::string& value) { return JsonString(value); });
}

JsonObject& JsonObject::AddRaw(absl::string_view key, absl::string_view json) {
  Key(key);
  absl::StrAppend(&body_, json);
  return *this;
}

std::string JsonObject::str() const { return absl::StrCat("{", body_, "}"); }

}  // namespace okl
