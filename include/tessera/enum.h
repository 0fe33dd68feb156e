// Vocabularies as one X-macro list each, X(enumerator, "name", "meaning"), from which
// TESSERA_ENUM_TABLE(Type, kRows, LIST) generates
//   enum class Type : std::uint8_t { the enumerators, in list order };
//   inline constexpr std::array kRows: EnumRow<Type>{value, name, meaning}, in list order;
//   EnumRowsOf(Type): the rows, found by argument-dependent lookup,
// so that the helpers below name and parse any such type: ToString(value),
// ParseEnum<Type>(text, what) and AcceptedNames<Type>(). Use it at namespace scope.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera {

// Name and meaning of each value, in list order.
template <typename Enum>
struct EnumRow {
  Enum value;
  std::string_view name;
  std::string_view meaning;
};

#define TESSERA_ENUM_ENUMERATOR_OF(enumerator, name, meaning) enumerator,
#define TESSERA_ENUM_ROW_OF(enumerator, name, meaning) {enumerator, name, meaning},
#define TESSERA_ENUM_TABLE(Type, kRows, LIST)                                    \
  enum class Type : std::uint8_t { LIST(TESSERA_ENUM_ENUMERATOR_OF) };           \
  inline constexpr auto kRows = [] {                                             \
    using enum Type;                                                             \
    return std::to_array<::tessera::EnumRow<Type>>({LIST(TESSERA_ENUM_ROW_OF)}); \
  }();                                                                           \
  constexpr const auto& EnumRowsOf(Type) { return kRows; }

// Generic helpers over any EnumRow table (also used by the policy file's vocabularies).
template <typename Enum, std::size_t N>
constexpr std::string_view NameIn(const std::array<EnumRow<Enum>, N>& rows, Enum value) {
  for (const auto& row : rows) {
    if (row.value == value) return row.name;
  }
  return "unknown";
}
template <typename Enum, std::size_t N>
constexpr std::string_view MeaningIn(const std::array<EnumRow<Enum>, N>& rows, Enum value) {
  for (const auto& row : rows) {
    if (row.value == value) return row.meaning;
  }
  return "";
}
template <typename Enum, std::size_t N>
std::string AcceptedIn(const std::array<EnumRow<Enum>, N>& rows) {
  std::string out;
  for (const auto& row : rows) {
    if (!out.empty()) out += ", ";
    out += row.name;
  }
  return out;
}

// "\"x\" is not a <what>; accepted: a, b, c" (defined in model.cc for the quoting).
Status UnknownNameError(std::string_view text, std::string_view what, const std::string& accepted);

// The value named `text` exactly, or an InvalidArgument error naming `what` and the accepted
// names.
template <typename Enum, std::size_t N>
StatusOr<Enum> ParseIn(const std::array<EnumRow<Enum>, N>& rows, std::string_view text,
                       std::string_view what) {
  for (const auto& row : rows) {
    if (row.name == text) return row.value;
  }
  return UnknownNameError(text, what, AcceptedIn(rows));
}

// A type declared by TESSERA_ENUM_TABLE.
template <typename Enum>
concept TableEnum = requires(Enum value) {
  EnumRowsOf(value);
};

template <TableEnum Enum>
constexpr std::string_view ToString(Enum value) {
  return NameIn(EnumRowsOf(value), value);
}
template <TableEnum Enum>
constexpr std::string_view MeaningOf(Enum value) {
  return MeaningIn(EnumRowsOf(value), value);
}
template <TableEnum Enum>
StatusOr<Enum> ParseEnum(std::string_view text, std::string_view what) {
  return ParseIn(EnumRowsOf(Enum{}), text, what);
}
// "a, b, c"
template <TableEnum Enum>
std::string AcceptedNames() {
  return AcceptedIn(EnumRowsOf(Enum{}));
}

}  // namespace tessera
