// The allocation tables: what each tracked pointer, handle or stream was charged, so its free
// returns exactly that.
#include <cstdint>
#include <mutex>
#include <utility>

#include "tessera/region.h"

#include "hook/process_state.h"

namespace tessera::hook {

void ResetAllocationTablesAfterFork(State& s) {
  s.alloc_mu = new std::mutex();
  s.allocations = new State::AllocationMap();
  s.handles = new State::AllocationMap();
  s.streams = new State::AllocationMap();
}

void RecordAllocation(CUdeviceptr ptr, int region_device, std::uint64_t bytes, Table table) {
  State& s = S();
  std::pair<int, std::uint64_t> stale{-1, 0};
  {
    std::lock_guard<std::mutex> lock(*s.alloc_mu);
    auto [it, inserted] = s.TableOf(table)->try_emplace(ptr, region_device, bytes);
    if (!inserted) {
      stale = it->second;  // freed through a path we do not track; the driver reused it
      it->second = {region_device, bytes};
    }
  }
  if (stale.first >= 0 && s.region != nullptr && s.slot != shm::kNoSlot) {
    shm::Release(*s.region, s.slot, stale.first, stale.second);
  }
}

bool TakeAllocation(CUdeviceptr ptr, int* region_device, std::uint64_t* bytes, Table table) {
  State& s = S();
  std::lock_guard<std::mutex> lock(*s.alloc_mu);
  State::AllocationMap* map = s.TableOf(table);
  auto it = map->find(ptr);
  if (it == map->end()) return false;
  *region_device = it->second.first;
  *bytes = it->second.second;
  map->erase(it);
  return true;
}

}  // namespace tessera::hook
