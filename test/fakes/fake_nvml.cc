// A fake libnvidia-ml.so.1 for CI, generated from src/hook/nvml_hooks.def like the fake CUDA
// driver: the same devices (count, memory, UUIDs, physical usage shared through
// TESSERA_FAKE_STATE), memory info that reports the physical usage, and a call counter per row.
//
// Below the generated rows: fake-only NVML entry points, which the node agent calls but the
// preload library does not intercept (so they are not in nvml_hooks.def). Each is defined
// against nvml.h's own declaration, so its signature cannot drift. Knobs:
//   TESSERA_FAKE_SM_COUNT=N       nvmlDeviceGetAttributes_v2 reports N SMs (unset: NOT_SUPPORTED)
//   TESSERA_FAKE_NUMA_NODE=N      nvmlDeviceGetNumaNodeId reports N (unset: NOT_SUPPORTED)
//   TESSERA_FAKE_MIG=G:K          GPU G has MIG enabled with K instances
//   TESSERA_FAKE_XID=G:X[,G:X]    events delivered once each by nvmlEventSetWait_v2; X is an XID
//                                 number, or dbe / sbe for a double-/single-bit ECC event
//   TESSERA_FAKE_XID_FILE=PATH    the same list read from PATH on every wait; new contents are
//                                 delivered once (to inject an event into a running process)
//   TESSERA_FAKE_NVML_UTIL_FILE=PATH  the driver's internal per-process samples, read from PATH on
//                                 every call, a line each: GPU_INDEX PID TIMESTAMP_US SM_PERCENT
//                                 (a process without a line at a stamp: 0 % then). As the real
//                                 one (H200, driver 580), nvmlDeviceGetProcessUtilization(last)
//                                 returns per process with a line after `last` one sample:
//                                 its mean over the stamps after `last` (0 % where it has no
//                                 line), stamped at the newest (unset: NOT_SUPPORTED; a line that
//                                 does not parse: UNKNOWN; no stamp after `last`: NOT_FOUND)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
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
  FakeNvml() {
    for (int i = 0; i < devices; ++i) {
      if (NodeGranted(i)) visible[visible_count++] = i;
    }
  }
  int devices = DeviceCount();    // physical devices; a handle names one (Handle, IndexOf)
  int visible[kMaxDevices] = {};  // NVML index -> physical device (those this process may open)
  int visible_count = 0;
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
  for (int v = 0; v < N().visible_count; ++v) {
    if (N().visible[v] == i) return i;
  }
  return -1;
}

// MIG (TESSERA_FAKE_MIG="<gpu index>:<instances>"): that GPU has MIG enabled with that many
// 1-slice instances, each 1/8 of the GPU's memory and SMs. Instance k of GPU g has the handle
// 0x3000 + 16 g + k.
struct MigRef {
  int gpu = -1;
  int instance = -1;
};
inline MigRef MigConfig() {
  MigRef config;
  if (const char* v = std::getenv("TESSERA_FAKE_MIG");
      v != nullptr && std::strchr(v, ':') != nullptr) {
    config.gpu = std::atoi(v);
    config.instance = std::atoi(std::strchr(v, ':') + 1);  // here: the instance count
  }
  return config;
}
MigRef MigOf(nvmlDevice_t device) {
  const auto h = reinterpret_cast<std::uintptr_t>(device);
  const MigRef config = MigConfig();
  if (h < 0x3000 || h >= 0x3000 + 16 * kMaxDevices) return {};
  const MigRef ref{static_cast<int>((h - 0x3000) / 16), static_cast<int>((h - 0x3000) % 16)};
  return ref.gpu == config.gpu && ref.instance < config.instance ? ref : MigRef{};
}
nvmlDevice_t MigHandle(int gpu, int instance) {
  return reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(0x3000 + 16 * gpu + instance));
}
std::string MigUuidText(MigRef ref) {
  char out[64];
  std::snprintf(out, sizeof(out), "MIG-face0000-0000-0000-%04x-%012x", ref.gpu, ref.instance);
  return out;
}
std::uint64_t MigMemory() { return N().memory / 8; }

template <NvmlHook H, typename... Args>
nvmlReturn_t Behave(Args...) {
  return NVML_SUCCESS;
}

