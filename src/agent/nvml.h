// What the node agent learns from NVML: each GPU's facts (inventory) and health events.
//
// GpuSource is the seam: NvmlGpuSource talks to libnvidia-ml.so.1, loaded with dlopen at run
// time (the agent builds and starts without NVML; entry points are typed from nvml.h), and tests
// use a fake object. Every NVML failure becomes a Status naming the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

struct MigInstance {
  std::string uuid;
  std::string profile;  // "1g.18gb": GPU-instance slices + memory in GB (rounded)
  std::uint64_t memory_bytes = 0;
  std::uint32_t sm_count = 0;
  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};

struct GpuFacts {
  std::string uuid;
  int index = 0;
  // The kernel's minor number, /dev/nvidia<minor> (nvmlDeviceGetMinorNumber): not NVML's index,
  // which follows PCI order. -1: NVML could not tell (the index stands in).
  int minor = -1;
  std::string model;
  std::uint64_t memory_bytes = 0;
  std::uint32_t sm_count = 0;  // 0: NVML could not tell
  int numa_node = -1;          // -1: unknown or not a NUMA system
  bool mig_enabled = false;
  std::vector<MigInstance> mig_instances;
  friend bool operator==(const GpuFacts&, const GpuFacts&) = default;
};

// One NVML event of a GPU.
struct HealthEvent {
  std::string uuid;    // the physical GPU's UUID
  std::string reason;  // "XID 79", "ECC double-bit"; empty: not node health (application XID,
                       // single-bit ECC), logged only
};

// Device memory one process holds on a GPU, as NVML reports it (host PID).
struct GpuProcess {
  unsigned int pid = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const GpuProcess&, const GpuProcess&) = default;
};

// One NVML utilization sample of a process (nvmlDeviceGetProcessUtilization): the percentage of
// the driver's sample period in which a kernel of the process ran on the SMs, stamped on the
// CPU clock in microseconds.
struct UtilizationSample {
  unsigned int pid = 0;
  std::uint64_t timestamp_us = 0;
  unsigned int sm_percent = 0;
  friend bool operator==(const UtilizationSample&, const UtilizationSample&) = default;
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // The utilization samples of the processes on the GPU `uuid` stamped after `since_us` (0: all
  // the driver keeps); empty when no process ran since (compute drift checks).
  virtual StatusOr<std::vector<UtilizationSample>> ProcessUtilization(const std::string& uuid,
                                                                      std::uint64_t since_us) {
    (void)since_us;
    return FailedPreconditionError("no per-process utilization for " + uuid);
  }
  // The compute processes on the GPU `uuid` and their memory (drift checks).
  virtual StatusOr<std::vector<GpuProcess>> Processes(const std::string& uuid) {
    return FailedPreconditionError("no per-process data for " + uuid);
  }
  // Every GPU NVML sees, in NVML index order.
  virtual StatusOr<std::vector<GpuFacts>> Discover() = 0;
  // Waits up to `timeout` for the next event. nullopt: none came.
  virtual StatusOr<std::optional<HealthEvent>> WaitHealthEvent(
      std::chrono::milliseconds timeout) = 0;
};

// The critical XIDs (docs/design/0014): faults of the GPU, its memory or its links that need a
// GPU reset or node drain. Application XIDs (13, 31, 43, 45, ...) are not node health.
bool IsCriticalXid(std::uint64_t xid);

// The verdict on one NVML event (type mask bit, eventData): a reason when it makes the GPU
// unhealthy, nullopt otherwise (single-bit ECC, application XIDs, unknown types).
std::optional<std::string> ClassifyEvent(unsigned long long event_type,
                                         unsigned long long event_data);

class NvmlGpuSource : public GpuSource {
 public:
  // dlopen `library` (default libnvidia-ml.so.1), resolve its entry points, nvmlInit_v2.
  // kUnavailable when the library is missing; errors name the call that failed.
  // `cuda_library`: the CUDA driver asked for SM counts NVML does not give (ProbeSmCounts).
  static StatusOr<std::unique_ptr<NvmlGpuSource>> Open(
      const std::string& library = "libnvidia-ml.so.1",
      const std::string& cuda_library = "libcuda.so.1");
  ~NvmlGpuSource() override;

  StatusOr<std::vector<GpuFacts>> Discover() override;
  StatusOr<std::vector<GpuProcess>> Processes(const std::string& uuid) override;
  StatusOr<std::vector<UtilizationSample>> ProcessUtilization(const std::string& uuid,
                                                              std::uint64_t since_us) override;
  // Registers every GPU for the health events it supports on first use.
  StatusOr<std::optional<HealthEvent>> WaitHealthEvent(std::chrono::milliseconds timeout) override;

  struct Api;

 private:
  NvmlGpuSource() = default;
  Status RegisterEvents();

  void* library_ = nullptr;
  std::string cuda_library_;
  std::map<std::string, std::uint32_t> cuda_sm_counts_;  // ProbeSmCounts' answers by UUID (0: none)
  std::unique_ptr<Api> api_;
  bool initialized_ = false;
  void* event_set_ = nullptr;  // nvmlEventSet_t
  bool events_registered_ = false;
};

}  // namespace tessera::agent
