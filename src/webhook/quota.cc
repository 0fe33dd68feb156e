#include "webhook/quota.h"

#include "tessera/quantity.h"

#include "k8s/object.h"

namespace tessera::webhook {

using nlohmann::json;

Usage UsageOf(const contract::PodAsk& ask, std::uint64_t largest) {
  Usage u;
  if (!ask.wants_gpu()) return u;
  const placement::Request& q = ask.request;
  if (q.exclusive()) {  // a whole GPU counts against all three limits
    u.gpus = q.gpu_count;
    u.cores_percent = 100ULL * q.gpu_count;
    u.memory_bytes = largest * q.gpu_count;
    return u;
  }
  std::uint64_t per_gpu = q.gpu_memory_bytes;
  if (per_gpu == 0 && q.memory_ppm != 0) {
    per_gpu = largest / placement::kPpmPerGpu * q.memory_ppm +
              largest % placement::kPpmPerGpu * q.memory_ppm / placement::kPpmPerGpu;
  }
  u.memory_bytes = per_gpu * q.gpu_count;
  u.cores_percent = static_cast<std::uint64_t>(q.gpu_milli / 10) * q.gpu_count;
  return u;
}

Usage UsageOfClaim(const json& spec) {
  const contract::ClaimUsage u = contract::ClaimUsageOf(spec);
  return Usage{u.memory_bytes, u.cores_percent, 0};  // whole GPUs: no exclusive class yet
}

QuotaBook::QuotaBook(const policy::Policy* policy, Clock& clock, std::chrono::milliseconds ttl)
    : policy_(policy), clock_(clock), ttl_(ttl) {}

std::optional<QuotaBook::Counted> QuotaBook::PodCounted(const json& pod,
                                                        const contract::PodAsk& id) const {
  if (id.uid.empty() || id.terminal) return std::nullopt;
  auto ask = contract::ParsePodAsk(pod, *policy_);
  if (!ask.ok() || !ask->wants_gpu()) return std::nullopt;
  return Counted{id.namespace_name, id.key(), *std::move(ask)};
}

void QuotaBook::ObservePod(const json& pod) {
  const contract::PodAsk id = contract::PodIdentity(pod);
  auto counted = PodCounted(pod, id);
  std::lock_guard lock(mu_);
  pending_.erase(id.key());
  if (id.uid.empty()) return;
  if (!counted) {
    pods_.erase(id.uid);
    return;
  }
  pods_[id.uid] = *std::move(counted);
}

void QuotaBook::ForgetPod(const json& pod) {
  const contract::PodAsk id = contract::PodIdentity(pod);
  std::lock_guard lock(mu_);
  pods_.erase(id.uid);
  pending_.erase(id.key());
}

// A relist: the pods it lists replace the book's at once (an admission meanwhile never sees the
// book half empty).
void QuotaBook::ReplacePods(const std::vector<json>& pods) {
  std::map<std::string, Counted> listed;
  std::vector<std::string> keys;
  for (const json& p : pods) {
    const contract::PodAsk id = contract::PodIdentity(p);
    keys.push_back(id.key());
    if (auto counted = PodCounted(p, id)) listed[id.uid] = *std::move(counted);
  }
  std::lock_guard lock(mu_);
  pods_.swap(listed);
  for (const std::string& key : keys) pending_.erase(key);
}

namespace {
std::string ClaimKey(const std::string& ns, const std::string& name) {
  return "claim:" + ns + "/" + name;
}

// A claim's namespace and usage, or nothing for a claim of no tessera class.
std::optional<std::pair<std::string, Usage>> ClaimCounted(const json& claim) {
  const json* spec = k8s::Find(claim, "spec");
  const Usage u = spec != nullptr ? UsageOfClaim(*spec) : Usage{};
  if (u.memory_bytes == 0 && u.cores_percent == 0) return std::nullopt;
  return std::pair{k8s::MetadataAt(claim, "namespace"), u};
}
}  // namespace

void QuotaBook::ObserveClaim(const json& claim) {
  const std::string uid = k8s::MetadataAt(claim, "uid");
  auto counted = ClaimCounted(claim);
  std::lock_guard lock(mu_);
  pending_.erase(ClaimKey(k8s::MetadataAt(claim, "namespace"), k8s::MetadataAt(claim, "name")));
  if (uid.empty()) return;
  if (!counted) {
    claims_.erase(uid);
    return;
  }
  claims_[uid] = *std::move(counted);
}

void QuotaBook::ForgetClaim(const json& claim) {
  std::lock_guard lock(mu_);
  claims_.erase(k8s::MetadataAt(claim, "uid"));
  pending_.erase(ClaimKey(k8s::MetadataAt(claim, "namespace"), k8s::MetadataAt(claim, "name")));
}

// A relist: the claims it lists replace the book's at once (an admission meanwhile never sees
// the book half empty).
void QuotaBook::ReplaceClaims(const std::vector<json>& claims) {
  std::map<std::string, std::pair<std::string, Usage>> listed;
  for (const json& c : claims) {
    const std::string uid = k8s::MetadataAt(c, "uid");
    if (auto counted = ClaimCounted(c); counted && !uid.empty()) listed[uid] = *std::move(counted);
  }
  std::lock_guard lock(mu_);
  claims_.swap(listed);
  for (const json& c : claims) {
    pending_.erase(ClaimKey(k8s::MetadataAt(c, "namespace"), k8s::MetadataAt(c, "name")));
  }
}

Usage QuotaBook::UsedLocked(const std::string& ns, std::uint64_t largest) {
  Usage total;
  auto add = [&total](const Usage& u) {
    total.memory_bytes += u.memory_bytes;
    total.cores_percent += u.cores_percent;
    total.gpus += u.gpus;
  };
  for (const auto& [uid, c] : pods_) {
    if (c.ns == ns) add(UsageOf(c.ask, largest));
  }
  for (const auto& [uid, c] : claims_) {
    if (c.first == ns) add(c.second);
  }
  const auto now = clock_.Now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.expires <= now) {
      it = pending_.erase(it);
      continue;
    }
    if (it->second.ns == ns) {
      add(it->second.claim ? *it->second.claim : UsageOf(it->second.ask, largest));
    }
    ++it;
  }
  return total;
}

