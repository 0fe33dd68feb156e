#include "k8s/rate_limiter.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

namespace tessera::k8s {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), burst_(static_cast<double>(std::max(burst, 1))), tokens_(burst_) {}

void TokenBucket::Advance(Clock::time_point now) {
  if (last_ && now > *last_) {
    const double seconds = std::chrono::duration<double>(now - *last_).count();
    tokens_ = std::min(burst_, tokens_ + seconds * qps_);
  }
  if (!last_ || now > *last_) last_ = now;
}

std::optional<TokenBucket::Clock::time_point> TokenBucket::Reserve(Clock::time_point now,
                                                                   Clock::time_point deadline) {
  if (qps_ <= 0) return now;
  std::lock_guard<std::mutex> lock(mu_);
  Advance(now);
  const double after = tokens_ - 1;
  if (after >= 0) {
    tokens_ = after;
    return now;
  }
  // The token this caller gets arrives once the deficit has been refilled (counted from the
  // newest time seen: a caller with an older `now` does not jump the queue).
  const auto wait =
      std::chrono::round<Clock::duration>(std::chrono::duration<double>(-after / qps_));
  const Clock::time_point ready = *last_ + wait;
  if (ready > deadline) return std::nullopt;
  tokens_ = after;
  return ready;
}

Status TokenBucket::Wait(Clock::time_point deadline) {
  const std::optional<Clock::time_point> ready = Reserve(Clock::now(), deadline);
  if (!ready) {
    char qps[32];
    std::snprintf(qps, sizeof(qps), "%g", qps_);
    return ResourceExhaustedError(std::string("client-side rate limit (") + qps +
                                  " qps): no request slot before the call's deadline");
  }
  std::this_thread::sleep_until(*ready);
  return Status::Ok();
}

double TokenBucket::TokensAt(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (qps_ <= 0) return burst_;
  Advance(now);
  return tokens_;
}

}  // namespace tessera::k8s
