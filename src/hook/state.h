// The preload library's process-wide state: configuration (limits file or HAMi environment),
// the container's shared region and this process's slot, the device map and the allocation
// table. Set up in two steps:
//   - at load (library constructor, main thread): read the limits, attach the region and claim
//     a slot — cheap, no driver call, so the robust slot mutex is held by the main thread;
//   - at the first intercepted call (EnsureInitialized): resolve the real driver functions.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/shm_layout.h"
#include "tessera/status.h"

#include "hook/cuda_api.h"

namespace tessera::hook {

void InitializeSlow();
extern std::atomic<bool> g_initialized;

// TESSERA_HOOK_STATS=1: count calls per hook (one predictable branch on the fast path when off).
extern bool g_stats_enabled;
void CountCall(std::size_t hook);

// The fast path is one acquire load.
inline void EnsureInitialized() {
  if (__builtin_expect(!g_initialized.load(std::memory_order_acquire), 0)) InitializeSlow();
}

// What an enforcing hook learns about the device of the current context.
struct DeviceQuota {
  bool limited = false;  // false: no tessera limit applies (pass through)
  bool refuse = false;   // machinery failed under fail-closed, or device not entitled
  int region_device = -1;
  std::uint64_t limit_bytes = 0;
};

// The quota of CUDA device `dev` (ordinal in this process).
DeviceQuota QuotaForDevice(CUdevice dev);
// The quota of the current context's device (CUDA_ERROR_INVALID_CONTEXT if none).
CUresult QuotaForCurrentDevice(DeviceQuota* quota, CUdevice* dev);
// The launch path's: the region device of the current context's device (its cap is not looked
// up), without a driver call when the process sees one device; -1 where no quota applies or
// the device cannot be told.
int RegionDeviceForLaunch();

// Reserve/release against the region for this process's slot. Reserve logs the refusal.
Status ReserveBytes(const DeviceQuota& quota, std::uint64_t bytes, const char* what);
void ReleaseBytes(const DeviceQuota& quota, std::uint64_t bytes);
std::uint64_t UsedBytes(const DeviceQuota& quota);

// Charges the per-process context cost of `dev` once (limits file `context=`); *charged_now
// (optional) says whether this call made the charge.
CUresult ChargeContextOnce(CUdevice dev, bool* charged_now);
// Device memory the driver takes for each stream created on `dev` (limits file `stream=`; 0:
// streams are not charged).
std::uint64_t StreamBytes(CUdevice dev);
// Returns a charge made by ChargeContextOnce (the driver then failed to create the context).
void UnchargeContext(CUdevice dev);

// The allocation tables: what a free must return. Pointers (cuMemAlloc*, pitch, managed) and
// handles (VMM allocation handles, arrays) and streams are kept apart: their values may coincide.
enum class Table : std::uint8_t { kPointers, kHandles, kStreams };
void RecordAllocation(CUdeviceptr ptr, int region_device, std::uint64_t bytes,
                      Table table = Table::kPointers);
bool TakeAllocation(CUdeviceptr ptr, int* region_device, std::uint64_t* bytes,
                    Table table = Table::kPointers);

// The container's view of a device for NVML: its cap and the container's usage, if a tessera
// limit applies (`nvml_index` is used in HAMi-compatible mode, whose limits are per index).
bool ViewForUuid(const char* uuid, int nvml_index, std::uint64_t* limit, std::uint64_t* used);

// Whether `pid` (as NVML reports it) is a live process of this container's region: used to
// show a container only its own GPU processes. False when no region applies.
bool IsContainerProcess(unsigned int pid);

// The real dlsym (glibc's), for resolving the driver libraries.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn RealDlsym();

// CLOCK_MONOTONIC in nanoseconds (the clock of the region's compute stamps).
std::uint64_t NowNs();

// The container's region when its launches are governed on some device (a gate other than
// kFree), else nullptr: the launch path's fast test, a few instructions (hook_cost_test).
extern shm::Region* g_compute_region;    // set once a node-written limits file's region applies
extern std::uint32_t g_compute_devices;  // 0 while no such region applies
inline shm::Region* GovernedRegion() {
  for (std::uint32_t d = 0; d < g_compute_devices; ++d) {
    if (g_compute_region->compute[d].gate.load(std::memory_order_relaxed) != 0)
      return g_compute_region;
  }
  return nullptr;
}
// Counts one of tessera's own failures in the region (fail-open events) and logs it once per
// `what` (a string literal).
void CountMachineryError(const char* what);
// TESSERA_HOOK_STATS: the governed launch path's time per launch (launch_hooks.cc).
void PrintGovernorStats();
// launch_hooks.cc: writes the governed launches' counters kept in the process to the region (the
// watcher does at every poll; this at exit, for the launches since its last).
void PublishGovernorCounters();
// launch_hooks.cc: the governor's per-process state starts afresh in a fork child; a stream
// about to be destroyed has its open work fenced.
void ResetGovernorAfterFork();
void GovernorStreamDestroyed(CUstream stream);
// Called for every cuGetProcAddress answer and every dlsym of a cu* name this library does not
// intercept: a stream-capture entry point handed out unintercepted means captures can no longer be
// counted, and every governed launch asks the driver about its stream (launch_hooks.cc).
void CaptureEntryPointHandedOut(const char* symbol, bool intercepted);

// Trims this process's memory pools and returns their freed reserve (pool_hooks.cc); true if
// some charge went down. Called before an allocation is refused.
bool TrimPoolsForRetry();

// Test hook: forget everything (used only by unit tests that link the state directly).
void ResetForTest();

}  // namespace tessera::hook
