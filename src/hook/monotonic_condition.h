// A condition variable whose timed waits run on CLOCK_MONOTONIC, for the preload library.
//
// std::condition_variable lives in libstdc++ (its constructor and notify calls), and GCC 12
// inlines its timed waits as pthread_cond_clockwait (glibc 2.30). The preload library links
// no C++ runtime and must load with glibc 2.28 (docs/design/0020-deployment.md, "The preload
// library's floor"), so it waits through pthread_cond_timedwait on a condition whose clock is
// set to CLOCK_MONOTONIC: the same wait, available since glibc 2.3.3.
#pragma once

#include <chrono>
#include <mutex>
#include <pthread.h>
#include <time.h>

namespace tessera::hook {

class MonotonicCondition {
 public:
  MonotonicCondition() {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cond_, &attr);
    pthread_condattr_destroy(&attr);
  }
  ~MonotonicCondition() { pthread_cond_destroy(&cond_); }
  MonotonicCondition(const MonotonicCondition&) = delete;
  MonotonicCondition& operator=(const MonotonicCondition&) = delete;

  void NotifyOne() { pthread_cond_signal(&cond_); }
  void NotifyAll() { pthread_cond_broadcast(&cond_); }

  // Waits until notified, `timeout` has passed, or a spurious wake-up; `lock` must hold its mutex
  // (as std::condition_variable::wait_for, whose callers re-check their condition).
  void WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::nanoseconds timeout) {
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const long long ns = timeout.count() < 0 ? 0 : timeout.count();
    deadline.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
    deadline.tv_nsec += static_cast<long>(ns % 1'000'000'000);
    if (deadline.tv_nsec >= 1'000'000'000) {
      deadline.tv_nsec -= 1'000'000'000;
      ++deadline.tv_sec;
    }
    pthread_cond_timedwait(&cond_, lock.mutex()->native_handle(), &deadline);
  }

 private:
  pthread_cond_t cond_;
};

}  // namespace tessera::hook
