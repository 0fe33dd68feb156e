// Enforcing hooks for memory, contexts and driver lookups (policy kEnforce rows of
// cuda_hooks.def). Every allocation is reserve -> driver call -> commit or roll back.
#include <algorithm>

#include "hook/accounting.h"
#include "hook/intercept.h"

namespace tessera::hook {
namespace {

constexpr std::uint64_t kPitchAlignment = 512;

std::uint64_t RoundUp(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

// Real<H>() or CUDA_ERROR_NOT_FOUND when the driver lacks the entry point (our export exists
// even where the driver's does not).
#define TESSERA_REAL_OR_RETURN(var, hook)  \
  const auto var = Real<CudaHook::hook>(); \
  if (var == nullptr) return CUDA_ERROR_NOT_FOUND

// Allocation on the current context's device, charged `bytes`, tracked for the matching free.
template <typename Call>
CUresult ChargedAllocation(std::uint64_t bytes, const char* what, CUdeviceptr* out, Call call) {
  DeviceQuota quota;
  CUdevice dev = 0;
  if (QuotaForCurrentDevice(&quota, &dev) != CUDA_SUCCESS || !quota.limited) return call();
  if (quota.refuse) {
    (void)ReserveBytes(quota, bytes, what);  // logs the refusal
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (ChargeContextOnce(dev, nullptr) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!ReserveBytes(quota, bytes, what).ok() &&
      !(TrimPoolsForRetry() && ReserveBytes(quota, bytes, what).ok())) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = call();
  if (r != CUDA_SUCCESS) {
    ReleaseBytes(quota, bytes);
    return r;
  }
  RecordAllocation(*out, quota.region_device, bytes);
  return r;
}

// Context creation: the context's own memory is charged (once per process and device) before
// the driver creates it, and returned if the driver fails to.
template <typename Call>
CUresult ChargedContext(CUdevice dev, Call call) {
  bool charged_now = false;
  if (ChargeContextOnce(dev, &charged_now) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = call();
  if (r != CUDA_SUCCESS && charged_now) UnchargeContext(dev);
  return r;
}

}  // namespace

template <>
CUresult Intercept<CudaHook::cuMemAlloc_v2>(CUdeviceptr* dptr, size_t bytes) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemAlloc_v2);
  return ChargedAllocation(bytes, "cuMemAlloc", dptr, [&] { return real(dptr, bytes); });
}

template <>
CUresult Intercept<CudaHook::cuMemAllocManaged>(CUdeviceptr* dptr, size_t bytes,
                                                unsigned int flags) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemAllocManaged);
  return ChargedAllocation(bytes, "cuMemAllocManaged", dptr,
                           [&] { return real(dptr, bytes, flags); });
}

template <>
CUresult Intercept<CudaHook::cuMemAllocPitch_v2>(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                                 size_t height, unsigned int element_bytes) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemAllocPitch_v2);
  DeviceQuota quota;
  CUdevice dev = 0;
  if (QuotaForCurrentDevice(&quota, &dev) != CUDA_SUCCESS || !quota.limited) {
    return real(dptr, pitch, width, height, element_bytes);
  }
  // The pitch is known only after the call: reserve the usual upper bound first, then settle.
  const std::uint64_t estimate = RoundUp(width, kPitchAlignment) * height;
  if (quota.refuse || ChargeContextOnce(dev, nullptr) != CUDA_SUCCESS ||
      !ReserveBytes(quota, estimate, "cuMemAllocPitch").ok()) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = real(dptr, pitch, width, height, element_bytes);
  if (r != CUDA_SUCCESS) {
    ReleaseBytes(quota, estimate);
    return r;
  }
  const std::uint64_t actual = static_cast<std::uint64_t>(*pitch) * height;
  if (actual > estimate && !ReserveBytes(quota, actual - estimate, "cuMemAllocPitch").ok()) {
    if (const auto free_fn = Real<CudaHook::cuMemFree_v2>()) free_fn(*dptr);
    ReleaseBytes(quota, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (actual < estimate) ReleaseBytes(quota, estimate - actual);
  RecordAllocation(*dptr, quota.region_device, actual);
  return r;
}

// Bytes of one element of an array format (unknown formats: 4 bytes per channel, an over- rather
// than under-estimate for the common ones).
std::uint64_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;
  }
}

std::uint64_t ArrayBytes(std::uint64_t width, std::uint64_t height, std::uint64_t depth,
                         CUarray_format format, unsigned int channels) {
  return width * std::max<std::uint64_t>(height, 1) * std::max<std::uint64_t>(depth, 1) *
         FormatBytes(format) * std::max(channels, 1u);
}

