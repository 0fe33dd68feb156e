// Quota resolution without a driver or the process state (quota_test.cc): how the quota of a
// CUDA device follows from the process's mode, the health of tessera's machinery, the device's
// region index and the configured caps. quota.cc applies it to the process state (state.h's
// QuotaForDevice).
#pragma once

#include <atomic>
#include <cstdint>

#include "tessera/limits.h"

#include "hook/state.h"

namespace tessera::hook {

enum class Mode : std::uint8_t {
  kInactive,    // no limits file, no HAMi variables: everything passes through
  kLimitsFile,  // node-written limits (authoritative)
  kHamiEnv,     // HAMi-core's environment contract (weaker trust)
};

// A CUDA ordinal's region device index is >= 0, -1 when no tessera limit applies to it, or:
inline constexpr int kUnknownDevice = -2;  // not resolved yet (or the driver could not say)
inline constexpr int kNotEntitled = -3;    // not in the limits: allocations refused
// Ordinals [0, kMaxOrdinals) have their region device index cached.
inline constexpr int kMaxOrdinals = 64;

struct QuotaInputs {
  Mode mode = Mode::kInactive;
  bool usable = false;       // machinery healthy, region attached and a slot held
  bool fail_closed = false;  // what an unusable machinery means: refuse (true) or pass through
};

// The cap of a device from this process's own configuration (never the region's copy, which any
// tenant process can write): in HAMi mode the variables of CUDA index `dev` (unlimited without
// one); otherwise the limits file's entry for `uuid` (0 when it has none).
std::uint64_t ConfiguredCap(Mode mode, const Limits& limits, const HamiLimits& hami,
                            const char* uuid, CUdevice dev);

// The quota of CUDA device `dev`. resolve(dev) maps the ordinal to its region device index (or
// kUnknownDevice / kNotEntitled / -1); any answer but kUnknownDevice for an ordinal in
// [0, kMaxOrdinals) is kept in `ordinal_map` (kMaxOrdinals entries), so the driver is asked
// once. cap(index) is the configured cap of region device `index`. No allocation.
template <typename Resolve, typename Cap>
DeviceQuota ResolveQuota(const QuotaInputs& in, std::atomic<int>* ordinal_map, CUdevice dev,
                         Resolve&& resolve, Cap&& cap) {
  DeviceQuota q;
  if (in.mode == Mode::kInactive) return q;
  if (!in.usable) {
    q.limited = in.fail_closed;
    q.refuse = in.fail_closed;
    return q;
  }
  int index = kUnknownDevice;
  const bool cacheable = dev >= 0 && dev < kMaxOrdinals;
  if (cacheable) index = ordinal_map[dev].load(std::memory_order_acquire);
  if (index == kUnknownDevice) {
    index = resolve(dev);
    if (cacheable && index != kUnknownDevice) {
      ordinal_map[dev].store(index, std::memory_order_release);
    }
  }
  if (index == kNotEntitled) {
    q.limited = true;
    q.refuse = true;
    return q;
  }
  if (index < 0) return q;  // unknown (driver could not say) or unlimited
  q.limited = true;
  q.region_device = index;
  q.limit_bytes = cap(index);
  return q;
}

}  // namespace tessera::hook
