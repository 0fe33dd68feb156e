// A fake libnvidia-ml.so.1 for CI, generated from src/hook/nvml_hooks.def like the fake CUDA
// driver: the same devices (count, memory, UUIDs, physical usage shared through
// TESSERA_FAKE_STATE), memory info that reports the physical usage, and a call counter per row.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fake_gpu.h"
#include "hook/nvml_table.h"

#define TESSERA_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace tessera::fake {
namespace {

using hook::kNvmlHookCount;
using hook::kNvmlHooks;
using hook::NvmlHook;

struct FakeNvml {
  int devices = DeviceCount();
  std::uint64_t memory = DeviceMemory();
  Shared* shared = MapShared();
  std::atomic<std::uint64_t> calls[kNvmlHookCount] = {};
};

FakeNvml& N() {
  static FakeNvml* fake = new FakeNvml();
  return *fake;
}

nvmlDevice_t Handle(int i) {
  return reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(0x2000 + i));
}
int IndexOf(nvmlDevice_t device) {
  const auto i = static_cast<int>(reinterpret_cast<std::uintptr_t>(device) - 0x2000);
  return i >= 0 && i < N().devices ? i : -1;
}

template <NvmlHook H, typename... Args>
nvmlReturn_t Behave(Args...) {
  return NVML_SUCCESS;
}

template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetCount_v2>(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(N().devices);
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetHandleByIndex_v2>(unsigned int index, nvmlDevice_t* device) {
  if (device == nullptr || static_cast<int>(index) >= N().devices) return NVML_ERROR_INVALID_ARGUMENT;
  *device = Handle(static_cast<int>(index));
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetHandleByUUID>(const char* uuid, nvmlDevice_t* device) {
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < N().devices; ++i) {
    if (UuidText(i) == uuid) {
      *device = Handle(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetIndex>(nvmlDevice_t device, unsigned int* index) {
  if (index == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned int>(IndexOf(device));
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetUUID>(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (uuid == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(uuid, length, "%s", UuidText(IndexOf(device)).c_str());
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetName>(nvmlDevice_t device, char* name, unsigned int length) {
  if (name == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "Tessera Fake GPU %d", IndexOf(device));
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetMemoryInfo>(nvmlDevice_t device, nvmlMemory_t* memory) {
  const int i = IndexOf(device);
  if (memory == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = N().memory;
  memory->used = N().shared->physical[i].load();
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetMemoryInfo_v2>(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  const int i = IndexOf(device);
  if (memory == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = N().memory;
  memory->reserved = 0;
  memory->used = N().shared->physical[i].load();
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
// Processes: this process (with the device's physical usage) plus TESSERA_FAKE_NVML_OTHER_PIDS
// (comma-separated pids of "other tenants", 1 MiB each).
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetComputeRunningProcesses_v3>(nvmlDevice_t device, unsigned int* count,
                                                                        nvmlProcessInfo_t* infos) {
  if (count == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<nvmlProcessInfo_t> all;
  nvmlProcessInfo_t me{};
  me.pid = static_cast<unsigned int>(getpid());
  me.usedGpuMemory = N().shared->physical[IndexOf(device)].load();
  all.push_back(me);
  if (const char* others = std::getenv("TESSERA_FAKE_NVML_OTHER_PIDS")) {
    std::string list = others;
    std::size_t start = 0;
    while (start < list.size()) {
      const std::size_t comma = list.find(',', start);
      nvmlProcessInfo_t other{};
      other.pid = static_cast<unsigned int>(std::strtoul(list.substr(start, comma - start).c_str(), nullptr, 10));
      other.usedGpuMemory = 1 << 20;
      all.push_back(other);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (infos == nullptr || *count < all.size()) {
    *count = static_cast<unsigned int>(all.size());
    return infos == nullptr && *count == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (std::size_t i = 0; i < all.size(); ++i) infos[i] = all[i];
  *count = static_cast<unsigned int>(all.size());
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace tessera::fake

#define TESSERA_NVML_HOOK(sym, policy, params, args)                                          \
  TESSERA_FAKE_EXPORT nvmlReturn_t sym params {                                               \
    ::tessera::fake::N().calls[static_cast<std::size_t>(::tessera::hook::NvmlHook::sym)]++;   \
    return ::tessera::fake::Behave<::tessera::hook::NvmlHook::sym> args;                      \
  }
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK

TESSERA_FAKE_EXPORT unsigned long long tessera_fake_nvml_calls(const char* symbol) {
  for (std::size_t i = 0; i < tessera::hook::kNvmlHookCount; ++i) {
    if (tessera::hook::kNvmlHooks[i].symbol == symbol) return tessera::fake::N().calls[i].load();
  }
  return ~0ULL;
}
