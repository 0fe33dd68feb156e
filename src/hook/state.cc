#include "hook/state.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hook/hook_table.h"
#include "tessera/limits.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

extern char** environ;

namespace tessera::hook {

std::atomic<bool> g_initialized{false};
bool g_stats_enabled = false;
namespace {
std::atomic<bool> g_init_claimed{false};  // a thread is publishing the real functions
}  // namespace

namespace {

enum class Mode : std::uint8_t {
  kInactive,     // no limits file, no HAMi variables: everything passes through
  kLimitsFile,   // node-written limits (authoritative)
  kHamiEnv,      // HAMi-core's environment contract (weaker trust)
};

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
  // CUDA ordinal -> region device index; kUnknown until resolved, kNotEntitled when the device
  // is not in the limits, -1 when no tessera limit applies to it.
  static constexpr int kUnknown = -2;
  static constexpr int kNotEntitled = -3;
  static constexpr int kMaxOrdinals = 64;
  std::atomic<int> ordinal_map[kMaxOrdinals];
  std::atomic<std::uint32_t> context_charged{0};  // bit per region device
  // The allocation table. Held by pointer so a fork child can start afresh: the parent's other
  // threads may have held the mutex at fork() (they do not exist in the child).
  std::mutex* alloc_mu = new std::mutex();
  using AllocationMap = std::unordered_map<CUdeviceptr, std::pair<int, std::uint64_t>>;
  AllocationMap* allocations = new AllocationMap();
  AllocationMap* handles = new AllocationMap();
  AllocationMap* streams = new AllocationMap();
  AllocationMap* TableOf(Table table) {
    switch (table) {
      case Table::kPointers: return allocations;
      case Table::kHandles: return handles;
      case Table::kStreams: return streams;
    }
    return handles;
  }
  // TESSERA_HOOK_STATS
  std::atomic<std::uint64_t> calls[kCudaHookCount] = {};
  std::uint64_t configure_ns = 0;
  std::uint64_t initialize_ns = 0;
};

std::uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

State& S() {
  static State* state = new State();
  return *state;
}

void ResetOrdinalMap(State& s) {
  for (auto& m : s.ordinal_map) m.store(State::kUnknown, std::memory_order_relaxed);
}

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

bool ReadFile(const char* path, std::string* out) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[4096];
  ssize_t n;
  out->clear();
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    out->append(buffer, static_cast<std::size_t>(n));
    if (out->size() > (1u << 20)) break;  // a limits file is a few lines
  }
  close(fd);
  return true;
}

const char* EnvOr(std::string_view name, std::string_view fallback) {
  const char* value = std::getenv(std::string(name).c_str());
  return value != nullptr && value[0] != '\0' ? value : fallback.data();
}

void MachineryFailed(State& s, const std::string& what) {
  s.machinery_ok = false;
  TESSERA_LOG(kError, kHook, "%s; %s", what.c_str(),
              s.fail_closed ? "enforcement fail-closed: GPU allocations will be refused"
                            : "enforcement fail-open: GPU calls pass through unlimited");
}

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
  s.alloc_mu = new std::mutex();
  s.allocations = new State::AllocationMap();
  s.handles = new State::AllocationMap();
  s.streams = new State::AllocationMap();
  s.context_charged.store(0);
  // A parent thread that was publishing the driver's functions does not exist here.
  if (!g_initialized.load(std::memory_order_acquire)) g_init_claimed.store(false);
  ResetOrdinalMap(s);
  s.slot = shm::kNoSlot;
  if (s.machinery_ok) ClaimSlot(s);
  PublishComputeRegion(s);
  ResetGovernorAfterFork();
}

