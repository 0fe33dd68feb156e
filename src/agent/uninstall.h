// `tessera-node --uninstall` (docs/design/0019-upgrades-and-uninstall.md): what tessera put on a
// node goes away — on the Node object every tessera.dev/ annotation, label and extended
// resource; on the host the state folder (slots' limits files and regions, ld.so.preload, MPS
// daemons and their folders), tessera's CDI specs, the device-plugin sockets and the preload
// library tessera installed. Refused while a container still runs on a tessera GPU (its files
// are its limits and accounting), unless forced.
#pragma once

#include <string>
#include <vector>

#include "k8s/client.h"
#include "tessera/status.h"

namespace tessera::agent {

struct UninstallPaths {
  std::string state_dir;          // <state>: slots/, ld.so.preload, mps/
  std::string cdi_dir;            // tessera.dev-gpu-*.json
  std::string device_plugin_dir;  // tessera-gpu*.sock
  std::string hook_library;       // the installed copy; its folder too when left empty
};

// The slots whose region has a live process (an active slot): "slot-0003 (ml/train-0)".
std::vector<std::string> ContainersInUse(const std::string& state_dir);

// Removes tessera's files from the host; returns what it removed. FailedPrecondition (naming
// the containers) while ContainersInUse is not empty and !force: nothing is removed then.
StatusOr<std::vector<std::string>> RemoveNodeFiles(const UninstallPaths& paths, bool force);

// Removes every tessera.dev/ annotation and label of the Node (merge patch) and every
// tessera.dev/ resource of its status (capacity, allocatable). Returns what it removed.
StatusOr<std::vector<std::string>> UnpublishNode(k8s::Client& client, const std::string& node);

}  // namespace tessera::agent