Usage QuotaBook::Used(const std::string& ns, std::uint64_t largest) {
  std::lock_guard lock(mu_);
  return UsedLocked(ns, largest);
}

Status QuotaBook::Check(const std::string& ns, const Usage& asked, std::uint64_t largest) {
  const policy::Quota* quota = policy_->QuotaOf(ns);
  if (quota == nullptr) return Status::Ok();
  const Usage used = UsedLocked(ns, largest);
  const std::string where = "namespace " + ns + ": quota ";
  if (quota->gpus && used.gpus + asked.gpus > *quota->gpus) {
    return ResourceExhaustedError(where + "quotas." + ns + ".gpus " + std::to_string(*quota->gpus) +
                                  " exceeded: in use " + std::to_string(used.gpus) + " + asked " +
                                  std::to_string(asked.gpus) + " whole GPUs");
  }
  if (quota->gpu_memory_bytes &&
      used.memory_bytes + asked.memory_bytes > *quota->gpu_memory_bytes) {
    return ResourceExhaustedError(where + "quotas." + ns + ".gpuMemory " +
                                  FormatQuantity(*quota->gpu_memory_bytes) + " exceeded: in use " +
                                  FormatBytesHuman(used.memory_bytes) + " + asked " +
                                  FormatBytesHuman(asked.memory_bytes) + " = " +
                                  FormatBytesHuman(used.memory_bytes + asked.memory_bytes));
  }
  if (quota->gpu_cores_percent &&
      used.cores_percent + asked.cores_percent > *quota->gpu_cores_percent) {
    return ResourceExhaustedError(where + "quotas." + ns + ".gpuCores " +
                                  std::to_string(*quota->gpu_cores_percent) +
                                  "% exceeded: in use " + std::to_string(used.cores_percent) +
                                  "% + asked " + std::to_string(asked.cores_percent) + "%");
  }
  return Status::Ok();
}

Status QuotaBook::Admit(const std::string& ns, const std::string& name, const contract::PodAsk& ask,
                        std::uint64_t largest, bool record) {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(Check(ns, UsageOf(ask, largest), largest));
  if (record && !name.empty()) {
    pending_[ns + "/" + name] = Pending{ns, ask, std::nullopt, clock_.Now() + ttl_};
  }
  return Status::Ok();
}

Status QuotaBook::AdmitClaim(const std::string& ns, const std::string& name, const Usage& asked,
                             std::uint64_t largest, bool record) {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(Check(ns, asked, largest));
  if (record && !name.empty()) {
    pending_[ClaimKey(ns, name)] = Pending{ns, {}, asked, clock_.Now() + ttl_};
  }
  return Status::Ok();
}

}  // namespace tessera::webhook
