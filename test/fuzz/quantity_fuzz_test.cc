// Fuzzes every quantity parser: none may crash, and whatever parses must round-trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tessera/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto q = tessera::ParseQuantity(text); q.ok()) {
    auto back = tessera::ParseQuantity(tessera::FormatQuantity(*q));
    if (!back.ok() || *back != *q || *q > tessera::kMaxQuantity) std::abort();
  } else if (q.status().message().find("accepted:") == std::string_view::npos) {
    std::abort();  // every rejection says what is accepted
  }
  if (auto p = tessera::ParsePercent(text); p.ok() && *p > 1'000'000) std::abort();
  if (auto f = tessera::ParseKaiGpuFraction(text);
      f.ok() && (*f == 0 || *f > tessera::kFractionOne)) {
    std::abort();
  }
  (void)tessera::ParseKaiGpuMemory(text);
  (void)tessera::QuoteForMessage(text);
  return 0;
}