void Configure(State& s) {
  ResetOrdinalMap(s);
  if (const char* stats = std::getenv(std::string(names::kEnvHookStats).c_str())) {
    g_stats_enabled = stats[0] == '1';
  }
  if (const char* level = std::getenv(std::string(names::kEnvHookLogLevel).c_str())) {
    if (auto parsed = log::ParseLevel(level); parsed.ok()) log::SetLevel(*parsed);
  }
  // The node-mounted limits file, when present, always wins: the environment belongs to the
  // tenant and may only *name* a file where the node mounted none (local `tessera run`).
  const bool node_file = access(std::string(names::kPathLimitsFile).c_str(), F_OK) == 0;
  const char* limits_path =
      node_file ? names::kPathLimitsFile.data() : EnvOr(names::kEnvLimitsFile, names::kPathLimitsFile);
  std::string text;
  errno = 0;
  const bool read = ReadFile(limits_path, &text);
  if (!read && errno != ENOENT) {
    s.mode = Mode::kLimitsFile;
    s.fail_closed = true;  // a limits file we cannot read is not the absence of limits
    MachineryFailed(s, std::string("cannot read limits file ") + limits_path + ": " + std::strerror(errno));
    return;
  }
  if (read) {
    s.mode = Mode::kLimitsFile;
    auto limits = ParseLimitsFile(text);
    if (!limits.ok()) {
      s.fail_closed = true;  // a corrupt node-written file is an anomaly: do not trust the cap
      MachineryFailed(s, std::string("limits file ") + limits_path + ": " + limits.status().message());
      return;
    }
    s.limits = std::move(limits).value();
    s.fail_closed = s.limits.fail_closed;
    const bool node_region = node_file && access(std::string(names::kPathRegionFile).c_str(), F_OK) == 0;
    s.region_path = node_region ? std::string(names::kPathRegionFile)
                                : EnvOr(names::kEnvRegionFile, names::kPathRegionFile);
    auto mapping = shm::Mapping::Attach(s.region_path);
    if (!mapping.ok()) {
      MachineryFailed(s, "shared region: " + mapping.status().message());
      return;
    }
    s.region = mapping->release();
    ClaimSlot(s);
    PublishComputeRegion(s);
    return;
  }
  auto hami = ParseHamiEnvironment(environ);
  if (!hami.ok()) {
    TESSERA_LOG(kError, kHook, "ignoring HAMi variables: %s", hami.status().message().c_str());
    return;
  }
  if (!hami->any()) return;  // inactive
  s.mode = Mode::kHamiEnv;
  s.hami = std::move(hami).value();
  TESSERA_LOG(kInfo, kHook,
              "no limits file at %s: using HAMi-compatible environment limits (weaker trust: the "
              "tenant controls its own environment)",
              limits_path);
  std::vector<shm::DeviceLimit> devices;
  for (int i = 0; i < static_cast<int>(shm::kMaxDevices); ++i) {
    const auto cap = s.hami.ForIndex(i);
    devices.push_back({"idx-" + std::to_string(i), cap ? *cap : kMaxQuantity,
                       s.hami.sm_percent ? *s.hami.sm_percent : 0});
  }
  s.region_path = EnvOr(names::kEnvRegionFile, "");
  if (s.region_path.empty()) s.region_path = "/tmp/tessera-hami-" + std::to_string(getuid()) + ".region";
  auto mapping = shm::Mapping::CreateOrAttach(s.region_path, devices);
  if (!mapping.ok()) {
    MachineryFailed(s, "HAMi-compatible region: " + mapping.status().message());
    return;
  }
  s.region = mapping->release();
  ClaimSlot(s);
}

// Runs once: from the library constructor (main thread, the usual case) or, if another
// library's constructor calls CUDA before ours ran, from that first call.
void ConfigureOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    State& s = S();
    const std::uint64_t start = MonotonicNs();
    Configure(s);
    if (s.mode != Mode::kInactive) pthread_atfork(nullptr, nullptr, OnForkChild);
    s.configure_ns = MonotonicNs() - start;
  });
}

__attribute__((constructor)) void OnLoad() { ConfigureOnce(); }

void PrintStats(State& s) {
  TESSERA_LOG(kWarn, kHook, "stats: configure %.1f us, first-call initialization %.1f us",
              static_cast<double>(s.configure_ns) / 1e3, static_cast<double>(s.initialize_ns) / 1e3);
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    const std::uint64_t n = s.calls[i].load(std::memory_order_relaxed);
    if (n != 0) {
      TESSERA_LOG(kWarn, kHook, "stats: %.*s %llu", static_cast<int>(kCudaHooks[i].symbol.size()),
                  kCudaHooks[i].symbol.data(), static_cast<unsigned long long>(n));
    }
  }
}

__attribute__((destructor)) void OnUnload() {
  State& s = S();
  if (g_stats_enabled) PrintStats(s);
  if (s.region != nullptr && s.slot != shm::kNoSlot) {
    shm::ReleaseSlot(*s.region, s.slot);
    s.slot = shm::kNoSlot;
  }
}


thread_local bool t_initializing = false;

int ResolveOrdinal(State& s, CUdevice dev) {
  if (s.mode == Mode::kHamiEnv) {
    return shm::FindDevice(*s.region, "idx-" + std::to_string(dev));
  }
  CUuuid uuid{};
  CUresult r = CUDA_ERROR_NOT_FOUND;
  if (auto fn = Real<CudaHook::cuDeviceGetUuid_v2>()) r = fn(&uuid, dev);
  if (r != CUDA_SUCCESS) {
    if (auto fn = Real<CudaHook::cuDeviceGetUuid>()) r = fn(&uuid, dev);
  }
  if (r != CUDA_SUCCESS) return State::kUnknown;
  const std::string id = FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
  int index = shm::FindDevice(*s.region, id);
  if (index < 0) index = shm::FindDevice(*s.region, "MIG" + id.substr(3));  // a MIG instance
  if (index < 0) {
    TESSERA_LOG(kWarn, kHook, "CUDA device %d (%s) is not in the limits file: allocations refused",
                dev, id.c_str());
    return State::kNotEntitled;
  }
  return index;
}

