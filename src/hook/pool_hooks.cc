// Stream-ordered allocation (cuMemAllocAsync, pools). A pool keeps freed memory reserved for
// reuse, so what a container really holds is each pool's *reserved* memory, not the sum of live
// allocations. Each pool is charged exactly its reserved bytes as last observed: an allocation
// reserves its size first (reserve -> call), then settles the pool's charge to the reserved
// amount the driver reports; trims and destroys settle it down. Before refusing memory, the
// process trims its own pools and settles (freed-but-reserved memory is given back first).
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "hook/intercept.h"

namespace tessera::hook {
namespace {

struct PoolCharge {
  int region_device = -1;
  CUdevice device = 0;
  std::uint64_t charged = 0;
};

struct Pools {
  std::mutex mu;  // serializes observe-and-settle
  std::unordered_map<CUmemoryPool, PoolCharge> charges;
  std::unordered_map<CUmemoryPool, CUdevice> created_on;  // cuMemPoolCreate's location
};

Pools& P() {
  static Pools* pools = new Pools();  // leaked: hooks may run during exit
  return *pools;
}

std::uint64_t Reserved(CUmemoryPool pool) {
  cuuint64_t reserved = 0;
  const auto get = Real<CudaHook::cuMemPoolGetAttribute>();
  if (get == nullptr ||
      get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
    return 0;
  }
  return reserved;
}

// Brings the pool's charge to its reserved memory, counting `tentative` bytes already reserved
// for it by the caller. False if growing the charge was refused (the charge is unchanged then,
// and the tentative bytes are still the caller's).
bool SettleLocked(CUmemoryPool pool, const DeviceQuota& quota, CUdevice dev,
                  std::uint64_t tentative) {
  PoolCharge& c = P().charges[pool];
  c.region_device = quota.region_device;
  c.device = dev;
  const std::uint64_t reserved = Reserved(pool);
  const std::uint64_t held = c.charged + tentative;
  if (reserved > held) {
    if (!ReserveBytes(quota, reserved - held, "memory pool").ok()) return false;
  } else if (held > reserved) {
    ReleaseBytes(quota, held - reserved);
  }
  c.charged = reserved;
  return true;
}

DeviceQuota QuotaOfCharge(const PoolCharge& c) {
  DeviceQuota q;
  q.limited = c.region_device >= 0;
  q.region_device = c.region_device;
  return q;
}

}  // namespace

// Trims every pool of this process to nothing and settles the charges. Returns whether any
// charge went down (worth retrying a refused reservation).
bool TrimPoolsForRetry() {
  const auto trim = Real<CudaHook::cuMemPoolTrimTo>();
  if (trim == nullptr) return false;
  std::lock_guard<std::mutex> lock(P().mu);
  bool gave_back = false;
  for (auto& [pool, c] : P().charges) {
    trim(pool, 0);
    const std::uint64_t reserved = Reserved(pool);
    if (reserved < c.charged) {
      ReleaseBytes(QuotaOfCharge(c), c.charged - reserved);
      c.charged = reserved;
      gave_back = true;
    }
  }
  return gave_back;
}

namespace {

// Whether `stream` is being captured into a graph: an allocation then becomes a graph memory
// node (charged when the graph is instantiated, graph_hooks.cc), and the capture must not see
// any other driver call from us.
template <CudaHook kIsCapturing>
bool Capturing(CUstream stream) {
  const auto is_capturing = Real<kIsCapturing>();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

template <typename Call>
CUresult AllocAsync(CUdeviceptr* dptr, std::uint64_t bytes, CUmemoryPool pool, CUstream stream,
                    bool capturing, Call call) {
  if (capturing) return call();
  CUdevice dev = 0;
  if (pool == nullptr) {
    const auto get_device = Real<CudaHook::cuCtxGetDevice>();
    const auto get_pool = Real<CudaHook::cuDeviceGetMemPool>();
    if (get_device == nullptr || get_pool == nullptr || get_device(&dev) != CUDA_SUCCESS ||
        get_pool(&pool, dev) != CUDA_SUCCESS) {
      return call();
    }
  } else {
    std::lock_guard<std::mutex> lock(P().mu);
    auto it = P().created_on.find(pool);
    if (it != P().created_on.end()) {
      dev = it->second;
    } else if (const auto get_device = Real<CudaHook::cuCtxGetDevice>()) {
      get_device(&dev);
    }
  }
  const DeviceQuota quota = QuotaForDevice(dev);
  if (!quota.limited) return call();
  if (quota.refuse || ChargeContextOnce(dev, nullptr) != CUDA_SUCCESS)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (!ReserveBytes(quota, bytes, "cuMemAllocAsync").ok() &&
      !(TrimPoolsForRetry() && ReserveBytes(quota, bytes, "cuMemAllocAsync").ok())) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = call();
  if (r != CUDA_SUCCESS) {
    ReleaseBytes(quota, bytes);
    return r;
  }
  std::lock_guard<std::mutex> lock(P().mu);
  if (!SettleLocked(pool, quota, dev, bytes)) {
    // The pool grew past what the container may hold: undo the allocation.
    ReleaseBytes(quota, bytes);
    if (const auto free_async = Real<CudaHook::cuMemFreeAsync>()) free_async(*dptr, stream);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

}  // namespace

template <>
CUresult Intercept<CudaHook::cuMemAllocAsync>(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemAllocAsync>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return AllocAsync(dptr, bytes, nullptr, stream, Capturing<CudaHook::cuStreamIsCapturing>(stream),
                    [&] { return real(dptr, bytes, stream); });
}

template <>
CUresult Intercept<CudaHook::cuMemAllocAsync_ptsz>(CUdeviceptr* dptr, size_t bytes,
                                                   CUstream stream) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemAllocAsync_ptsz>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return AllocAsync(dptr, bytes, nullptr, stream,
                    Capturing<CudaHook::cuStreamIsCapturing_ptsz>(stream),
                    [&] { return real(dptr, bytes, stream); });
}

template <>
CUresult Intercept<CudaHook::cuMemAllocFromPoolAsync>(CUdeviceptr* dptr, size_t bytes,
                                                      CUmemoryPool pool, CUstream stream) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemAllocFromPoolAsync>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return AllocAsync(dptr, bytes, pool, stream, Capturing<CudaHook::cuStreamIsCapturing>(stream),
                    [&] { return real(dptr, bytes, pool, stream); });
}

template <>
CUresult Intercept<CudaHook::cuMemAllocFromPoolAsync_ptsz>(CUdeviceptr* dptr, size_t bytes,
                                                           CUmemoryPool pool, CUstream stream) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemAllocFromPoolAsync_ptsz>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return AllocAsync(dptr, bytes, pool, stream,
                    Capturing<CudaHook::cuStreamIsCapturing_ptsz>(stream),
                    [&] { return real(dptr, bytes, pool, stream); });
}

template <>
CUresult Intercept<CudaHook::cuMemPoolCreate>(CUmemoryPool* pool, const CUmemPoolProps* props) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemPoolCreate>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(pool, props);
  if (r == CUDA_SUCCESS && pool != nullptr && props != nullptr &&
      props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    std::lock_guard<std::mutex> lock(P().mu);
    P().created_on[*pool] = props->location.id;
  }
  return r;
}

template <>
CUresult Intercept<CudaHook::cuMemPoolDestroy>(CUmemoryPool pool) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemPoolDestroy>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(pool);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(P().mu);
  if (auto it = P().charges.find(pool); it != P().charges.end()) {
    ReleaseBytes(QuotaOfCharge(it->second), it->second.charged);
    P().charges.erase(it);
  }
  P().created_on.erase(pool);
  return r;
}

template <>
CUresult Intercept<CudaHook::cuMemPoolTrimTo>(CUmemoryPool pool, size_t keep) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuMemPoolTrimTo>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(pool, keep);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(P().mu);
  if (auto it = P().charges.find(pool); it != P().charges.end()) {
    (void)SettleLocked(pool, QuotaOfCharge(it->second), it->second.device, 0);  // only shrinks
  }
  return r;
}

}  // namespace tessera::hook
