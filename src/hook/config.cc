// Configuration at load: the limits file (node-mounted, or named by the environment) or, without
// one, HAMi-core's environment variables; attaching the container's region and claiming a slot.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "tessera/limits.h"
#include "tessera/log.h"
#include "tessera/mountinfo.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

#include "hook/process_state.h"

extern char** environ;

namespace tessera::hook {
namespace {

// Allocation-free/preload: see include/tessera/file.h (the general reader is not used here).
bool ReadSmallFile(const char* path, std::string* out) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[4096];
  ssize_t n;
  out->clear();
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    out->append(buffer, static_cast<std::size_t>(n));
    if (out->size() > (1u << 20)) break;  // a limits file is a few lines, a mount table a few KiB
  }
  close(fd);
  return true;
}

// Whether this process runs in a container the device plugin gave a slot: the node's folder of
// the limits file is a mount point here (/proc/self/mountinfo's fifth field). Neither the files
// nor the folders are proof — the node removes a released slot's folder whole, a tenant may
// delete the region (its folder is writable), a host may have an /etc/tessera of its own —
// while a container's mounts are the runtime's, which an unprivileged tenant cannot undo.
bool SlotMounted() {
  const std::string folder(names::kPathLimitsFile.substr(0, names::kPathLimitsFile.rfind('/')));
  // No such folder (a host, `tessera run`): no mount point either, and no mount table to read.
  std::string table;
  if (access(folder.c_str(), F_OK) != 0 || !ReadSmallFile("/proc/self/mountinfo", &table)) {
    return false;
  }
  return MountPointIn(table, folder);
}

const char* EnvOr(std::string_view name, std::string_view fallback) {
  const char* value = std::getenv(std::string(name).c_str());
  return value != nullptr && value[0] != '\0' ? value : fallback.data();
}

void Configure(State& s) {
  ResetOrdinalMap(s);
  if (const char* stats = std::getenv(std::string(names::kEnvHookStats).c_str())) {
    g_stats_enabled = stats[0] == '1';
  }
  if (const char* level = std::getenv(std::string(names::kEnvHookLogLevel).c_str())) {
    if (auto parsed = log::ParseLevel(level); parsed.ok()) log::SetLevel(*parsed);
  }
  // The node-mounted limits file, when present, always wins: the environment belongs to the
  // tenant and may only *name* a file where the node mounted none (local `tessera run`).
  const bool node_file = access(std::string(names::kPathLimitsFile).c_str(), F_OK) == 0;
  const char* limits_path = node_file ? names::kPathLimitsFile.data()
                                      : EnvOr(names::kEnvLimitsFile, names::kPathLimitsFile);
  // The device plugin gave this container a slot (its folders are mounted) but the limits file
  // is missing: the node's files were removed under a running container. That is not the absence
  // of limits, and the environment may not stand in for the node's file: refuse the GPU rather
  // than run unlimited.
  if (!node_file && SlotMounted()) {
    s.mode = Mode::kLimitsFile;
    s.fail_closed = true;
    MachineryFailed(s, "the node mounted a tessera slot but its limits file " +
                           std::string(names::kPathLimitsFile) + " is missing");
    return;
  }
  std::string text;
  errno = 0;
  const bool read = ReadSmallFile(limits_path, &text);
  if (!read && errno != ENOENT) {
    s.mode = Mode::kLimitsFile;
    s.fail_closed = true;  // a limits file we cannot read is not the absence of limits
    MachineryFailed(
        s, std::string("cannot read limits file ") + limits_path + ": " + std::strerror(errno));
    return;
  }
  if (read) {
    s.mode = Mode::kLimitsFile;
    auto limits = ParseLimitsFile(text);
    if (!limits.ok()) {
      s.fail_closed = true;  // a corrupt node-written file is an anomaly: do not trust the cap
      MachineryFailed(s,
                      std::string("limits file ") + limits_path + ": " + limits.status().message());
      return;
    }
    s.limits = std::move(limits).value();
    s.fail_closed = s.limits.fail_closed;
    const bool node_region =
        node_file && access(std::string(names::kPathRegionFile).c_str(), F_OK) == 0;
    s.region_path = node_region ? std::string(names::kPathRegionFile)
                                : EnvOr(names::kEnvRegionFile, names::kPathRegionFile);
    auto mapping = shm::Mapping::Attach(s.region_path);
    if (!mapping.ok()) {
      MachineryFailed(s, "shared region: " + mapping.status().message());
      return;
    }
    s.region = mapping->release();
    ClaimSlot(s);
    PublishComputeRegion(s);
    return;
  }
  auto hami = ParseHamiEnvironment(environ);
  if (!hami.ok()) {
    TESSERA_LOG(kError, kHook, "ignoring HAMi variables: %s", hami.status().message().c_str());
    return;
  }
  if (!hami->any()) return;  // inactive
  s.mode = Mode::kHamiEnv;
  s.hami = std::move(hami).value();
  TESSERA_LOG(kInfo, kHook,
              "no limits file at %s: using HAMi-compatible environment limits (weaker trust: the "
              "tenant controls its own environment)",
              limits_path);
  std::vector<shm::DeviceLimit> devices;
  for (int i = 0; i < static_cast<int>(shm::kMaxDevices); ++i) {
    const auto cap = s.hami.ForIndex(i);
    devices.push_back({"idx-" + std::to_string(i), cap ? *cap : kMaxQuantity,
                       s.hami.sm_percent ? *s.hami.sm_percent : 0});
  }
  s.region_path = EnvOr(names::kEnvRegionFile, "");
  if (s.region_path.empty()) {
    s.region_path = "/tmp/tessera-hami-" + std::to_string(getuid()) + ".region";
  }
  auto mapping = shm::Mapping::CreateOrAttach(s.region_path, devices);
  if (!mapping.ok()) {
    MachineryFailed(s, "HAMi-compatible region: " + mapping.status().message());
    return;
  }
  s.region = mapping->release();
  ClaimSlot(s);
}

__attribute__((constructor)) void OnLoad() { ConfigureOnce(); }

}  // namespace

// Runs once: from the library constructor (main thread, the usual case) or, if another
// library's constructor calls CUDA before ours ran, from that first call.
// pthread_once rather than std::call_once, whose state lives in libstdc++ (the library links no
// C++ runtime: docs/design/0020-deployment.md, "The preload library's floor").
void ConfigureOnce() {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    State& s = S();
    const std::uint64_t start = MonotonicNs();
    Configure(s);
    if (s.mode != Mode::kInactive) pthread_atfork(nullptr, nullptr, OnForkChild);
    s.configure_ns = MonotonicNs() - start;
  });
}

}  // namespace tessera::hook
