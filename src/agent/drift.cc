#include "agent/drift.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "tessera/file.h"
#include "tessera/json_writer.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"
#include "tessera/text.h"

namespace tessera::agent {
namespace {

// Whether a cgroup path names the pod: cgroupfs ("pod<uid>") or systemd
// ("pod<uid_with_underscores>").
bool CgroupNamesPod(const std::string& cgroup, const std::string& uid) {
  if (uid.empty() || cgroup.empty()) return false;
  std::string systemd = uid;
  std::replace(systemd.begin(), systemd.end(), '-', '_');
  return cgroup.find("pod" + uid) != std::string::npos ||
         cgroup.find("pod" + systemd) != std::string::npos;
}

struct RegionView {
  bool readable = false;
  std::set<unsigned int> pids;
  std::map<std::string, std::uint64_t> used;       // by UUID
  std::map<std::string, std::uint64_t> throttled;  // by UUID: ns held for the share or a turn
  std::map<std::string, std::uint64_t> held;       // by UUID: ns held for a higher class
};

std::uint64_t ValueOr(const std::map<std::string, std::uint64_t>& by_uuid,
                      const std::string& uuid) {
  const auto it = by_uuid.find(uuid);
  return it == by_uuid.end() ? 0 : it->second;
}

RegionView ReadRegion(const std::string& path) {
  RegionView view;
  auto m =
      shm::RegionCopy::Read(path);  // a private copy (truncation-safe); the previous layout too
  if (!m.ok()) return view;
  view.readable = true;
  const shm::Region& r = m->region();
  for (const auto& slot : r.slots) {
    if (slot.state.load() == 1 && slot.pid > 0)
      view.pids.insert(static_cast<unsigned int>(slot.pid));
  }
  for (std::uint32_t d = 0; d < std::min<std::uint32_t>(r.header.device_count, shm::kMaxDevices);
       ++d) {
    const std::string uuid(r.devices[d].uuid, strnlen(r.devices[d].uuid, shm::kUuidBytes));
    view.used[uuid] = shm::UsedBytes(r, static_cast<int>(d));
    view.throttled[uuid] = r.compute[d].throttled_ns.load();
    view.held[uuid] = r.compute[d].priority_held_ns.load();
  }
  return view;
}

}  // namespace

std::string ProcCgroupOf(unsigned int pid) {
  return ReadFile("/proc/" + std::to_string(pid) + "/cgroup", 64u << 10).value_or("");
}

unsigned int ProcNsPidOf(unsigned int pid) {
  const StatusOr<std::string> status =
      ReadFile("/proc/" + std::to_string(pid) + "/status", 64u << 10);
  if (!status.ok()) return 0;
  std::istringstream lines(*status);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream fields(line.substr(6));
    unsigned int innermost = 0, value = 0;
    while (fields >> value) innermost = value;  // host first, the process's own namespace last
    return innermost;
  }
  return pid;
}

DriftReport CheckDrift(const std::vector<WatchedContainer>& containers,
                       const std::map<std::string, std::vector<GpuProcess>>& processes,
                       const CgroupOf& cgroup_of) {
  DriftReport report;
  std::vector<RegionView> regions;
  regions.reserve(containers.size());
  for (const WatchedContainer& c : containers) regions.push_back(ReadRegion(c.region_path));
  for (const auto& [uuid, list] : processes) {
    // Which container each process belongs to (first match wins; a PID is in one cgroup).
    std::map<std::size_t, std::vector<GpuProcess>> owned;
    for (const GpuProcess& p : list) {
      const std::string cgroup = cgroup_of(p.pid);
      std::optional<std::size_t> owner;
      for (std::size_t i = 0; i < containers.size() && !owner; ++i) {
        bool on_gpu = false;
        for (const auto& d : containers[i].limits.devices) on_gpu |= d.uuid == uuid;
        if (!on_gpu) continue;
        if (CgroupNamesPod(cgroup, containers[i].limits.pod_uid) ||
            regions[i].pids.count(p.pid) != 0)
          owner = i;
      }
      if (owner) {
        owned[*owner].push_back(p);
      } else if (p.bytes > 0) {
        report.unattributed.push_back({uuid, p});
      }
    }
    for (std::size_t i = 0; i < containers.size(); ++i) {
      const WatchedContainer& c = containers[i];
      for (const auto& d : c.limits.devices) {
        if (d.uuid != uuid) continue;
        ContainerDrift drift;
        drift.id = c.id;
        drift.pod = c.limits.pod;
        drift.pod_uid = c.limits.pod_uid;
        drift.container = c.limits.container;
        drift.uuid = uuid;
        drift.cap_bytes = d.memory_bytes;
        drift.cores_percent = d.cores_percent;
        drift.compute = c.limits.compute;
        drift.mode = c.limits.mode;
        drift.region_readable = regions[i].readable;
        drift.slot_pids = regions[i].pids;
        // Waiting for others: held for a higher class, and a work-conserving share's turns. A
        // hard share is held at its own cap however idle the GPU is: not evidence of others.
        drift.waited_ns = ValueOr(regions[i].held, uuid);
        if (c.limits.compute == ComputeMode::kWorkConserving)
          drift.waited_ns += ValueOr(regions[i].throttled, uuid);
        drift.region_bytes = ValueOr(regions[i].used, uuid);
        for (const GpuProcess& p : owned[i]) {
          drift.nvml_bytes += p.bytes;
          drift.pids.push_back(p.pid);
        }
        report.containers.push_back(std::move(drift));
      }
    }
  }
  return report;
}

