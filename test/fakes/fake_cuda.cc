// A stateful fake libcuda.so.1 for CI (no GPU), generated from the same cuda_hooks.def as the
// preload library: every row is exported; the rows that matter for accounting behave like a
// device (contexts, memory, UUIDs, cuGetProcAddress with versions and per-thread variants);
// the rest succeed and count their calls.
//
// Configuration (environment, read once):
//   TESSERA_FAKE_GPUS          number of devices (default 2)
//   TESSERA_FAKE_GPU_MEMORY    bytes per device (default 16 GiB)
//   TESSERA_FAKE_CONTEXT_BYTES device memory a context takes (default 0)
//   TESSERA_FAKE_STREAM_BYTES  device memory a stream takes (default 0)
//   TESSERA_FAKE_CUDA_SM_COUNT CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (default: reads 0)
//   CUDA_VISIBLE_DEVICES       honoured as the driver does: indices or UUIDs, comma-separated
//   TESSERA_FAKE_STATE         file holding the devices' physical usage, shared by every
//                              process using the fake (default: private to the process), so a
//                              test can check what "nvidia-smi" would see
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "fake_gpu.h"
#include "hook/hook_table.h"
#include "proc_address_rule.h"

#define TESSERA_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace tessera::fake {
namespace {

using hook::CudaHook;
using hook::kCudaHookCount;
using hook::kCudaHooks;

struct Fake {
  int devices = 2;
  std::uint64_t memory = 16ULL << 30;
  std::uint64_t context_bytes = 0;
  std::uint64_t stream_bytes = 0;
  Shared* shared = nullptr;
  std::atomic<std::uint64_t> calls[kCudaHookCount] = {};
  std::mutex mu;
  std::unordered_map<CUdeviceptr, std::pair<int, std::uint64_t>> allocations;
  std::uint64_t next_address = 0x10000;
  std::atomic<std::uint32_t> contexts = 0;  // bit per device with a context charged
  int visible[kMaxDevices] = {};            // CUDA ordinal -> physical device
  int visible_count = 0;
};

Fake& F() {
  static Fake* fake = [] {
    auto* f = new Fake();
    f->devices = DeviceCount();
    f->memory = DeviceMemory();
    f->context_bytes = EnvU64("TESSERA_FAKE_CONTEXT_BYTES", 0);
    f->stream_bytes = EnvU64("TESSERA_FAKE_STREAM_BYTES", 0);
    f->shared = MapShared();
    // The devices this process may open (TESSERA_FAKE_DEV_DIR), in order: what the driver
    // enumerates, and what CUDA_VISIBLE_DEVICES's numbers index, as in a container.
    int granted[kMaxDevices] = {};
    int granted_count = 0;
    for (int i = 0; i < f->devices; ++i) {
      if (NodeGranted(i)) granted[granted_count++] = i;
    }
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible == nullptr) {
      for (int i = 0; i < granted_count; ++i) f->visible[f->visible_count++] = granted[i];
    } else {
      std::string list = visible;
      std::size_t start = 0;
      while (start <= list.size() && f->visible_count < kMaxDevices) {
        const std::size_t comma = list.find(',', start);
        const std::string item =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        int physical = -1;
        for (int i = 0; i < granted_count; ++i) {
          if (item == UuidText(granted[i]) || item == std::to_string(i)) physical = granted[i];
        }
        if (physical < 0) break;  // the driver stops at the first invalid entry
        f->visible[f->visible_count++] = physical;
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    return f;
  }();
  return *fake;
}

thread_local int t_current = -1;  // device of the current context

CUcontext ContextFor(int dev) {
  return reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(0x1000 + dev));
}
int DeviceOf(CUcontext ctx) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(ctx) - 0x1000);
}
bool ValidDevice(int dev) { return dev >= 0 && dev < F().visible_count; }
int Physical(int ordinal) { return F().visible[ordinal]; }

// Takes physical memory on `dev`, as the device would (all processes share it).
bool TakePhysical(int dev, std::uint64_t bytes) {
  auto& used = F().shared->physical[dev];
  bool reclaimed = false;
  for (std::uint64_t now = used.load();;) {
    if (bytes > F().memory || now > F().memory - bytes) {
      if (reclaimed) return false;
      ReclaimEnded(F().shared);  // what ended processes held goes back, as the driver does
      reclaimed = true;
      now = used.load();
    } else if (used.compare_exchange_weak(now, now + bytes)) {
      break;
    }
  }
  AttributeToMe(F().shared, dev, static_cast<std::int64_t>(bytes));
  return true;
}

