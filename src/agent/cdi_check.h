// Whether the container runtime applied each slot's CDI device (issue #24; docs/design/0021).
// kubelet itself mounts a slot's limits folder, region folder and preload library (the device
// plugin's Allocate answer), so those reach the container whatever the runtime; its GPUs' device
// nodes and the driver's libraries come only through the slot's CDI device
// (tessera.dev/gpu=<slot>). A runtime that ignores CDI (containerd before 1.7 or without
// enable_cdi, CRI-O before 1.23) starts the container without its GPU — still enforced, but its
// CUDA calls find no device and nothing says why; a runtime that cannot find the device's spec
// (its spec folders do not include tessera-node's) refuses to create the container. Each pass of
// the clean-up thread reads, for every slot's container that is due, its Pod's status (a container
// found with or without its device is due again after kRecheck, in case it restarted under a
// reconfigured runtime; one not running yet, or ended, after kRetry, doubled each time up to
// kRecheck):
//   - running: one of its processes (host PIDs whose cgroup is the container's) must have the
//     spec mounted at /etc/tessera-cdi.json (/proc/PID/mountinfo, readable without ptrace); the
//     spec mounts itself, so only a runtime that applied the device made that mount. If none has
//     it, the Pod is told (TesseraCdiNotApplied), once per container, and the Node once.
//   - waiting, the runtime having refused it with a message that names its device (or "CDI
//     device"): the Pod is told once
//     (TesseraCdiUnresolved) where tessera-node wrote the spec and whether it is still there.
// The kubelet reports a container running only after the runtime started it (mounts made), and
// runc's init process is never asked, so a container being set up is not mistaken for one
// without its device.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/drift.h"
#include "agent/drift_actions.h"

namespace tessera::agent {

// Whether a /proc/PID/cgroup text names the container `container_id` (a runtime's ID, without
// "containerd://") as its own cgroup's leaf: "<id>" (cgroupfs) or "...-<id>.scope" (systemd), never
// a runtime monitor's scope ("crio-conmon-<id>.scope").
bool CgroupNamesContainer(std::string_view cgroup, std::string_view container_id);
// The host PIDs whose cgroup names `container_id` (CgroupNamesContainer).
std::vector<unsigned int> ProcPidsOfContainer(std::string_view container_id);
// Whether the mount namespace of host process `pid` has a slot's CDI spec mounted
// (names::kPathCdiSpecInContainer): nullopt where it cannot be told (gone, unreadable, or the
// runtime's own init process still setting the container up).
std::optional<bool> ProcCdiSpecMounted(unsigned int pid);

struct CdiCheckDeps {
  using Clock = std::chrono::steady_clock;
  std::function<std::vector<WatchedContainer>()> containers;
  DriftApi* api = nullptr;  // the Pods' statuses, and the Events
  std::function<std::vector<unsigned int>(std::string_view container_id)> pids_of =
      ProcPidsOfContainer;
  std::function<std::optional<bool>(unsigned int pid)> spec_mounted = ProcCdiSpecMounted;
  // Where tessera-node writes a slot's CDI spec (agent/slots.h PathsOf), and whether it is there.
  std::function<std::string(std::string_view slot)> spec_path;
  std::function<bool(const std::string& path)> exists;
  std::function<Clock::time_point()> now = Clock::now;
};

class CdiCheck {
 public:
  static constexpr std::chrono::seconds kRecheck{60};
  static constexpr std::chrono::seconds kRetry{5};  // doubled while nothing is concluded

  explicit CdiCheck(CdiCheckDeps deps) : deps_(std::move(deps)) {}
  void Pass();

  // Containers found running without their CDI device.
  std::uint64_t not_applied() const { return not_applied_; }

 private:
  struct Seen {
    CdiCheckDeps::Clock::time_point next_at{};  // not read again before
    int misses = 0;                             // reads that concluded nothing, in a row
    std::string told_id;  // the container ID last found without it (told once per ID)
    bool told_unresolved = false;
  };
  // One container of the pass; `seen` is carried to the next pass.
  void Check(const WatchedContainer& c, Seen& seen);

  CdiCheckDeps deps_;
  std::map<std::string, Seen> seen_;  // by slot
  bool told_node_ = false;
  std::uint64_t not_applied_ = 0;
};

}  // namespace tessera::agent
