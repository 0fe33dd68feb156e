// What tessera-node does for a container between kubelet's Allocate and the container's
// creation (docs/design/0016-device-plugin.md): learn which pod and container hold a slot
// (PodResources), read and verify the pod's decision, and write that slot's limits file, region
// and CDI spec for the decided GPU. Also: remove the files of slots no container holds any more.
//
// Nothing here takes a node-wide lock across a binding: each slot's files are its own, the GPU
// table is copied under a short lock, and two slots are prepared in parallel.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/limits.h"
#include "tessera/status.h"

#include "agent/slots.h"
#include "contract/decision.h"
#include "governor/mps.h"
#include "k8s/watch.h"
#include "policy/policy.h"

namespace tessera::agent {

// The pod and container kubelet recorded for a device.
struct DeviceOwner {
  std::string pod_namespace;
  std::string pod_name;
  std::string container;
};

// Kubelet's PodResources API, as far as the binder needs it.
class DeviceOwners {
 public:
  virtual ~DeviceOwners() = default;
  // Who holds `device` of `resource`; nullopt if nobody (yet).
  virtual StatusOr<std::optional<DeviceOwner>> OwnerOf(std::string_view resource,
                                                       std::string_view device) = 0;
  // Every device of `resource` some container holds.
  virtual StatusOr<std::set<std::string>> HeldDevices(std::string_view resource) = 0;
};

// The API server, as far as the binder needs it.
class PodApi {
 public:
  virtual ~PodApi() = default;
  virtual StatusOr<k8s::Json> GetPod(std::string_view ns, std::string_view name) = 0;
  // The pod named by a limits file's "namespace/name".
  StatusOr<k8s::Json> GetPodOf(const Limits& limits) {
    const std::size_t slash = limits.pod.find('/');
    if (slash == std::string::npos)
      return InvalidArgumentError("limits name no pod: \"" + limits.pod + "\"");
    return GetPod(limits.pod.substr(0, slash), limits.pod.substr(slash + 1));
  }
  // A Warning Event on the pod (best effort).
  virtual void WarnPod(const k8s::Json& pod, std::string_view reason, std::string_view message) = 0;
};

// What the binder knows of a GPU on this node (from the inventory loop).
struct BinderGpu {
  int minor = 0;  // /dev/nvidia<minor>
  bool managed = false;
  bool healthy = true;
  std::string health_reason;
  std::uint64_t context_bytes = 0;  // charged per process (limits file context=)
  std::uint64_t stream_bytes = 0;   // charged per stream (limits file stream=)
};

struct BinderOptions {
  std::string node_name;
  std::string state_dir;
  std::string cdi_dir;
  std::string hook_library;   // the preload library on the host
  std::string ld_so_preload;  // the host file naming it (written at start)
  CdiDriver driver;           // the host driver's libraries and device nodes the CDI spec names
  policy::Policy policy;
  // The node's MPS daemons (mode mps containers); null: mode mps is refused on this node.
  governor::NodeMps* mps = nullptr;
  // A slot allocated or prepared this recently keeps its files even if kubelet does not list it
  // as held yet: kubelet records an allocation after Allocate answers, and the clean-up's list
  // may predate it.
  std::chrono::milliseconds release_grace{std::chrono::seconds(30)};
  // Decision public keys by keyId (0002 §4).
  std::map<std::string, std::shared_ptr<contract::Verifier>, std::less<>> keys;
};

// The limits of `container` in a verified decision: each device must be one of this node's
// managed, healthy GPUs. Errors name what is wrong.
StatusOr<Limits> LimitsFor(const contract::Decision& decision, std::string_view container,
                           const std::map<std::string, BinderGpu, std::less<>>& gpus,
                           const policy::Policy& policy);

// The sum of the shares of the latency-critical MPS containers whose slots under `state_dir`
// hold a limits file for the GPU `uuid` (other than `except_slot`), at most 100: the reserve a
// best-effort MPS container's SM limit leaves them (governor::ActiveThreadPercent).
std::uint32_t LatencyCriticalMpsAsks(const std::string& state_dir, std::string_view uuid,
                                     std::string_view except_slot);

class SlotBinder {
 public:
  SlotBinder(BinderOptions options, DeviceOwners* owners, PodApi* pods);

  void SetGpus(std::map<std::string, BinderGpu, std::less<>> gpus);