template <typename Handle>
CUdeviceptr KeyOf(Handle handle) {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(handle));
}

template <>
CUresult Intercept<CudaHook::cuMemFree_v2>(CUdeviceptr dptr) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemFree_v2);
  return Uncharged(dptr, Table::kPointers, [&] { return real(dptr); });
}

template <>
CUresult Intercept<CudaHook::cuMemGetInfo_v2>(size_t* free_bytes, size_t* total_bytes) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemGetInfo_v2);
  const CUresult r = real(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS) return r;
  DeviceQuota quota;
  CUdevice dev = 0;
  if (QuotaForCurrentDevice(&quota, &dev) != CUDA_SUCCESS || !quota.limited) return r;
  if (quota.refuse) {
    if (free_bytes != nullptr) *free_bytes = 0;
    return r;
  }
  const std::uint64_t used = UsedBytes(quota);
  const std::uint64_t limit = quota.limit_bytes;
  const std::uint64_t left = used < limit ? limit - used : 0;
  if (total_bytes != nullptr) *total_bytes = std::min<std::uint64_t>(*total_bytes, limit);
  if (free_bytes != nullptr) *free_bytes = std::min<std::uint64_t>(*free_bytes, left);
  return r;
}

template <>
CUresult Intercept<CudaHook::cuDeviceTotalMem_v2>(size_t* bytes, CUdevice dev) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuDeviceTotalMem_v2);
  const CUresult r = real(bytes, dev);
  if (r != CUDA_SUCCESS || bytes == nullptr) return r;
  const DeviceQuota quota = QuotaForDevice(dev);
  if (quota.limited && !quota.refuse) *bytes = std::min<std::uint64_t>(*bytes, quota.limit_bytes);
  return r;
}

template <>
CUresult Intercept<CudaHook::cuCtxCreate_v2>(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuCtxCreate_v2);
  return ChargedContext(dev, [&] { return real(ctx, flags, dev); });
}

template <>
CUresult Intercept<CudaHook::cuCtxCreate_v3>(CUcontext* ctx, CUexecAffinityParam* params,
                                             int num_params, unsigned int flags, CUdevice dev) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuCtxCreate_v3);
  return ChargedContext(dev, [&] { return real(ctx, params, num_params, flags, dev); });
}

template <>
CUresult Intercept<CudaHook::cuCtxCreate_v4>(CUcontext* ctx, CUctxCreateParams* params,
                                             unsigned int flags, CUdevice dev) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuCtxCreate_v4);
  return ChargedContext(dev, [&] { return real(ctx, params, flags, dev); });
}

template <>
CUresult Intercept<CudaHook::cuDevicePrimaryCtxRetain>(CUcontext* ctx, CUdevice dev) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuDevicePrimaryCtxRetain);
  return ChargedContext(dev, [&] { return real(ctx, dev); });
}

template <>
CUresult Intercept<CudaHook::cuMemCreate>(CUmemGenericAllocationHandle* handle, size_t size,
                                          const CUmemAllocationProp* prop,
                                          unsigned long long flags) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemCreate);
  const auto call = [&] { return real(handle, size, prop, flags); };
  // Only device memory is the GPU's: host and host-NUMA locations are not charged.
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return call();
  return ChargedOnDevice(prop->location.id, size, "cuMemCreate", Table::kHandles, call,
                         [&] { return static_cast<CUdeviceptr>(*handle); });
}

template <>
CUresult Intercept<CudaHook::cuMemRelease>(CUmemGenericAllocationHandle handle) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMemRelease);
  return Uncharged(static_cast<CUdeviceptr>(handle), Table::kHandles, [&] { return real(handle); });
}

// Arrays live on the current context's device.
template <typename Call, typename Key>
CUresult ChargedOnCurrentDevice(std::uint64_t bytes, const char* what, Call call, Key key) {
  CUdevice dev = 0;
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return call();
  return ChargedOnDevice(dev, bytes, what, Table::kHandles, call, key);
}

template <>
CUresult Intercept<CudaHook::cuArrayCreate_v2>(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuArrayCreate_v2);
  const auto call = [&] { return real(array, desc); };
  if (desc == nullptr || array == nullptr) return call();
  return ChargedOnCurrentDevice(
      ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels), "cuArrayCreate",
      call, [&] { return KeyOf(*array); });
}

