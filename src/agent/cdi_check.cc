#include "agent/cdi_check.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/mountinfo.h"
#include "tessera/names.h"

#include "agent/slots.h"

namespace tessera::agent {
namespace {

constexpr std::size_t kMaxMountTableBytes = std::size_t{4} << 20;
constexpr std::size_t kMaxRuntimeMessage = 300;  // of the runtime's error, quoted in the Event

// The status of the container named `name` (among the pod's containers and init containers),
// or nullptr.
const k8s::Json* StatusOf(const k8s::Json& pod, const std::string& name) {
  const auto status = pod.find("status");
  if (status == pod.end() || !status->is_object()) return nullptr;
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    const auto statuses = status->find(list);
    if (statuses == status->end() || !statuses->is_array()) continue;
    for (const k8s::Json& s : *statuses) {
      if (s.is_object() && s.value("name", "") == name) return &s;
    }
  }
  return nullptr;
}

// "containerd://abc" -> "abc" ("" if there is no ID).
std::string RuntimeIdOf(const k8s::Json& status) {
  const std::string id = status.value("containerID", "");
  const std::size_t sep = id.find("://");
  return sep == std::string::npos ? id : id.substr(sep + 3);
}

std::string PodKey(const Limits& l) { return l.pod + " container " + l.container; }

}  // namespace

bool CgroupNamesContainer(std::string_view cgroup, std::string_view container_id) {
  if (container_id.empty()) return false;
  std::size_t line = 0;
  while (line < cgroup.size()) {
    const std::size_t end = std::min(cgroup.find('\n', line), cgroup.size());
    std::string_view path = cgroup.substr(line, end - line);
    const std::size_t slash = path.rfind('/');
    const std::string_view leaf = slash == std::string_view::npos ? path : path.substr(slash + 1);
    // cgroupfs: ".../<id>"; systemd: "...-<id>.scope" (never a runtime monitor's, e.g. CRI-O's
    // "crio-conmon-<id>.scope", which lives in the host's mount namespace).
    if (leaf == container_id ||
        (leaf.ends_with(".scope") && leaf.find("conmon") == std::string_view::npos &&
         leaf.substr(0, leaf.size() - 6).ends_with(std::string("-") + std::string(container_id)))) {
      return true;
    }
    line = end + 1;
  }
  return false;
}

