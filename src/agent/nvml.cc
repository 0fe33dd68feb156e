#include "agent/nvml.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <dlfcn.h>
#include <fstream>
#include <map>
#include <string_view>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/nvml_api.h"

#include "agent/local_gpu.h"

namespace tessera::agent {

// The entry points the agent uses: X(symbol, required). Optional ones may be missing from an
// older driver; the facts they give are then left at "unknown".
#define TESSERA_AGENT_NVML(X)                       \
  X(nvmlInit_v2, true)                              \
  X(nvmlShutdown, true)                             \
  X(nvmlDeviceGetCount_v2, true)                    \
  X(nvmlDeviceGetHandleByIndex_v2, true)            \
  X(nvmlDeviceGetUUID, true)                        \
  X(nvmlDeviceGetName, true)                        \
  X(nvmlDeviceGetMemoryInfo, true)                  \
  X(nvmlErrorString, false)                         \
  X(nvmlDeviceGetAttributes_v2, false)              \
  X(nvmlDeviceGetNumaNodeId, false)                 \
  X(nvmlDeviceGetMinorNumber, false)                \
  X(nvmlDeviceGetPciInfo_v3, false)                 \
  X(nvmlDeviceGetMigMode, false)                    \
  X(nvmlDeviceGetMaxMigDeviceCount, false)          \
  X(nvmlDeviceGetMigDeviceHandleByIndex, false)     \
  X(nvmlEventSetCreate, false)                      \
  X(nvmlEventSetFree, false)                        \
  X(nvmlDeviceGetSupportedEventTypes, false)        \
  X(nvmlDeviceRegisterEvents, false)                \
  X(nvmlEventSetWait_v2, false)                     \
  X(nvmlDeviceGetHandleByUUID, false)               \
  X(nvmlDeviceGetComputeRunningProcesses_v3, false) \
  X(nvmlDeviceGetProcessUtilization, false)

struct NvmlGpuSource::Api {
#define TESSERA_AGENT_NVML_PTR(sym, required) decltype(&::sym) sym = nullptr;
  TESSERA_AGENT_NVML(TESSERA_AGENT_NVML_PTR)
#undef TESSERA_AGENT_NVML_PTR
};

namespace {

// Critical XIDs, after NVIDIA's XID catalog ("XID Errors", GPU deployment and management docs):
// each names a fault of the GPU itself (memory, micro-controllers, bus, NVLink, GSP) whose
// documented action is a GPU reset or node drain, never "fix the application".
constexpr std::uint64_t kCriticalXids[] = {
    48,   // double-bit ECC error
    62,   // internal micro-controller halt
    63,   // ECC page retirement / row-remapping event (reset needed to take effect)
    64,   // ECC page retirement / row-remapper recording failure
    74,   // NVLink error
    79,   // GPU has fallen off the bus
    92,   // high single-bit ECC error rate
    94,   // contained ECC error (reset needed to clear)
    95,   // uncontained ECC error
    119,  // GSP RPC timeout
    120,  // GSP error
};

std::string ErrorText(const NvmlGpuSource::Api& api, nvmlReturn_t rc) {
  std::string text = "NVML error " + std::to_string(static_cast<int>(rc));
  if (api.nvmlErrorString != nullptr) {
    if (const char* message = api.nvmlErrorString(rc)) text += " (" + std::string(message) + ")";
  }
  return text;
}

Status CallError(const NvmlGpuSource::Api& api, std::string_view call, nvmlReturn_t rc) {
  std::string message = std::string(call) + ": " + ErrorText(api, rc);
  if (rc == NVML_ERROR_DRIVER_NOT_LOADED || rc == NVML_ERROR_LIB_RM_VERSION_MISMATCH ||
      rc == NVML_ERROR_GPU_IS_LOST) {
    return UnavailableError(std::move(message));
  }
  return InternalError(std::move(message));
}

std::string Fixed(const char* text, std::size_t size) {
  std::size_t n = 0;
  while (n < size && text[n] != '\0') ++n;
  return std::string(text, n);
}

// "1g.18gb" from a MIG device's attributes.
std::string MigProfile(unsigned int slices, unsigned long long memory_mib) {
  const auto gb =
      static_cast<unsigned long long>(std::llround(static_cast<double>(memory_mib) / 1024.0));
  return std::to_string(slices) + "g." + std::to_string(gb) + "gb";
}

// /sys/bus/pci/devices/<domain:bus:device.function>/numa_node for NVML's bus id
// ("00000000:1B:00.0": an 8-digit domain, upper case). -1 when unknown.
int SysfsNumaNode(const char* bus_id) {
  std::string id(bus_id);
  if (id.size() > 12 && id.find(':') == 8) id = id.substr(4);  // 4-digit domain, as sysfs names it
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto text = ReadFile("/sys/bus/pci/devices/" + id + "/numa_node", 64);
  if (!text.ok()) return -1;
  int node = -1;
  const char* begin = text->data();
  const char* end = begin + text->size();
  while (begin < end && *begin == ' ') ++begin;
  if (std::from_chars(begin, end, node).ec != std::errc()) return -1;
  return node;
}

}  // namespace

bool IsCriticalXid(std::uint64_t xid) {
  for (std::uint64_t critical : kCriticalXids) {
    if (critical == xid) return true;
  }
  return false;
}

std::optional<std::string> ClassifyEvent(unsigned long long event_type,
                                         unsigned long long event_data) {
  if ((event_type & nvmlEventTypeDoubleBitEccError) != 0) return "ECC double-bit";
  if ((event_type & nvmlEventTypeXidCriticalError) != 0 && IsCriticalXid(event_data)) {
    return "XID " + std::to_string(event_data);
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<NvmlGpuSource>> NvmlGpuSource::Open(const std::string& library,
                                                             const std::string& cuda_library) {
  std::unique_ptr<NvmlGpuSource> source(new NvmlGpuSource());
  source->cuda_library_ = cuda_library;
  // RTLD_NODELETE: NVML keeps threads and heap state behind its globals; unloading it at exit
  // gains nothing and turns that state into leaks (LeakSanitizer reported them).
  source->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (source->library_ == nullptr) {
    const char* why = dlerror();
    return UnavailableError("NVML not available: dlopen " + library + ": " +
                            (why != nullptr ? why : "unknown error") +
                            " (is the NVIDIA driver installed on this node?)");
  }
  source->api_ = std::make_unique<Api>();
  Api& api = *source->api_;
#define TESSERA_AGENT_NVML_LOAD(sym, required)                                                  \
  api.sym = reinterpret_cast<decltype(&::sym)>(dlsym(source->library_, #sym));                  \
  if ((required) && api.sym == nullptr) {                                                       \
    return UnavailableError("NVML " + library + ": no entry point " #sym " (driver too old?)"); \
  }
  TESSERA_AGENT_NVML(TESSERA_AGENT_NVML_LOAD)
#undef TESSERA_AGENT_NVML_LOAD
  if (nvmlReturn_t rc = api.nvmlInit_v2(); rc != NVML_SUCCESS) {
    return CallError(api, "nvmlInit_v2", rc);
  }
  source->initialized_ = true;
  return source;
}

NvmlGpuSource::~NvmlGpuSource() {
  if (api_ != nullptr) {
    if (event_set_ != nullptr && api_->nvmlEventSetFree != nullptr) {
      (void)api_->nvmlEventSetFree(static_cast<nvmlEventSet_t>(event_set_));
    }
    if (initialized_) (void)api_->nvmlShutdown();
  }
  if (library_ != nullptr) dlclose(library_);  // a no-op unload (RTLD_NODELETE): drops the handle
}

namespace {

StatusOr<nvmlDevice_t> DeviceByUuid(const NvmlGpuSource::Api& api, const std::string& uuid) {
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t rc = api.nvmlDeviceGetHandleByUUID(uuid.c_str(), &device); rc != NVML_SUCCESS) {
    return CallError(api, "nvmlDeviceGetHandleByUUID(" + uuid + ")", rc);
  }
  return device;
}

// A list NVML writes into the caller's buffer: `call(buffer, &count)`, the buffer grown while
// NVML says it is too small. `what` names the call in errors.
template <typename T, typename Call>
StatusOr<std::vector<T>> ReadList(const NvmlGpuSource::Api& api, const std::string& what,
                                  const Call& call) {
  std::vector<T> items(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(items.size());
    const nvmlReturn_t rc = call(items.data(), &count);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      items.resize(count + 16);
      continue;
    }
    if (rc != NVML_SUCCESS) return CallError(api, what, rc);
    items.resize(std::min<std::size_t>(count, items.size()));
    return items;
  }
  return UnavailableError(what + ": the list kept growing");
}

}  // namespace

StatusOr<std::vector<GpuProcess>> NvmlGpuSource::Processes(const std::string& uuid) {
  const Api& api = *api_;
  if (api.nvmlDeviceGetHandleByUUID == nullptr ||
      api.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) {
    return FailedPreconditionError(
        "this NVML has no per-process memory (nvmlDeviceGetComputeRunningProcesses_v3)");
  }
  const StatusOr<nvmlDevice_t> device = DeviceByUuid(api, uuid);
  if (!device.ok()) return device.status();
  const auto infos = ReadList<nvmlProcessInfo_t>(
      api, "nvmlDeviceGetComputeRunningProcesses_v3(" + uuid + ")",
      [&](nvmlProcessInfo_t* buffer, unsigned int* count) {
        return api.nvmlDeviceGetComputeRunningProcesses_v3(*device, count, buffer);
      });
  if (!infos.ok()) return infos.status();
  std::vector<GpuProcess> out;
  for (const nvmlProcessInfo_t& info : *infos) {
    const bool known =
        info.usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE);
    out.push_back({info.pid, known ? info.usedGpuMemory : 0});
  }
  return out;
}

StatusOr<std::vector<UtilizationSample>> NvmlGpuSource::ProcessUtilization(const std::string& uuid,
                                                                           std::uint64_t since_us) {
  const Api& api = *api_;
  if (api.nvmlDeviceGetHandleByUUID == nullptr || api.nvmlDeviceGetProcessUtilization == nullptr) {
    return FailedPreconditionError(
        "this NVML has no per-process utilization (nvmlDeviceGetProcessUtilization)");
  }
  const StatusOr<nvmlDevice_t> device = DeviceByUuid(api, uuid);
  if (!device.ok()) return device.status();
  const auto samples = ReadList<nvmlProcessUtilizationSample_t>(
      api, "nvmlDeviceGetProcessUtilization(" + uuid + ")",
      [&](nvmlProcessUtilizationSample_t* buffer, unsigned int* count) {
        const nvmlReturn_t rc =
            api.nvmlDeviceGetProcessUtilization(*device, buffer, count, since_us);
        if (rc != NVML_ERROR_NOT_FOUND) return rc;
        *count = 0;  // no sample since `since_us`
        return NVML_SUCCESS;
      });
  if (!samples.ok()) return samples.status();
  std::vector<UtilizationSample> out;
  for (const nvmlProcessUtilizationSample_t& s : *samples)
    out.push_back({s.pid, s.timeStamp, s.smUtil});
  return out;
}

StatusOr<std::vector<GpuFacts>> NvmlGpuSource::Discover() {
  const Api& api = *api_;
  unsigned int count = 0;
  if (nvmlReturn_t rc = api.nvmlDeviceGetCount_v2(&count); rc != NVML_SUCCESS) {
    return CallError(api, "nvmlDeviceGetCount_v2", rc);
  }
  std::vector<GpuFacts> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    const std::string where = "(GPU " + std::to_string(i) + ")";
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t rc = api.nvmlDeviceGetHandleByIndex_v2(i, &device); rc != NVML_SUCCESS) {
      return CallError(api, "nvmlDeviceGetHandleByIndex_v2" + where, rc);
    }
    GpuFacts gpu;
    gpu.index = static_cast<int>(i);
    char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t rc = api.nvmlDeviceGetUUID(device, text, sizeof(text)); rc != NVML_SUCCESS) {
      return CallError(api, "nvmlDeviceGetUUID" + where, rc);
    }
    gpu.uuid = Fixed(text, sizeof(text));
    if (nvmlReturn_t rc = api.nvmlDeviceGetName(device, text, sizeof(text)); rc != NVML_SUCCESS) {
      return CallError(api, "nvmlDeviceGetName" + where, rc);
    }
    gpu.model = Fixed(text, sizeof(text));
    nvmlMemory_t memory{};
    if (nvmlReturn_t rc = api.nvmlDeviceGetMemoryInfo(device, &memory); rc != NVML_SUCCESS) {
      return CallError(api, "nvmlDeviceGetMemoryInfo" + where, rc);
    }
    gpu.memory_bytes = memory.total;
    if (api.nvmlDeviceGetAttributes_v2 != nullptr) {
      nvmlDeviceAttributes_t attributes{};
      nvmlReturn_t rc = api.nvmlDeviceGetAttributes_v2(device, &attributes);
      if (rc == NVML_SUCCESS) {
        gpu.sm_count = attributes.multiprocessorCount;
      } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
        TESSERA_LOG(kWarn, kAgent, "%s: SM count unknown",
                    CallError(api, "nvmlDeviceGetAttributes_v2" + where, rc).message().c_str());
      }
    }
    if (api.nvmlDeviceGetMinorNumber != nullptr) {
      unsigned int minor = 0;
      if (api.nvmlDeviceGetMinorNumber(device, &minor) == NVML_SUCCESS) {
        gpu.minor = static_cast<int>(minor);
      }
    }
    if (api.nvmlDeviceGetNumaNodeId != nullptr) {
      unsigned int node = 0;
      if (api.nvmlDeviceGetNumaNodeId(device, &node) == NVML_SUCCESS) {
        gpu.numa_node = static_cast<int>(node);
      }
    }
    if (gpu.numa_node < 0 && api.nvmlDeviceGetPciInfo_v3 != nullptr) {
      // Older drivers (and some VMs) answer NOT_SUPPORTED: the kernel knows it from the PCI bus.
      nvmlPciInfo_t pci{};
      if (api.nvmlDeviceGetPciInfo_v3(device, &pci) == NVML_SUCCESS) {
        gpu.numa_node = SysfsNumaNode(pci.busId);
      }
    }
    if (api.nvmlDeviceGetMigMode != nullptr) {
      unsigned int current = NVML_DEVICE_MIG_DISABLE;
      unsigned int pending = NVML_DEVICE_MIG_DISABLE;
      nvmlReturn_t rc = api.nvmlDeviceGetMigMode(device, &current, &pending);
      if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED) {
        return CallError(api, "nvmlDeviceGetMigMode" + where, rc);
      }
      gpu.mig_enabled = rc == NVML_SUCCESS && current == NVML_DEVICE_MIG_ENABLE;
    }
    if (gpu.mig_enabled && api.nvmlDeviceGetMaxMigDeviceCount != nullptr &&
        api.nvmlDeviceGetMigDeviceHandleByIndex != nullptr) {
      unsigned int max = 0;
      if (nvmlReturn_t rc = api.nvmlDeviceGetMaxMigDeviceCount(device, &max); rc != NVML_SUCCESS) {
        return CallError(api, "nvmlDeviceGetMaxMigDeviceCount" + where, rc);
      }
      for (unsigned int m = 0; m < max; ++m) {
        nvmlDevice_t mig = nullptr;
        nvmlReturn_t rc = api.nvmlDeviceGetMigDeviceHandleByIndex(device, m, &mig);
        if (rc == NVML_ERROR_NOT_FOUND) continue;  // an empty slot
        const std::string mig_where =
            "(GPU " + std::to_string(i) + " MIG " + std::to_string(m) + ")";
        if (rc != NVML_SUCCESS)
          return CallError(api, "nvmlDeviceGetMigDeviceHandleByIndex" + mig_where, rc);
        MigInstance instance;
        if (rc = api.nvmlDeviceGetUUID(mig, text, sizeof(text)); rc != NVML_SUCCESS) {
          return CallError(api, "nvmlDeviceGetUUID" + mig_where, rc);
        }
        instance.uuid = Fixed(text, sizeof(text));
        nvmlMemory_t mig_memory{};
        if (rc = api.nvmlDeviceGetMemoryInfo(mig, &mig_memory); rc != NVML_SUCCESS) {
          return CallError(api, "nvmlDeviceGetMemoryInfo" + mig_where, rc);
        }
        instance.memory_bytes = mig_memory.total;
        if (api.nvmlDeviceGetAttributes_v2 != nullptr) {
          nvmlDeviceAttributes_t attributes{};
          if (api.nvmlDeviceGetAttributes_v2(mig, &attributes) == NVML_SUCCESS) {
            instance.sm_count = attributes.multiprocessorCount;
            instance.profile =
                MigProfile(attributes.gpuInstanceSliceCount, attributes.memorySizeMB);
          }
        }
        gpu.mig_instances.push_back(std::move(instance));
      }
    }
    gpus.push_back(std::move(gpu));
  }
  // SM counts NVML does not give come from the CUDA driver, in a child process (a cuInit of every
  // GPU): asked once per GPU, not at every rediscovery; a GPU it could not count stays unknown.
  bool unseen = false;
  for (const GpuFacts& g : gpus)
    unseen = unseen || (g.sm_count == 0 && !cuda_sm_counts_.contains(g.uuid));
  if (unseen) {
    const std::map<std::string, std::uint32_t> sms = ProbeSmCounts(cuda_library_);
    for (const GpuFacts& g : gpus) {
      const auto it = sms.find(g.uuid);
      cuda_sm_counts_[g.uuid] = it != sms.end() ? it->second : 0;
    }
  }
  for (GpuFacts& g : gpus) {
    if (auto it = cuda_sm_counts_.find(g.uuid); g.sm_count == 0 && it != cuda_sm_counts_.end())
      g.sm_count = it->second;
  }
  return gpus;
}

