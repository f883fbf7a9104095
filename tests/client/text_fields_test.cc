// tests/client/text_fields_test.cc: the LIBSVM line parser both data readers share.

#include "client/io/text_fields.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl::text {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// What ParseLibsvmLine hands its callbacks, and the error it returns.
struct Parsed {
  std::vector<double> labels;
  std::vector<std::pair<uint64_t, double>> pairs;
  std::string error;
};

Parsed Parse(absl::string_view line, bool labelled) {
  Parsed parsed;
  parsed.error = ParseLibsvmLine(
      line, labelled,
      [&](double label) {
        parsed.labels.push_back(label);
        return std::string();
      },
      [&](uint64_t index, double value) {
        parsed.pairs.emplace_back(index, value);
        return std::string();
      });
  return parsed;
}

TEST(ParseLibsvmLineTest, HandsOverTheLabelAndEveryPairInOrder) {
  const Parsed parsed = Parse("+1 3:0.5\t7:-2  2:1e-3", /*labelled=*/true);
  EXPECT_EQ(parsed.error, "");
  EXPECT_THAT(parsed.labels, ElementsAre(1.0));
  EXPECT_THAT(parsed.pairs, ElementsAre(Pair(3, 0.5), Pair(7, -2.0), Pair(2, 1e-3)));
}

TEST(ParseLibsvmLineTest, UnlabelledTakesALeadingNumberForALabelAndPairsOtherwise) {
  const Parsed with_label = Parse("-1 4:2", /*labelled=*/false);
  EXPECT_EQ(with_label.error, "");
  EXPECT_THAT(with_label.labels, ElementsAre(-1.0));
  EXPECT_THAT(with_label.pairs, ElementsAre(Pair(4, 2.0)));
  const Parsed pairs_only = Parse("4:2 5:3", /*labelled=*/false);
  EXPECT_EQ(pairs_only.error, "");
  EXPECT_TRUE(pairs_only.labels.empty());
  EXPECT_THAT(pairs_only.pairs, ElementsAre(Pair(4, 2.0), Pair(5, 3.0)));
  // Labelled, a pair in the label's place is a bad label.
  EXPECT_EQ(Parse("4:2 5:3", /*labelled=*/true).error, "bad number '4:2' as the label");
}

TEST(ParseLibsvmLineTest, SaysWhatIsWrongWithTheFirstBadToken) {
  EXPECT_EQ(Parse("1 3", true).error, "expected index:value, got '3'");
  EXPECT_EQ(Parse("1 x:3", true).error, "bad index 'x'");
  EXPECT_EQ(Parse("1 :3", true).error, "bad index ''");
  EXPECT_EQ(Parse("1 0:3", true).error, "index 0: indices are 1-based");
  EXPECT_EQ(Parse("1 2:abc 0:1", true).error, "bad number 'abc' at index 2");
  EXPECT_EQ(Parse("1 2:inf", true).error, "non-finite number 'inf' at index 2");
  EXPECT_EQ(Parse("nan 2:1", true).error, "non-finite number 'nan' as the label");
  EXPECT_EQ(Parse("1 99999999999999999999999:1", true).error,
            "bad index '99999999999999999999999'");
}

TEST(ParseLibsvmLineTest, StopsAtTheFirstErrorACallbackReturns) {
  int pairs = 0;
  const std::string error = ParseLibsvmLine(
      "1 2:1 3:1 4:1", /*labelled=*/true, [](double) { return std::string(); },
      [&](uint64_t index, double) {
        ++pairs;
        return index == 3 ? std::string("index 3 is out of range") : std::string();
      });
  EXPECT_EQ(error, "index 3 is out of range");
  EXPECT_EQ(pairs, 2);
}

}  // namespace
}  // namespace okl::text
