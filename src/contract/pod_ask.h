// What a pod asks of tessera, read from the Pod object as the API server returns it
// (docs/design/0002 §1): per-container `tessera.dev/gpu`, `gpu-memory`, `gpu-cores` limits,
// the `tessera.dev/priority` and `tessera.dev/mode` annotations and KAI-Scheduler's
// `gpu-memory` / `gpu-fraction` annotations, turned into one placement request.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/model.h"
#include "tessera/status.h"

#include "placement/cluster.h"
#include "policy/policy.h"

namespace tessera::contract {

struct PodAsk {
  std::string uid;
  std::string namespace_name;
  std::string name;
  std::string node_name;          // spec.nodeName; empty while unbound
  std::int32_t k8s_priority = 0;  // spec.priority (set by admission from the PriorityClass)
  bool terminal = false;          // phase Succeeded or Failed: holds no GPU any more
  // The GPU ask. `container` is empty for a pod that asks tessera for nothing.
  std::string container;
  PriorityClass priority = PriorityClass::kNormal;
  ComputeMode compute = ComputeMode::kHard;  // tessera.dev/compute
  std::uint32_t compute_window_ms = 0;       // tessera.dev/compute-window-ms (hard shares)
  placement::Request request;                // valid when wants_gpu()

  bool wants_gpu() const { return !container.empty(); }
  std::string key() const { return namespace_name + "/" + name; }
};

// Reads a Pod. Errors name the field and the accepted form ("pod ml/train-0: container train:
// resources.limits[tessera.dev/gpu-cores]: \"150\": expected a whole percent 1-100"). A pod asking
// for nothing is not an error: its ask has an empty container.
// Limits: one container per pod may ask for GPUs; init containers may not; MIG asks are not
// placed by the extender yet.
StatusOr<PodAsk> ParsePodAsk(const nlohmann::json& pod, const policy::Policy& policy);

// The identity fields only (uid, namespace, name, nodeName, priority, phase): never fails on a
// well-formed object, for pods whose ask is invalid or already decided.
PodAsk PodIdentity(const nlohmann::json& pod);

}  // namespace tessera::contract
