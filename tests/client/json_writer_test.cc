// tests/client/json_writer_test.cc
//
// The JSON writer's output, byte for byte: `okl --json` and the benchmarks' reports are read
// by scripts and diffed across runs, so a number or an escape written another way (even one
// that parses to the same value) is a change these tests catch.

#include "client/io/json_writer.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

TEST(JsonNumberTest, WritesTheShortestFormThatParsesBackToTheSameDouble) {
  // std::to_chars' form: the fewest significant digits that round-trip, in fixed or
  // scientific notation, whichever is shorter (fixed on a tie), an exponent of at least two
  // digits, and no ".0" on integral values.
  const std::vector<std::pair<double, std::string>> cases = {
      {0.1, "0.1"},
      {1.0 / 3, "0.3333333333333333"},
      {0.0125, "0.0125"},
      {1.5, "1.5"},
      {-2, "-2"},
      {0.0, "0"},
      {-0.0, "-0"},
      {2.0, "2"},
      {100, "100"},
      {0.001, "0.001"},
      {1e-4, "1e-04"},
      {1e-5, "1e-05"},
      {1e15, "1e+15"},
      {1e21, "1e+21"},
      {1e-300, "1e-300"},
      {1e300, "1e+300"},
      {9007199254740992.0, "9007199254740992"},  // 2^53
      {123456789012345683968.0, "123456789012345683968"},
      {18446744073709551615.0, "18446744073709551616"},  // uint64 max, rounded to 2^64
      {5e-324, "5e-324"},                                // the least subnormal
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      // Doubles whose shortest digits Grisu2 misses: nlohmann-json's dump writes them as
      // -8.481620698703041e+18 and 4.1752050594835004e+78.
      {-8.48162069870304e18, "-8481620698703040512"},
      {4.1752050594835e78, "4.1752050594835e+78"},
  };
  for (const auto& [value, expected] : cases) {
    EXPECT_EQ(JsonNumber(value), expected) << expected;
    EXPECT_EQ(std::strtod(JsonNumber(value).c_str(), nullptr), value) << expected;
  }
}

TEST(JsonNumberTest, WritesNullForNanAndInfinities) {
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(-std::nan("")), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity()), "null");
}

TEST(JsonStringTest, EscapesQuoteBackslashAndControlCharactersAndNothingElseInAscii) {
  std::string ascii;
  for (int c = 0; c < 0x80; ++c) ascii += static_cast<char>(c);
  // \n, \r and \t in short form; every other control character, \b and \f among them, as
  // \u00xx in lower-case hex; DEL (0x7f) as it is.
  EXPECT_EQ(JsonString(ascii),
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\t\\n"
            "\\u000b\\u000c\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015"
            "\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f"
            " !\\\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`"
            "abcdefghijklmnopqrstuvwxyz{|}~\x7f\"");
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("/"), "\"/\"");
}