template <>
CUresult Intercept<CudaHook::cuArray3DCreate_v2>(CUarray* array,
                                                 const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuArray3DCreate_v2);
  const auto call = [&] { return real(array, desc); };
  if (desc == nullptr || array == nullptr) return call();
  return ChargedOnCurrentDevice(
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels),
      "cuArray3DCreate", call, [&] { return KeyOf(*array); });
}

template <>
CUresult Intercept<CudaHook::cuArrayDestroy>(CUarray array) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuArrayDestroy);
  return Uncharged(KeyOf(array), Table::kHandles, [&] { return real(array); });
}

template <>
CUresult Intercept<CudaHook::cuMipmappedArrayCreate>(CUmipmappedArray* array,
                                                     const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                     unsigned int levels) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMipmappedArrayCreate);
  const auto call = [&] { return real(array, desc, levels); };
  if (desc == nullptr || array == nullptr) return call();
  // Every level halves each dimension (not below 1).
  std::uint64_t bytes = 0;
  std::uint64_t w = desc->Width, h = desc->Height, d = desc->Depth;
  for (unsigned int level = 0; level < std::max(levels, 1u); ++level) {
    bytes += ArrayBytes(w, h, d, desc->Format, desc->NumChannels);
    w = std::max<std::uint64_t>(w / 2, 1);
    h = h == 0 ? 0 : std::max<std::uint64_t>(h / 2, 1);
    d = d == 0 ? 0 : std::max<std::uint64_t>(d / 2, 1);
  }
  return ChargedOnCurrentDevice(bytes, "cuMipmappedArrayCreate", call,
                                [&] { return KeyOf(*array); });
}

template <>
CUresult Intercept<CudaHook::cuMipmappedArrayDestroy>(CUmipmappedArray array) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuMipmappedArrayDestroy);
  return Uncharged(KeyOf(array), Table::kHandles, [&] { return real(array); });
}

// Streams take device memory of their own: each is charged the per-stream size the node side
// measured (limits file stream=; nothing when 0) and returned when destroyed. Streams a context
// destroys with itself stay charged until the process ends (conservative).
template <typename Call>
CUresult ChargedStream(CUstream* stream, const char* what, Call call) {
  CUdevice dev = 0;
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  if (stream == nullptr || get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return call();
  const std::uint64_t bytes = StreamBytes(dev);
  if (bytes == 0) return call();
  return ChargedOnDevice(dev, bytes, what, Table::kStreams, call, [&] { return KeyOf(*stream); });
}

template <>
CUresult Intercept<CudaHook::cuStreamCreate>(CUstream* stream, unsigned int flags) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuStreamCreate);
  return ChargedStream(stream, "cuStreamCreate", [&] { return real(stream, flags); });
}

template <>
CUresult Intercept<CudaHook::cuStreamCreateWithPriority>(CUstream* stream, unsigned int flags,
                                                         int priority) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuStreamCreateWithPriority);
  return ChargedStream(stream, "cuStreamCreateWithPriority",
                       [&] { return real(stream, flags, priority); });
}

template <>
CUresult Intercept<CudaHook::cuStreamDestroy_v2>(CUstream stream) {
  EnsureInitialized();
  TESSERA_REAL_OR_RETURN(real, cuStreamDestroy_v2);
  GovernorStreamDestroyed(stream);
  return Uncharged(KeyOf(stream), Table::kStreams, [&] { return real(stream); });
}

namespace {
// The answer of a cuGetProcAddress: our trampoline for a hooked entry point, else the driver's.
void HandOut(const char* symbol, void** pfn) {
  void* const real = *pfn;
  *pfn = TrampolineForReal(real);
  CaptureEntryPointHandedOut(symbol, real == nullptr || *pfn != real);
}
}  // namespace

// The CUDA runtime fetches cuGetProcAddress by dlsym, then asks it for "cuGetProcAddress"
// itself and uses the answer for every later lookup: every answer that is a hooked entry point
// must be our trampoline. The real driver resolves name, version and per-thread flags; we map
// the real pointer it returns to ours.
template <>
CUresult Intercept<CudaHook::cuGetProcAddress_v2>(const char* symbol, void** pfn, int cuda_version,
                                                  cuuint64_t flags,
                                                  CUdriverProcAddressQueryResult* status) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGetProcAddress_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) HandOut(symbol, pfn);
  return r;
}

template <>
CUresult Intercept<CudaHook::cuGetProcAddress>(const char* symbol, void** pfn, int cuda_version,
                                               cuuint64_t flags) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGetProcAddress>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) HandOut(symbol, pfn);
  return r;
}

}  // namespace tessera::hook
