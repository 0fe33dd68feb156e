#include "tessera/region.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <errno.h>
#include <fcntl.h>
#include <new>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera::shm {
namespace {

constexpr std::uint64_t kRegionBytes = sizeof(Region);

std::string Errno(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

void InitRobustMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

void RecomputeTotals(Region& region) {
  for (std::uint32_t d = 0; d < kMaxDevices; ++d) {
    std::uint64_t sum = 0;
    for (std::uint32_t s = 0; s < kMaxSlots; ++s) {
      if (region.slots[s].state.load(std::memory_order_relaxed) != 0) {
        sum += region.slots[s].used_bytes[d].load(std::memory_order_relaxed);
      }
    }
    region.devices[d].used_bytes.store(sum, std::memory_order_relaxed);
  }
}

// Locks the region lock; if its holder died mid-update, repairs the totals from the slots.
void LockRegion(Region& region) {
  const int rc = pthread_mutex_lock(&region.lock);
  if (rc == EOWNERDEAD) {
    RecomputeTotals(region);
    pthread_mutex_consistent(&region.lock);
  }
}
void UnlockRegion(Region& region) { pthread_mutex_unlock(&region.lock); }

// total -= n, never below zero (the region is tenant-writable; a wrapped total would refuse
// every allocation). Caller holds the region lock.
void SubtractLocked(std::atomic<std::uint64_t>& total, std::uint64_t n) {
  const std::uint64_t have = total.load(std::memory_order_relaxed);
  total.store(have > n ? have - n : 0, std::memory_order_relaxed);
}

// Frees a slot whose owner is gone (or is about to be reused). Caller holds the region lock.
void FreeSlotLocked(Region& region, std::uint32_t s) {
  Slot& slot = region.slots[s];
  for (std::uint32_t d = 0; d < kMaxDevices; ++d) {
    const std::uint64_t used = slot.used_bytes[d].exchange(0, std::memory_order_relaxed);
    if (used != 0) SubtractLocked(region.devices[d].used_bytes, used);
  }
  slot.pid = 0;
  slot.start_time = 0;
  slot.state.store(0, std::memory_order_release);
}

// Tries to take over slot `s` if its owner is dead or gone; returns true if the caller now
// holds its owner mutex (and the slot's usage has been returned).
bool TryTakeDeadSlot(Region& region, std::uint32_t s) {
  const int rc = pthread_mutex_trylock(&region.slots[s].owner);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&region.slots[s].owner);
  } else if (rc != 0) {
    return false;  // EBUSY: alive
  }
  // The owner died (EOWNERDEAD), or released the slot between our look and our lock (then its
  // usage is already zero and freeing again is harmless).
  LockRegion(region);
  FreeSlotLocked(region, s);
  UnlockRegion(region);
  return true;
}

}  // namespace

Mapping::Mapping(Mapping&& other) noexcept
    : region_(other.region_), layout_(other.layout_), bytes_(other.bytes_) {
  other.region_ = nullptr;
}
Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (region_ != nullptr) munmap(region_, bytes_);
    region_ = other.region_;
    layout_ = other.layout_;
    bytes_ = other.bytes_;
    other.region_ = nullptr;
  }
  return *this;
}
Mapping::~Mapping() {
  if (region_ != nullptr) munmap(region_, bytes_);
}

