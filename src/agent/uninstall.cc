#include "agent/uninstall.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "tessera/names.h"
#include "tessera/region.h"

#include "governor/mps.h"
#include "k8s/paths.h"
#include "observe/observe.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

bool Ours(const std::string& key) { return key.rfind(std::string(names::kDomain) + "/", 0) == 0; }

// Removes `path` (a file or a folder tree) if it exists; records it.
void Remove(const fs::path& path, std::vector<std::string>& removed) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;
  if (fs::remove_all(path, ec) > 0 && !ec) removed.push_back(path.string());
}

}  // namespace

std::vector<std::string> ContainersInUse(const std::string& state_dir,
                                         const std::set<std::string>& held_slots) {
  std::vector<std::string> in_use;
  for (const observe::ContainerSource& c : observe::StateDirContainers(state_dir)) {
    if (held_slots.count(c.id) != 0) {
      in_use.push_back(c.id + " (" + c.limits.pod + "; kubelet still holds its slot)");
      continue;
    }
    // A private copy, no locks taken: the region is the tenant's to write (garbage included).
    auto copy = shm::RegionCopy::Read(c.region_path);
    if (!copy.ok()) {
      if (copy.status().code() == StatusCode::kNotFound) continue;  // never started a GPU process
      in_use.push_back(c.id + " (" + c.limits.pod +
                       "; its region cannot be read: " + copy.status().message() + ")");
      continue;
    }
    const shm::Region& r = copy->region();
    const bool live = std::any_of(std::begin(r.slots), std::end(r.slots), [](const shm::Slot& s) {
      return s.state.load(std::memory_order_relaxed) == 1;
    });
    if (live)
      in_use.push_back(c.id + " (" + c.limits.pod + "; a process holds a slot of its region)");
  }
  return in_use;
}

StatusOr<std::vector<std::string>> RemoveNodeFiles(const UninstallPaths& p, bool force,
                                                   const std::set<std::string>& held_slots) {
  const std::string state = fs::path(p.state_dir).lexically_normal().string();
  if (p.state_dir.empty() || state == "/") {
    return InvalidArgumentError("--state-dir " + p.state_dir +
                                ": tessera's own folder is needed, not the root");
  }
  if (!force) {
    const std::vector<std::string> in_use = ContainersInUse(p.state_dir, held_slots);
    if (!in_use.empty()) {
      std::string list;
      for (const std::string& c : in_use) list += (list.empty() ? "" : ", ") + c;
      return FailedPreconditionError(
          "containers still run on tessera GPUs: " + list +
          "; delete their pods first, or pass --force (their caps and accounting go)");
    }
  }
  std::vector<std::string> removed;
  std::error_code ec;
  // MPS daemons first (they hold files in the state folder): a fresh NodeMps quits every daemon
  // it finds, none being in use.
  if (fs::is_directory(p.state_dir + "/mps", ec))
    governor::NodeMps(p.state_dir + "/mps", "nvidia-cuda-mps-control").Retain({});
  for (const char* part : {"slots", "mps", "ld.so.preload"})
    Remove(fs::path(p.state_dir) / part, removed);
  // The installed library (only a file or a link: a folder named by mistake is left alone), and
  // its folder when that is left empty and is tessera's (named tessera, or inside the state
  // folder).
  const auto library = fs::symlink_status(p.hook_library, ec);
  if (!p.hook_library.empty() && (fs::is_regular_file(library) || fs::is_symlink(library))) {
    if (fs::remove(p.hook_library, ec)) removed.push_back(p.hook_library);
    const fs::path folder = fs::path(p.hook_library).parent_path();
    const bool ours = folder.filename() == "tessera" ||
                      folder.lexically_normal().string().rfind(state + "/", 0) == 0;
    if (ours && fs::is_directory(folder, ec) && fs::is_empty(folder, ec)) Remove(folder, removed);
  }
  if (fs::is_directory(p.state_dir, ec) && fs::is_empty(p.state_dir, ec))
    Remove(p.state_dir, removed);
  for (const auto& entry : fs::directory_iterator(p.cdi_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tessera.dev-gpu-", 0) == 0 && entry.path().extension() == ".json")
      Remove(entry.path(), removed);
  }
  for (const auto& entry : fs::directory_iterator(p.device_plugin_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tessera-gpu", 0) == 0 && entry.path().extension() == ".sock")
      Remove(entry.path(), removed);
  }
  return removed;
}

StatusOr<std::vector<std::string>> UnpublishNode(k8s::Client& client, const std::string& node) {
  auto got = client.Get(k8s::NodePath(node));
  if (!got.ok()) return got.status().WithContext("node " + node);
  std::vector<std::string> removed;
  k8s::Json meta = k8s::Json::object();
  for (const char* field : {"annotations", "labels"}) {
    const k8s::Json map = (*got)["metadata"].value(field, k8s::Json::object());
    for (const auto& [key, value] : map.items()) {
      if (!Ours(key)) continue;
      meta[field][key] = nullptr;
      removed.push_back(std::string(field) + " " + key);
    }
  }
  if (!meta.empty()) {
    TESSERA_RETURN_IF_ERROR(
        client.Patch(k8s::NodePath(node), {{"metadata", meta}}, k8s::PatchType::kMerge).status());
  }
  k8s::Json status = k8s::Json::object();
  const k8s::Json node_status = (*got).value("status", k8s::Json::object());
  for (const char* field : {"capacity", "allocatable"}) {
    const k8s::Json resources = node_status.value(field, k8s::Json::object());
    for (const auto& [key, value] : resources.items()) {
      if (!Ours(key)) continue;
      status[field][key] = nullptr;
      removed.push_back("status." + std::string(field) + " " + key);
    }
  }
  if (!status.empty()) {
    TESSERA_RETURN_IF_ERROR(
        client.Patch(k8s::NodeStatusPath(node), {{"status", status}}, k8s::PatchType::kMerge)
            .status());
  }
  return removed;
}

}  // namespace tessera::agent
