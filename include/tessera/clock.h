// The one clock abstraction: steady time for every expiry and deadline, wall time for what is
// written for people, and a sleep that a stop request ends. Code that judges time takes a
// Clock& (default Clock::Real()); tests hand it a FakeClock (testutil/fake_clock.h) and move
// time themselves.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

namespace tessera {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using WallTimePoint = std::chrono::system_clock::time_point;

  virtual ~Clock() = default;
  // Monotonic: every expiry and deadline decision. Thread-safe.
  virtual TimePoint Now() = 0;
  // Wall time, for timestamps written for people (never for expiry: clocks of hosts differ).
  virtual WallTimePoint WallNow() = 0;
  // Returns once Now() >= deadline, or at once when `stop` is requested.
  virtual void SleepUntil(TimePoint deadline, std::stop_token stop) = 0;

  // The steady and system clocks (a process-wide instance, never destroyed).
  static Clock& Real();
};

namespace clock_internal {

class RealClock final : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  WallTimePoint WallNow() override { return std::chrono::system_clock::now(); }
  void SleepUntil(TimePoint deadline, std::stop_token stop) override {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_until(lock, stop, deadline, [] { return false; });
  }
};

}  // namespace clock_internal

inline Clock& Clock::Real() {
  static Clock* clock = new clock_internal::RealClock();  // never destroyed: used by any thread
  return *clock;
}

}  // namespace tessera