namespace {

// A header of a layout from `oldest` to kLayoutVersion, its sizes those of that layout.
Status ValidateLayouts(const Header& header, std::uint64_t file_bytes, std::uint32_t oldest) {
  if (file_bytes < sizeof(Header)) {
    return DataLossError("region is " + std::to_string(file_bytes) +
                         " bytes, smaller than its header");
  }
  if (header.magic != kMagic) return DataLossError("region has a wrong magic number");
  if (header.layout_version < oldest || header.layout_version > kLayoutVersion) {
    return DataLossError("region layout version " + std::to_string(header.layout_version) +
                         ", this library reads version " +
                         (oldest == kLayoutVersion
                              ? std::to_string(kLayoutVersion)
                              : std::to_string(oldest) + " to " + std::to_string(kLayoutVersion)));
  }
  const std::uint64_t bytes = RegionBytesOfLayout(header.layout_version);
  if (header.header_bytes != sizeof(Header) || header.region_bytes != bytes ||
      file_bytes != bytes || header.max_devices != kMaxDevices || header.max_slots != kMaxSlots) {
    return DataLossError("region size " + std::to_string(file_bytes) + " does not match ABI " +
                         AbiVersion());
  }
  if (header.device_count > kMaxDevices) {
    return DataLossError("region lists " + std::to_string(header.device_count) + " devices");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateHeader(const Header& header, std::uint64_t file_bytes) {
  return ValidateLayouts(header, file_bytes, kLayoutVersion);
}

namespace {

void Initialize(Region& region, const std::vector<DeviceLimit>& devices) {
  std::memset(static_cast<void*>(&region), 0, kRegionBytes);
  region.header.magic = kMagic;
  region.header.layout_version = kLayoutVersion;
  region.header.header_bytes = sizeof(Header);
  region.header.region_bytes = kRegionBytes;
  region.header.max_devices = kMaxDevices;
  region.header.max_slots = kMaxSlots;
  region.header.device_count = static_cast<std::uint32_t>(devices.size());
  InitRobustMutex(&region.lock);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    Device& d = region.devices[i];
    std::strncpy(d.uuid, devices[i].uuid.c_str(), kUuidBytes - 1);
    d.limit_bytes = devices[i].limit_bytes;
    d.cores_percent = devices[i].cores_percent;
  }
  for (Slot& slot : region.slots) InitRobustMutex(&slot.owner);
  for (BusyLog& log : region.busy) InitRobustMutex(&log.lock);
  region.header.ready.store(1, std::memory_order_release);
}

StatusOr<Region*> MapRegion(int fd, const std::string& path, std::uint64_t bytes = kRegionBytes) {
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return UnavailableError(Errno("cannot map region", path));
  return static_cast<Region*>(addr);
}

Status CheckDevices(const std::vector<DeviceLimit>& devices) {
  if (devices.size() > kMaxDevices) {
    return InvalidArgumentError("at most " + std::to_string(kMaxDevices) + " devices per region");
  }
  for (const auto& d : devices) {
    if (d.uuid.empty() || d.uuid.size() >= kUuidBytes) {
      return InvalidArgumentError("device UUID must be 1 to 63 bytes");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Mapping> Mapping::Create(const std::string& path,
                                  const std::vector<DeviceLimit>& devices) {
  TESSERA_RETURN_IF_ERROR(CheckDevices(devices));
  // Build in a temporary file, then rename: attachers never see a half-initialized region.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) return UnavailableError(Errno("cannot create region", tmp));
  fchmod(fd, 0666);
  if (ftruncate(fd, static_cast<off_t>(kRegionBytes)) != 0) {
    const Status s = UnavailableError(Errno("cannot size region", tmp));
    close(fd);
    unlink(tmp.c_str());
    return s;
  }
  auto region = MapRegion(fd, tmp);
  close(fd);
  if (!region.ok()) {
    unlink(tmp.c_str());
    return region.status();
  }
  Initialize(**region, devices);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = UnavailableError(Errno("cannot publish region", path));
    munmap(*region, kRegionBytes);
    unlink(tmp.c_str());
    return s;
  }
  return Mapping(*region, kLayoutVersion, kRegionBytes);
}

StatusOr<Mapping> Mapping::CreateOrAttach(const std::string& path,
                                          const std::vector<DeviceLimit>& devices) {
  TESSERA_RETURN_IF_ERROR(CheckDevices(devices));
  if (auto existing = Attach(path);
      existing.ok() || existing.status().code() != StatusCode::kNotFound) {
    return existing;
  }
  // Build a complete region in a private file, then publish it with link(), which fails if
  // another process published first: nobody ever maps a half-built region.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  auto built = Create(tmp, devices);
  if (!built.ok()) return built.status();
  const int linked = link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  unlink(tmp.c_str());
  if (linked == 0) return built;
  if (link_errno == EEXIST) return Attach(path);
  errno = link_errno;
  return UnavailableError(Errno("cannot publish region", path));
}

StatusOr<Mapping> Mapping::Attach(const std::string& path) {
  return AttachLayouts(path, kLayoutVersion);
}

StatusOr<Mapping> Mapping::AttachForReading(const std::string& path) {
  return AttachLayouts(path, kOldestReadableLayout);
}

namespace {

// Opens a region file read-write only if it is a regular file: a tenant can replace its region
// with a device node (mknod) or a FIFO, and merely opening some devices acts (a watchdog arms).
// The path is resolved once without opening the object (O_PATH), checked, then reopened through
// that descriptor; where /proc is not mounted, a checked lstat precedes the open instead.
StatusOr<int> OpenRegularFile(const std::string& path, int flags) {
  const int probe = open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (probe < 0) {
    if (errno == ENOENT) return NotFoundError(Errno("no region", path));
    return UnavailableError(Errno("cannot open region", path));
  }
  struct stat st {};
  if (fstat(probe, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(probe);
    return DataLossError("region " + path + " is not a regular file");
  }
  int fd = open(("/proc/self/fd/" + std::to_string(probe)).c_str(), flags | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {  // no /proc
    struct stat again {};
    fd = lstat(path.c_str(), &again) == 0 && S_ISREG(again.st_mode) && again.st_ino == st.st_ino
             ? open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
             : -1;
  }
  close(probe);
  if (fd < 0) return UnavailableError(Errno("cannot open region", path));
  struct stat opened {};
  if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || opened.st_ino != st.st_ino) {
    close(fd);
    return DataLossError("region " + path + " changed while it was opened");
  }
  return fd;
}

// The layout a region file's size says (every layout extends the previous one), 0 if none.
std::uint32_t LayoutOfSize(std::uint64_t file_bytes, std::uint32_t oldest) {
  std::uint32_t layout = 0;
  for (std::uint32_t v = oldest; v <= kLayoutVersion; ++v) {
    if (RegionBytesOfLayout(v) == file_bytes) layout = v;
  }
  return layout;
}

Status WrongSize(const std::string& path, std::uint64_t file_bytes) {
  return DataLossError("region " + path + " is " + std::to_string(file_bytes) + " bytes; ABI " +
                       AbiVersion() + " needs " + std::to_string(kRegionBytes));
}

}  // namespace

StatusOr<Mapping> Mapping::AttachLayouts(const std::string& path, std::uint32_t oldest) {
  auto opened = OpenRegularFile(path, O_RDWR);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const Status s = UnavailableError(Errno("cannot stat region", path));
    close(fd);
    return s;
  }
  // The size says the layout (every layout extends the previous one); the header must agree.
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  const std::uint32_t layout = LayoutOfSize(file_bytes, oldest);
  if (layout == 0) {
    close(fd);
    return WrongSize(path, file_bytes);
  }
  auto region = MapRegion(fd, path, file_bytes);
  close(fd);
  if (!region.ok()) return region.status();
  Mapping mapping(*region, layout, file_bytes);
  // A concurrent creator (CreateOrAttach) may still be initializing: wait a bounded while.
  for (int i = 0; i < 10000 && mapping.region()->header.ready.load(std::memory_order_acquire) == 0;
       ++i) {
    sched_yield();
  }
  if (mapping.region()->header.ready.load(std::memory_order_acquire) == 0) {
    return UnavailableError("region " + path + " was never initialized by its creator");
  }
  const Status valid = ValidateLayouts(mapping.region()->header, file_bytes, oldest);
  if (!valid.ok()) return valid.WithContext("region " + path);
  if (mapping.region()->header.layout_version != layout) {
    return DataLossError("region " + path + ": header says layout " +
                         std::to_string(mapping.region()->header.layout_version) +
                         ", its size layout " + std::to_string(layout));
  }
  return mapping;
}

StatusOr<RegionCopy> RegionCopy::Read(const std::string& path) {
  auto opened = OpenRegularFile(path, O_RDONLY);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct stat st {};
  const bool stat_ok = fstat(fd, &st) == 0;
  const auto file_bytes = static_cast<std::uint64_t>(stat_ok ? st.st_size : 0);
  const std::uint32_t layout = LayoutOfSize(file_bytes, kOldestReadableLayout);
  if (layout == 0) {
    close(fd);
    return WrongSize(path, file_bytes);
  }
  RegionCopy copy;
  // malloc, not an aligned operator new: this file is in the preload library, whose C++ ABI
  // floor (deployments/images/preload-abi-floor) an aligned new would raise.
  static_assert(alignof(Region) <= alignof(std::max_align_t));
  copy.storage_.reset(static_cast<Region*>(std::malloc(sizeof(Region))));
  if (!copy.storage_) return UnavailableError("region " + path + ": out of memory for a copy");
  std::memset(static_cast<void*>(copy.storage_.get()), 0, sizeof(Region));
  auto* bytes = reinterpret_cast<char*>(copy.storage_.get());
  std::uint64_t done = 0;
  while (done < file_bytes) {
    const ssize_t n = pread(fd, bytes + done, file_bytes - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // truncated under us: what was read is checked below
    done += static_cast<std::uint64_t>(n);
  }
  close(fd);
  if (done != file_bytes) return DataLossError("region " + path + " shrank while it was read");
  const Header& h = copy.storage_->header;
  if (h.ready.load(std::memory_order_relaxed) == 0) {
    return UnavailableError("region " + path + " was never initialized by its creator");
  }
  const Status valid = ValidateLayouts(h, file_bytes, kOldestReadableLayout);
  if (!valid.ok()) return valid.WithContext("region " + path);
  if (h.layout_version != layout) {
    return DataLossError("region " + path + ": header says layout " +
                         std::to_string(h.layout_version) + ", its size layout " +
                         std::to_string(layout));
  }
  copy.layout_ = layout;
  return copy;
}

void RegionCopy::Free::operator()(Region* r) const { std::free(r); }

StatusOr<std::uint32_t> ClaimSlot(Region& region, std::int32_t pid, std::uint64_t start_time) {
  // Protocol: only the holder of a slot's owner mutex changes its state. A claimer takes the
  // mutex first, then marks the slot active; so an active slot whose mutex can be taken has a
  // dead owner (EOWNERDEAD), and a claim that dies half-way leaves a free slot.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t s = 0; s < kMaxSlots; ++s) {
      Slot& slot = region.slots[s];
      if (slot.state.load(std::memory_order_acquire) != 0) continue;
      const int rc = pthread_mutex_trylock(&slot.owner);
      if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(&slot.owner);
      } else if (rc != 0) {
        continue;
      }
      // Start from zero: a dead owner's charges, or a late charge against a slot its process
      // had already released at exit, are returned to the device first.
      LockRegion(region);
      FreeSlotLocked(region, s);
      slot.pid = pid;
      slot.start_time = start_time;
      slot.state.store(1, std::memory_order_release);
      UnlockRegion(region);
      return s;
    }
    if (ReclaimDeadSlots(region) == 0) break;
  }
  return ResourceExhaustedError("all " + std::to_string(kMaxSlots) +
                                " process slots of the region are taken by live processes");
}

void ReleaseSlot(Region& region, std::uint32_t slot) {
  if (slot >= kMaxSlots) return;
  LockRegion(region);
  FreeSlotLocked(region, slot);
  UnlockRegion(region);
  pthread_mutex_unlock(&region.slots[slot].owner);
}

int FindDevice(const Region& region, std::string_view uuid) {
  const std::uint32_t n =
      region.header.device_count < kMaxDevices ? region.header.device_count : kMaxDevices;
  for (std::uint32_t d = 0; d < n; ++d) {
    const char* have = region.devices[d].uuid;
    if (uuid == std::string_view(have, strnlen(have, kUuidBytes))) return static_cast<int>(d);
  }
  return -1;
}

Status Reserve(Region& region, std::uint32_t slot, int device, std::uint64_t bytes,
               std::uint64_t limit_bytes) {
  if (slot >= kMaxSlots || device < 0 || static_cast<std::uint32_t>(device) >= kMaxDevices) {
    return InternalError("reserve: bad slot or device");
  }
  Device& d = region.devices[device];
  for (int attempt = 0; attempt < 2; ++attempt) {
    LockRegion(region);
    if (region.slots[slot].state.load(std::memory_order_relaxed) != 1) {
      UnlockRegion(region);
      return FailedPreconditionError("reserve: process slot " + std::to_string(slot) +
                                     " is not active");
    }
    const std::uint64_t used = d.used_bytes.load(std::memory_order_relaxed);
    if (bytes <= limit_bytes && used <= limit_bytes - bytes) {
      const std::uint64_t now = used + bytes;
      d.used_bytes.store(now, std::memory_order_relaxed);
      region.slots[slot].used_bytes[device].fetch_add(bytes, std::memory_order_relaxed);
      if (now > d.peak_bytes.load(std::memory_order_relaxed)) {
        d.peak_bytes.store(now, std::memory_order_relaxed);
      }
      UnlockRegion(region);
      return Status::Ok();
    }
    UnlockRegion(region);
    // Before refusing, return the usage of processes that died (event-driven reclaim).
    if (attempt == 0 && ReclaimDeadSlots(region) > 0) continue;
    d.oom_rejections.fetch_add(1, std::memory_order_relaxed);
    return ResourceExhaustedError("limit " + std::to_string(limit_bytes) + " bytes, used " +
                                  std::to_string(used) + ", requested " + std::to_string(bytes));
  }
  return ResourceExhaustedError("unreachable");
}

void Release(Region& region, std::uint32_t slot, int device, std::uint64_t bytes) {
  if (slot >= kMaxSlots || device < 0 || static_cast<std::uint32_t>(device) >= kMaxDevices) return;
  LockRegion(region);
  auto& mine = region.slots[slot].used_bytes[device];
  const std::uint64_t have = mine.load(std::memory_order_relaxed);
  const std::uint64_t give = bytes < have ? bytes : have;  // never underflow
  mine.store(have - give, std::memory_order_relaxed);
  SubtractLocked(region.devices[device].used_bytes, give);
  UnlockRegion(region);
}

int ReclaimDeadSlots(Region& region) {
  int reclaimed = 0;
  for (std::uint32_t s = 0; s < kMaxSlots; ++s) {
    if (region.slots[s].state.load(std::memory_order_acquire) == 0) continue;
    if (TryTakeDeadSlot(region, s)) {
      pthread_mutex_unlock(&region.slots[s].owner);
      ++reclaimed;
    }
  }
  return reclaimed;
}

std::uint64_t UsedBytes(const Region& region, int device) {
  if (device < 0 || static_cast<std::uint32_t>(device) >= kMaxDevices) return 0;
  return region.devices[device].used_bytes.load(std::memory_order_relaxed);
}

std::string AbiVersion() {
  return std::to_string(kLayoutVersion) + "." + std::to_string(sizeof(Region));
}

}  // namespace tessera::shm