Status NvmlGpuSource::RegisterEvents() {
  const Api& api = *api_;
  if (api.nvmlEventSetCreate == nullptr || api.nvmlDeviceRegisterEvents == nullptr ||
      api.nvmlEventSetWait_v2 == nullptr) {
    return UnavailableError("NVML has no event API (nvmlEventSetCreate/nvmlEventSetWait_v2)");
  }
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t rc = api.nvmlEventSetCreate(&set); rc != NVML_SUCCESS) {
    return CallError(api, "nvmlEventSetCreate", rc);
  }
  event_set_ = set;
  unsigned int count = 0;
  if (nvmlReturn_t rc = api.nvmlDeviceGetCount_v2(&count); rc != NVML_SUCCESS) {
    return CallError(api, "nvmlDeviceGetCount_v2", rc);
  }
  constexpr unsigned long long kWanted = nvmlEventTypeXidCriticalError |
                                         nvmlEventTypeDoubleBitEccError |
                                         nvmlEventTypeSingleBitEccError;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t rc = api.nvmlDeviceGetHandleByIndex_v2(i, &device); rc != NVML_SUCCESS) {
      return CallError(api, "nvmlDeviceGetHandleByIndex_v2(GPU " + std::to_string(i) + ")", rc);
    }
    unsigned long long types = kWanted;
    if (api.nvmlDeviceGetSupportedEventTypes != nullptr) {
      unsigned long long supported = 0;
      if (api.nvmlDeviceGetSupportedEventTypes(device, &supported) == NVML_SUCCESS) {
        types &= supported;
      }
    }
    if (types == 0) {
      TESSERA_LOG(kWarn, kAgent, "GPU %u supports no health events; its health is not watched", i);
      continue;
    }
    if (nvmlReturn_t rc = api.nvmlDeviceRegisterEvents(device, types, set); rc != NVML_SUCCESS) {
      TESSERA_LOG(kWarn, kAgent, "%s; its health is not watched",
                  CallError(api, "nvmlDeviceRegisterEvents(GPU " + std::to_string(i) + ")", rc)
                      .message()
                      .c_str());
    }
  }
  events_registered_ = true;
  return Status::Ok();
}

