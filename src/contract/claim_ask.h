// What a ResourceClaim asks of tessera's DRA driver (docs/design/0022-dra-driver.md): its
// requests of tessera's DeviceClasses (capacities `memory` and `cores`) and the driver's opaque
// config. The tenant writes the claim's spec; tessera-scheduler's validating webhook checks it at
// admission (kube-scheduler would round nonsense to the request policy, or leave the pod Pending
// without a word), and tessera-node reads the same config when it prepares the claim.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/model.h"
#include "tessera/status.h"

#include "policy/policy.h"

namespace tessera::contract {

// The driver's opaque config (devices.config[].opaque.parameters), apiVersion
// gpu.tessera.dev/v1alpha1, kind GpuConfig. Absent fields keep the defaults.
struct GpuConfig {
  PriorityClass priority = PriorityClass::kNormal;
  ComputeMode compute = ComputeMode::kHard;
  std::uint32_t window_ms = 0;  // 0: the default bucket
  std::string mps_user;         // numeric user ID, mode mps only
};
// Applies one parameters object over `config`; errors name the field (under `where`) and the
// accepted form, and leave `config` as it was. `from_class`: a DeviceClass's config (an
// administrator's); a claim's (the tenant's) may not raise its priority to latency-critical.
Status ApplyGpuConfig(const nlohmann::json& parameters, std::string_view where, bool from_class,
                      GpuConfig& config);

// The request policy of a device's `memory` capacity (the node's ResourceSlice): an ask is rounded
// up to a step of 256 MiB (the smallest a CUDA context fits in), 1 GiB when it asks none, and a
// device of `gpu_memory` bytes takes at most ClaimMemoryMax of it (the API server requires the
// range's max - min to be whole steps, and a GPU's memory seldom is: an H200's 143771Mi is not).
inline constexpr std::uint64_t kClaimMemoryStepBytes = std::uint64_t{256} << 20;
inline constexpr std::uint64_t kClaimMemoryDefaultBytes = std::uint64_t{1} << 30;
std::uint64_t ClaimMemoryMax(std::uint64_t gpu_memory);

// The most GPUs one request of a claim may count (the API server's limit on a claim's allocation
// results).
inline constexpr std::int64_t kMaxClaimCount = 32;

// Whether a DeviceClass is one of tessera's (shared.gpu.tessera.dev, mps.gpu.tessera.dev).
bool IsTesseraDeviceClass(std::string_view device_class);
// The sharing mode a request's DeviceClass names; a class of the cluster's own that selects this
// driver's devices shares them.
SharingMode SharingModeOfClass(std::string_view device_class);

// Whether a devices.config[] entry applies to `request` ("req", or "req/sub" for a
// firstAvailable alternative): no `requests` names every request, "req" each of its
// subrequests, "req/sub" that one only. Admission and the node apply configs by this one rule.
bool ConfigAppliesTo(const nlohmann::json& config, std::string_view request);

// Checks a claim's spec (a ResourceClaim's `spec`, a ResourceClaimTemplate's `spec.spec`) for
// what it asks of tessera's classes and driver: the capacities (memory a quantity above 0 that,
// rounded to the policy's steps, a GPU of `largest_gpu_memory` can give when that is known; cores
// a whole percent 1-100, at least the MPS floor under mps), a mode the namespace's `tier` allows
// and one mode a claim (alternatives of one request may differ: one is allocated), no adminAccess
// and no toleration of the unhealthy taint, each GpuConfig of the driver, and mpsUser set by a
// config that applies to each mps request. Requests of other classes and configs of other
// drivers are not looked at. Errors name the field under `where` and the accepted form:
// kPermissionDenied for what the tier forbids, kOutOfRange for memory larger than any GPU,
// kInvalidArgument for the rest.
Status CheckClaimSpec(const nlohmann::json& spec, std::string_view where,
                      const policy::Policy& policy, TrustTier tier,
                      std::uint64_t largest_gpu_memory);

// What a claim's spec takes of tessera's GPUs, for its namespace's quota (webhook/quota.h): per
// request of tessera's classes, its memory (rounded up to the request policy's 256 MiB steps;
// 1 GiB when it asks none) and cores, times the request's count; of a request's firstAvailable
// alternatives, the most of each (one of them is allocated). Values CheckClaimSpec would refuse
// count as their defaults (memory 1 GiB, cores 0, count 1; a count over kMaxClaimCount as that).
struct ClaimUsage {
  std::uint64_t memory_bytes = 0;
  std::uint64_t cores_percent = 0;
};
ClaimUsage ClaimUsageOf(const nlohmann::json& spec);

}  // namespace tessera::contract
