// A Clock for tests: time moves only when the test moves it. SleepUntil parks the caller until
// Advance() or WakeSleeper() reaches its deadline (or its stop is requested), so a test can step
// a thread that sleeps between rounds without depending on real timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

#include "tessera/clock.h"

namespace tessera::testutil {

class FakeClock final : public Clock {
 public:
  // 2026-01-01T00:00:00Z: the wall clock at `start`.
  static constexpr WallTimePoint kWallStart{std::chrono::seconds(1767225600)};

  explicit FakeClock(TimePoint start = TimePoint{}) : start_(start), now_(start) {}

  TimePoint Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  WallTimePoint WallNow() override {
    std::lock_guard<std::mutex> lock(mu_);
    return kWallStart + std::chrono::duration_cast<WallTimePoint::duration>(now_ - start_);
  }
  void SleepUntil(TimePoint deadline, std::stop_token stop) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++sleeps_;
    deadline_ = deadline;
    sleeping_ = true;
    cv_.wait(lock, stop, [&] { return now_ >= deadline; });
    sleeping_ = false;
  }

  void Advance(std::chrono::nanoseconds d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      now_ += d;
    }
    cv_.notify_all();
  }
  FakeClock& operator+=(std::chrono::nanoseconds d) {
    Advance(d);
    return *this;
  }
  // Moves the time to the end of the current sleep.
  void WakeSleeper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      now_ = std::max(now_, deadline_);
    }
    cv_.notify_all();
  }
  // The number of SleepUntil() calls so far, and whether one is waiting now.
  int sleeps() {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeps_;
  }
  bool sleeping() {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeping_;
  }
  // Time since the start.
  std::chrono::nanoseconds Elapsed() { return Now() - start_; }

 private:
  const TimePoint start_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  TimePoint now_;
  TimePoint deadline_{};
  int sleeps_ = 0;
  bool sleeping_ = false;
};

}  // namespace tessera::testutil
