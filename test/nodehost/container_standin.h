// A container on a host with no container runtime (issue #22 part 2): the workload runs in a
// cgroup of its own named after its pod (as kubelet's cgroupfs driver names it: .../pod<uid>/...),
// in a mount namespace of its own with the binds kubelet and the CDI spec hand a runtime, and
// with their environment. The process is still the host's (its PID namespace, its root file
// system): enough for what tessera-node governs (the preload library through the mounted
// /etc/ld.so.preload, the limits file and region at their container paths, the cgroup the drift
// check attributes by), not an isolation boundary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "agent/slots.h"

namespace tessera::nodehost {

// The edits a CDI spec gives a device: environment ("KEY=VALUE"), mounts and device nodes (the
// spec's and the device's own). Device nodes are reported, not created: on a GPU host they are
// the host's own.
struct CdiEdits {
  std::vector<std::string> env;
  std::vector<agent::Mount> mounts;
  std::vector<std::string> device_nodes;
};
// The edits of `qualified` ("vendor/class=name") from the *.json specs in `cdi_dir`; kNotFound
// when no spec there names it, kInvalidArgument (file and field) for a spec that does not parse.
StatusOr<CdiEdits> ReadCdiEdits(const std::string& cdi_dir, std::string_view qualified);

// The cgroup folders a process of `relative` (e.g. "tessera-nodehost/pod<uid>/main") joins,
// nested under this process's own cgroup (as kubelet's --cgroup-root nests pods): on cgroup v2
// the one unified folder, on v1 the pids and memory hierarchies. Empty when neither is found.
std::vector<std::string> CgroupFolders(std::string_view relative);

struct ContainerSpec {
  std::vector<std::string> argv;     // the workload (argv[0] looked up in PATH)
  std::vector<agent::Mount> mounts;  // bound in the container's mount namespace
  std::vector<std::string> cgroups;  // folders to create and join (CgroupFolders)
};

// The arguments after `exec-container` that make ExecContainer run `spec`.
std::vector<std::string> ExecContainerArgs(const ContainerSpec& spec);

// The container's first step, run as `tessera-node-host exec-container ARGS` (a fresh,
// single-threaded process): create and join the cgroups, unshare the mount namespace, make it
// private, bind every mount (read-only where asked), then exec the workload. Returns only on
// failure (the message on stderr, exit code 127).
int ExecContainer(const std::vector<std::string>& args);

// What a runtime does when a container is gone: SIGKILL whatever still runs in `folder` (its
// processes' leftovers), then remove it.
void KillAndRemoveCgroup(const std::string& folder);

// Creates what a bind needs on the host (a folder, or an empty file for a file's mount) where it
// is missing; returns what it created, deepest last, for RemoveCreated.
std::vector<std::string> CreateMountTargets(const std::vector<agent::Mount>& mounts);
// Removes what CreateMountTargets created, where it is still empty.
void RemoveCreated(const std::vector<std::string>& created);

}  // namespace tessera::nodehost