StatusOr<std::optional<HealthEvent>> NvmlGpuSource::WaitHealthEvent(
    std::chrono::milliseconds timeout) {
  if (!events_registered_) TESSERA_RETURN_IF_ERROR(RegisterEvents());
  const Api& api = *api_;
  nvmlEventData_t data{};
  const auto ms = static_cast<unsigned int>(timeout.count() < 0 ? 0 : timeout.count());
  nvmlReturn_t rc = api.nvmlEventSetWait_v2(static_cast<nvmlEventSet_t>(event_set_), &data, ms);
  if (rc == NVML_ERROR_TIMEOUT) return std::optional<HealthEvent>();
  if (rc != NVML_SUCCESS) return CallError(api, "nvmlEventSetWait_v2", rc);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (nvmlReturn_t u = api.nvmlDeviceGetUUID(data.device, uuid, sizeof(uuid)); u != NVML_SUCCESS) {
    return CallError(api, "nvmlDeviceGetUUID(event device)", u);
  }
  std::optional<std::string> reason = ClassifyEvent(data.eventType, data.eventData);
  if (!reason) {
    TESSERA_LOG(kInfo, kAgent, "GPU %s: event type 0x%llx data %llu: not node health", uuid,
                data.eventType, data.eventData);
    return std::optional<HealthEvent>(HealthEvent{Fixed(uuid, sizeof(uuid)), ""});
  }
  return std::optional<HealthEvent>(HealthEvent{Fixed(uuid, sizeof(uuid)), *reason});
}

}  // namespace tessera::agent
