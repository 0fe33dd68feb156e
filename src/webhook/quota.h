// Per-namespace GPU quotas (policy `quotas.<namespace>`: gpuMemory, gpuCores, gpus), which a
// ResourceQuota cannot count: a fractional ask's memory may be a share of a GPU not chosen yet.
//
// Usage is what the namespace's live pods ask (fed by the pod watch) plus admissions granted in
// the last `admission_ttl` whose pods the watch has not shown yet, so two pods admitted at once
// cannot both slip under the limit. Counting rules:
//   gpuMemory: explicit bytes x GPUs; a share of a GPU (cores-only, gpu-fraction) counts as that
//              share of the largest GPU in the cluster (an upper bound);
//   gpuCores:  compute shares in percent (100 = one GPU);
//   gpus:      whole GPUs; a whole GPU also counts as 100 % compute and the largest GPU's
//              memory, so a namespace limited in memory or compute cannot escape by asking whole.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/clock.h"
#include "tessera/status.h"

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

class QuotaBook {
 public:
  // `clock` times out remembered admissions; it must outlive the book.
  explicit QuotaBook(const policy::Policy* policy, Clock& clock = Clock::Real(),
                     std::chrono::milliseconds admission_ttl = std::chrono::seconds(30));

  void ObservePod(const nlohmann::json& pod);
  void ForgetPod(const nlohmann::json& pod);
  void ReplacePods(const std::vector<nlohmann::json>& pods);

  Usage Used(const std::string& ns, std::uint64_t largest_gpu_memory);
  // Checks `ask` against the namespace's quota; if it fits (or there is no quota) and `record`,
  // remembers the admission of ns/name. A denial names the quota field, the limit, the usage
  // and the ask.
  Status Admit(const std::string& ns, const std::string& name, const contract::PodAsk& ask,
               std::uint64_t largest_gpu_memory, bool record);

 private:
  struct Counted {
    std::string ns;
    std::string key;  // namespace/name
    contract::PodAsk ask;
  };
  struct Pending {
    contract::PodAsk ask;
    std::chrono::steady_clock::time_point expires;
  };
  Usage UsedLocked(const std::string& ns, std::uint64_t largest);

  const policy::Policy* policy_;
  Clock& clock_;
  const std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::map<std::string, Counted> pods_;     // by UID
  std::map<std::string, Pending> pending_;  // by namespace/name
};

}  // namespace tessera::webhook
