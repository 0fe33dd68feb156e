// Puts the inventory on the Node object: the annotation tessera.dev/gpu-inventory and the label
// tessera.dev/gpu-node=true (merge patch of the Node), and the node-level sums in
// status.capacity and status.allocatable (merge patch of the /status subresource). Reads the
// Node first and patches only what differs; merge patches touch only tessera's keys, so other
// annotations, labels and resources stay as they are.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "tessera/status.h"

#include "agent/inventory.h"
#include "k8s/client.h"

namespace tessera::agent {

struct PublishResult {
  bool patched_metadata = false;
  bool patched_status = false;
};

class Publisher {
 public:
  Publisher(k8s::Client& client, std::string node_name)
      : client_(client), node_name_(std::move(node_name)) {}

  // The generation of the inventory already on the Node (0 if none or unreadable JSON).
  StatusOr<std::int64_t> ExistingGeneration();
  // One attempt (the caller retries): GET the Node, PATCH what differs.
  StatusOr<PublishResult> Publish(const Inventory& inventory);
  // Resources kubelet reports itself (those of our device plugin): never patched here, so the
  // two writers cannot disagree.
  void LeaveToKubelet(std::string resource) { kubelet_owned_.insert(std::move(resource)); }
  // The DRA path (ADR 0022): the node-level sums are all 0, so that no device-plugin pod is placed
  // on (or admitted by kubelet to) a node whose GPUs kube-scheduler's allocator hands out, and the
  // Node is labelled tessera.dev/path=dra (else device-plugin) for the extender's ledger.
  void AdvertiseNoResources() { advertise_none_ = true; }

 private:
  k8s::Client& client_;
  std::string node_name_;
  std::set<std::string> kubelet_owned_;
  bool advertise_none_ = false;
};

}  // namespace tessera::agent