// The cap of region device `index` from this process's own configuration: the read-only limits
// file, or its own HAMi variables; never the region's copy, which any tenant process can write.
std::uint64_t LimitOf(const State& s, int index, CUdevice dev) {
  if (s.mode == Mode::kHamiEnv) {
    const auto cap = s.hami.ForIndex(static_cast<int>(dev));
    return cap ? *cap : kMaxQuantity;
  }
  const char* uuid = s.region->devices[index].uuid;
  for (const auto& d : s.limits.devices) {
    if (d.uuid == uuid) return d.memory_bytes;
  }
  return 0;
}

}  // namespace

bool ViewForUuid(const char* uuid, int nvml_index, std::uint64_t* limit, std::uint64_t* used) {
  State& s = S();
  if (s.mode == Mode::kInactive || s.region == nullptr || !s.machinery_ok) return false;
  int index = -1;
  if (s.mode == Mode::kHamiEnv) {
    if (nvml_index < 0) return false;
    index = shm::FindDevice(*s.region, "idx-" + std::to_string(nvml_index));
    if (index < 0) return false;
    const auto cap = s.hami.ForIndex(nvml_index);
    if (!cap) return false;
    *limit = *cap;
  } else {
    index = shm::FindDevice(*s.region, uuid);
    if (index < 0) return false;
    *limit = LimitOf(s, index, 0);
  }
  *used = shm::UsedBytes(*s.region, index);
  return true;
}

bool IsContainerProcess(unsigned int pid) {
  State& s = S();
  if (s.region == nullptr) return false;
  for (const shm::Slot& slot : s.region->slots) {
    if (slot.state.load(std::memory_order_acquire) == 1 && static_cast<unsigned int>(slot.pid) == pid) {
      return true;
    }
  }
  return false;
}

DlsymFn RealDlsym() {
  static const DlsymFn fn = [] {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

void CountCall(std::size_t hook) { S().calls[hook].fetch_add(1, std::memory_order_relaxed); }

void InitializeSlow() {
  if (t_initializing) return;  // re-entered from the driver while resolving: use what we have
  auto& claimed = g_init_claimed;
  t_initializing = true;
  ConfigureOnce();
  State& s = S();
  // No lock is held across dlopen/dlsym (they take the loader lock; a library constructor
  // holding it may be the caller): every thread may resolve, one publishes.
  const std::uint64_t start = MonotonicNs();
  void* resolved[kCudaHookCount] = {};
  const DlsymFn real_dlsym = RealDlsym();
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr || real_dlsym == nullptr) {
    TESSERA_LOG(kError, kHook, "cannot load libcuda.so.1: %s", dlerror());
  } else {
    for (std::size_t i = 0; i < kCudaHookCount; ++i) {
      resolved[i] = real_dlsym(handle, std::string(kCudaHooks[i].symbol).c_str());
    }
  }
  if (!claimed.exchange(true, std::memory_order_acq_rel)) {
    for (std::size_t i = 0; i < kCudaHookCount; ++i) g_real_cuda[i] = resolved[i];
    IndexRealFunctions();
    s.initialize_ns = MonotonicNs() - start;
    g_initialized.store(true, std::memory_order_release);
  } else {
    while (!g_initialized.load(std::memory_order_acquire)) sched_yield();
  }
  t_initializing = false;
}

std::uint64_t NowNs() { return MonotonicNs(); }

shm::Region* g_compute_region = nullptr;
std::uint32_t g_compute_devices = 0;

void CountMachineryError(const char* what) {
  State& s = S();
  if (s.region != nullptr) s.region->header.machinery_errors.fetch_add(1, std::memory_order_relaxed);
  static std::mutex mu;
  static std::vector<const char*>* logged = new std::vector<const char*>();
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(logged->begin(), logged->end(), what) != logged->end()) return;
  logged->push_back(what);
  TESSERA_LOG(kWarn, kHook, "compute governor: %s (fail-open; logged once)", what);
}

