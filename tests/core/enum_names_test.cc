// tests/core/enum_names_test.cc
//
// Every enum's name table (core/enum_names.h) round-trips: each value has one distinct,
// lower-case name, the parser reads it back (in any case, '-' for '_'), and the table
// lists the values 0, 1, ... in order, so a value cannot be left out between two others.
// That the tables cover every value the wire can carry is checked in tests/proto.

#include "core/enum_names.h"

#include <array>
#include <cstddef>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "core/config.h"
#include "core/model.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

template <typename Enum, size_t N>
void ExpectRoundTrips(const std::array<EnumName<Enum>, N>& table) {
  std::set<std::string> names;
  for (size_t i = 0; i < N; ++i) {
    const EnumName<Enum>& entry = table[i];
    const std::string name(entry.name);
    SCOPED_TRACE(name);
    EXPECT_EQ(static_cast<size_t>(entry.value), i) << "the table lists the values in order";
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(name, absl::AsciiStrToLower(name));
    EXPECT_TRUE(names.insert(name).second) << "a duplicate name";
    EXPECT_EQ(NameOf(table, entry.value), entry.name);
    EXPECT_EQ(ParseName(table, entry.name), std::optional<Enum>(entry.value));
    std::string shouted = absl::AsciiStrToUpper(name);
    for (char& c : shouted) {
      if (c == '_') c = '-';
    }
    EXPECT_EQ(ParseName(table, shouted), std::optional<Enum>(entry.value)) << shouted;
  }
  EXPECT_EQ(NameOf(table, static_cast<Enum>(N)), "unknown");
  EXPECT_EQ(ParseName(table, ""), std::nullopt);
  EXPECT_EQ(ParseName(table, "unknown"), std::nullopt);
  EXPECT_EQ(ParseName(table, std::string(table[0].name) + " "), std::nullopt);
}

TEST(EnumNamesTest, EveryTableRoundTrips) {
  ExpectRoundTrips(kKernelTypeNames);
  ExpectRoundTrips(kLossTypeNames);
  ExpectRoundTrips(kScheduleNames);
  ExpectRoundTrips(kBudgetPolicyNames);
  ExpectRoundTrips(kCandidateStatusNames);
  ExpectRoundTrips(kSelectPredictionNames);
}

TEST(EnumNamesTest, TheNameFunctionsAndParsersReadTheTables) {
  EXPECT_EQ(KernelTypeName(KernelType::kPolynomial), "polynomial");
  EXPECT_EQ(LossTypeName(LossType::kEpsilonInsensitive), "epsilon_insensitive");
  EXPECT_EQ(ScheduleName(Schedule::kInverseSqrt), "inverse_sqrt");
  EXPECT_EQ(BudgetPolicyName(BudgetPolicy::kMerge), "merge");
  EXPECT_EQ(CandidateStatusName(CandidateStatus::kRetired), "retired");
  EXPECT_EQ(ParseKernelType("Heat"), KernelType::kHeat);
  EXPECT_EQ(ParseLossType("epsilon-insensitive"), LossType::kEpsilonInsensitive);
  EXPECT_EQ(ParseSchedule("POWER"), Schedule::kPower);
  EXPECT_EQ(ParseBudgetPolicy("merge"), BudgetPolicy::kMerge);
  EXPECT_EQ(ParseBudgetPolicy("largest"), std::nullopt);
}

TEST(EnumNamesTest, NameListJoinsWithCommasAndOr) {
  EXPECT_EQ(NameList(kBudgetPolicyNames), "oldest, smallest or merge");
  EXPECT_EQ(NameList(kKernelTypeNames), "gaussian, laplacian, linear, polynomial or heat");
  constexpr std::array<EnumName<Schedule>, 1> kOne = {{{Schedule::kPower, "power"}}};
  EXPECT_EQ(NameList(kOne), "power");
}

}  // namespace
}  // namespace okl
