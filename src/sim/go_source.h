// Go's math/rand (v1) source (the additive lagged Fibonacci generator of rng.go), ported so that
// `tessera sim --rng go` reproduces the authors' simulator draw for draw (spec §2.1). Its seeding
// table is read from the installed Go toolchain at configure time (cmake/TesseraGoRng.cmake).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "placement/random.h"

namespace tessera::sim {

// Whether this build has Go's table (false: Go was not found at configure time).
bool GoSourceAvailable();

class GoSource final : public placement::RandomSource {
 public:
  // Requires GoSourceAvailable().
  explicit GoSource(std::int64_t seed);
  std::int64_t Int63() override;

 private:
  static constexpr int kLen = 607;
  static constexpr int kTap = 273;
  std::array<std::int64_t, kLen> vec_{};
  int tap_ = 0;
  int feed_ = kLen - kTap;
};

}  // namespace tessera::sim
