// The process-wide state behind state.h, shared by the files that implement it; nothing else
// includes this. By concern:
//   state.cc       the State object, clocks, call statistics, test reset
//   config.cc      configuration at load: limits file or HAMi environment, region attach
//   slot.cc        the process slot, the compute region, fork child re-attach, unload
//   resolve.cc     the real dlsym and the first-call resolution of the driver's functions
//   quota.cc       device quotas, reserve/release, context and stream charges, NVML views
//   allocations.cc the allocation tables
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "tessera/limits.h"
#include "tessera/region.h"

#include "hook/hook_table.h"
#include "hook/quota.h"
#include "hook/state.h"

namespace tessera::hook {

// Process-wide state. Deliberately leaked (never destroyed): other threads may still be in a
// hook while the process exits.
struct State {
  Mode mode = Mode::kInactive;
  bool fail_closed = false;
  bool machinery_ok = true;
  Limits limits;
  HamiLimits hami;
  shm::Region* region = nullptr;
  std::uint32_t slot = shm::kNoSlot;
  std::string region_path;
  // CUDA ordinal -> region device index; kUnknownDevice until resolved, kNotEntitled when the
  // device is not in the limits, -1 when no tessera limit applies to it (quota.h).
  std::atomic<int> ordinal_map[kMaxOrdinals];
  std::atomic<std::uint32_t> context_charged{0};  // bit per region device
  std::atomic<int> device_count{-1};              // devices the driver shows; -1 until read
  // The allocation table. Held by pointer so a fork child can start afresh: the parent's other
  // threads may have held the mutex at fork() (they do not exist in the child).
  std::mutex* alloc_mu = new std::mutex();
  using AllocationMap = std::unordered_map<CUdeviceptr, std::pair<int, std::uint64_t>>;
  AllocationMap* allocations = new AllocationMap();
  AllocationMap* handles = new AllocationMap();
  AllocationMap* streams = new AllocationMap();
  AllocationMap* TableOf(Table table) {
    switch (table) {
      case Table::kPointers:
        return allocations;
      case Table::kHandles:
        return handles;
      case Table::kStreams:
        return streams;
    }
    return handles;
  }
  // TESSERA_HOOK_STATS
  std::atomic<std::uint64_t> calls[kCudaHookCount] = {};
  std::uint64_t configure_ns = 0;
  std::uint64_t initialize_ns = 0;
};

// state.cc
State& S();
std::uint64_t MonotonicNs();
void ResetOrdinalMap(State& s);
// Marks the machinery failed and logs `what` with its consequence (fail-closed or fail-open).
void MachineryFailed(State& s, const std::string& what);
void PrintStats(State& s);

// config.cc: runs Configure once, from the library constructor or the first intercepted call.
void ConfigureOnce();

// slot.cc
void ClaimSlot(State& s);
void PublishComputeRegion(const State& s);
// pthread_atfork child handler: fresh tables, slot and governor state.
void OnForkChild();

// resolve.cc: in a fork child, forgets a publication of the driver's functions that a parent
// thread (which does not exist here) had begun.
void ForgetUnfinishedInitialization();

// allocations.cc: in a fork child, fresh tables (never locks: a parent thread may have held the
// mutex at fork(); the old tables are leaked on purpose).
void ResetAllocationTablesAfterFork(State& s);

}  // namespace tessera::hook