DeviceQuota QuotaForDevice(CUdevice dev) {
  State& s = S();
  DeviceQuota q;
  if (s.mode == Mode::kInactive) return q;
  if (!s.machinery_ok || s.region == nullptr || s.slot == shm::kNoSlot) {
    q.limited = s.fail_closed;
    q.refuse = s.fail_closed;
    return q;
  }
  int index = State::kUnknown;
  const bool cacheable = dev >= 0 && dev < State::kMaxOrdinals;
  if (cacheable) index = s.ordinal_map[dev].load(std::memory_order_acquire);
  if (index == State::kUnknown) {
    index = ResolveOrdinal(s, dev);
    if (cacheable && index != State::kUnknown) {
      s.ordinal_map[dev].store(index, std::memory_order_release);
    }
  }
  if (index == State::kNotEntitled) {
    q.limited = true;
    q.refuse = true;
    return q;
  }
  if (index < 0) return q;  // unknown (driver could not say) or unlimited
  q.limited = true;
  q.region_device = index;
  q.limit_bytes = LimitOf(s, index, dev);
  return q;
}

CUresult QuotaForCurrentDevice(DeviceQuota* quota, CUdevice* dev) {
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  if (get_device == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = get_device(dev);
  if (r != CUDA_SUCCESS) return r;
  *quota = QuotaForDevice(*dev);
  return CUDA_SUCCESS;
}

Status ReserveBytes(const DeviceQuota& quota, std::uint64_t bytes, const char* what) {
  State& s = S();
  if (quota.refuse) {
    TESSERA_LOG(kWarn, kHook, "out of memory: %s of %llu bytes refused (device not entitled, or "
                "tessera's accounting is unavailable under fail-closed) pid %d",
                what, static_cast<unsigned long long>(bytes), static_cast<int>(getpid()));
    return ResourceExhaustedError("refused");
  }
  if (!quota.limited || quota.region_device < 0) return Status::Ok();
  Status status = shm::Reserve(*s.region, s.slot, quota.region_device, bytes, quota.limit_bytes);
  if (!status.ok()) {
    TESSERA_LOG(kWarn, kHook, "out of memory: %s on %s: %s, pid %d", what,
                s.region->devices[quota.region_device].uuid, status.message().c_str(),
                static_cast<int>(getpid()));
  }
  return status;
}

void ReleaseBytes(const DeviceQuota& quota, std::uint64_t bytes) {
  State& s = S();
  if (!quota.limited || quota.region_device < 0 || s.region == nullptr) return;
  shm::Release(*s.region, s.slot, quota.region_device, bytes);
}

std::uint64_t UsedBytes(const DeviceQuota& quota) {
  State& s = S();
  if (!quota.limited || quota.region_device < 0 || s.region == nullptr) return 0;
  return shm::UsedBytes(*s.region, quota.region_device);
}

namespace {

const DeviceLimits* LimitsOf(const State& s, int region_device) {
  if (s.mode != Mode::kLimitsFile) return nullptr;
  const char* uuid = s.region->devices[region_device].uuid;
  for (const auto& d : s.limits.devices) {
    if (d.uuid == uuid) return &d;
  }
  return nullptr;
}

std::uint64_t ContextBytes(const State& s, int region_device) {
  const DeviceLimits* d = LimitsOf(s, region_device);
  return d == nullptr ? 0 : d->context_bytes;
}

}  // namespace

std::uint64_t StreamBytes(CUdevice dev) {
  const DeviceQuota q = QuotaForDevice(dev);
  if (!q.limited || q.refuse) return 0;
  const DeviceLimits* d = LimitsOf(S(), q.region_device);
  return d == nullptr ? 0 : d->stream_bytes;
}

CUresult ChargeContextOnce(CUdevice dev, bool* charged_now) {
  State& s = S();
  if (charged_now != nullptr) *charged_now = false;
  const DeviceQuota q = QuotaForDevice(dev);
  if (!q.limited) return CUDA_SUCCESS;
  if (q.refuse) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::uint32_t bit = 1u << q.region_device;
  if ((s.context_charged.fetch_or(bit) & bit) != 0) return CUDA_SUCCESS;
  const std::uint64_t context_bytes = ContextBytes(s, q.region_device);
  if (context_bytes != 0 && !ReserveBytes(q, context_bytes, "CUDA context").ok()) {
    s.context_charged.fetch_and(~bit);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (charged_now != nullptr) *charged_now = true;
  return CUDA_SUCCESS;
}

void UnchargeContext(CUdevice dev) {
  State& s = S();
  const DeviceQuota q = QuotaForDevice(dev);
  if (!q.limited || q.refuse) return;
  const std::uint32_t bit = 1u << q.region_device;
  if ((s.context_charged.fetch_and(~bit) & bit) == 0) return;
  ReleaseBytes(q, ContextBytes(s, q.region_device));
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
