// THE shared-region ABI (layout version 3): one region per container, mapped by every process of
// the container (the preload library) and by the node side (tessera-node or `tessera run`).
// Plain standard-layout structs with fixed-width fields and explicit padding; layout pinned by
// src/core/shm_layout_test.cc. Any change to a field's offset or size bumps kLayoutVersion.
//
// Accounting protocol (docs/design/0002-contracts-v1.md, "Shared region"):
//   reserve:  lock `lock`; the slot must be active; if devices[d].used_bytes + n exceeds the
//             limit *of the limits file* (the caller passes it: devices[d].limit_bytes is only a
//             copy for readers, never trusted) -> unlock, reclaim the slots of dead processes
//             once and retry, else count an OOM rejection and refuse; otherwise
//             devices[d].used_bytes += n, slots[s].used_bytes[d] += n, raise peak_bytes; unlock
//   call the driver; on failure roll back the same way; on free subtract the same way.
//   A process holds its slot's robust `owner` mutex for its whole life; when it dies, the
//   kernel marks the mutex EOWNERDEAD and whoever locks it next releases the slot's usage.
//   If the holder of `lock` dies inside the critical section, the next locker gets EOWNERDEAD
//   and recomputes every devices[d].used as the sum of the slots before continuing.
//
// Compute protocol (docs/design/0017-compute-governor.md): compute[d] is lock-free. The
// container's processes add to its counters and stamp its activity; the GPU's arbiter (node
// side) writes `gate`, `depth_us` and `arbiter_beat_ns`. A launch proceeds when the gate is
// kFree, or kOpen, or the arbiter's beat is stale (fail-open); otherwise it waits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace tessera::shm {

inline constexpr std::uint64_t kMagic = 0x5245534553534554ULL;  // "TESSERES" little-endian
inline constexpr std::uint32_t kLayoutVersion = 3;
inline constexpr std::uint32_t kMaxDevices = 16;
inline constexpr std::uint32_t kMaxSlots = 256;
inline constexpr std::size_t kUuidBytes = 64;  // "GPU-…" or "MIG-…", NUL-terminated

struct Header {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t header_bytes;        // sizeof(Header)
  std::uint64_t region_bytes;        // sizeof(Region)
  std::uint32_t max_devices;         // kMaxDevices
  std::uint32_t max_slots;           // kMaxSlots
  std::atomic<std::uint32_t> ready;  // 1 once the creator has filled devices[]
  std::uint32_t device_count;
  std::atomic<std::uint64_t> machinery_errors;  // tessera's own failures (fail-open events)
  std::uint8_t reserved[16];
};

struct Device {
  char uuid[kUuidBytes];
  std::uint64_t limit_bytes;              // copy of the limits file, for readers
  std::atomic<std::uint64_t> used_bytes;  // sum over slots, changed only under Region::lock
  std::atomic<std::uint64_t> peak_bytes;
  std::atomic<std::uint64_t> oom_rejections;
  std::uint32_t cores_percent;  // 0: no compute reservation
  std::uint32_t reserved0;
  std::uint8_t reserved[24];
};

struct Slot {
  pthread_mutex_t owner;             // robust, process-shared; held for the process's life
  std::atomic<std::uint32_t> state;  // 0 free, 1 active
  std::int32_t pid;                  // in the process's own PID namespace (diagnostics)
  std::uint64_t start_time;          // /proc/self/stat field 22, against PID reuse
  std::atomic<std::uint64_t> used_bytes[kMaxDevices];
  std::uint8_t reserved[8];
};

// What the arbiter tells a container's launches (Compute::gate).
enum class Gate : std::uint32_t {
  kFree = 0,          // not governed: launches pass straight through (no arbiter, or none needed)
  kOpen = 1,          // governed: launch, with fences, at most depth_us of work in flight
  kHeldShare = 2,     // wait: the share is spent, or another container holds the GPU's turn
  kHeldPriority = 3,  // wait: a higher priority class is running on the GPU
};

