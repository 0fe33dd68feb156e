// What a node's GPUs are doing, per GPU and per container, for tessera-node's /metrics and
// `tessera top` (issue 11). Dependency-free (the GPU host builds it into `tessera top`).
//
// A Snapshot is read from the node-written limits files (trusted: caps, shares, classes) and the
// containers' regions (the preload library's accounting; writable by the tenant, which is why
// NVML's figure and the drift beside it come from the node agent). It renders as Prometheus text
// (labels compatible with dcgm-exporter's) and reads back from it, so `tessera top` shows a
// remote node from its /metrics exactly as a local one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/limits.h"
#include "tessera/model.h"
#include "tessera/shm_layout.h"
#include "tessera/status.h"

namespace tessera::observe {

struct GpuRow {
  int index = -1;  // NVML index; -1 unknown
  std::string uuid;
  std::string model;
  std::uint64_t memory_total = 0;  // 0 unknown
  bool healthy = true;
};

// One container on one GPU.
struct ContainerRow {
  std::string id;                  // its source (slot, or limits file): unique on the node
  std::string ns, pod, container;  // `tessera run`: ns "local", pod "tessera-run-<pid>"
  std::string pod_uid;
  std::string uuid;
  PriorityClass priority = PriorityClass::kNormal;
  SharingMode mode = SharingMode::kShared;
  ComputeMode compute = ComputeMode::kHard;
  std::uint64_t limit_bytes = 0;
  std::uint32_t cores_percent = 0;  // 0: no compute share
  bool region_readable = false;     // false: the counters below are unknown (0)
  bool compute_readable =
      false;  // false: a region of layout 1 (the previous library): no compute counters
  std::uint64_t used_bytes = 0, peak_bytes = 0, oom_denials = 0;
  std::uint64_t busy_ns = 0, throttled_ns = 0, priority_held_ns = 0, priority_holds = 0,
                launches = 0, launch_failures = 0, governor_failures = 0, governor_down_ns = 0;
  shm::Gate gate = shm::Gate::kFree;
  std::optional<std::uint64_t> nvml_bytes;  // only the node agent knows (NVML)
  std::optional<double> delivered;          // busy per wall second over the last window

  // Unique per container and GPU: a pod recreated under the same name while its old slot is
  // still there is another container.
  std::string Key() const { return id + "/" + ns + "/" + pod + "/" + container + "/" + uuid; }
  std::optional<std::int64_t> drift_bytes() const {
    if (!nvml_bytes) return std::nullopt;
    return static_cast<std::int64_t>(*nvml_bytes) - static_cast<std::int64_t>(used_bytes);
  }
};

struct NodeCounts {
  std::uint64_t over_cap = 0, unattributed = 0, kills = 0, evictions = 0, events_dropped = 0;
  std::uint64_t compute_drift = 0;  // episodes (agent/compute_drift.h)
};

struct Snapshot {
  std::string node;
  std::string version;
  std::vector<GpuRow> gpus;
  std::vector<ContainerRow> containers;
  std::optional<NodeCounts> counts;  // the node agent's; absent for a local `tessera top`
};

// A container's read-only limits file and its region.
struct ContainerSource {
  std::string id;  // slot name, or the limits file's path
  Limits limits;
  std::string region_path;
};

// A slot's files under <state>/slots/<slot>/ (tessera-node's layout, agent/slots.h).
inline constexpr std::string_view kSlotLimitsFile = "etc/limits";
inline constexpr std::string_view kSlotRegionFile = "run/region";

// The containers of a node's state folder (<state>/slots/<slot>/{etc/limits,run/region}).
std::vector<ContainerSource> StateDirContainers(const std::string& state_dir);
// The live `tessera run`s registered in `arbiter_dir` (governor::DefaultLocalArbiterDir()).
std::vector<ContainerSource> LocalRunContainers(const std::string& arbiter_dir);

// One row per device line of each limits file, with its region's counters where readable.
std::vector<ContainerRow> ReadContainers(const std::vector<ContainerSource>& sources);

// Delivered compute share: busy GPU time per wall second between two Update()s at least
// `min_window_ns` apart (earlier calls keep the previous figure).
class ShareMeter {
 public:
  explicit ShareMeter(std::uint64_t min_window_ns = 1'000'000'000)
      : min_window_ns_(min_window_ns) {}
  void Update(std::vector<ContainerRow>& rows, std::uint64_t now_ns);

 private:
  struct Seen {
    std::uint64_t busy_ns = 0, at_ns = 0;
    std::optional<double> delivered;
  };
  std::uint64_t min_window_ns_;
  std::map<std::string, Seen> seen_;
};

// Prometheus text of a snapshot (families of names::kAllMetrics with label sets
// node/gpu/container).
std::string RenderExposition(const Snapshot& snapshot);
// The snapshot a RenderExposition text describes (what `tessera top --from URL` reads).
StatusOr<Snapshot> SnapshotFromExposition(std::string_view text);

// `tessera top`: per GPU a header line (memory, shares, containers) and per container a line
// (cap, used, peak, NVML, delivered vs target, held, denials), at most `columns` wide.
std::string RenderTop(const Snapshot& snapshot, int columns = 100);
// The snapshot as one JSON object, for `tessera top --json` (docs/protocol.md).
std::string SnapshotJson(const Snapshot& snapshot);

}  // namespace tessera::observe
