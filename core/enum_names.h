// core/enum_names.h
//
// One name table per enum: each value beside the one name okl's messages, stats and
// tools spell it with (lower case, words joined by '_'). The name function and the parser
// of an enum both read its table, so a name is written once and a new value needs one
// line. tests/core/enum_names_test.cc round-trips every table, and tests/proto checks that
// every value the wire can carry has a name.
//
// Example:
//   inline constexpr std::array<EnumName<Fruit>, 2> kFruitNames = {{
//       {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}}};
//   NameOf(kFruitNames, Fruit::kPear);      // "pear"
//   ParseName(kFruitNames, "Apple");        // Fruit::kApple
//   NameList(kFruitNames);                  // "apple or pear"
#ifndef OKL_CORE_ENUM_NAMES_H_
#define OKL_CORE_ENUM_NAMES_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace okl {

template <typename Enum>
struct EnumName {
  Enum value;
  absl::string_view name;
};

// The value's name; "unknown" for a value the table lacks (a cast from bad input).
template <typename Enum, size_t N>
constexpr absl::string_view NameOf(const std::array<EnumName<Enum>, N>& table, Enum value) {
  for (const EnumName<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// The value named `name`, ignoring case and reading '-' as '_' ("Inverse-Sqrt" is
// inverse_sqrt); nullopt for any other text.
template <typename Enum, size_t N>
std::optional<Enum> ParseName(const std::array<EnumName<Enum>, N>& table,
                              absl::string_view name) {
  std::string spelled = absl::AsciiStrToLower(name);
  for (char& c : spelled) {
    if (c == '-') c = '_';
  }
  for (const EnumName<Enum>& entry : table) {
    if (entry.name == spelled) return entry.value;
  }
  return std::nullopt;
}

// The names in table order, for messages: "a, b or c".
template <typename Enum, size_t N>
std::string NameList(const std::array<EnumName<Enum>, N>& table) {
  std::string list;
  for (size_t i = 0; i < N; ++i) {
    absl::StrAppend(&list, i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
  }
  return list;
}

}  // namespace okl

#endif  // OKL_CORE_ENUM_NAMES_H_
