// `tessera-node --uninstall` (docs/design/0019-upgrades-and-uninstall.md): what tessera put on a
// node goes away — on the Node object every tessera.dev/ annotation, label and extended
// resource; on the host the state folder (slots' limits files and regions, ld.so.preload, MPS
// daemons and their folders), tessera's CDI specs, the device-plugin sockets and the preload
// library tessera installed. Refused while a container still runs on a tessera GPU (its files
// are its limits and accounting), unless forced.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "tessera/status.h"

#include "k8s/client.h"

namespace tessera::agent {

struct UninstallPaths {
  std::string state_dir;          // <state>: slots/, ld.so.preload, mps/
  std::string cdi_dir;            // tessera.dev-gpu-*.json
  std::string device_plugin_dir;  // tessera-gpu*.sock
  std::string hook_library;       // the installed copy; its folder too when left empty
};

// The containers still there: a slot kubelet holds (`held_slots`, from PodResources), a region
// with an active slot, or a region that cannot be read (counted as in use: fail closed).
std::vector<std::string> ContainersInUse(const std::string& state_dir,
                                         const std::set<std::string>& held_slots);

// Removes tessera's files from the host; returns what it removed. FailedPrecondition (naming
// the containers) while ContainersInUse is not empty and !force: nothing is removed then.
// InvalidArgument for a state folder that is the root.
StatusOr<std::vector<std::string>> RemoveNodeFiles(const UninstallPaths& paths, bool force,
                                                   const std::set<std::string>& held_slots);

// Removes every tessera.dev/ annotation and label of the Node (merge patch) and every
// tessera.dev/ resource of its status (capacity, allocatable). Returns what it removed.
StatusOr<std::vector<std::string>> UnpublishNode(k8s::Client& client, const std::string& node);

}  // namespace tessera::agent
