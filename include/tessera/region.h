// The shared usage region of one container (layout: tessera/shm_layout.h): create, attach,
// claim a slot, reserve and release memory. Dependency-free: linked into the preload library,
// `tessera run` and the node agent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/shm_layout.h"
#include "tessera/status.h"

namespace tessera::shm {

struct DeviceLimit {
  std::string uuid;
  std::uint64_t limit_bytes = 0;
  std::uint32_t cores_percent = 0;
};

// A mapping of a region file. Movable, not copyable; unmaps on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  Region* region() const { return region_; }
  // Gives up ownership: the region stays mapped for the life of the process (the preload
  // library, whose hooks may run until the very end).
  Region* release() {
    Region* r = region_;
    region_ = nullptr;
    return r;
  }
  explicit operator bool() const { return region_ != nullptr; }

  // Creates (or replaces) the region file at `path`, sized and initialized for `devices`
  // (at most kMaxDevices), mode 0666 so every UID of the container can account into it.
  static StatusOr<Mapping> Create(const std::string& path, const std::vector<DeviceLimit>& devices);
  // Creates the file only if it does not exist yet; otherwise attaches (HAMi-compatible mode,
  // where the first process of a container creates the region).
  static StatusOr<Mapping> CreateOrAttach(const std::string& path,
                                          const std::vector<DeviceLimit>& devices);
  // Maps an existing region; refuses a wrong magic, layout version or size (DataLoss), and a
  // region whose creator never finished (Unavailable).
  static StatusOr<Mapping> Attach(const std::string& path);
  // The node side's reader (agent, `tessera top`): also a region of an earlier layout (from
  // kOldestReadableLayout on), created by the previous library in a container that still runs
  // it. Fields past that layout's size do not exist: check has_compute() before compute[].
  static StatusOr<Mapping> AttachForReading(const std::string& path);

  std::uint32_t layout_version() const { return layout_; }
  bool has_compute() const { return layout_ >= 2; }

 private:
  Mapping(Region* region, std::uint32_t layout, std::uint64_t bytes)
      : region_(region), layout_(layout), bytes_(bytes) {}
  static StatusOr<Mapping> AttachLayouts(const std::string& path, std::uint32_t oldest);
  Region* region_ = nullptr;
  std::uint32_t layout_ = kLayoutVersion;
  std::uint64_t bytes_ = 0;
};

// A private copy of a region, read with pread: for node-side readers that only look (metrics,
// drift, `tessera top`, uninstall). A tenant can truncate its region file at any moment, which
// turns a read of a shared mapping into SIGBUS; a copy cannot. Layouts from
// kOldestReadableLayout on; fields past the copy's layout are zero (check has_compute()).
class RegionCopy {
 public:
  static StatusOr<RegionCopy> Read(const std::string& path);
  const Region& region() const { return *storage_; }
  std::uint32_t layout_version() const { return layout_; }
  bool has_compute() const { return layout_ >= 2; }

 private:
  struct Free {
    void operator()(Region* r) const;
  };
  std::unique_ptr<Region, Free> storage_;
  std::uint32_t layout_ = 0;
};

// Checks a mapped region's header (also used by the fuzz target on raw bytes).
Status ValidateHeader(const Header& header, std::uint64_t file_bytes);

inline constexpr std::uint32_t kNoSlot = 0xffffffffu;

// Claims a free slot (reclaiming dead ones) and locks its robust owner mutex from the calling
// thread, which must live as long as the process (the preload library calls this from its
// constructor on the main thread, and from the fork child handler).
StatusOr<std::uint32_t> ClaimSlot(Region& region, std::int32_t pid, std::uint64_t start_time);
// Returns the slot's usage to the container and frees it (clean process exit).
void ReleaseSlot(Region& region, std::uint32_t slot);

// The device entry for a UUID, or -1.
int FindDevice(const Region& region, std::string_view uuid);

// Atomically reserves `bytes` on `device` for `slot`: ResourceExhausted (with used and limit in
// the message) if that would exceed `limit_bytes`. Never check-then-add. The limit is the
// caller's (from the read-only limits file), never the region's copy, which the tenant can write.
Status Reserve(Region& region, std::uint32_t slot, int device, std::uint64_t bytes,
               std::uint64_t limit_bytes);
// Returns `bytes` (a failed driver call rolling back, or a free).
void Release(Region& region, std::uint32_t slot, int device, std::uint64_t bytes);

// Frees the usage of every slot whose process has died (its owner mutex is EOWNERDEAD).
// Returns how many slots were reclaimed. Event-driven: called when a slot is claimed and
// before an allocation is refused; no timer.
int ReclaimDeadSlots(Region& region);

std::uint64_t UsedBytes(const Region& region, int device);

// "2.53376": layout version and size, printed by `tessera version`.
std::string AbiVersion();

}  // namespace tessera::shm