  // Allocate: the slot's folders exist (empty until PreStartContainer fills them).
  Status Allocate(std::string_view slot);
  // What Allocate answers kubelet for the slot: mounts, environment, CDI device.
  SlotAllocation AllocationOf(std::string_view slot) const;
  // PreStartContainer: the slot's files for the container kubelet recorded. On any error the pod
  // gets a TesseraDecisionRejected Event and the slot keeps no limits file (no GPU).
  Status Prepare(std::string_view slot);
  // DRA (docs/design/0022-dra-driver.md): a claim's slot ("claim-<uid>"), written from limits the
  // caller derived from the claim's allocation: region, limits file and a CDI spec that also
  // carries the slot's mounts and environment (no Allocate answer carries them on this path).
  // `mps_user`: the numeric user ID of mode mps (the claim's config). Idempotent: a slot whose
  // limits file holds these limits is kept as it is, region included (kubelet prepares again after
  // its restart, under running containers). On an error nothing is left half-prepared (no limits
  // file, no CDI spec).
  Status PrepareClaim(std::string_view slot, const Limits& limits, std::string_view mps_user);
  // NodeUnprepareResources: removes a claim slot's files; files already gone are no error.
  Status ReleaseClaim(std::string_view slot);
  // The limits of every slot on this node (claims' and device-plugin ones) but `except_slot`
  // (unreadable ones left out).
  std::vector<Limits> OtherSlotLimits(std::string_view except_slot) const;
  // The claim slots on this node ("claim-<uid>") and the limits their files hold (nullopt: none
  // readable).
  std::vector<std::pair<std::string, std::optional<Limits>>> ClaimSlots() const;
  // Removes the files of slots no container holds and nobody allocated or prepared within
  // `release_grace`; returns how many were removed.
  StatusOr<int> RemoveReleased();
  // Slots a container holds whose folder exists without a limits file (kubelet never called
  // PreStartContainer for it, or the node's files were removed under the running container):
  // prepared again from the pod's decision (its region kept, where there is one: the running
  // processes account there), and the pod told why its processes that started
  // meanwhile were refused the GPU (TesseraLimitsMissing; the library fails closed without the
  // file). A slot is restored when two passes in a row found its file missing, and each
  // container (namespace, pod and container name) once; a refused decision gets
  // TesseraDecisionRejected, as from Prepare. Slots touched within `release_grace` wait (a
  // PreStartContainer may be under way). Returns how many slots were written again. One caller at a
  // time (the clean-up loop).
  StatusOr<int> RestoreHeld();

 private:
  // The limits a slot's file holds (nullopt: none readable).
  std::optional<Limits> SlotLimits(std::string_view slot) const;
  StatusOr<Limits> VerifiedLimits(const k8s::Json& pod, const DeviceOwner& owner);
  // Prepare; with `restore` (RestoreHeld: the container runs), an existing region is kept, and
  // nothing is done (kAborted) if the slot was prepared since the pass looked.
  Status PrepareSlot(std::string_view slot, bool restore);
  bool TouchedWithinGrace(std::string_view slot);
  std::shared_ptr<std::mutex> SlotMutex(std::string_view slot);
  static std::string OwnerKey(const DeviceOwner& o) {
    return o.pod_namespace + "/" + o.pod_name + "/" + o.container;
  }
  // `with_allocation`: the CDI spec also carries what Allocate answers (DRA).
  Status WriteSlot(std::string_view slot, const Limits& limits, std::string_view mps_user,
                   bool keep_region, bool with_allocation);
  std::map<std::string, BinderGpu, std::less<>> Gpus();

  const BinderOptions options_;
  DeviceOwners* const owners_;
  PodApi* const pods_;
  void Touch(std::string_view slot);

  std::mutex gpus_mu_;     // guards gpus_ only (copied out before use)
  std::mutex touched_mu_;  // guards touched_ and restore_tried_ (held across a removal)
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> touched_;
  std::map<std::string, BinderGpu, std::less<>> gpus_;
  // Containers told of their slot's missing limits (RestoreHeld) or of a refused decision
  // (Prepare): slot -> OwnerKey, kept while the slot is held; guarded by touched_mu_.
  std::map<std::string, std::string, std::less<>> restore_tried_;
  std::set<std::string> missing_before_;  // RestoreHeld's previous pass: held slots without limits
  std::mutex slot_mus_mu_;                // guards slot_mus_
  std::map<std::string, std::shared_ptr<std::mutex>, std::less<>> slot_mus_;  // one per slot
};

}  // namespace tessera::agent
