// Small helpers for the line-oriented text parsers (the limits file, the sim's recipes).
#pragma once

#include <string_view>
#include <vector>

namespace tessera {

// The words of one line: runs of characters other than spaces and tabs.
std::vector<std::string_view> SplitWords(std::string_view line);

}  // namespace tessera