// Compute::depth_us that means one launch in flight: each launch is fenced alone, and the next
// waits until it completed.
inline constexpr std::uint32_t kDepthOneLaunchUs = 1;

// Per device: the container's compute accounting and the arbiter's verdict. Times are
// CLOCK_MONOTONIC nanoseconds (one clock for every process of the node).
struct Compute {
  // Written by the container's processes (the preload library):
  std::atomic<std::uint64_t> busy_ns;           // GPU time of its work, measured by event fences
  std::atomic<std::uint64_t> throttled_ns;      // time launches waited for the share or a turn
  std::atomic<std::uint64_t> priority_held_ns;  // time launches waited for a higher class
  std::atomic<std::uint64_t> launches;          // governed launches (kernels, graphs)
  std::atomic<std::uint64_t> launches_held;     // launches that waited for the share or a turn
  std::atomic<std::uint64_t> priority_holds;    // launches that waited for a higher class
  std::atomic<std::uint64_t> active_ns;         // latest moment it launched or had work in flight
  std::atomic<std::uint64_t> waiting_ns;        // latest moment a launch of it was waiting
  // Written by the GPU's arbiter (node side):
  std::atomic<std::uint64_t> arbiter_beat_ns;  // the arbiter's latest decision
  std::atomic<std::uint32_t> gate;             // a Gate
  std::atomic<std::uint32_t> depth_us;         // work it may keep in flight (0: the default;
                                               // kDepthOneLaunchUs: one launch)
  // Written by the container's processes:
  std::atomic<std::uint64_t> launch_failures;  // governed launches the driver refused
  // The governor itself failed (its arbiter stopped deciding, no watcher thread): how often a
  // launch found it so, and how long launches waited for it (fail-closed tiers only; fail-open
  // ones run ungoverned meanwhile).
  std::atomic<std::uint64_t> governor_failures;
  std::atomic<std::uint64_t> governor_down_ns;
  std::uint8_t reserved[24];
};

// Per device: the container's recent busy time as disjoint spans on the host clock, so that the
// work of its streams and processes that overlapped is counted once (src/governor/busy_log.h).
// Written only by the container's processes, under `lock`; nobody on the node side reads it.
inline constexpr std::uint32_t kBusySpans = 60;
struct BusySpan {
  std::uint64_t begin_ns;
  std::uint64_t end_ns;
};
struct BusyLog {
  pthread_mutex_t lock;  // robust, process-shared
  std::uint32_t count;   // spans in use: sorted by begin, disjoint
  std::uint32_t reserved0;
  std::uint8_t reserved[16];
  BusySpan spans[kBusySpans];
};

struct Region {
  Header header;
  pthread_mutex_t lock;  // robust, process-shared; guards used_bytes
  std::uint8_t reserved_lock[24];
  Device devices[kMaxDevices];
  Slot slots[kMaxSlots];
  Compute compute[kMaxDevices];  // layout version 2
  BusyLog busy[kMaxDevices];     // layout version 3
};

// The bytes of a region of layout `version` as its library created it: every layout extends the
// one before at the end (version 1 is version 2 without compute[], version 2 is version 3 without
// busy[]), so node-side readers can read the regions of containers still running a previous
// library. 0: not a layout we know.
inline constexpr std::uint32_t kOldestReadableLayout = 1;
constexpr std::uint64_t RegionBytesOfLayout(std::uint32_t version) {
  return version == 3   ? sizeof(Region)
         : version == 2 ? offsetof(Region, busy)
         : version == 1 ? offsetof(Region, compute)
                        : 0;
}

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8);
static_assert(sizeof(pthread_mutex_t) == 40, "the ABI assumes x86-64 / aarch64 glibc");
static_assert(std::is_standard_layout_v<Region>);
static_assert(sizeof(Header) == 64);
static_assert(sizeof(Device) == 128);
static_assert(sizeof(Slot) == 192);
static_assert(sizeof(Compute) == 128);
static_assert(sizeof(BusyLog) == 1024);

}  // namespace tessera::shm
