#include "placement/random.h"

namespace tessera::placement {

std::int64_t SplitMixSource::Int63() {
  state_ += 0x9E3779B97F4A7C15ULL;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<std::int64_t>(z >> 1);
}

std::int32_t Rand::Int31n(std::int32_t n) {
  if ((n & (n - 1)) == 0) return Int31() & (n - 1);
  const auto un = static_cast<std::uint32_t>(n);
  const auto max = static_cast<std::int32_t>((1U << 31) - 1U - ((1U << 31) % un));
  std::int32_t v = Int31();
  while (v > max) v = Int31();
  return v % n;
}

std::int32_t Rand::Int31nLemire(std::int32_t n) {
  const auto un = static_cast<std::uint32_t>(n);
  std::uint64_t prod = static_cast<std::uint64_t>(Uint32()) * un;
  auto low = static_cast<std::uint32_t>(prod);
  if (low < un) {
    const std::uint32_t thresh = (0U - un) % un;
    while (low < thresh) {
      prod = static_cast<std::uint64_t>(Uint32()) * un;
      low = static_cast<std::uint32_t>(prod);
    }
  }
  return static_cast<std::int32_t>(prod >> 32);
}

std::vector<int> Rand::Perm(int n) {
  std::vector<int> m(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int j = Intn(i + 1);
    m[static_cast<std::size_t>(i)] = m[static_cast<std::size_t>(j)];
    m[static_cast<std::size_t>(j)] = i;
  }
  return m;
}

}  // namespace tessera::placement
