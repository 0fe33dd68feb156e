#include "sim/go_source.h"

namespace tessera::sim {
namespace {

#ifdef TESSERA_HAVE_GO_RNG
constexpr std::array<std::int64_t, 607> kRngCooked = {
#include "tessera_generated/go_rng_cooked.inc"
};
#endif

// x -> 48271 * x mod (2^31 - 1), Schrage's method, as Go's seedrand.
std::int32_t SeedRand(std::int32_t x) {
  constexpr std::int32_t kA = 48271;
  constexpr std::int32_t kQ = 44488;
  constexpr std::int32_t kR = 3399;
  const std::int32_t hi = x / kQ;
  const std::int32_t lo = x % kQ;
  x = kA * lo - kR * hi;
  if (x < 0) x += 0x7fffffff;
  return x;
}

}  // namespace

bool GoSourceAvailable() {
#ifdef TESSERA_HAVE_GO_RNG
  return true;
#else
  return false;
#endif
}

GoSource::GoSource(std::int64_t seed) {
  constexpr std::int64_t kInt32Max = 0x7fffffff;
  seed %= kInt32Max;
  if (seed < 0) seed += kInt32Max;
  if (seed == 0) seed = 89482311;
  auto x = static_cast<std::int32_t>(seed);
  for (int i = -20; i < kLen; ++i) {
    x = SeedRand(x);
    if (i >= 0) {
      std::uint64_t u = static_cast<std::uint64_t>(static_cast<std::int64_t>(x)) << 40;
      x = SeedRand(x);
      u ^= static_cast<std::uint64_t>(static_cast<std::int64_t>(x)) << 20;
      x = SeedRand(x);
      u ^= static_cast<std::uint64_t>(static_cast<std::int64_t>(x));
#ifdef TESSERA_HAVE_GO_RNG
      u ^= static_cast<std::uint64_t>(kRngCooked[static_cast<std::size_t>(i)]);
#endif
      vec_[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(u);
    }
  }
  tap_ = 0;
  feed_ = kLen - kTap;
}

std::int64_t GoSource::Int63() {
  if (--tap_ < 0) tap_ += kLen;
  if (--feed_ < 0) feed_ += kLen;
  const std::uint64_t x = static_cast<std::uint64_t>(vec_[static_cast<std::size_t>(feed_)]) +
                          static_cast<std::uint64_t>(vec_[static_cast<std::size_t>(tap_)]);
  vec_[static_cast<std::size_t>(feed_)] = static_cast<std::int64_t>(x);
  return static_cast<std::int64_t>(x & 0x7fffffffffffffffULL);
}

}  // namespace tessera::sim