CUresult MakeContext(int dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const std::uint32_t bit = 1u << dev;
  if ((F().contexts.fetch_or(bit) & bit) == 0 && F().context_bytes != 0 &&
      !TakePhysical(Physical(dev), F().context_bytes)) {
    F().contexts.fetch_and(~bit);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

CUresult Allocate(CUdeviceptr* dptr, std::uint64_t bytes) {
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!TakePhysical(Physical(t_current), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(F().mu);
  *dptr = F().next_address;
  F().next_address += (bytes + 0xfff) & ~0xfffULL;
  F().allocations[*dptr] = {t_current, bytes};
  return CUDA_SUCCESS;
}

// Physical memory held by handles (VMM allocations, arrays): handle -> (physical device, bytes).
std::mutex g_handles_mu;
std::unordered_map<std::uint64_t, std::pair<int, std::uint64_t>> g_handles;
std::uint64_t g_next_handle = 0x100;

CUresult TakeHandle(int physical, std::uint64_t bytes, std::uint64_t* handle) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!TakePhysical(physical, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  *handle = g_next_handle++;
  g_handles[*handle] = {physical, bytes};
  return CUDA_SUCCESS;
}

CUresult ReturnHandle(std::uint64_t handle) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_handles.find(handle);
  if (it == g_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  ReleasePhysical(F().shared, it->second.first, it->second.second);
  g_handles.erase(it);
  return CUDA_SUCCESS;
}

// Stream-ordered pools: memory freed into a pool stays reserved (physical) until trimmed.
struct FakePool {
  int physical = 0;
  std::uint64_t reserved = 0;
  std::uint64_t unused = 0;
};
std::unordered_map<CUmemoryPool, FakePool> g_pools;
std::unordered_map<CUdeviceptr, std::pair<CUmemoryPool, std::uint64_t>> g_pool_allocations;
std::uintptr_t g_next_pool = 0x4000;
constexpr std::uint64_t kPoolGranularity = 2ULL << 20;

CUmemoryPool DefaultPool(int physical) {
  auto pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(0x3000 + physical));
  g_pools.try_emplace(pool, FakePool{physical, 0, 0});
  return pool;
}

CUresult PoolAllocate(CUdeviceptr* dptr, std::uint64_t bytes, CUmemoryPool pool) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_pools.find(pool);
  if (it == g_pools.end()) return CUDA_ERROR_INVALID_VALUE;
  FakePool& p = it->second;
  if (p.unused < bytes) {
    const std::uint64_t grow =
        (bytes - p.unused + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
    if (!TakePhysical(p.physical, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    p.reserved += grow;
    p.unused += grow;
  }
  p.unused -= bytes;
  *dptr = 0x900000000000ULL + (g_next_handle++ << 24);
  g_pool_allocations[*dptr] = {pool, bytes};
  return CUDA_SUCCESS;
}

std::uint64_t ElementBytes(CUarray_format format) {
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

// The default behaviour of a row: succeed.
template <CudaHook H, typename... Args>
CUresult Behave(Args...) {
  return CUDA_SUCCESS;
}

// cuInit in a child forked from a process that had called it fails as the real driver's does (the
// H200's 580 driver answered CUDA_ERROR_NOT_INITIALIZED): a daemon that initialises CUDA itself
// cannot probe the GPU in a forked child.
std::atomic<pid_t> g_initialised_by{0};
template <>
CUresult Behave<CudaHook::cuInit>(unsigned int) {
  pid_t expected = 0;
  if (g_initialised_by.compare_exchange_strong(expected, getpid())) return CUDA_SUCCESS;
  return expected == getpid() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}
template <>
CUresult Behave<CudaHook::cuDriverGetVersion>(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}
// The SM count, where TESSERA_FAKE_CUDA_SM_COUNT sets one (unset: the attribute reads 0, as it
// did before, so tests that take SMs from the fake NVML keep doing so).
template <>
CUresult Behave<CudaHook::cuDeviceGetAttribute>(int* value, CUdevice_attribute attrib, CUdevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    *value = static_cast<int>(EnvU64("TESSERA_FAKE_CUDA_SM_COUNT", 0));
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDeviceGetCount>(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = F().visible_count;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDeviceGet>(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
  uuid->bytes[0] = static_cast<char>(0xfa);
  uuid->bytes[1] = static_cast<char>(0xce);
  uuid->bytes[15] = static_cast<char>(Physical(dev));
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDeviceGetUuid>(CUuuid* uuid, CUdevice dev) {
  return FakeUuid(uuid, dev);
}
template <>
CUresult Behave<CudaHook::cuDeviceGetUuid_v2>(CUuuid* uuid, CUdevice dev) {
  return FakeUuid(uuid, dev);
}
template <>
CUresult Behave<CudaHook::cuDeviceGetName>(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "Tessera Fake GPU %d", dev);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDeviceTotalMem_v2>(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = F().memory;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDevicePrimaryCtxRetain>(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = MakeContext(dev);
  if (r == CUDA_SUCCESS) *ctx = ContextFor(dev);
  return r;
}
CUresult CreateContext(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = MakeContext(dev);
  if (r != CUDA_SUCCESS) return r;
  *ctx = ContextFor(dev);
  t_current = dev;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuCtxCreate_v2>(CUcontext* ctx, unsigned int, CUdevice dev) {
  return CreateContext(ctx, dev);
}
template <>
CUresult Behave<CudaHook::cuCtxCreate_v3>(CUcontext* ctx, CUexecAffinityParam*, int, unsigned int,
                                          CUdevice dev) {
  return CreateContext(ctx, dev);
}
template <>
CUresult Behave<CudaHook::cuCtxCreate_v4>(CUcontext* ctx, CUctxCreateParams*, unsigned int,
                                          CUdevice dev) {
  return CreateContext(ctx, dev);
}
template <>
CUresult Behave<CudaHook::cuCtxSetCurrent>(CUcontext ctx) {
  if (ctx == nullptr) {
    t_current = -1;
    return CUDA_SUCCESS;
  }
  if (!ValidDevice(DeviceOf(ctx))) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = DeviceOf(ctx);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuCtxGetCurrent>(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_current < 0 ? nullptr : ContextFor(t_current);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuCtxGetDevice>(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = t_current;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemAlloc_v2>(CUdeviceptr* dptr, size_t bytes) {
  return Allocate(dptr, bytes);
}
template <>
CUresult Behave<CudaHook::cuMemAllocManaged>(CUdeviceptr* dptr, size_t bytes, unsigned int) {
  return Allocate(dptr, bytes);
}
template <>
CUresult Behave<CudaHook::cuMemAllocPitch_v2>(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                              size_t height, unsigned int) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) / 512 * 512;
  return Allocate(dptr, static_cast<std::uint64_t>(*pitch) * height);
}
template <>
CUresult Behave<CudaHook::cuMemFree_v2>(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(F().mu);
  auto it = F().allocations.find(dptr);
  if (it == F().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  ReleasePhysical(F().shared, Physical(it->second.first), it->second.second);
  F().allocations.erase(it);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemGetInfo_v2>(size_t* free_bytes, size_t* total_bytes) {
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  ReclaimEnded(F().shared);
  const std::uint64_t used = F().shared->physical[Physical(t_current)].load();
  if (free_bytes != nullptr) *free_bytes = F().memory - used;
  if (total_bytes != nullptr) *total_bytes = F().memory;
  return CUDA_SUCCESS;
}

void* FakeEntryPoint(std::size_t index);  // defined after the exported functions

template <>
CUresult Behave<CudaHook::cuMemCreate>(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long) {
  if (handle == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    *handle = 0x7000000;  // host memory: not the GPU's
    return CUDA_SUCCESS;
  }
  if (!ValidDevice(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  std::uint64_t h = 0;
  const CUresult r = TakeHandle(Physical(prop->location.id), size, &h);
  if (r == CUDA_SUCCESS) *handle = h;
  return r;
}
template <>
CUresult Behave<CudaHook::cuMemRelease>(CUmemGenericAllocationHandle handle) {
  return handle == 0x7000000 ? CUDA_SUCCESS : ReturnHandle(handle);
}
CUresult CreateArray(std::uint64_t bytes, std::uint64_t* handle) {
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  return TakeHandle(Physical(t_current), bytes, handle);
}
template <>
CUresult Behave<CudaHook::cuArrayCreate_v2>(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (array == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t h = 0;
  const CUresult r = CreateArray(
      d->Width * std::max<std::size_t>(d->Height, 1) * ElementBytes(d->Format) * d->NumChannels,
      &h);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(h);
  return r;
}
template <>
CUresult Behave<CudaHook::cuArray3DCreate_v2>(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (array == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t h = 0;
  const CUresult r =
      CreateArray(d->Width * std::max<std::size_t>(d->Height, 1) *
                      std::max<std::size_t>(d->Depth, 1) * ElementBytes(d->Format) * d->NumChannels,
                  &h);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(h);
  return r;
}
template <>
CUresult Behave<CudaHook::cuArrayDestroy>(CUarray array) {
  return ReturnHandle(reinterpret_cast<std::uintptr_t>(array));
}
// Streams take TESSERA_FAKE_STREAM_BYTES of the current device each (a handle of 0 bytes
// otherwise, so every stream still has a distinct value).
CUresult CreateStream(CUstream* stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const int physical = Physical(t_current);
  if (F().stream_bytes != 0 && !TakePhysical(physical, F().stream_bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  const std::uint64_t h = g_next_handle++;
  g_handles[h] = {physical, F().stream_bytes};
  *stream = reinterpret_cast<CUstream>(h);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuStreamCreate>(CUstream* stream, unsigned int) {
  return CreateStream(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamCreateWithPriority>(CUstream* stream, unsigned int, int) {
  return CreateStream(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamDestroy_v2>(CUstream stream) {
  return ReturnHandle(reinterpret_cast<std::uintptr_t>(stream));
}
// Kernels, for `tessera doctor`'s workers: a function is its name; launching "tessera_fault"
// makes the context's error sticky (CUDA_ERROR_ILLEGAL_ADDRESS from then on, as a real fault
// does), "tessera_spin" takes a little time, "tessera_burn" 200 us. Every other function, and a
// null one, just succeeds.
std::atomic<CUresult> g_sticky{CUDA_SUCCESS};
std::mutex g_functions_mu;
std::unordered_map<std::string, std::string*> g_functions;  // name -> the CUfunction value
template <>
CUresult Behave<CudaHook::cuModuleGetFunction>(CUfunction* fn, CUmodule, const char* name) {
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_functions_mu);
  std::string*& f = g_functions[name];
  if (f == nullptr) f = new std::string(name);  // lives as long as the process, like a module
  *fn = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}
// Stream capture: a stream between cuStreamBeginCapture* and cuStreamEndCapture* is captured
// (as is the handle kCapturingStream, always). Launches into a captured stream become graph nodes:
// they take no time. Anything else recorded into it — an event, a stream wait (the governor's
// fences and gates must never go there) — makes the capture "foreign", and its end then fails
// with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as a capture broken by a stray call does.
const CUstream kCapturingStream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(0xca97));
std::mutex g_captures_mu;
std::unordered_map<CUstream, bool> g_captures;  // captured stream -> something foreign went in
bool CapturedLocked(CUstream stream) {
  return stream == kCapturingStream || g_captures.contains(stream);
}
bool Captured(CUstream stream) {
  std::lock_guard<std::mutex> lock(g_captures_mu);
  return CapturedLocked(stream);
}
// Something other than a launch went into `stream`: true if it is captured.
bool ForeignIntoCapture(CUstream stream) {
  std::lock_guard<std::mutex> lock(g_captures_mu);
  const auto it = g_captures.find(stream);
  if (it != g_captures.end()) it->second = true;
  return CapturedLocked(stream);
}
// Kernels run asynchronously, as on a GPU: a launch returns at once and its time is queued on
// its stream's timeline (CLOCK_MONOTONIC), where an event completes when everything queued
// before it has; cuEventElapsedTime reads those moments, which the compute governor's fences use
// to measure busy time. Streams run side by side (no legacy-stream ordering); a synchronize waits
// for every stream. A stream held by cuStreamWaitValue32 (the governor's probe gate) completes
// nothing recorded on it until the watched word reaches the value: its events stay pending, and
// a synchronize waits for the word (at most 2 s, then it fails: a gate that is never opened is a
// bug the tests must see, not a hang).
constexpr std::int64_t kPendingNs = -2;
struct FakeEvent {
  std::atomic<std::int64_t> at_ns{-1};
};
std::int64_t FakeNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
struct StreamGate {
  CUstream stream;
  const volatile std::uint32_t* word;
  std::uint32_t value;
  // What was queued behind the gate, in order: an event (completes when reached) or a kernel's
  // time (it runs once the gate opens, instead of during its launch).
  std::vector<std::pair<FakeEvent*, std::int64_t>> queued;
};
std::mutex g_gates_mu;  // also guards the timelines
std::vector<StreamGate> g_gates;
std::vector<std::pair<CUstream, std::int64_t>> g_timelines;  // stream -> when its work ends
std::int64_t& TimelineLocked(CUstream stream) {
  for (auto& [s, until] : g_timelines) {
    if (s == stream) return until;
  }
  return g_timelines.emplace_back(stream, 0).second;
}
// Queues `ns` of work on the stream's timeline; returns when it ends.
std::int64_t RunLocked(CUstream stream, std::int64_t ns) {
  std::int64_t& until = TimelineLocked(stream);
  until = std::max(until, FakeNowNs()) + ns;
  return until;
}
// Sleeps until every stream's queued work has run.
void WaitForTimelines() {
  std::int64_t last = 0;
  {
    std::lock_guard<std::mutex> lock(g_gates_mu);
    for (const auto& [s, until] : g_timelines) last = std::max(last, until);
  }
  const std::int64_t now = FakeNowNs();
  if (last > now) std::this_thread::sleep_for(std::chrono::nanoseconds(last - now));
}
bool Reached(const StreamGate& g) { return static_cast<std::int32_t>(*g.word - g.value) >= 0; }
// Opens the gates whose word has been written: what waited behind them completes now.
void OpenGates() {
  std::lock_guard<std::mutex> lock(g_gates_mu);
  std::erase_if(g_gates, [](StreamGate& g) {
    if (!Reached(g)) return false;
    std::int64_t t = RunLocked(g.stream, 0);
    for (const auto& [event, kernel_ns] : g.queued) {
      if (event != nullptr) {
        event->at_ns.store(t);
      } else {
        t = RunLocked(g.stream, kernel_ns);
      }
    }
    return true;
  });
}
bool WaitForGates() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    OpenGates();
    {
      std::lock_guard<std::mutex> lock(g_gates_mu);
      if (g_gates.empty()) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
// Queues a kernel of `ns` on `stream`: behind its gate if it has one, else on its timeline.
void QueueKernel(CUstream stream, std::int64_t ns) {
  std::lock_guard<std::mutex> lock(g_gates_mu);
  for (StreamGate& g : g_gates) {
    if (g.stream == stream) {
      g.queued.emplace_back(nullptr, ns);
      return;
    }
  }
  RunLocked(stream, ns);
}
CUresult FakeLaunch(CUfunction f, void** params, CUstream stream = nullptr) {
  if (g_sticky.load() != CUDA_SUCCESS) return g_sticky.load();
  if (f == nullptr) return CUDA_SUCCESS;
  const std::string* name = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_functions_mu);
    for (const auto& entry : g_functions) {
      if (reinterpret_cast<CUfunction>(entry.second) == f) name = entry.second;
    }
  }
  if (name == nullptr) return CUDA_SUCCESS;
  {
    // A function's first launch loads its module (CUDA's lazy loading), which may synchronize
    // the context: it waits for every stream, held ones included.
    static std::mutex loaded_mu;
    static std::vector<const std::string*> loaded;
    std::unique_lock<std::mutex> lock(loaded_mu);
    if (std::find(loaded.begin(), loaded.end(), name) == loaded.end()) {
      loaded.push_back(name);
      lock.unlock();
      if (!WaitForGates()) return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
  }
  if (*name == "tessera_fault") g_sticky.store(CUDA_ERROR_ILLEGAL_ADDRESS);
  std::int64_t ns = 0;
  if (*name == "tessera_burn") ns = 200'000;  // doctor's burn
  if (*name == "tessera_spin" && params != nullptr && params[0] != nullptr) {
    ns = static_cast<std::int64_t>(
        std::min<std::uint64_t>(*static_cast<std::uint64_t*>(params[0]) / 20, 10'000'000));
  }
  if (ns > 0 && !Captured(stream)) {  // (a launch into a capture is a graph node)
    OpenGates();
    QueueKernel(stream, ns);
  }
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuLaunchKernel>(CUfunction f, unsigned int, unsigned int, unsigned int,
                                          unsigned int, unsigned int, unsigned int, unsigned int,
                                          CUstream stream, void** params, void**) {
  return FakeLaunch(f, params, stream);
}
template <>
CUresult Behave<CudaHook::cuEventCreate>(CUevent* event, unsigned int) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<CUevent>(new FakeEvent());
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuEventDestroy_v2>(CUevent event) {
  delete reinterpret_cast<FakeEvent*>(event);
  return CUDA_SUCCESS;
}
CUresult FakeRecord(CUevent event, CUstream stream) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (ForeignIntoCapture(stream)) {  // an event node of the capture: never completes here
    e->at_ns.store(kPendingNs);
    return CUDA_SUCCESS;
  }
  OpenGates();
  {
    std::lock_guard<std::mutex> lock(g_gates_mu);
    for (StreamGate& g : g_gates) {
      if (g.stream == stream) {
        e->at_ns.store(kPendingNs);
        g.queued.emplace_back(e, 0);
        return g_sticky.load();
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_gates_mu);
    e->at_ns.store(RunLocked(stream, 0));
  }
  return g_sticky.load();
}
template <>
CUresult Behave<CudaHook::cuEventRecord>(CUevent event, CUstream stream) {
  return FakeRecord(event, stream);
}
template <>
CUresult Behave<CudaHook::cuEventRecord_ptsz>(CUevent event, CUstream stream) {
  return FakeRecord(event, stream);
}
template <>
CUresult Behave<CudaHook::cuEventQuery>(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  OpenGates();
  const std::int64_t at = reinterpret_cast<FakeEvent*>(event)->at_ns.load();
  if (at == kPendingNs || at > FakeNowNs()) return CUDA_ERROR_NOT_READY;
  return g_sticky.load();
}
CUresult FakeElapsed(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OpenGates();
  const std::int64_t a = reinterpret_cast<FakeEvent*>(start)->at_ns.load();
  const std::int64_t b = reinterpret_cast<FakeEvent*>(end)->at_ns.load();
  if (a == kPendingNs || b == kPendingNs || std::max(a, b) > FakeNowNs())
    return CUDA_ERROR_NOT_READY;
  if (a < 0 || b < 0) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(static_cast<double>(b - a) / 1e6);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuEventElapsedTime>(float* ms, CUevent start, CUevent end) {
  return FakeElapsed(ms, start, end);
}
template <>
CUresult Behave<CudaHook::cuEventElapsedTime_v2>(float* ms, CUevent start, CUevent end) {
  return FakeElapsed(ms, start, end);
}

template <>
CUresult Behave<CudaHook::cuCtxSynchronize>() {
  if (!WaitForGates()) return CUDA_ERROR_LAUNCH_TIMEOUT;
  WaitForTimelines();
  return g_sticky.load();
}
template <>
CUresult Behave<CudaHook::cuCtxSynchronize_v2>(CUcontext) {
  return Behave<CudaHook::cuCtxSynchronize>();
}
template <>
CUresult Behave<CudaHook::cuStreamSynchronize>(CUstream) {
  if (!WaitForGates()) return CUDA_ERROR_LAUNCH_TIMEOUT;
  WaitForTimelines();
  return g_sticky.load();
}

// Graphs: memory-alloc nodes take physical memory when the graph is instantiated.
struct FakeNode {
  CUgraphNodeType type;
  CUDA_MEM_ALLOC_NODE_PARAMS params;
};
struct FakeGraph {
  std::vector<FakeNode*> nodes;
};
struct FakeExec {
  std::vector<std::pair<int, std::uint64_t>> held;  // (physical device, bytes)
};
template <>
CUresult Behave<CudaHook::cuGraphCreate>(CUgraph* graph, unsigned int) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(new FakeGraph());
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphDestroy>(CUgraph graph) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (FakeNode* n : g->nodes) delete n;
  delete g;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphAddMemAllocNode>(CUgraphNode* node, CUgraph graph,
                                                  const CUgraphNode*, size_t,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (node == nullptr || g == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  params->dptr = 0xa00000000000ULL + (g_next_handle++ << 24);
  auto* n = new FakeNode{CU_GRAPH_NODE_TYPE_MEM_ALLOC, *params};
  g->nodes.push_back(n);
  *node = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphGetNodes>(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (g == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr) {
    for (std::size_t i = 0; i < *count && i < g->nodes.size(); ++i)
      nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i]);
  }
  *count = g->nodes.size();
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphNodeGetType>(CUgraphNode node, CUgraphNodeType* type) {
  if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = reinterpret_cast<FakeNode*>(node)->type;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphMemAllocNodeGetParams>(CUgraphNode node,
                                                        CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (node == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *params = reinterpret_cast<FakeNode*>(node)->params;
  return CUDA_SUCCESS;
}
CUresult FakeInstantiate(CUgraphExec* exec, CUgraph graph) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (exec == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new FakeExec();
  for (FakeNode* n : g->nodes) {
    const int dev = n->params.poolProps.location.id;
    if (!ValidDevice(dev) || !TakePhysical(Physical(dev), n->params.bytesize)) {
      for (auto& [phys, bytes] : e->held) ReleasePhysical(F().shared, phys, bytes);
      delete e;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->held.emplace_back(Physical(dev), n->params.bytesize);
  }
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuGraphInstantiateWithFlags>(CUgraphExec* exec, CUgraph graph,
                                                       unsigned long long) {
  return FakeInstantiate(exec, graph);
}
template <>
CUresult Behave<CudaHook::cuGraphInstantiateWithParams>(CUgraphExec* exec, CUgraph graph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS*) {
  return FakeInstantiate(exec, graph);
}
template <>
CUresult Behave<CudaHook::cuGraphInstantiateWithParams_ptsz>(CUgraphExec* exec, CUgraph graph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS*) {
  return FakeInstantiate(exec, graph);
}
template <>
CUresult Behave<CudaHook::cuGraphExecDestroy>(CUgraphExec exec) {
  auto* e = reinterpret_cast<FakeExec*>(exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [phys, bytes] : e->held) ReleasePhysical(F().shared, phys, bytes);
  delete e;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuImportExternalMemory>(CUexternalMemory* memory,
                                                  const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* desc) {
  if (memory == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  *memory = reinterpret_cast<CUexternalMemory>(static_cast<std::uintptr_t>(g_next_handle++ << 8));
  return CUDA_SUCCESS;
}

CUresult FakeBeginCapture(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream
  std::lock_guard<std::mutex> lock(g_captures_mu);
  if (CapturedLocked(stream)) return CUDA_ERROR_ILLEGAL_STATE;
  g_captures[stream] = false;
  return CUDA_SUCCESS;
}
CUresult FakeEndCapture(CUstream stream, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_captures_mu);
  const auto it = g_captures.find(stream);
  if (it == g_captures.end()) return CUDA_ERROR_ILLEGAL_STATE;
  const bool foreign = it->second;
  g_captures.erase(it);
  static int graphs = 0;
  *graph = foreign ? nullptr : reinterpret_cast<CUgraph>(&graphs);
  return foreign ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCapture>(CUstream stream) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCapture_ptsz>(CUstream stream) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCapture_v2>(CUstream stream, CUstreamCaptureMode) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCapture_v2_ptsz>(CUstream stream, CUstreamCaptureMode) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCaptureToGraph>(CUstream stream, CUgraph, const CUgraphNode*,
                                                       const CUgraphEdgeData*, size_t,
                                                       CUstreamCaptureMode) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamBeginCaptureToGraph_ptsz>(CUstream stream, CUgraph,
                                                            const CUgraphNode*,
                                                            const CUgraphEdgeData*, size_t,
                                                            CUstreamCaptureMode) {
  return FakeBeginCapture(stream);
}
template <>
CUresult Behave<CudaHook::cuStreamEndCapture>(CUstream stream, CUgraph* graph) {
  return FakeEndCapture(stream, graph);
}
template <>
CUresult Behave<CudaHook::cuStreamEndCapture_ptsz>(CUstream stream, CUgraph* graph) {
  return FakeEndCapture(stream, graph);
}
CUresult FakeIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = Captured(stream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuStreamIsCapturing>(CUstream stream, CUstreamCaptureStatus* status) {
  return FakeIsCapturing(stream, status);
}
template <>
CUresult Behave<CudaHook::cuStreamIsCapturing_ptsz>(CUstream stream,
                                                    CUstreamCaptureStatus* status) {
  return FakeIsCapturing(stream, status);
}

CUresult FakeDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr || !ValidDevice(dev)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  *pool = DefaultPool(Physical(dev));
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuDeviceGetMemPool>(CUmemoryPool* pool, CUdevice dev) {
  return FakeDeviceGetMemPool(pool, dev);
}
template <>
CUresult Behave<CudaHook::cuDeviceGetDefaultMemPool>(CUmemoryPool* pool, CUdevice dev) {
  return FakeDeviceGetMemPool(pool, dev);
}
CUresult FakeAllocAsync(CUdeviceptr* dptr, size_t bytes) {
  if (t_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUmemoryPool pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    pool = DefaultPool(Physical(t_current));
  }
  return PoolAllocate(dptr, bytes, pool);
}
template <>
CUresult Behave<CudaHook::cuMemAllocAsync>(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return FakeAllocAsync(dptr, bytes);
}
template <>
CUresult Behave<CudaHook::cuMemAllocAsync_ptsz>(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return FakeAllocAsync(dptr, bytes);
}
template <>
CUresult Behave<CudaHook::cuMemAllocFromPoolAsync>(CUdeviceptr* dptr, size_t bytes,
                                                   CUmemoryPool pool, CUstream) {
  return PoolAllocate(dptr, bytes, pool);
}
template <>
CUresult Behave<CudaHook::cuMemAllocFromPoolAsync_ptsz>(CUdeviceptr* dptr, size_t bytes,
                                                        CUmemoryPool pool, CUstream) {
  return PoolAllocate(dptr, bytes, pool);
}
CUresult FakeFreeAsync(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_pool_allocations.find(dptr);
  if (it == g_pool_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  g_pools[it->second.first].unused += it->second.second;
  g_pool_allocations.erase(it);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemFreeAsync>(CUdeviceptr dptr, CUstream) {
  return FakeFreeAsync(dptr);
}
template <>
CUresult Behave<CudaHook::cuMemFreeAsync_ptsz>(CUdeviceptr dptr, CUstream) {
  return FakeFreeAsync(dptr);
}
template <>
CUresult Behave<CudaHook::cuMemPoolTrimTo>(CUmemoryPool pool, size_t keep) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_pools.find(pool);
  if (it == g_pools.end()) return CUDA_ERROR_INVALID_VALUE;
  FakePool& p = it->second;
  const std::uint64_t above = p.reserved > keep ? p.reserved - keep : 0;
  const std::uint64_t release = std::min(p.unused, above);
  p.reserved -= release;
  p.unused -= release;
  ReleasePhysical(F().shared, p.physical, release);
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemPoolGetAttribute>(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void* value) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_pools.find(pool);
  if (it == g_pools.end() || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) return CUDA_ERROR_NOT_SUPPORTED;
  *static_cast<cuuint64_t*>(value) = it->second.reserved;
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemPoolCreate>(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr || !ValidDevice(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  *pool = reinterpret_cast<CUmemoryPool>(g_next_pool++);
  g_pools[*pool] = FakePool{Physical(props->location.id), 0, 0};
  return CUDA_SUCCESS;
}
template <>
CUresult Behave<CudaHook::cuMemPoolDestroy>(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = g_pools.find(pool);
  if (it == g_pools.end()) return CUDA_ERROR_INVALID_VALUE;
  ReleasePhysical(F().shared, it->second.physical, it->second.reserved);
  g_pools.erase(it);
  return CUDA_SUCCESS;
}

// cuGetProcAddress as the driver answers it: among the rows for `symbol`, the newest whose
// version is not above the caller's, preferring the per-thread variant when asked for.
CUresult Lookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool known = false;
  const int best = DriverProcAddressRow(symbol, cuda_version, per_thread, &known);
  *pfn = nullptr;
  if (best < 0) {
    if (status != nullptr) {
      *status =
          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = FakeEntryPoint(static_cast<std::size_t>(best));
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

template <>
CUresult Behave<CudaHook::cuGetProcAddress_v2>(const char* symbol, void** pfn, int cuda_version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, pfn, cuda_version, flags, status);
}
template <>
CUresult Behave<CudaHook::cuGetProcAddress>(const char* symbol, void** pfn, int cuda_version,
                                            cuuint64_t flags) {
  return Lookup(symbol, pfn, cuda_version, flags, nullptr);
}

}  // namespace
}  // namespace tessera::fake

#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args)                  \
  TESSERA_FAKE_EXPORT CUresult sym params {                                                 \
    ::tessera::fake::F().calls[static_cast<std::size_t>(::tessera::hook::CudaHook::sym)]++; \
    return ::tessera::fake::Behave<::tessera::hook::CudaHook::sym> args;                    \
  }
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK

namespace tessera::fake {
namespace {
void* FakeEntryPoint(std::size_t index) {
  static void* const kEntryPoints[kCudaHookCount] = {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  reinterpret_cast<void*>(&::sym),
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
  };
  return kEntryPoints[index];
}
}  // namespace
}  // namespace tessera::fake

// Driver functions the preload library resolves outside its table (the probe gate).
TESSERA_FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, std::size_t bytes, unsigned int) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pp = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  return *pp != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TESSERA_FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* out, void* p, unsigned int) {
  if (out == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUdeviceptr>(p);  // unified addressing
  return CUDA_SUCCESS;
}
TESSERA_FAKE_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr,
                                                    cuuint32_t value, unsigned int flags) {
  if (addr == 0 || flags != CU_STREAM_WAIT_VALUE_GEQ) return CUDA_ERROR_NOT_SUPPORTED;
  if (tessera::fake::ForeignIntoCapture(stream)) return CUDA_SUCCESS;  // a node of the capture
  tessera::fake::StreamGate g{
      stream, reinterpret_cast<const volatile std::uint32_t*>(addr), value, {}};
  if (tessera::fake::Reached(g)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(tessera::fake::g_gates_mu);
  tessera::fake::g_gates.push_back(g);
  return CUDA_SUCCESS;
}

// Test introspection.
TESSERA_FAKE_EXPORT unsigned long long tessera_fake_calls(const char* symbol) {
  for (std::size_t i = 0; i < tessera::hook::kCudaHookCount; ++i) {
    if (tessera::hook::kCudaHooks[i].symbol == symbol) return tessera::fake::F().calls[i].load();
  }
  return ~0ULL;
}
TESSERA_FAKE_EXPORT unsigned long long tessera_fake_physical_bytes(int dev) {
  return dev >= 0 && dev < tessera::fake::kMaxDevices
             ? tessera::fake::F().shared->physical[dev].load()
             : 0;
}
