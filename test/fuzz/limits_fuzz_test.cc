// Fuzzes what the preload library reads from outside at start-up: the limits file, HAMi's
// variables and their memory units. Nothing may crash; whatever parses must round-trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/limits.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto limits = tessera::ParseLimitsFile(text); limits.ok()) {
    auto again = tessera::ParseLimitsFile(tessera::FormatLimitsFile(*limits));
    if (!again.ok() || tessera::FormatLimitsFile(*again) != tessera::FormatLimitsFile(*limits)) {
      std::abort();
    }
    for (const auto& d : limits->devices) {
      if (d.cores_percent > 100 || d.uuid.empty() || d.uuid.size() >= 64) std::abort();
    }
  }
  (void)tessera::ParseHamiMemory(text);
  // The same bytes as an environment: NUL-separated KEY=VALUE entries.
  std::vector<std::string> entries;
  std::string current;
  for (char c : text) {
    if (c == '\0' || c == '\n') {
      entries.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  entries.push_back(current);
  std::vector<const char*> environment;
  for (const auto& e : entries) environment.push_back(e.c_str());
  environment.push_back(nullptr);
  if (auto hami = tessera::ParseHamiEnvironment(environment.data()); hami.ok()) {
    if (hami->sm_percent && *hami->sm_percent > 100) std::abort();
  }
  return 0;
}