TEST(JsonStringTest, CopiesBytesAboveAsciiAsTheyAreWhetherOrNotUtf8) {
  EXPECT_EQ(JsonString("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // U+2028 and U+2029, which some writers escape for JavaScript parsers older than ES2019.
  EXPECT_EQ(JsonString("\xe2\x80\xa8\xe2\x80\xa9"), "\"\xe2\x80\xa8\xe2\x80\xa9\"");
  // Not UTF-8: a stray byte, a lone continuation byte, a truncated sequence before a quote,
  // an overlong '/', an encoded surrogate. No reader of okl's JSON expects these; the
  // writer neither fails nor rewrites them.
  EXPECT_EQ(JsonString("a\xff-\x80 \xe2\x82\"\xc0\xaf\xed\xa0\x80"),
            "\"a\xff-\x80 \xe2\x82\\\"\xc0\xaf\xed\xa0\x80\"");
}

TEST(JsonObjectTest, WritesTheHeadersExample) {
  JsonObject json;
  json.AddString("model", "a9a").AddUint("steps", 3000).AddDouble("mean_loss", 0.4567);
  EXPECT_EQ(json.str(), "{\"model\":\"a9a\",\"steps\":3000,\"mean_loss\":0.4567}");
}

TEST(JsonObjectTest, EscapesStringsAndRoundTripsNumbers) {
  JsonObject json;
  json.AddString("s", "a\"b\\c\n\x01")
      .AddDouble("d", 0.1)
      .AddDouble("nan", std::nan(""))
      .AddUint("u", 18446744073709551615u)
      .AddBool("b", true)
      .AddDoubles("v", {1.5, -2});
  EXPECT_EQ(json.str(),
            "{\"s\":\"a\\\"b\\\\c\\n\\u0001\",\"d\":0.1,\"nan\":null,"
            "\"u\":18446744073709551615,\"b\":true,\"v\":[1.5,-2]}");
}

TEST(JsonObjectTest, WritesIntegersExactly) {
  JsonObject json;
  json.AddInt("min", std::numeric_limits<int64_t>::min())
      .AddInt("max", std::numeric_limits<int64_t>::max())
      .AddInt("minus_one", -1)
      .AddInt("zero", 0)
      .AddUint("two_to_53_plus_1", (uint64_t{1} << 53) + 1)
      .AddUint("uint64_max", std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(json.str(),
            "{\"min\":-9223372036854775808,\"max\":9223372036854775807,\"minus_one\":-1,"
            "\"zero\":0,\"two_to_53_plus_1\":9007199254740993,"
            "\"uint64_max\":18446744073709551615}");
}

TEST(JsonObjectTest, KeepsFieldsInInsertionOrderDuplicatesIncluded) {
  JsonObject json;
  json.AddInt("b", 1).AddInt("a", 2).AddBool("c", false).AddNull("a").AddString("", "");
  EXPECT_EQ(json.str(), "{\"b\":1,\"a\":2,\"c\":false,\"a\":null,\"\":\"\"}");
}

TEST(JsonObjectTest, EscapesKeysAsStrings) {
  JsonObject json;
  json.AddInt("a\"b\\\b\xc3\xa9", 1);
  EXPECT_EQ(json.str(), "{\"a\\\"b\\\\\\u0008\xc3\xa9\":1}");
}

TEST(JsonObjectTest, WritesArraysOfDoublesWithNullForTheNonFinite) {
  JsonObject json;
  json.AddDoubles("empty", {})
      .AddDoubles("one", {2.0})
      .AddDoubles("mixed",
                  {-0.0, std::numeric_limits<double>::infinity(), 1e-300, std::nan("")});
  EXPECT_EQ(json.str(), "{\"empty\":[],\"one\":[2],\"mixed\":[-0,null,1e-300,null]}");
}

TEST(JsonObjectTest, WritesArraysOfStringsEscapedAsStrings) {
  JsonObject json;
  json.AddStrings("empty", {}).AddStrings("ids", {"a", "", "q\"\\\n\x01\xc3\xa9"});
  EXPECT_EQ(json.str(), "{\"empty\":[],\"ids\":[\"a\",\"\",\"q\\\"\\\\\\n\\u0001\xc3\xa9\"]}");
}

TEST(JsonObjectTest, CopiesRawValuesAsTheyAreAndNestsObjects) {
  JsonObject inner;
  inner.AddDouble("x", 0.5).AddDoubles("v", {1, 2});
  JsonObject json;
  json.AddRaw("inner", inner.str())
      .AddRaw("spaced", "{ \"k\" : [1, 2.0, 1E5] }")
      .AddRaw("empty", JsonObject().str());
  EXPECT_EQ(json.str(),
            "{\"inner\":{\"x\":0.5,\"v\":[1,2]},\"spaced\":{ \"k\" : [1, 2.0, 1E5] },"
            "\"empty\":{}}");
}

TEST(JsonObjectTest, WritesOneLineWithoutSpacesOrATrailingNewline) {
  EXPECT_EQ(JsonObject().str(), "{}");
  JsonObject json;
  json.AddString("a", "x y").AddDoubles("v", {1, 2, 3});
  EXPECT_EQ(json.str(), "{\"a\":\"x y\",\"v\":[1,2,3]}");
}

}  // namespace
}  // namespace okl
