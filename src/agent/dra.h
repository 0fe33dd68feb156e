// tessera as a DRA driver, node side (docs/design/0022-dra-driver.md): the ResourceSlice that
// publishes this node's GPUs as devices of `gpu.tessera.dev` with consumable capacities, and
// what an allocated ResourceClaim means for the slot tessera-node prepares for it. The gRPC
// plugin that kubelet calls lives in dra_plugin.h; everything here is plain data, so tests reach
// every rule without a kubelet.
//
// Trust on this path: the allocation a node prepares is read from the claim's status, which only
// kube-scheduler (resourceclaims/binding) and the resource-claim controller may write; the
// tenant writes the claim's spec, including its opaque config, whose fields are checked here
// against their forms and the namespace's tier (ADR 0022, "Trust").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/limits.h"
#include "tessera/status.h"

#include "agent/inventory.h"
#include "agent/slot_binder.h"
#include "contract/claim_ask.h"
#include "k8s/client.h"
#include "k8s/watch.h"
#include "policy/policy.h"

namespace tessera::agent::dra {

// The device name of a GPU in this node's pool: "gpu-<NVML index>".
std::string DeviceName(int index);
// "<node>-gpu.tessera.dev": the one ResourceSlice of a node's pool.
std::string SliceName(std::string_view node);

// Request policy of the `memory` capacity: a claim's ask is rounded up to a step of 256 MiB
// (the smallest a CUDA context fits in), 1 GiB when it asks none.
inline constexpr std::uint64_t kMemoryStepBytes = contract::kClaimMemoryStepBytes;
inline constexpr std::uint64_t kMemoryDefaultBytes = contract::kClaimMemoryDefaultBytes;

// The ResourceSlice (resource.k8s.io/v1) of this node: one device per managed GPU (attributes
// uuid, productName, index, numaNode; capacities memory and cores with their request policies;
// allowMultipleAllocations), an unhealthy GPU tainted NoSchedule. `generation`: the pool's.
k8s::Json ResourceSliceFor(const InventoryContent& content, std::int64_t generation);

// Keeps this node's ResourceSlice as ResourceSliceFor says: created when missing (kubelet deletes
// a node's slices when it starts, and 30 s after a plugin's sockets went away), replaced when its
// devices change, the pool's generation one higher each time; left alone otherwise.
class SlicePublisher {
 public:
  explicit SlicePublisher(k8s::Client& client) : client_(client) {}
  // Whether it wrote (created or replaced) the slice.
  StatusOr<bool> Publish(const InventoryContent& content);

 private:
  k8s::Client& client_;
};

// The driver's opaque config, shared with admission (contract/claim_ask.h).
using contract::ApplyGpuConfig;
using contract::GpuConfig;

// One device of a claim allocated to this node's pool.
struct ClaimDevice {
  std::string request;  // the request's name (a firstAvailable subrequest's "/sub" cut off)
  std::string device;   // "gpu-<index>"
  std::string share_id;
  std::string uuid;
  std::uint64_t memory_bytes = 0;
  std::uint32_t cores_percent = 0;
};

// What a claim's slot is prepared with.
struct PreparedClaim {
  Limits limits;
  std::string mps_user;
  std::vector<ClaimDevice> devices;
};

// A device of this node's pool.
struct PoolDevice {
  std::string uuid;
  std::uint64_t memory_bytes = 0;  // the GPU's
  BinderGpu gpu;
};
using PoolDevices = std::map<std::string, PoolDevice, std::less<>>;  // by device name

// A container already prepared on one of this node's GPUs (a claim's slot, or a device-plugin
// slot left from before the node changed path).
struct Neighbour {
  std::string uuid;
  std::string claim;  // "container C of pod NS/NAME", for messages
  std::string namespace_name;
  TrustTier tier = TrustTier::kTeam;
  std::string tier_error;  // its namespace's tier could not be read: a claim beside it is refused
  SharingMode mode = SharingMode::kShared;
};

// What the node knows that a claim is judged against.
struct ClaimContext {
  std::string node;  // the pool
  PoolDevices devices;
  const policy::Policy* policy = nullptr;
  TrustTier tier = TrustTier::kTeam;  // the claim's namespace's
  // The other claims on this node's GPUs. kube-scheduler packs claims knowing nothing of tiers:
  // until tessera confirms allocations (binding conditions, ADR 0022 item 3) the node refuses a
  // claim its tier may not share a GPU with, and one of another mode.
  std::vector<Neighbour> neighbours;
};

// The devices, limits and config of an allocated claim (the API object) for this node, checked:
// the UID kubelet named, an allocation with at least one result of this driver, every one of
// them in this node's pool on a managed healthy GPU, its consumed capacities well-formed, one
// sharing mode (from the requests' DeviceClasses) that the tier allows, and a config that parses.
// Every error names the field.
StatusOr<PreparedClaim> ClaimLimits(const k8s::Json& claim, std::string_view uid,
                                    const ClaimContext& context);

// The API server as far as preparing needs it.
class ClaimApi {
 public:
  virtual ~ClaimApi() = default;
  virtual StatusOr<k8s::Json> GetClaim(std::string_view ns, std::string_view name) = 0;
  // The namespace's `tessera.dev/trust` label, nullopt without one.
  virtual StatusOr<std::optional<std::string>> TrustLabel(std::string_view ns) = 0;
};

// NodePrepareResources / NodeUnprepareResources without gRPC: reads the claim, judges it
// (ClaimLimits) and prepares or releases its slot through the binder.
class ClaimPreparer {
 public:
  ClaimPreparer(std::string node, policy::Policy policy, ClaimApi* api, SlotBinder* binder);
  // This node's pool from the newest inventory.
  void SetInventory(const InventoryContent& content,
                    const std::map<std::string, BinderGpu, std::less<>>& gpus);
  // The prepared devices with their CDI device ID ("tessera.dev/gpu=claim-<uid>").
  struct Prepared {
    std::vector<ClaimDevice> devices;
    std::string pool;  // this node's
    std::string cdi_device;
  };
  StatusOr<Prepared> Prepare(std::string_view ns, std::string_view name, std::string_view uid);
  Status Unprepare(std::string_view uid);
  // Claim slots kubelet will not release: their claim is gone (deleted, or made again under
  // another UID), no longer allocated on this node's pool, or reserved for no pod. kubelet
  // releases a claim's slot (NodeUnprepareResources) once the claim's last pod here is gone, but
  // not if it lost its checkpoint meanwhile (its state wiped under the same node name). A slot
  // is released on the second pass in a row that finds it so; one whose claim cannot be read (an
  // API error other than NotFound) or whose limits file names no claim is kept. Returns how many
  // were released. One caller at a time (the clean-up loop).
  StatusOr<int> ReleaseOrphans();

 private:
  const std::string node_;
  const policy::Policy policy_;
  ClaimApi* const api_;
  SlotBinder* const binder_;
  std::mutex mu_;  // guards devices_ and inventory_seen_
  PoolDevices devices_;
  bool inventory_seen_ = false;
  // Held from reading the other slots through writing this claim's: two prepares (kubelet calls
  // them from each pod's worker) must not both judge a GPU without seeing each other.
  std::mutex judge_mu_;
  std::set<std::string> orphans_before_;  // ReleaseOrphans' previous findings
};

}  // namespace tessera::agent::dra
