#include "observe/observe.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/file.h"
#include "tessera/region.h"

#include "governor/arbiter_host.h"

namespace tessera::observe {
namespace {

// A limits file's text: only a regular file, at most 64 KiB (a registration in the machine-wide
// folder may name anything: a FIFO would block, /dev/zero would never end).

std::optional<ContainerSource> Source(std::string id, const std::string& limits_path,
                                      std::string region_path) {
  auto limits = ParseLimitsFile(ReadFile(limits_path, kMaxLimitsFileBytes).value_or(""));
  if (!limits.ok()) return std::nullopt;  // released, or being written: the next read sees it
  return ContainerSource{std::move(id), std::move(*limits), std::move(region_path)};
}

}  // namespace

std::vector<ContainerSource> StateDirContainers(const std::string& state_dir) {
  std::vector<ContainerSource> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/slots", ec)) {
    const std::string dir = entry.path().string();
    auto s = Source(entry.path().filename().string(), dir + "/" + std::string(kSlotLimitsFile),
                    dir + "/" + std::string(kSlotRegionFile));
    if (s) out.push_back(std::move(*s));
  }
  std::sort(out.begin(), out.end(),
            [](const ContainerSource& a, const ContainerSource& b) { return a.id < b.id; });
  return out;
}

std::vector<ContainerSource> LocalRunContainers(const std::string& arbiter_dir) {
  std::vector<ContainerSource> out;
  for (const auto& [limits_path, region_path] : governor::LocalRegistrations(arbiter_dir)) {
    if (auto s = Source(limits_path, limits_path, region_path)) out.push_back(std::move(*s));
  }
  return out;
}

std::vector<ContainerRow> ReadContainers(const std::vector<ContainerSource>& sources) {
  std::vector<ContainerRow> rows;
  for (const ContainerSource& source : sources) {
    const Limits& l = source.limits;
    // A private copy (a tenant may truncate its region at any time: a shared mapping would
    // SIGBUS); of the previous layout too, for a container still running the previous library.
    auto mapping = shm::RegionCopy::Read(source.region_path);
    const std::size_t slash = l.pod.find('/');
    for (const DeviceLimits& d : l.devices) {
      ContainerRow row;
      row.id = source.id;
      row.pod_uid = l.pod_uid;
      row.ns = slash == std::string::npos ? "" : l.pod.substr(0, slash);
      row.pod = slash == std::string::npos ? l.pod : l.pod.substr(slash + 1);
      row.container = l.container;
      row.uuid = d.uuid;
      row.priority = l.priority;
      row.mode = l.mode;
      row.compute = l.compute;
      row.limit_bytes = d.memory_bytes;
      row.cores_percent = d.cores_percent;
      const int device = mapping.ok() ? shm::FindDevice(mapping->region(), d.uuid) : -1;
      if (device >= 0) {
        const shm::Region& r = mapping->region();
        const shm::Device& dev = r.devices[device];
        row.region_readable = true;
        row.used_bytes = shm::UsedBytes(r, device);
        row.peak_bytes = dev.peak_bytes.load(std::memory_order_relaxed);
        row.oom_denials = dev.oom_rejections.load(std::memory_order_relaxed);
        if (!mapping->has_compute()) {
          rows.push_back(std::move(row));
          continue;
        }
        const shm::Compute& c = r.compute[device];
        row.compute_readable = true;
        row.busy_ns = c.busy_ns.load(std::memory_order_relaxed);
        row.throttled_ns = c.throttled_ns.load(std::memory_order_relaxed);
        row.priority_held_ns = c.priority_held_ns.load(std::memory_order_relaxed);
        row.priority_holds = c.priority_holds.load(std::memory_order_relaxed);
        row.launches = c.launches.load(std::memory_order_relaxed);
        row.launch_failures = c.launch_failures.load(std::memory_order_relaxed);
        row.governor_failures = c.governor_failures.load(std::memory_order_relaxed);
        row.governor_down_ns = c.governor_down_ns.load(std::memory_order_relaxed);
        const std::uint32_t gate = c.gate.load(std::memory_order_relaxed);
        row.gate = gate <= static_cast<std::uint32_t>(shm::Gate::kHeldPriority)
                       ? static_cast<shm::Gate>(gate)
                       : shm::Gate::kFree;
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

void ShareMeter::Update(std::vector<ContainerRow>& rows, std::uint64_t now_ns) {
  std::map<std::string, Seen> next;
  for (ContainerRow& row : rows) {
    if (!row.compute_readable) continue;  // no compute counters (layout 1, or no region)
    const std::string key = row.Key();
    Seen seen;
    auto it = seen_.find(key);
    if (it == seen_.end() || row.busy_ns < it->second.busy_ns) {  // new (or a re-created region)
      seen = {row.busy_ns, now_ns, std::nullopt};
    } else if (now_ns - it->second.at_ns >= min_window_ns_) {
      const double window = static_cast<double>(now_ns - it->second.at_ns);
      seen = {row.busy_ns, now_ns, static_cast<double>(row.busy_ns - it->second.busy_ns) / window};
    } else {
      seen = it->second;
    }
    row.delivered = seen.delivered;
    next[key] = seen;
  }
  seen_ = std::move(next);
}

}  // namespace tessera::observe
