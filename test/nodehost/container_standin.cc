#include "nodehost/container_standin.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <sys/mount.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tessera/file.h"
#include "tessera/text.h"

namespace tessera::nodehost {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kCgroupRoot = "/sys/fs/cgroup";

// Appends the env, mounts and device nodes of one containerEdits object.
Status AppendEdits(const json& edits, const std::string& where, CdiEdits& out) {
  if (!edits.is_object()) return InvalidArgumentError(where + ": not an object");
  for (const char* list : {"env", "mounts", "deviceNodes"}) {
    if (edits.contains(list) && !edits[list].is_array()) {
      return InvalidArgumentError(where + "." + list + ": expected a list");
    }
  }
  for (const json& e : edits.value("env", json::array())) {
    if (!e.is_string()) return InvalidArgumentError(where + ".env: each entry is a string");
    out.env.push_back(e.get<std::string>());
  }
  for (const json& m : edits.value("mounts", json::array())) {
    if (!m.is_object() || !m.contains("hostPath") || !m.contains("containerPath") ||
        !m["hostPath"].is_string() || !m["containerPath"].is_string()) {
      return InvalidArgumentError(where + ".mounts: each needs hostPath and containerPath");
    }
    bool read_only = false;
    for (const json& o : m.value("options", json::array())) read_only |= o == "ro";
    out.mounts.push_back(
        {m["containerPath"].get<std::string>(), m["hostPath"].get<std::string>(), read_only});
  }
  for (const json& d : edits.value("deviceNodes", json::array())) {
    if (!d.is_object() || !d.contains("path") || !d["path"].is_string()) {
      return InvalidArgumentError(where + ".deviceNodes: each needs a path");
    }
    out.device_nodes.push_back(d["path"].get<std::string>());
  }
  return Status::Ok();
}

[[noreturn]] void Fail(const std::string& what, int error = errno) {
  std::fprintf(stderr, "exec-container: %s: %s\n", what.c_str(), std::strerror(error));
  std::fflush(stderr);
  _exit(127);
}

}  // namespace

StatusOr<CdiEdits> ReadCdiEdits(const std::string& cdi_dir, std::string_view qualified) {
  const std::size_t eq = qualified.find('=');
  if (eq == std::string_view::npos) {
    return InvalidArgumentError("CDI device \"" + std::string(qualified) +
                                "\": expected vendor/class=name");
  }
  const std::string_view kind = qualified.substr(0, eq);
  const std::string_view name = qualified.substr(eq + 1);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cdi_dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    const std::string file = entry.path().string();
    TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(file));
    const json spec = json::parse(text, nullptr, false);
    if (!spec.is_object()) return InvalidArgumentError(file + ": not a JSON object");
    if (!spec.contains("kind") || !spec["kind"].is_string()) {
      return InvalidArgumentError(file + ": kind: expected a string (vendor/class)");
    }
    if (spec["kind"] != kind) continue;
    if (!spec.contains("devices") || !spec["devices"].is_array()) {
      return InvalidArgumentError(file + ": devices: expected a list");
    }
    for (std::size_t i = 0; i < spec["devices"].size(); ++i) {
      const json& device = spec["devices"][i];
      if (!device.is_object() || !device.contains("name") || !device["name"].is_string()) {
        return InvalidArgumentError(file + ": devices[" + std::to_string(i) +
                                    "].name: expected a string");
      }
      if (device["name"] != name) continue;
      CdiEdits edits;
      if (spec.contains("containerEdits")) {
        TESSERA_RETURN_IF_ERROR(
            AppendEdits(spec["containerEdits"], file + ": containerEdits", edits));
      }
      if (device.contains("containerEdits")) {
        TESSERA_RETURN_IF_ERROR(
            AppendEdits(device["containerEdits"],
                        file + ": devices[" + std::string(name) + "].containerEdits", edits));
      }
      return edits;
    }
  }
  if (ec) return NotFoundError("CDI folder " + cdi_dir + ": " + ec.message());
  return NotFoundError("no CDI spec in " + cdi_dir + " names " + std::string(qualified));
}

std::vector<std::string> CgroupFolders(std::string_view relative) {
  const fs::path root(kCgroupRoot);
  const std::string self = ReadFile("/proc/self/cgroup").value_or("");
  std::vector<std::string> out;
  std::error_code ec;
  const bool unified = fs::exists(root / "cgroup.controllers", ec);
  std::istringstream lines(self);
  for (std::string line; std::getline(lines, line);) {
    // "ID:CONTROLLERS:PATH"; v2's one line is "0::PATH".
    const std::size_t a = line.find(':');
    const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string own = line.substr(b + 1);
    fs::path folder;
    if (unified && controllers.empty()) {
      folder = root / own.substr(own.starts_with('/') ? 1 : 0);
    } else if (!unified && (controllers == "pids" || controllers == "memory")) {
      folder = root / controllers / own.substr(own.starts_with('/') ? 1 : 0);
    } else {
      continue;
    }
    if (fs::is_directory(folder, ec))
      out.push_back((folder / relative).lexically_normal().string());
  }
  return out;
}

