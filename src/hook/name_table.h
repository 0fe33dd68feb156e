// Compile-time open-addressing tables from symbol name to row index, shared by the CUDA and
// NVML hook lists (O(1) lookup on the dlsym path, no allocation, no static initialization).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::hook {

constexpr std::uint32_t Fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

// Slot -> row index + 1 (0 = empty). kSize must be a power of two above twice the rows.
template <std::size_t kSize, std::size_t kRows>
constexpr std::array<std::uint16_t, kSize> BuildNameTable(
    const std::array<std::string_view, kRows>& names) {
  static_assert((kSize & (kSize - 1)) == 0 && kRows * 2 <= kSize, "grow the name table");
  std::array<std::uint16_t, kSize> table{};
  for (std::size_t i = 0; i < kRows; ++i) {
    std::size_t h = Fnv1a(names[i]) & (kSize - 1);
    while (table[h] != 0) h = (h + 1) & (kSize - 1);
    table[h] = static_cast<std::uint16_t>(i + 1);
  }
  return table;
}

// The row whose name is `name`, or kRows.
template <std::size_t kSize, std::size_t kRows>
std::size_t FindName(const std::array<std::uint16_t, kSize>& table,
                     const std::array<std::string_view, kRows>& names, std::string_view name) {
  std::size_t h = Fnv1a(name) & (kSize - 1);
  while (table[h] != 0) {
    const std::size_t index = table[h] - 1u;
    if (names[index] == name) return index;
    h = (h + 1) & (kSize - 1);
  }
  return kRows;
}

}  // namespace tessera::hook
