// The host's clock for the GPU probe programs (busy_probe.cu, bracket_control.cu): microseconds,
// and host work simulated by spinning on it.
#pragma once

#include <chrono>

inline double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void Spin(double us) {
  const double end = NowUs() + us;
  while (NowUs() < end) {
  }
}
