// The process state object, clocks, call statistics and the test reset. The other parts of
// state.h are implemented by concern: see process_state.h.
#include "hook/state.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <time.h>

#include "tessera/log.h"

#include "hook/hook_table.h"
#include "hook/process_state.h"

namespace tessera::hook {

bool g_stats_enabled = false;

std::uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

State& S() {
  static State* state = new State();
  return *state;
}

void ResetOrdinalMap(State& s) {
  for (auto& m : s.ordinal_map) m.store(kUnknownDevice, std::memory_order_relaxed);
}

void MachineryFailed(State& s, const std::string& what) {
  s.machinery_ok = false;
  TESSERA_LOG(kError, kHook, "%s; %s", what.c_str(),
              s.fail_closed ? "enforcement fail-closed: GPU allocations will be refused"
                            : "enforcement fail-open: GPU calls pass through unlimited");
}

void PrintStats(State& s) {
  TESSERA_LOG(kWarn, kHook, "stats: configure %.1f us, first-call initialization %.1f us",
              static_cast<double>(s.configure_ns) / 1e3,
              static_cast<double>(s.initialize_ns) / 1e3);
  PrintGovernorStats();
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    const std::uint64_t n = s.calls[i].load(std::memory_order_relaxed);
    if (n != 0) {
      TESSERA_LOG(kWarn, kHook, "stats: %.*s %llu", static_cast<int>(kCudaHooks[i].symbol.size()),
                  kCudaHooks[i].symbol.data(), static_cast<unsigned long long>(n));
    }
  }
}

void CountCall(std::size_t hook) { S().calls[hook].fetch_add(1, std::memory_order_relaxed); }

std::uint64_t NowNs() { return MonotonicNs(); }

void ResetForTest() {
  g_compute_region = nullptr;
  g_compute_devices = 0;
  State& s = S();
  std::lock_guard<std::mutex> lock(*s.alloc_mu);
  s.allocations->clear();
  s.handles->clear();
  s.streams->clear();
  s.context_charged.store(0);
  ResetOrdinalMap(s);
}

}  // namespace tessera::hook
