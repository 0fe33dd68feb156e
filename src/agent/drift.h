// Drift detection (docs/design/0016-device-plugin.md §drift): what NVML says each tessera
// container really holds, against what its region says and what its decision allows. The preload
// library cannot do this itself: a process that bypasses it never runs it, and the tenant can
// write its own region. Dependency-free (the GPU host runs it through `tessera drift`).
//
// A GPU process belongs to a container when its cgroup names the container's pod (production:
// host PIDs, containers in their own PID namespaces) or when its PID holds a live slot of the
// container's region (one PID namespace: `tessera run`, tests). Anything else on a managed GPU is
// unattributed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/limits.h"
#include "tessera/status.h"

#include "agent/compute_drift.h"
#include "agent/nvml.h"
#include "observe/observe.h"

namespace tessera::agent {

// One container the node prepared: its limits file and region.
using WatchedContainer = observe::ContainerSource;

struct ContainerDrift {
  std::string id;
  std::string pod;  // namespace/name
  std::string pod_uid;
  std::string container;
  std::string uuid;  // the GPU
  std::uint64_t cap_bytes = 0;
  std::uint64_t region_bytes = 0;  // what the preload library accounted
  std::uint64_t nvml_bytes = 0;    // what NVML says the container's processes hold
  std::vector<unsigned int> pids;  // its processes on the GPU (host PIDs)
  // For the compute drift check (agent/compute_drift.h): its share on this GPU, its sharing
  // mode, whether its region could be read, the PIDs of the region's live slots (as the
  // processes see themselves: their own PID namespace's), and the time its launches waited for
  // others so far (from its region: held for a higher class, and a work-conserving share's
  // turns; a hard share's own cap is not waiting for others).
  std::uint32_t cores_percent = 0;
  ComputeMode compute = ComputeMode::kHard;
  SharingMode mode = SharingMode::kShared;
  bool region_readable = false;
  std::set<unsigned int> slot_pids;
  std::uint64_t waited_ns = 0;
  // NVML above the region: what the library could not see (module code, implicit growth,
  // bypassing processes) or a tenant who rewrote the region. Reported, not acted on.
  std::int64_t drift_bytes() const {
    return static_cast<std::int64_t>(nvml_bytes) - static_cast<std::int64_t>(region_bytes);
  }
  // Above the decision's cap: acted on.
  bool over_cap() const { return nvml_bytes > cap_bytes; }
};

struct UnattributedProcess {
  std::string uuid;
  GpuProcess process;
};

struct DriftReport {
  std::vector<ContainerDrift> containers;
  std::vector<UnattributedProcess> unattributed;
};

// The cgroup path of a host PID ("" if gone): /proc/<pid>/cgroup in production.
using CgroupOf = std::function<std::string(unsigned int pid)>;
std::string ProcCgroupOf(unsigned int pid);
// The PID a host process has in its own (innermost) PID namespace, from the NSpid line of
// /proc/<pid>/status (0 if gone or unreadable; the PID itself where there is no NSpid line).
unsigned int ProcNsPidOf(unsigned int pid);

// `processes`: NVML's processes of every GPU tessera manages, by UUID. Regions that cannot be
// read count as 0 bytes (the tenant may have broken its own region; NVML still tells the truth).
DriftReport CheckDrift(const std::vector<WatchedContainer>& containers,
                       const std::map<std::string, std::vector<GpuProcess>>& processes,
                       const CgroupOf& cgroup_of);

// Whether a host process maps the preload library: true, false, or nullopt where it cannot be
// told. A process that exec'd a program without the preload keeps its PID and start time, and so
// the live slot its first image claimed, but no longer maps the library.
using MapsLibrary = std::function<std::optional<bool>(unsigned int pid)>;
// From /proc/PID/maps: the library is the file at `library` by device and inode (what a
// container's read-only mount of it shares with the host's file; a copy elsewhere is not it), or
// by its path there or in the container (names.h), also as " (deleted)" where an upgrade replaced
// the file under a running process. Where the library or the maps cannot be read: nullopt.
MapsLibrary ProcMapsLibrary(const std::string& library);
struct LibraryFile {
  unsigned int major = 0, minor = 0;  // its file system's device
  std::uint64_t inode = 0;            // 0: not known
  std::vector<std::string> paths;
};
// Pure: whether the text of a /proc/PID/maps maps the file.
bool MapsLibraryFile(std::string_view maps, const LibraryFile& file);

// The compute drift check's view of the report's containers (agent/compute_drift.h): a tenant per
// container and GPU (key "<id>/<uuid>"), its processes, and among them the ungoverned ones: whose
// PID in their own namespace (`ns_pid_of`; 0: gone, left alone) holds no live slot of its region,
// or that do not map the library (`maps_library`, where given). None where the region cannot be
// read: a region being upgraded or recreated is no evidence.
std::vector<ComputeTenant> ComputeTenantsOf(
    const DriftReport& report, const std::function<unsigned int(unsigned int)>& ns_pid_of,
    const MapsLibrary& maps_library = {});

// One line per finding, for logs and `tessera drift`.
std::string FormatDrift(const DriftReport& report);
// The same as one JSON object, for `tessera drift --json` (docs/protocol.md):
// {"containers": [{id, pod, podUid, container, uuid, capBytes, regionBytes, nvmlBytes,
//   driftBytes, overCap, pids}], "unattributed": [{uuid, pid, bytes}]}
std::string DriftJson(const DriftReport& report);

}  // namespace tessera::agent