std::vector<unsigned int> ProcPidsOfContainer(std::string_view container_id) {
  std::vector<unsigned int> pids;
  if (container_id.empty()) return pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const unsigned int pid = static_cast<unsigned int>(std::stoul(name));
    if (CgroupNamesContainer(ProcCgroupOf(pid), container_id)) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::optional<bool> ProcCdiSpecMounted(unsigned int pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  // runc's init process sits in the container's cgroup before it has made the mounts.
  const StatusOr<std::string> comm = ReadFile(proc + "/comm", 4096);
  if (!comm.ok() || comm->starts_with("runc")) return std::nullopt;
  const StatusOr<std::string> table = ReadFile(proc + "/mountinfo", kMaxMountTableBytes);
  if (!table.ok()) return std::nullopt;
  return MountPointIn(*table, names::kPathCdiSpecInContainer);
}

void CdiCheck::Pass() {
  std::map<std::string, Seen> next;
  for (const WatchedContainer& c : deps_.containers()) {
    // A slot handed to another pod is another container (slot names are reused).
    const std::string key = c.id + "/" + c.limits.pod_uid + "/" + c.limits.container;
    Seen seen;
    if (const auto it = seen_.find(key); it != seen_.end()) seen = it->second;
    Check(c, seen);
    next[key] = seen;
  }
  seen_ = std::move(next);  // released slots are forgotten
}

void CdiCheck::Check(const WatchedContainer& c, Seen& seen) {
  const auto now = deps_.now();
  if (now < seen.next_at) return;
  // Until something is concluded below, read again after a growing wait (a container pulling its
  // image, crash-looping or ended costs one API read a minute at most).
  seen.next_at = now + std::min<std::chrono::nanoseconds>(
                           kRetry * (std::int64_t{1} << std::min(seen.misses++, 4)), kRecheck);
  const Limits& l = c.limits;
  StatusOr<k8s::Json> pod = deps_.api->GetPodOf(l);
  if (!pod.ok() || !pod->is_object()) return;  // gone (its slot is released soon), or no answer
  const auto meta = pod->find("metadata");
  if (meta == pod->end() || !meta->is_object() ||
      (!l.pod_uid.empty() && meta->value("uid", "") != l.pod_uid)) {
    return;  // another pod of the same name
  }
  const k8s::Json* status = StatusOf(*pod, l.container);
  if (status == nullptr) return;
  const auto state = status->find("state");
  if (state == status->end() || !state->is_object()) return;
  const std::string device = std::string(kCdiKind) + "=" + c.id;
  if (const auto waiting = state->find("waiting");
      waiting != state->end() && waiting->is_object()) {
    const std::string reason = waiting->value("reason", "");
    const std::string message = waiting->value("message", "");
    if (seen.told_unresolved || reason.find("Error") == std::string::npos ||
        (message.find(device) == std::string::npos &&
         message.find("CDI device") == std::string::npos)) {
      return;
    }
    seen.told_unresolved = true;
    seen.next_at = now + kRecheck;
    const std::string spec = deps_.spec_path(c.id);
    const std::string text =
        "container " + l.container + ": the runtime could not apply its CDI device " + device +
        " (" + std::string(reason) + ": " + message.substr(0, kMaxRuntimeMessage) +
        "); tessera-node wrote the spec to " + spec +
        (deps_.exists(spec) ? " (it is there: the runtime must read CDI specs from its folder — "
                              "containerd: enable_cdi = true and cdi_spec_dirs; CRI-O: "
                              "cdi_spec_dirs)"
                            : " and it is missing now (removed by hand, or the folder is not "
                              "the node's)") +
        "; the container does not start without it";
    TESSERA_LOG(kWarn, kAgent, "%s: %s", l.pod.c_str(), text.c_str());
    deps_.api->WarnPod(*pod, names::kEventCdiUnresolved, text);
    return;
  }
  if (state->find("running") == state->end()) return;
  const std::string id = RuntimeIdOf(*status);
  if (id.empty()) return;
  // Applied if any of its processes has the spec mounted (one may have changed its root or mount
  // namespace since); not applied if none has and at least one could be asked.
  std::optional<bool> mounted;
  for (const unsigned int pid : deps_.pids_of(id)) {
    const std::optional<bool> m = deps_.spec_mounted(pid);
    if (m.has_value()) mounted = mounted.value_or(false) || *m;
    if (mounted.value_or(false)) break;
  }
  if (!mounted.has_value()) return;  // no process to ask yet (or already gone)
  seen.misses = 0;
  seen.next_at = now + kRecheck;  // concluded: read again in a minute (a restart may differ)
  if (*mounted || seen.told_id == id) return;
  seen.told_id = id;
  ++not_applied_;
  const std::string text =
      "container " + l.container + " runs without its CDI device " + device + " (no " +
      std::string(names::kPathCdiSpecInContainer) +
      " in it): it has no GPU device node and no driver library, so its CUDA calls find no "
      "device; the runtime ignored the device (containerd before 1.7 or without enable_cdi = "
      "true, CRI-O before 1.23). Its limits and tessera's library still apply";
  TESSERA_LOG(kError, kAgent, "%s: %s", l.pod.c_str(), text.c_str());
  deps_.api->WarnPod(*pod, names::kEventCdiNotApplied, text);
  if (!told_node_) {
    told_node_ = true;
    deps_.api->WarnNode(names::kEventCdiNotApplied,
                        "the container runtime of this node does not apply CDI devices (" +
                            PodKey(l) +
                            " ran without its own): tessera's GPU containers get no GPU until it "
                            "does (containerd 1.7+ with enable_cdi = true, CRI-O 1.23+)");
  }
}

}  // namespace tessera::agent
