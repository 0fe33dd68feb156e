// Random draws with Go math/rand (v1) semantics over any 63-bit source, so that a Go-compatible
// source reproduces the authors' simulator exactly and any other source is a drop-in substitute
// (docs/design/0008). Used by the Random policy and by the trace simulator's workload generator.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tessera::placement {

// A stream of non-negative 63-bit integers.
class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual std::int64_t Int63() = 0;
};

// splitmix64-based source: the generator used when Go's table is not available (`--rng std`).
class SplitMixSource final : public RandomSource {
 public:
  explicit SplitMixSource(std::uint64_t seed) : state_(seed) {}
  std::int64_t Int63() override;

 private:
  std::uint64_t state_;
};

// The derived draws of Go's *rand.Rand, reduced to Int63 exactly as Go does.
class Rand {
 public:
  explicit Rand(std::unique_ptr<RandomSource> source) : source_(std::move(source)) {}

  std::int64_t Int63() { return source_->Int63(); }
  std::int32_t Int31() { return static_cast<std::int32_t>(Int63() >> 32); }
  std::uint32_t Uint32() { return static_cast<std::uint32_t>(Int63() >> 31); }
  // Uniform in [0, n), n > 0: Go's Int31n (rejection sampling).
  std::int32_t Int31n(std::int32_t n);
  // Uniform in [0, n), 0 < n < 2^31: Go's Intn.
  int Intn(int n) { return Int31n(static_cast<std::int32_t>(n)); }
  // Uniform in [0, n): Go's unexported int31n (Lemire's method), used by Shuffle.
  std::int32_t Int31nLemire(std::int32_t n);
  // Go's Shuffle over n elements: calls swap(i, j).
  template <typename Swap>
  void Shuffle(int n, Swap swap) {
    for (int i = n - 1; i > 0; --i) {
      const int j = Int31nLemire(static_cast<std::int32_t>(i + 1));
      swap(i, j);
    }
  }
  // Go's Perm(n).
  std::vector<int> Perm(int n);

 private:
  std::unique_ptr<RandomSource> source_;
};

}  // namespace tessera::placement
