#include "agent/slots.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/json_writer.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "observe/observe.h"

namespace tessera::agent {

std::string SlotId(int n) {
  char id[32];
  std::snprintf(id, sizeof(id), "slot-%04d", n);
  return id;
}

StatusOr<int> ParseSlotId(std::string_view id) {
  constexpr std::string_view kPrefix = "slot-";
  if (id.size() != kPrefix.size() + 4 || id.substr(0, kPrefix.size()) != kPrefix) {
    return InvalidArgumentError("device \"" + std::string(id) +
                                "\" is not a tessera slot (slot-NNNN)");
  }
  int n = 0;
  for (char c : id.substr(kPrefix.size())) {
    if (c < '0' || c > '9') {
      return InvalidArgumentError("device \"" + std::string(id) +
                                  "\" is not a tessera slot (slot-NNNN)");
    }
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string ClaimSlot(std::string_view claim_uid) { return "claim-" + std::string(claim_uid); }

StatusOr<std::string> ParseClaimSlot(std::string_view slot) {
  constexpr std::string_view kPrefix = "claim-";
  const auto invalid = [&] {
    return InvalidArgumentError(
        "\"" + QuoteForMessage(slot) +
        "\" is not a claim slot (claim-<uid>, the uid of 1-64 of [a-z0-9-])");
  };
  if (!slot.starts_with(kPrefix)) return invalid();
  const std::string_view uid = slot.substr(kPrefix.size());
  if (uid.empty() || uid.size() > 64) return invalid();
  for (char c : uid) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return invalid();
  }
  return std::string(uid);
}

Status CheckSlotName(std::string_view slot) {
  if (ParseSlotId(slot).ok() || ParseClaimSlot(slot).ok()) return Status::Ok();
  return InvalidArgumentError("\"" + QuoteForMessage(slot) +
                              "\" is not a tessera slot (slot-NNNN or claim-<uid>)");
}

SlotPaths PathsOf(const std::string& state_dir, const std::string& cdi_dir, std::string_view slot) {
  SlotPaths p;
  p.dir = state_dir + "/slots/" + std::string(slot);
  p.limits = p.dir + "/" + std::string(observe::kSlotLimitsFile);
  p.region = p.dir + "/" + std::string(observe::kSlotRegionFile);
  p.etc_dir = p.limits.substr(0, p.limits.rfind('/'));
  p.run_dir = p.region.substr(0, p.region.rfind('/'));
  p.cdi_spec = cdi_dir + "/tessera.dev-gpu-" + std::string(slot) + ".json";
  return p;
}

SlotAllocation AllocationFor(const SlotPaths& paths, std::string_view slot,
                             const std::string& hook_library, const std::string& ld_so_preload) {
  const auto parent = [](std::string_view path) {
    return std::string(path.substr(0, path.rfind('/')));
  };
  SlotAllocation a;
  a.mounts = {
      {parent(names::kPathLimitsFile), paths.etc_dir, true},
      {parent(names::kPathRegionFile), paths.run_dir, false},
      {std::string(names::kPathHookLibrary), hook_library, true},
      {std::string(names::kPathLdSoPreload), ld_so_preload, true},
  };
  a.envs = {
      {std::string(names::kEnvLimitsFile), std::string(names::kPathLimitsFile)},
      {std::string(names::kEnvRegionFile), std::string(names::kPathRegionFile)},
      // The GPU comes from tessera's CDI device only, never from NVIDIA's runtime hook.
      {"NVIDIA_VISIBLE_DEVICES", "void"},
  };
  a.cdi_device = std::string(kCdiKind) + "=" + std::string(slot);
  return a;
}

std::string CdiSpec(std::string_view slot, const std::vector<int>& gpu_minors,
                    const CdiDriver& driver, const std::vector<Mount>& extra_mounts,
                    const std::vector<std::string>& extra_env) {
  // A node at /dev in the container; on the host under the driver's root when that is not "/".
  std::string host_dev = driver.dev_root;
  while (!host_dev.empty() && host_dev.back() == '/') host_dev.pop_back();
  const auto device_node = [&host_dev](const std::string& path, std::string& o) {
    ObjectWriter node(o);
    node.Str("path", path);
    if (!host_dev.empty()) node.Str("hostPath", host_dev + path);
  };
  std::string out;
  {
    ObjectWriter spec(out);
    spec.Str("cdiVersion", "0.6.0");
    spec.Str("kind", kCdiKind);
    std::string& devices = spec.Field("devices");
    devices += '[';
    {
      ObjectWriter device(devices);
      device.Str("name", slot);
      ObjectWriter edits(device.Field("containerEdits"));
      std::vector<std::string> nodes;
      for (const int minor : gpu_minors) nodes.push_back("/dev/nvidia" + std::to_string(minor));
      AppendJsonArray(edits.Field("deviceNodes"), nodes, device_node);
      if (!extra_env.empty()) {
        AppendJsonArray(edits.Field("env"), extra_env,
                        [](const std::string& e, std::string& o) { AppendJsonString(o, e); });
      }
      if (!extra_mounts.empty()) {
        AppendJsonArray(edits.Field("mounts"), extra_mounts, [](const Mount& m, std::string& o) {
          ObjectWriter mount(o);
          mount.Str("hostPath", m.host_path);
          mount.Str("containerPath", m.container_path);
          AppendJsonArray(
              mount.Field("options"),
              std::vector<std::string>{m.read_only ? "ro" : "rw", "nosuid", "nodev", "bind"},
              [](const std::string& opt, std::string& x) { AppendJsonString(x, opt); });
        });
      }
    }
    devices += ']';
    ObjectWriter common(spec.Field("containerEdits"));
    const std::vector<std::string> control = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                              "/dev/nvidia-uvm-tools"};
    AppendJsonArray(common.Field("deviceNodes"), control, device_node);
    AppendJsonArray(
        common.Field("mounts"), driver.files, [](const std::string& path, std::string& o) {
          ObjectWriter mount(o);
          mount.Str("hostPath", path);
          mount.Str("containerPath", path);
          AppendJsonArray(mount.Field("options"),
                          std::vector<std::string>{"ro", "nosuid", "nodev", "bind"},
                          [](const std::string& opt, std::string& x) { AppendJsonString(x, opt); });
        });
  }
  out += '\n';
  return out;
}

Status WriteFileAtomically(const std::string& path, std::string_view content, unsigned int mode) {
  const std::string temp = path + ".tmp-" + std::to_string(getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return UnavailableError("cannot write " + temp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(temp.c_str());
      return UnavailableError("cannot write " + temp + ": " + std::strerror(e));
    }
    done += static_cast<std::size_t>(n);
  }
  fchmod(fd, mode);
  if (fsync(fd) != 0 || close(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(temp.c_str());
    return UnavailableError("cannot write " + path + ": " + std::strerror(e));
  }
  return Status::Ok();
}

}  // namespace tessera::agent