std::vector<std::string> ExecContainerArgs(const ContainerSpec& spec) {
  std::vector<std::string> args;
  for (const std::string& cgroup : spec.cgroups) {
    args.push_back("--cgroup");
    args.push_back(cgroup);
  }
  for (const agent::Mount& m : spec.mounts) {
    args.push_back(m.read_only ? "--bind-ro" : "--bind");
    args.push_back(m.host_path);
    args.push_back(m.container_path);
  }
  args.push_back("--");
  args.insert(args.end(), spec.argv.begin(), spec.argv.end());
  return args;
}

int ExecContainer(const std::vector<std::string>& args) {
  ContainerSpec spec;
  std::size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& flag = args[i];
    if (flag == "--cgroup" && i + 1 < args.size()) {
      spec.cgroups.push_back(args[++i]);
    } else if ((flag == "--bind" || flag == "--bind-ro") && i + 2 < args.size()) {
      spec.mounts.push_back({args[i + 2], args[i + 1], flag == "--bind-ro"});
      i += 2;
    } else {
      std::fprintf(stderr,
                   "exec-container: unexpected argument \"%s\" (accepted: --cgroup DIR, --bind "
                   "HOST CONTAINER, --bind-ro HOST CONTAINER, then -- PROGRAM ARGS...)\n",
                   flag.c_str());
      return 2;
    }
  }
  spec.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i + 1, args.size())),
                   args.end());
  if (spec.argv.empty()) {
    std::fprintf(stderr, "exec-container: no program after --\n");
    return 2;
  }
  for (const std::string& cgroup : spec.cgroups) {
    std::error_code ec;
    fs::create_directories(cgroup, ec);
    if (ec) Fail("create cgroup " + cgroup, ec.value());
    const std::string pid = std::to_string(getpid()) + "\n";
    const int fd = open((cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) Fail("join cgroup " + cgroup);
    if (write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
      Fail("join cgroup " + cgroup);
    }
    close(fd);
  }
  if (unshare(CLONE_NEWNS) != 0) Fail("unshare the mount namespace");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail("make / private");
  for (const agent::Mount& m : spec.mounts) {
    if (mount(m.host_path.c_str(), m.container_path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) !=
        0) {
      Fail("bind " + m.host_path + " at " + m.container_path);
    }
    if (m.read_only && mount(nullptr, m.container_path.c_str(), nullptr,
                             MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC, nullptr) != 0) {
      Fail("make " + m.container_path + " read-only");
    }
  }
  std::vector<char*> argv;
  for (std::string& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  Fail("run " + spec.argv[0]);
}

std::vector<std::string> CreateMountTargets(const std::vector<agent::Mount>& mounts) {
  std::vector<std::string> created;
  for (const agent::Mount& m : mounts) {
    std::error_code ec;
    if (fs::exists(m.container_path, ec)) continue;
    // The missing parents, outermost first.
    std::vector<fs::path> parents;
    for (fs::path p = fs::path(m.container_path).parent_path(); !p.empty() && !fs::exists(p, ec);
         p = p.parent_path()) {
      parents.insert(parents.begin(), p);
    }
    for (const fs::path& p : parents) {
      if (fs::create_directory(p, ec)) created.push_back(p.string());
    }
    if (fs::is_directory(m.host_path, ec)) {
      if (fs::create_directory(m.container_path, ec)) created.push_back(m.container_path);
    } else if (std::ofstream(m.container_path)) {
      created.push_back(m.container_path);
    }
  }
  return created;
}

void KillAndRemoveCgroup(const std::string& folder) {
  std::error_code ec;
  // Only a container's own folder (CgroupFolders' "tessera-nodehost/pod<uid>/<name>"): never a
  // folder whose processes are not the container's.
  const std::string path = fs::path(folder).lexically_normal().string();
  if (path != folder || !path.starts_with(std::string(kCgroupRoot) + "/") ||
      path.find("/tessera-nodehost/pod") == std::string::npos || !fs::is_directory(path, ec)) {
    return;
  }
  for (int round = 0; round < 50; ++round) {
    bool any = false;
    for (std::string_view pid : SplitWords(ReadFile(folder + "/cgroup.procs").value_or(""))) {
      const long n = std::strtol(std::string(pid).c_str(), nullptr, 10);
      if (n > 1) kill(static_cast<pid_t>(n), SIGKILL);
      any = true;
    }
    if (!any) break;
    usleep(20000);
  }
  fs::remove(folder, ec);
}

void RemoveCreated(const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    std::error_code ec;
    if (fs::is_directory(*it, ec) ? fs::is_empty(*it, ec) : fs::file_size(*it, ec) == 0) {
      fs::remove(*it, ec);
    }
  }
}

}  // namespace tessera::nodehost