bool MapsLibraryFile(std::string_view maps, const LibraryFile& file) {
  constexpr std::string_view kDeleted = " (deleted)";
  // Each line: address perms offset MAJOR:MINOR inode [path] (device numbers in hex).
  while (!maps.empty()) {
    const std::size_t end = maps.find('\n');
    const std::string_view line = maps.substr(0, end);
    maps = end == std::string_view::npos ? std::string_view() : maps.substr(end + 1);
    const std::vector<std::string_view> words = SplitWords(line);
    std::uint64_t inode = 0;
    if (words.size() < 5 ||
        std::from_chars(words[4].data(), words[4].data() + words[4].size(), inode).ec !=
            std::errc() ||
        inode == 0)
      continue;
    unsigned int major = 0, minor = 0;
    const std::string device(words[3]);
    if (file.inode != 0 && inode == file.inode &&
        std::sscanf(device.c_str(), "%x:%x", &major, &minor) == 2 && major == file.major &&
        minor == file.minor)
      return true;
    if (words.size() < 6) continue;
    // The path: the rest of the line (it may hold spaces).
    std::string_view path = line.substr(static_cast<std::size_t>(words[5].data() - line.data()));
    if (path.ends_with(kDeleted)) path.remove_suffix(kDeleted.size());
    if (std::find(file.paths.begin(), file.paths.end(), path) != file.paths.end()) return true;
  }
  return false;
}

MapsLibrary ProcMapsLibrary(const std::string& library) {
  return [library](unsigned int pid) -> std::optional<bool> {
    // The file as it is now (one stat a process and pass). Unknown: no answer, rather than every
    // process "outside the library".
    struct stat st {};
    if (library.empty() || stat(library.c_str(), &st) != 0) return std::nullopt;
    LibraryFile file;
    file.major = major(st.st_dev);
    file.minor = minor(st.st_dev);
    file.inode = st.st_ino;
    // After an upgrade replaced the file, its path (here or in the container) is what matches.
    file.paths = {library, std::string(names::kPathHookLibrary)};
    const StatusOr<std::string> maps =
        ReadFile("/proc/" + std::to_string(pid) + "/maps", 64u << 20);
    if (!maps.ok() || maps->empty()) return std::nullopt;  // gone, or not ours to read
    return MapsLibraryFile(*maps, file);
  };
}

std::vector<ComputeTenant> ComputeTenantsOf(
    const DriftReport& report, const std::function<unsigned int(unsigned int)>& ns_pid_of,
    const MapsLibrary& maps_library) {
  std::vector<ComputeTenant> tenants;
  for (const ContainerDrift& c : report.containers) {
    ComputeTenant t;
    t.key = c.id + "/" + c.uuid;
    t.uuid = c.uuid;
    t.share_percent = c.cores_percent;
    t.mode = c.compute;
    t.waited_ns = c.waited_ns;
    t.spatial = c.mode == SharingMode::kMps;
    for (unsigned int pid : c.pids) {
      t.pids.insert(pid);
      if (!c.region_readable) continue;
      const unsigned int ns_pid = ns_pid_of(pid);
      if (ns_pid == 0) continue;  // gone
      if (c.slot_pids.count(ns_pid) == 0 || (maps_library && maps_library(pid) == false))
        t.ungoverned.insert(pid);
    }
    tenants.push_back(std::move(t));
  }
  return tenants;
}

std::string FormatDrift(const DriftReport& report) {
  std::ostringstream out;
  for (const ContainerDrift& c : report.containers) {
    out << (c.over_cap() ? "OVER CAP " : "ok       ") << c.pod << " " << c.container << " on "
        << c.uuid << ": NVML " << FormatBytesHuman(c.nvml_bytes) << ", region "
        << FormatBytesHuman(c.region_bytes) << ", cap " << FormatBytesHuman(c.cap_bytes)
        << ", drift " << (c.drift_bytes() < 0 ? "-" : "+")
        << FormatBytesHuman(
               static_cast<std::uint64_t>(c.drift_bytes() < 0 ? -c.drift_bytes() : c.drift_bytes()))
        << " (" << c.pids.size() << " process(es))\n";
  }
  for (const UnattributedProcess& u : report.unattributed) {
    out << "UNATTRIBUTED pid " << u.process.pid << " on " << u.uuid << ": "
        << FormatBytesHuman(u.process.bytes) << " outside every tessera container\n";
  }
  return out.str();
}

std::string DriftJson(const DriftReport& report) {
  std::string out;
  {
    ObjectWriter o(out);
    AppendJsonArray(
        o.Field("containers"), report.containers, [](const ContainerDrift& c, std::string& into) {
          ObjectWriter w(into);
          w.Str("id", c.id);
          w.Str("pod", c.pod);
          w.Str("podUid", c.pod_uid);
          w.Str("container", c.container);
          w.Str("uuid", c.uuid);
          w.Num("capBytes", c.cap_bytes);
          w.Num("regionBytes", c.region_bytes);
          w.Num("nvmlBytes", c.nvml_bytes);
          w.Num("driftBytes", c.drift_bytes());
          w.Bool("overCap", c.over_cap());
          AppendJsonArray(w.Field("pids"), c.pids,
                          [](unsigned int pid, std::string& p) { p += std::to_string(pid); });
        });
    AppendJsonArray(o.Field("unattributed"), report.unattributed,
                    [](const UnattributedProcess& u, std::string& into) {
                      ObjectWriter w(into);
                      w.Str("uuid", u.uuid);
                      w.Num("pid", u.process.pid);
                      w.Num("bytes", u.process.bytes);
                    });
  }
  out += '\n';
  return out;
}

}  // namespace tessera::agent
