// This process's slot in the container's region: claimed at load, re-claimed by a fork child,
// released at unload; the compute region the launch path tests; the region's process list.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <unistd.h>
#include <vector>

#include "tessera/log.h"
#include "tessera/region.h"

#include "hook/process_state.h"

namespace tessera::hook {

shm::Region* g_compute_region = nullptr;
std::uint32_t g_compute_devices = 0;

namespace {

std::uint64_t ProcessStartTime() {
  char buffer[1024];
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
  close(fd);
  if (n <= 0) return 0;
  buffer[n] = '\0';
  const char* p = std::strrchr(buffer, ')');  // the command name may contain spaces
  if (p == nullptr) return 0;
  // Field 22 (starttime) is the 20th field after ')'.
  for (int field = 3; field <= 22 && p != nullptr; ++field) p = std::strchr(p + 1, ' ');
  return p == nullptr ? 0 : std::strtoull(p + 1, nullptr, 10);
}

__attribute__((destructor)) void OnUnload() {
  State& s = S();
  PublishGovernorCounters();
  if (g_stats_enabled) PrintStats(s);
  if (s.region != nullptr && s.slot != shm::kNoSlot) {
    shm::ReleaseSlot(*s.region, s.slot);
    s.slot = shm::kNoSlot;
  }
}

}  // namespace

void ClaimSlot(State& s) {
  if (s.region == nullptr) return;
  auto slot = shm::ClaimSlot(*s.region, static_cast<std::int32_t>(getpid()), ProcessStartTime());
  if (!slot.ok()) {
    MachineryFailed(s, "cannot claim a process slot: " + slot.status().message());
    return;
  }
  s.slot = *slot;
}

// Compute governance applies to node-written limits (the arbiter is the node's), in a process
// that holds a slot.
void PublishComputeRegion(const State& s) {
  const bool applies = s.mode == Mode::kLimitsFile && s.region != nullptr && s.slot != shm::kNoSlot;
  g_compute_devices = 0;  // never a count without its region
  g_compute_region = applies ? s.region : nullptr;
  g_compute_devices = applies ? std::min(s.region->header.device_count, shm::kMaxDevices) : 0;
}

void OnForkChild() {
  State& s = S();
  // The child has its own CUDA state (none) and needs its own slot. Never lock anything here:
  // a parent thread may have held these at fork(). The old table is leaked on purpose.
  ResetAllocationTablesAfterFork(s);
  s.context_charged.store(0);
  // A parent thread that was publishing the driver's functions does not exist here.
  ForgetUnfinishedInitialization();
  ResetOrdinalMap(s);
  s.slot = shm::kNoSlot;
  if (s.machinery_ok) ClaimSlot(s);
  PublishComputeRegion(s);
  ResetGovernorAfterFork();
}

bool IsContainerProcess(unsigned int pid) {
  State& s = S();
  if (s.region == nullptr) return false;
  for (const shm::Slot& slot : s.region->slots) {
    if (slot.state.load(std::memory_order_acquire) == 1 &&
        static_cast<unsigned int>(slot.pid) == pid) {
      return true;
    }
  }
  return false;
}

void CountMachineryError(const char* what) {
  State& s = S();
  if (s.region != nullptr) {
    s.region->header.machinery_errors.fetch_add(1, std::memory_order_relaxed);
  }
  static std::mutex mu;
  static std::vector<const char*>* logged = new std::vector<const char*>();
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(logged->begin(), logged->end(), what) != logged->end()) return;
  logged->push_back(what);
  TESSERA_LOG(kWarn, kHook, "compute governor: %s (logged once)", what);
}

}  // namespace tessera::hook
