// Exponential backoff with jitter: the n-th delay is drawn from [d/2, d] where d starts at
// `initial` and doubles up to `max`. Reset() after a success.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace tessera::k8s {

class Backoff {
 public:
  using Duration = std::chrono::milliseconds;

  Backoff(Duration initial, Duration max, std::uint64_t seed = std::random_device{}())
      : initial_(initial), max_(max), current_(initial), rng_(seed) {}

  Duration Next() {
    const Duration ceiling = current_;
    current_ = current_ * 2 > max_ ? max_ : current_ * 2;
    const auto half = ceiling.count() / 2;
    std::uniform_int_distribution<std::int64_t> pick(half, ceiling.count());
    return Duration(pick(rng_));
  }
  void Reset() { current_ = initial_; }
  Duration current_ceiling() const { return current_; }

 private:
  Duration initial_;
  Duration max_;
  Duration current_;
  std::mt19937_64 rng_;
};

}  // namespace tessera::k8s
