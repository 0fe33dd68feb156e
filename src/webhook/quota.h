// Per-namespace GPU quotas (policy `quotas.<namespace>`: gpuMemory, gpuCores, gpus), which a
// ResourceQuota cannot count: a fractional ask's memory may be a share of a GPU not chosen yet.
//
// Usage is what the namespace's live pods and ResourceClaims of tessera's DeviceClasses ask (fed
// by the pod and claim watches) plus admissions granted in the last `admission_ttl` whose objects
// the watches have not shown yet, so two pods (or claims) admitted at once cannot both slip under
// the limit. A claim counts from its creation to its deletion, allocated or not (a claim made from
// a pod's template is deleted with the pod). Counting rules:
//   gpuMemory: explicit bytes x GPUs; a share of a GPU (cores-only, gpu-fraction) counts as that
//              share of the largest GPU in the cluster (an upper bound);
//   gpuCores:  compute shares in percent (100 = one GPU);
//   gpus:      whole GPUs; a whole GPU also counts as 100 % compute and the largest GPU's
//              memory, so a namespace limited in memory or compute cannot escape by asking whole.
//   claims:    contract::ClaimUsageOf (memory rounded up to the request policy, times count).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/clock.h"
#include "tessera/status.h"

#include "contract/claim_ask.h"
#include "contract/pod_ask.h"
#include "policy/policy.h"

namespace tessera::webhook {

struct Usage {
  std::uint64_t memory_bytes = 0;
  std::uint64_t cores_percent = 0;
  std::uint64_t gpus = 0;
};

// What one pod's ask counts, given the largest GPU's memory.
Usage UsageOf(const contract::PodAsk& ask, std::uint64_t largest_gpu_memory);
// What a claim's spec (a ResourceClaim's `spec`) counts: contract::ClaimUsageOf.
Usage UsageOfClaim(const nlohmann::json& spec);

class QuotaBook {
 public:
  // `clock` times out remembered admissions; it must outlive the book.
  explicit QuotaBook(const policy::Policy* policy, Clock& clock = Clock::Real(),
                     std::chrono::milliseconds admission_ttl = std::chrono::seconds(30));

  void ObservePod(const nlohmann::json& pod);
  void ForgetPod(const nlohmann::json& pod);
  void ReplacePods(const std::vector<nlohmann::json>& pods);
  void ObserveClaim(const nlohmann::json& claim);
  void ForgetClaim(const nlohmann::json& claim);
  void ReplaceClaims(const std::vector<nlohmann::json>& claims);

  Usage Used(const std::string& ns, std::uint64_t largest_gpu_memory);
  // Checks `ask` against the namespace's quota; if it fits (or there is no quota) and `record`,
  // remembers the admission of ns/name. A denial names the quota field, the limit, the usage
  // and the ask.
  Status Admit(const std::string& ns, const std::string& name, const contract::PodAsk& ask,
               std::uint64_t largest_gpu_memory, bool record);
  // The same for a ResourceClaim's usage (remembered as the claim ns/name).
  Status AdmitClaim(const std::string& ns, const std::string& name, const Usage& asked,
                    std::uint64_t largest_gpu_memory, bool record);

 private:
  struct Counted {
    std::string ns;
    std::string key;  // namespace/name
    contract::PodAsk ask;
  };
  struct Pending {
    std::string ns;
    contract::PodAsk ask;  // a pod's (Usage computed when counted: the largest GPU may change)
    std::optional<Usage> claim;  // ... or a claim's
    std::chrono::steady_clock::time_point expires;
  };
  // What a pod counts (nothing for one without a UID, finished, or asking no GPU).
  std::optional<Counted> PodCounted(const nlohmann::json& pod, const contract::PodAsk& id) const;
  Usage UsedLocked(const std::string& ns, std::uint64_t largest);
  Status Check(const std::string& ns, const Usage& asked, std::uint64_t largest);

  const policy::Policy* policy_;
  Clock& clock_;
  const std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::map<std::string, Counted> pods_;     // by UID
  std::map<std::string, Pending> pending_;  // by namespace/name ("claim:" namespace/name)
  std::map<std::string, std::pair<std::string, Usage>> claims_;  // by UID: namespace, usage
};

}  // namespace tessera::webhook
