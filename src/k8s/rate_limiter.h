// The client-side rate limit: a token bucket (qps, burst) shared by all calls of a Client.
// The math takes the time as an argument, so tests inject it; Wait() uses the steady clock.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>

#include "tessera/status.h"

namespace tessera::k8s {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // qps <= 0: unlimited. burst < 1 is treated as 1. The bucket starts full.
  TokenBucket(double qps, int burst);

  // Takes a token now or reserves the next one: returns when the caller may proceed (`now` if
  // a token was there). nullopt, and nothing taken, if that would be after `deadline`.
  std::optional<Clock::time_point> Reserve(Clock::time_point now, Clock::time_point deadline);

  // Reserve() with the steady clock, then sleeps until the reserved time.
  // kResourceExhausted if no token can be had before `deadline`.
  Status Wait(Clock::time_point deadline);

  // Tokens available at `now` (may be negative while callers wait for reserved tokens).
  double TokensAt(Clock::time_point now);

 private:
  void Advance(Clock::time_point now);  // requires mu_

  const double qps_;
  const double burst_;
  std::mutex mu_;
  double tokens_;
  std::optional<Clock::time_point> last_;
};

}  // namespace tessera::k8s
