// Device quotas: which region device (if any) limits a CUDA device and its cap; reserving and
// releasing against the region; the per-process context and per-stream charges; the NVML view.
#include "hook/quota.h"

#include <cstdint>
#include <string>
#include <unistd.h>

#include "tessera/limits.h"
#include "tessera/log.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

#include "hook/hook_table.h"
#include "hook/process_state.h"

namespace tessera::hook {

std::uint64_t ConfiguredCap(Mode mode, const Limits& limits, const HamiLimits& hami,
                            const char* uuid, CUdevice dev) {
  if (mode == Mode::kHamiEnv) {
    const auto cap = hami.ForIndex(static_cast<int>(dev));
    return cap ? *cap : kMaxQuantity;
  }
  for (const auto& d : limits.devices) {
    if (d.uuid == uuid) return d.memory_bytes;
  }
  return 0;
}

namespace {

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
  if (r != CUDA_SUCCESS) return kUnknownDevice;
  const std::string id = FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
  int index = shm::FindDevice(*s.region, id);
  if (index < 0) index = shm::FindDevice(*s.region, "MIG" + id.substr(3));  // a MIG instance
  if (index < 0) {
    TESSERA_LOG(kWarn, kHook, "CUDA device %d (%s) is not in the limits file: allocations refused",
                dev, id.c_str());
    return kNotEntitled;
  }
  return index;
}

// The cap of region device `index` from this process's own configuration: the read-only limits
// file, or its own HAMi variables; never the region's copy, which any tenant process can write.
std::uint64_t LimitOf(const State& s, int index, CUdevice dev) {
  // The region's uuid is read only where the limits file applies (HAMi caps are per index).
  const char* uuid = s.mode == Mode::kHamiEnv ? "" : s.region->devices[index].uuid;
  return ConfiguredCap(s.mode, s.limits, s.hami, uuid, dev);
}

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

namespace {
// `with_cap` false: limit_bytes is left 0 (a launch needs only which region device it is on).
DeviceQuota QuotaOf(CUdevice dev, bool with_cap) {
  State& s = S();
  QuotaInputs in;
  in.mode = s.mode;
  in.usable = s.machinery_ok && s.region != nullptr && s.slot != shm::kNoSlot;
  in.fail_closed = s.fail_closed;
  return ResolveQuota(
      in, s.ordinal_map, dev, [&s](CUdevice d) { return ResolveOrdinal(s, d); },
      [&s, dev, with_cap](int index) { return with_cap ? LimitOf(s, index, dev) : 0; });
}
}  // namespace

DeviceQuota QuotaForDevice(CUdevice dev) { return QuotaOf(dev, true); }

CUresult QuotaForCurrentDevice(DeviceQuota* quota, CUdevice* dev) {
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  if (get_device == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = get_device(dev);
  if (r != CUDA_SUCCESS) return r;
  *quota = QuotaForDevice(*dev);
  return CUDA_SUCCESS;
}

int RegionDeviceForLaunch() {
  // One visible device (a container's usual case): whatever context is current is on ordinal
  // 0, and a launch pays for no driver call to learn it (a launch with no context fails in the
  // driver itself). The count is read once.
  State& s = S();
  int count = s.device_count.load(std::memory_order_relaxed);
  if (count < 0) {
    const auto get_count = Real<CudaHook::cuDeviceGetCount>();
    int n = 0;
    count = get_count != nullptr && get_count(&n) == CUDA_SUCCESS ? n : 0;
    s.device_count.store(count, std::memory_order_relaxed);
  }
  if (count == 1) return QuotaOf(0, false).region_device;
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  CUdevice dev = 0;
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return -1;
  return QuotaOf(dev, false).region_device;
}

Status ReserveBytes(const DeviceQuota& quota, std::uint64_t bytes, const char* what) {
  State& s = S();
  if (quota.refuse) {
    TESSERA_LOG(kWarn, kHook,
                "out of memory: %s of %llu bytes refused (device not entitled, or "
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

}  // namespace tessera::hook