template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetCount_v2>(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(N().visible_count);
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetHandleByIndex_v2>(unsigned int index,
                                                             nvmlDevice_t* device) {
  if (device == nullptr || index >= static_cast<unsigned int>(N().visible_count))
    return NVML_ERROR_INVALID_ARGUMENT;
  *device = Handle(N().visible[index]);
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetHandleByUUID>(const char* uuid, nvmlDevice_t* device) {
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int v = 0; v < N().visible_count; ++v) {
    if (const int i = N().visible[v]; UuidText(i) == uuid) {
      *device = Handle(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetIndex>(nvmlDevice_t device, unsigned int* index) {
  if (index == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  for (int v = 0; v < N().visible_count; ++v) {  // its place among the devices this process sees
    if (N().visible[v] == IndexOf(device)) *index = static_cast<unsigned int>(v);
  }
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetUUID>(nvmlDevice_t device, char* uuid,
                                                 unsigned int length) {
  if (uuid != nullptr && MigOf(device).gpu >= 0) {
    std::snprintf(uuid, length, "%s", MigUuidText(MigOf(device)).c_str());
    return NVML_SUCCESS;
  }
  if (uuid == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(uuid, length, "%s", UuidText(IndexOf(device)).c_str());
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetName>(nvmlDevice_t device, char* name,
                                                 unsigned int length) {
  if (name == nullptr || IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "Tessera Fake GPU %d", IndexOf(device));
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetMemoryInfo>(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (memory != nullptr && MigOf(device).gpu >= 0) {
    *memory = nvmlMemory_t{};
    memory->total = memory->free = MigMemory();
    return NVML_SUCCESS;
  }
  const int i = IndexOf(device);
  if (memory == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = N().memory;
  ReclaimEnded(N().shared);
  memory->used = N().shared->physical[i].load();
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetMemoryInfo_v2>(nvmlDevice_t device,
                                                          nvmlMemory_v2_t* memory) {
  const int i = IndexOf(device);
  if (memory == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = N().memory;
  memory->reserved = 0;
  ReclaimEnded(N().shared);
  memory->used = N().shared->physical[i].load();
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
// The PID, as the caller sees it, of the process another namespace names `ns_pid` (fake_gpu.h):
// the process whose innermost NSpid is that and whose cgroup hashes to `cgroup`; 0 if the caller
// cannot see one (it ended, or lives in a PID namespace the caller's does not hold). The real
// driver reports host PIDs; an agent with the host's PID namespace finds every container's here.
unsigned int PidSeenHere(std::int32_t ns_pid, std::uint64_t cgroup) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  unsigned int found = 0;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const unsigned long pid = std::strtoul(entry->d_name, &end, 10);
    if (pid == 0 || *end != '\0') continue;
    const std::string dir = std::string("/proc/") + entry->d_name;
    std::ifstream status(dir + "/status");
    std::string line;
    long innermost = -1;
    while (std::getline(status, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream fields(line.substr(6));
      for (long v = 0; fields >> v;) innermost = v;
      break;
    }
    if (innermost == ns_pid && HashOfFile((dir + "/cgroup").c_str()) == cgroup) {
      found = static_cast<unsigned int>(pid);
      break;
    }
  }
  closedir(proc);
  return found;
}

// Processes: every live process holding memory of the device (what the fake driver attributed to
// it), by the PID the caller sees (PidSeenHere), plus TESSERA_FAKE_NVML_OTHER_PIDS
// (comma-separated pids of "other tenants", 1 MiB each).
template <>
nvmlReturn_t Behave<NvmlHook::nvmlDeviceGetComputeRunningProcesses_v3>(nvmlDevice_t device,
                                                                       unsigned int* count,
                                                                       nvmlProcessInfo_t* infos) {
  const int index = IndexOf(device);
  if (count == nullptr || index < 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<nvmlProcessInfo_t> all;
  for (const auto& row : N().shared->processes) {
    const std::int32_t pid = row.pid.load();
    const std::uint64_t bytes = row.bytes[index].load();
    if (bytes == 0 || pid <= 0) continue;
    const bool mine = row.ns.load() == MyNs();
    const unsigned int seen = mine ? (Alive(pid) ? static_cast<unsigned int>(pid) : 0)
                                   : PidSeenHere(pid, row.cgroup.load());
    if (seen == 0) continue;
    nvmlProcessInfo_t p{};
    p.pid = seen;
    p.usedGpuMemory = bytes;
    all.push_back(p);
  }
  if (const char* others = std::getenv("TESSERA_FAKE_NVML_OTHER_PIDS")) {
    std::string list = others;
    std::size_t start = 0;
    while (start < list.size()) {
      const std::size_t comma = list.find(',', start);
      nvmlProcessInfo_t other{};
      other.pid = static_cast<unsigned int>(
          std::strtoul(list.substr(start, comma - start).c_str(), nullptr, 10));
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

#define TESSERA_NVML_HOOK(sym, policy, params, args)                                        \
  TESSERA_FAKE_EXPORT nvmlReturn_t sym params {                                             \
    ::tessera::fake::N().calls[static_cast<std::size_t>(::tessera::hook::NvmlHook::sym)]++; \
    return ::tessera::fake::Behave<::tessera::hook::NvmlHook::sym> args;                    \
  }
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK

TESSERA_FAKE_EXPORT unsigned long long tessera_fake_nvml_calls(const char* symbol) {
  for (std::size_t i = 0; i < tessera::hook::kNvmlHookCount; ++i) {
    if (tessera::hook::kNvmlHooks[i].symbol == symbol) return tessera::fake::N().calls[i].load();
  }
  return ~0ULL;
}

// ---- Fake-only NVML entry points (not intercepted by the preload library) ----

namespace tessera::fake {
namespace {

struct FakeEvent {
  int gpu;
  unsigned long long type;
  unsigned long long data;
};

struct FakeEventSet {
  unsigned long long mask[kMaxDevices] = {};
};

struct EventSource {
  std::mutex mu;
  std::deque<FakeEvent> pending;
  bool env_read = false;
  std::string file_contents;
};
EventSource& Events() {
  static EventSource* events = new EventSource();
  return *events;
}

void ParseEvents(const std::string& list, std::deque<FakeEvent>& out) {
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    FakeEvent e{std::atoi(item.c_str()), nvmlEventTypeXidCriticalError, 0};
    std::string what = item.substr(colon + 1);
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    if (what == "dbe") {
      e.type = nvmlEventTypeDoubleBitEccError;
    } else if (what == "sbe") {
      e.type = nvmlEventTypeSingleBitEccError;
    } else {
      e.data = std::strtoull(what.c_str(), nullptr, 10);
    }
    out.push_back(e);
  }
}

// Picks up newly injected events; the caller holds mu.
void RefreshEvents(EventSource& events) {
  if (!events.env_read) {
    events.env_read = true;
    if (const char* v = std::getenv("TESSERA_FAKE_XID")) ParseEvents(v, events.pending);
  }
  if (const char* path = std::getenv("TESSERA_FAKE_XID_FILE")) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    if (!text.str().empty() && text.str() != events.file_contents) {
      events.file_contents = text.str();
      ParseEvents(events.file_contents, events.pending);
    }
  }
}

}  // namespace
}  // namespace tessera::fake

using tessera::fake::N;

TESSERA_FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    default:
      return "Unknown Error";
  }
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                            nvmlDeviceAttributes_t* attributes) {
  using namespace tessera::fake;
  const bool mig = MigOf(device).gpu >= 0;
  if (attributes == nullptr || (!mig && IndexOf(device) < 0)) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::getenv("TESSERA_FAKE_SM_COUNT") == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  const auto sms = static_cast<unsigned int>(EnvU64("TESSERA_FAKE_SM_COUNT", 0));
  *attributes = nvmlDeviceAttributes_t{};
  attributes->multiprocessorCount = mig ? sms / 8 : sms;
  attributes->gpuInstanceSliceCount = mig ? 1 : 8;
  attributes->computeInstanceSliceCount = attributes->gpuInstanceSliceCount;
  attributes->memorySizeMB = (mig ? MigMemory() : N().memory) >> 20;
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t
nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                unsigned int* count, unsigned long long last_seen_us) {
  const int index = tessera::fake::IndexOf(device);
  if (count == nullptr || index < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const char* path = std::getenv("TESSERA_FAKE_NVML_UTIL_FILE");
  if (path == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  std::ifstream file(path);
  std::vector<nvmlProcessUtilizationSample_t> lines;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    int gpu = -1;
    nvmlProcessUtilizationSample_t sample{};
    if (!(fields >> gpu >> sample.pid >> sample.timeStamp >> sample.smUtil))
      return NVML_ERROR_UNKNOWN;
    if (gpu == index && sample.timeStamp > last_seen_us) lines.push_back(sample);
  }
  if (lines.empty()) return NVML_ERROR_NOT_FOUND;  // as the driver: no sample since last_seen_us
  std::vector<unsigned long long> stamps;
  for (const auto& l : lines) stamps.push_back(l.timeStamp);
  std::sort(stamps.begin(), stamps.end());
  stamps.erase(std::unique(stamps.begin(), stamps.end()), stamps.end());
  std::vector<nvmlProcessUtilizationSample_t> all;  // a process each, in the order first seen
  for (const auto& l : lines) {
    const bool seen =
        std::any_of(all.begin(), all.end(), [&](const auto& a) { return a.pid == l.pid; });
    if (seen) continue;
    nvmlProcessUtilizationSample_t mean = l;
    mean.timeStamp = stamps.back();
    unsigned long long sum = 0;
    for (const auto& m : lines) sum += m.pid == l.pid ? m.smUtil : 0;
    mean.smUtil = static_cast<unsigned int>(sum / stamps.size());
    all.push_back(mean);
  }
  if (all.empty()) return NVML_ERROR_NOT_FOUND;
  if (utilization == nullptr || *count < all.size()) {
    *count = static_cast<unsigned int>(all.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(all.begin(), all.end(), utilization);
  *count = static_cast<unsigned int>(all.size());
  return NVML_SUCCESS;
}

// The kernel's minor number: the physical index plus TESSERA_FAKE_MINOR_OFFSET (default 0), so
// that a test can tell it from NVML's index.
TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                          unsigned int* minor) {
  const int i = tessera::fake::IndexOf(device);
  if (minor == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  *minor = static_cast<unsigned int>(static_cast<std::uint64_t>(i) +
                                     tessera::fake::EnvU64("TESSERA_FAKE_MINOR_OFFSET", 0));
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  if (node == nullptr || tessera::fake::IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::getenv("TESSERA_FAKE_NUMA_NODE") == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  *node = static_cast<unsigned int>(tessera::fake::EnvU64("TESSERA_FAKE_NUMA_NODE", 0));
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                                      unsigned int* pending) {
  const int i = tessera::fake::IndexOf(device);
  if (current == nullptr || pending == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::fake::MigRef config = tessera::fake::MigConfig();
  *current = *pending = config.gpu == i ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                                unsigned int* count) {
  if (count == nullptr || tessera::fake::IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 7;
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                     unsigned int index,
                                                                     nvmlDevice_t* mig) {
  const int i = tessera::fake::IndexOf(device);
  if (mig == nullptr || i < 0 || index >= 7) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::fake::MigRef config = tessera::fake::MigConfig();
  if (config.gpu != i) return NVML_ERROR_INVALID_ARGUMENT;
  if (static_cast<int>(index) >= config.instance) return NVML_ERROR_NOT_FOUND;
  *mig = tessera::fake::MigHandle(i, static_cast<int>(index));
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = reinterpret_cast<nvmlEventSet_t>(new tessera::fake::FakeEventSet());
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  delete reinterpret_cast<tessera::fake::FakeEventSet*>(set);
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                                  unsigned long long* types) {
  if (types == nullptr || tessera::fake::IndexOf(device) < 0) return NVML_ERROR_INVALID_ARGUMENT;
  *types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
           nvmlEventTypeSingleBitEccError;
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                          unsigned long long types,
                                                          nvmlEventSet_t set) {
  const int i = tessera::fake::IndexOf(device);
  if (set == nullptr || i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  reinterpret_cast<tessera::fake::FakeEventSet*>(set)->mask[i] |= types;
  return NVML_SUCCESS;
}

TESSERA_FAKE_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                     unsigned int timeoutms) {
  using namespace tessera::fake;
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto* registered = reinterpret_cast<FakeEventSet*>(set);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutms);
  EventSource& events = Events();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(events.mu);
      RefreshEvents(events);
      while (!events.pending.empty()) {
        const FakeEvent e = events.pending.front();
        events.pending.pop_front();
        if (e.gpu < 0 || e.gpu >= N().devices || (registered->mask[e.gpu] & e.type) == 0) continue;
        *data = nvmlEventData_t{};
        data->device = Handle(e.gpu);
        data->eventType = e.type;
        data->eventData = e.data;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        return NVML_SUCCESS;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(20)));
  }
}
