// Device-plugin slots (docs/design/0016-device-plugin.md): the opaque devices tessera-node offers
// kubelet for `tessera.dev/gpu-slot`, what Allocate answers for one, where its files live on the
// node, and its CDI spec. Dependency-free.
//
// A slot is only a handle: kubelet passes device IDs, never the pod, so the slot cannot know its
// GPU at Allocate. The container's decision names the GPU; PreStartContainer (after kubelet has
// recorded the allocation) learns the pod from the PodResources API and writes the slot's limits
// file, region and CDI spec for the decided GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/names.h"
#include "tessera/status.h"

namespace tessera::agent {

// "slot-0042": slots are numbered per node, kSlotsPerGpu for every managed GPU.
std::string SlotId(int n);
// The number of a slot ID; kInvalidArgument for anything else (IDs come from kubelet).
StatusOr<int> ParseSlotId(std::string_view id);
// "claim-<uid>": the slot of a DRA ResourceClaim (docs/design/0022-dra-driver.md), one per claim
// on this node, whatever containers share it.
std::string ClaimSlot(std::string_view claim_uid);
// The claim UID of a claim slot; kInvalidArgument for anything else (a UID is 1-64 characters of
// [a-z0-9-], as the API server writes them).
StatusOr<std::string> ParseClaimSlot(std::string_view slot);
// Ok for a device-plugin slot or a claim slot.
Status CheckSlotName(std::string_view slot);

// Where a slot's files live on the node (under --state-dir) and in the container.
struct SlotPaths {
  std::string dir;       // <state>/slots/<slot>
  std::string etc_dir;   // <dir>/etc  -> /etc/tessera (read-only)
  std::string limits;    // <etc_dir>/limits
  std::string run_dir;   // <dir>/run  -> /run/tessera (read-write)
  std::string region;    // <run_dir>/region
  std::string cdi_spec;  // <cdi-dir>/tessera.dev-gpu-<slot>.json
};
SlotPaths PathsOf(const std::string& state_dir, const std::string& cdi_dir, std::string_view slot);

struct Mount {
  std::string container_path;
  std::string host_path;
  bool read_only = true;
};

// What Allocate answers for one container's slot (the same for every slot; only paths differ).
struct SlotAllocation {
  std::vector<Mount> mounts;
  std::vector<std::pair<std::string, std::string>> envs;
  std::string cdi_device;  // "tessera.dev/gpu=<slot>"
};
// `hook_library`: the preload library on the host; `ld_so_preload`: the host file naming it.
SlotAllocation AllocationFor(const SlotPaths& paths, std::string_view slot,
                             const std::string& hook_library, const std::string& ld_so_preload);

// The CDI kind of tessera's devices.
inline constexpr std::string_view kCdiKind = "tessera.dev/gpu";

// What a node's NVIDIA driver puts into every GPU container: its libraries (bind-mounted
// read-only at the same paths) and its device nodes, found under `dev_root` + "/dev" on the host
// ("/" for a driver installed on the host; a driver container's root, e.g. /run/nvidia/driver,
// where the GPU Operator installs it) and always at /dev in the container.
struct CdiDriver {
  std::vector<std::string> files;
  std::string dev_root = "/";
};

// A CDI spec (JSON, cdiVersion 0.6.0) with one device named `slot`: the decided GPUs' device
// nodes `/dev/nvidia<minor>` (one for a fraction, each of a whole-GPU ask's), the control nodes
// every CUDA process needs, and the driver's libraries (`driver`).
// `extra_mounts` and `extra_env` ("KEY=VALUE") go to the device's edits (an MPS container's pipe
// folder and client environment).
std::string CdiSpec(std::string_view slot, const std::vector<int>& gpu_minors,
                    const CdiDriver& driver, const std::vector<Mount>& extra_mounts = {},
                    const std::vector<std::string>& extra_env = {});

// Where an MPS container finds the node's MPS daemon (its pipe folder, mounted).
inline constexpr std::string_view kMpsPipeInContainer = names::kPathMpsPipe;

// Writes `content` to `path` atomically (a temporary file in the same folder, then rename), with
// `mode`. Never leaves a half-written file at `path`.
Status WriteFileAtomically(const std::string& path, std::string_view content, unsigned int mode);

}  // namespace tessera::agent
