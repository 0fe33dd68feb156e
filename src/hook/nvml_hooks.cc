// NVML interception: trampolines for every row of nvml_hooks.def (pass-through by default) and
// the memory views: inside a capped container, NVML reports the cap as the device's total and
// the container's usage as used (nvidia-smi, PyTorch's OOM message, monitoring agents).
#include <atomic>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <string>

#include "hook/name_table.h"
#include "hook/nvml_table.h"
#include "hook/state.h"

namespace tessera::hook {

void* g_real_nvml[kNvmlHookCount] = {};

namespace {

constexpr std::array<std::string_view, kNvmlHookCount> kNvmlNames = {
#define TESSERA_NVML_HOOK(sym, policy, params, args) #sym,
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
};
constexpr auto kNvmlNameTable = BuildNameTable<64>(kNvmlNames);

std::atomic<bool> g_nvml_ready{false};

// Resolves the real NVML on the first intercepted NVML call (independent of CUDA's).
void EnsureNvml() {
  if (__builtin_expect(g_nvml_ready.load(std::memory_order_acquire), 1)) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (g_nvml_ready.load(std::memory_order_acquire)) return;
  const auto real_dlsym = RealDlsym();
  void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr && real_dlsym != nullptr) {
    for (std::size_t i = 0; i < kNvmlHookCount; ++i) {
      g_real_nvml[i] = real_dlsym(handle, std::string(kNvmlHooks[i].symbol).c_str());
    }
  }
  g_nvml_ready.store(true, std::memory_order_release);
}

template <NvmlHook H, typename... Args>
nvmlReturn_t NvmlIntercept(Args... args) {
  EnsureNvml();
  const auto real = RealNvml<H>();
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return real(args...);
}

// The container's view of `device`, if a tessera limit applies to it.
bool ViewOf(nvmlDevice_t device, std::uint64_t* limit, std::uint64_t* used) {
  const auto get_uuid = RealNvml<NvmlHook::nvmlDeviceGetUUID>();
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (get_uuid == nullptr || get_uuid(device, uuid, sizeof(uuid)) != NVML_SUCCESS) return false;
  unsigned int index = 0;
  const auto get_index = RealNvml<NvmlHook::nvmlDeviceGetIndex>();
  const int nvml_index = get_index != nullptr && get_index(device, &index) == NVML_SUCCESS
                             ? static_cast<int>(index)
                             : -1;
  return ViewForUuid(uuid, nvml_index, limit, used);
}

template <>
nvmlReturn_t NvmlIntercept<NvmlHook::nvmlDeviceGetMemoryInfo>(nvmlDevice_t device,
                                                              nvmlMemory_t* memory) {
  EnsureNvml();
  const auto real = RealNvml<NvmlHook::nvmlDeviceGetMemoryInfo>();
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const nvmlReturn_t r = real(device, memory);
  std::uint64_t limit = 0, used = 0;
  if (r == NVML_SUCCESS && memory != nullptr && ViewOf(device, &limit, &used)) {
    memory->total = limit;
    memory->used = used < limit ? used : limit;
    memory->free = limit - memory->used;
  }
  return r;
}

template <>
nvmlReturn_t NvmlIntercept<NvmlHook::nvmlDeviceGetMemoryInfo_v2>(nvmlDevice_t device,
                                                                 nvmlMemory_v2_t* memory) {
  EnsureNvml();
  const auto real = RealNvml<NvmlHook::nvmlDeviceGetMemoryInfo_v2>();
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const nvmlReturn_t r = real(device, memory);
  std::uint64_t limit = 0, used = 0;
  if (r == NVML_SUCCESS && memory != nullptr && ViewOf(device, &limit, &used)) {
    memory->total = limit;
    memory->reserved = 0;
    memory->used = used < limit ? used : limit;
    memory->free = limit - memory->used;
  }
  return r;
}

// Inside a capped container, the process list shows only the container's own processes
// (those holding a slot in its region); other tenants' processes and usage stay hidden. In a
// PID namespace where NVML reports host PIDs, nothing matches and the list is empty, which is
// what nvidia-smi shows in such containers anyway.
template <>
nvmlReturn_t NvmlIntercept<NvmlHook::nvmlDeviceGetComputeRunningProcesses_v3>(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {
  EnsureNvml();
  const auto real = RealNvml<NvmlHook::nvmlDeviceGetComputeRunningProcesses_v3>();
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const nvmlReturn_t r = real(device, count, infos);
  std::uint64_t limit = 0, used = 0;
  if (r != NVML_SUCCESS || count == nullptr || infos == nullptr || !ViewOf(device, &limit, &used)) {
    return r;
  }
  unsigned int kept = 0;
  for (unsigned int i = 0; i < *count; ++i) {
    if (IsContainerProcess(infos[i].pid)) infos[kept++] = infos[i];
  }
  *count = kept;
  return r;
}

}  // namespace

NvmlHook FindNvmlHookByName(std::string_view name) {
  return static_cast<NvmlHook>(FindName(kNvmlNameTable, kNvmlNames, name));
}

}  // namespace tessera::hook

#define TESSERA_NVML_HOOK(sym, policy, params, args)                            \
  extern "C" TESSERA_EXPORT nvmlReturn_t sym params {                           \
    return ::tessera::hook::NvmlIntercept<::tessera::hook::NvmlHook::sym> args; \
  }
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK

namespace tessera::hook {

void* const kNvmlTrampolines[kNvmlHookCount] = {
#define TESSERA_NVML_HOOK(sym, policy, params, args) reinterpret_cast<void*>(&::sym),
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
};

}  // namespace tessera::hook
