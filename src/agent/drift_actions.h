// Drift enforcement (docs/design/0016-device-plugin.md §drift): what the node agent does about
// what agent/drift.h finds. Every pass of the clean-up thread compares NVML's processes with the
// containers' regions and decisions, then, once per episode (an Event when a container crosses
// its cap, not every pass):
//   - a container above its cap: counted, acted on per its tier's onDrift (report, kill its GPU
//     processes, evict its pod), logged and told to its Pod (MemoryOverCap);
//   - drift above 256 MiB and 5% of the cap: told to its Pod (MemoryDrift);
//   - a process on a managed GPU that belongs to no tessera container: counted, logged and told
//     to the Node (UnattributedProcess);
//   - compute drift (agent/compute_drift.h: NVML's per-process utilization against the share,
//     or a process outside the library): counted, acted on per the tier's onDrift like a memory
//     cap, told to its Pod (ComputeDrift); a GPU whose samples cannot be read is told to the
//     Node (ComputeDriftUnchecked).
// Then the metrics' sample, and an Event for each container whose allocations were refused at
// its cap since the last sample (GpuMemoryDenied), at most one a minute per container.
//
// Everything it reads and does goes through DriftDeps: the agent wires NVML, the state folder,
// the API server and kill(2) (daemon.cc); tests wire fakes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "agent/compute_drift.h"
#include "agent/drift.h"
#include "agent/nvml.h"
#include "agent/slot_binder.h"
#include "k8s/watch.h"
#include "observe/observe.h"
#include "policy/policy.h"

namespace tessera::agent {

// The API server as drift enforcement needs it (production: the agent's pods and Events).
class DriftApi : public PodApi {
 public:
  // A Warning Event on this node (best effort).
  virtual void WarnNode(std::string_view reason, std::string_view message) = 0;
  // Evicts the pod (policy/v1 Eviction).
  virtual Status Evict(std::string_view ns, std::string_view name) = 0;
  // Events dropped so far (the recorder's queue was full): a metric.
  virtual std::uint64_t events_dropped() = 0;
};

// The parent PID of `pid` (0 if unknown), from /proc/<pid>/stat.
unsigned int ProcParentOf(unsigned int pid);
// Whether `pid` is a child of this process (the agent's context-size probes).
bool IsOwnChild(unsigned int pid);
// SIGKILL to a host PID.
void KillProcess(unsigned int pid);

struct DriftDeps {
  using Clock = std::chrono::steady_clock;

  // --- What a pass reads.
  GpuSource* gpus = nullptr;  // NVML's processes per GPU
  // The GPUs tessera manages now (the latest inventory).
  std::function<std::vector<std::string>()> managed;
  // The containers bound to slots (their limits files and regions).
  std::function<std::vector<WatchedContainer>()> containers;
  CgroupOf cgroup_of = ProcCgroupOf;
  // A host process's PID in its own namespace (what its slot in the region records).
  std::function<unsigned int(unsigned int pid)> ns_pid_of = ProcNsPidOf;
  // Whether a host process maps the preload library (ProcMapsLibrary; unset: slots alone tell).
  MapsLibrary maps_library;
  // NVML stamps utilization samples on the CPU's wall clock, in microseconds.
  std::function<std::uint64_t()> wall_us = [] {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  };
  ComputeDriftOptions compute{};
  // The agent's own processes (its context-size probes) are not tenants: true for them.
  std::function<bool(unsigned int pid)> own_process = IsOwnChild;
  std::function<Clock::time_point()> now = Clock::now;

  // --- The metrics; no `sample`: no sample, no GpuMemoryDenied Events, no counts.
  // One sample: NVML's bytes by container key (observe::ContainerRow::Key()) at `now_ns`;
  // returns the rows read from the regions.
  std::function<std::vector<observe::ContainerRow>(
      const std::map<std::string, std::uint64_t>& nvml_by_key, std::uint64_t now_ns)>
      sample;
  std::function<void(const observe::NodeCounts& counts)> set_counts;

  // --- What it does.
  DriftApi* api = nullptr;
  // The onDrift of the pod's tier (its decision under the node's policy).
  std::function<policy::DriftAction(const StatusOr<k8s::Json>& pod)> on_drift;
  // SIGKILL to a host PID.
  std::function<void(unsigned int pid)> kill = KillProcess;
};

class DriftActions {
 public:
  explicit DriftActions(DriftDeps deps);

  // One pass: Check() then Sample() of its figures.
  void Pass() { Sample(Check()); }

  // NVML against regions and decisions, acted on once per episode. Returns NVML's bytes per
  // container (observe::ContainerRow::Key()) for the metrics.
  std::map<std::string, std::uint64_t> Check();
  // The metrics' sample, GpuMemoryDenied Events and the counts (nothing without deps.sample).
  void Sample(const std::map<std::string, std::uint64_t>& nvml_by_key);

  // What the metrics endpoint counts (events_dropped from the API).
  observe::NodeCounts counts() const;

 private:
  void ReportDrift(const ContainerDrift& c);
  void ActOnOverCap(const ContainerDrift& c);
  // Compute drift over the containers of this pass (NVML's processes in `processes`).
  void CheckCompute(const DriftReport& report,
                    const std::map<std::string, std::vector<GpuProcess>>& processes);
  // One action and Event for a container's findings of a pass (report-only findings: no action).
  void ActOnCompute(const ContainerDrift& c, const std::vector<ComputeFinding>& findings);
  // The tier's onDrift for the pod `c` runs in: `pids` killed, or the pod evicted, or reported.
  // Returns what was done, for the Event.
  std::string Enforce(const ContainerDrift& c, const std::vector<unsigned int>& pids,
                      StatusOr<k8s::Json>* pod);

  DriftDeps deps_;
  ComputeDrift compute_;
  std::set<std::string> over_cap_, unattributed_;  // the episodes already acted on
  std::set<std::string> drifting_;                 // drift episodes already reported
  struct Told {
    std::uint64_t count = 0;            // denials already told (or there at start)
    DriftDeps::Clock::time_point at{};  // when the last Event went out
  };
  std::map<std::string, Told> denials_;   // by container key
  std::map<std::string, Told> failures_;  // launch failures, by container key
  std::map<std::string, Told> governor_;  // governor failures, by container key
  // A counter of `row` that rose since it was last told (`told`, updated): posts `reason` with
  // `message(risen by)` at most once a minute; what rose before the agent's first sample is not
  // told.
  void TellRise(std::map<std::string, Told>& told, std::map<std::string, Told>& next,
                const observe::ContainerRow& row, std::uint64_t count, std::string_view reason,
                const std::function<std::string(std::uint64_t)>& message);
  bool sampled_once_ = false;
  struct {
    std::uint64_t over_cap = 0, unattributed = 0, kills = 0, evictions = 0, compute = 0;
  } counters_;  // for the metrics endpoint (issue 11)
};

}  // namespace tessera::agent
