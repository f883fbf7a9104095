// client/io/json_writer.h
//
// A minimal JSON writer for `okl --json` and the benchmarks' reports: one object per result, built field by
// field. Numbers are written so that they parse back to the same double (shortest
// round-trip form); NaN and infinities, which JSON cannot hold, become null. Strings are
// escaped per RFC 8259. Thread-compatible.
//
// Example:
//   okl::JsonObject json;
//   json.AddString("model", "a9a").AddUint("steps", 3000).AddDouble("mean_loss", 0.4567);
//   std::cout << json.str() << "\n";  // {"model":"a9a","steps":3000,"mean_loss":0.4567}
#ifndef OKL_CLIENT_IO_JSON_WRITER_H_
#define OKL_CLIENT_IO_JSON_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace okl {

// `value` as a JSON string literal, quotes included.
std::string JsonString(absl::string_view value);
// `value` as a JSON number in its shortest round-trip form; null if not finite.
std::string JsonNumber(double value);

class JsonObject {
 public:
  JsonObject& AddString(absl::string_view key, absl::string_view value);
  JsonObject& AddDouble(absl::string_view key, double value);
  JsonObject& AddInt(absl::string_view key, int64_t value);
  JsonObject& AddUint(absl::string_view key, uint64_t value);
  JsonObject& AddBool(absl::string_view key, bool value);
  JsonObject& AddNull(absl::string_view key);
  JsonObject& AddDoubles(absl::string_view key, absl::Span<const double> values);
  // An array of strings.
  JsonObject& AddStrings(absl::string_view key, absl::Span<const std::string> values);
  // `json` must be one valid JSON value (an object, an array, ...): it is copied as is.
  JsonObject& AddRaw(absl::string_view key, absl::string_view json);

  // The object, "{...}", on one line.
  std::string str() const;

 private:
  void Key(absl::string_view key);
  // A JSON array of format(value) for each of `values`.
  template <typename T, typename Format>
  JsonObject& AddArray(absl::string_view key, absl::Span<const T> values, Format format);

  std::string body_;
};

}  // namespace okl

#endif  // OKL_CLIENT_IO_JSON_WRITER_H_
