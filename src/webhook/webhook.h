// tessera's admission webhooks (docs/design/0013-admission.md).
//
// Mutating (/mutate, pods CREATE): takes over pods addressed to another GPU scheduler
// (`schedulerName: kai-scheduler`), translates KAI's `gpu-memory` (MiB) annotation into a
// `tessera.dev/gpu-memory` limit, adds the `tessera.dev/gpu-slot: 1` handle to the container of a
// fractional ask, and sets the PriorityClass the policy maps the tessera priority to.
//
// Validating (/validate, failurePolicy Fail): pods CREATE and UPDATE, pods/binding CREATE, and
// on the DRA path resourceclaims and resourceclaimtemplates CREATE (contract/claim_ask.h).
// Every denial names the rule, the field and the accepted form:
//   - the ask itself (contract::ParsePodAsk: quantities, ranges, KAI conflicts, modes the tier
//     allows, MPS user ID), memory larger than any GPU in the cluster;
//   - decisions cannot be forged: only the scheduler's users may create, change or remove
//     `tessera.dev/decision` / `-signature`, on pods or through a Binding; pods asking for
//     tessera GPUs may not come with spec.nodeName;
//   - a tessera priority must match spec.priorityClassName as the policy maps it;
//   - per-namespace quotas (quota.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/policy.h"
#include "webhook/admission.h"
#include "webhook/quota.h"

namespace tessera::webhook {

// Why a pod was refused (the `rule` label of tessera_admission_denials_total; docs/protocol.md).
#define TESSERA_ADMISSION_RULES(X)                                                               \
  X(kReview, "review", "the body is not an AdmissionReview")                                     \
  X(kForgedDecision, "forged-decision", "a decision written by someone else than the scheduler") \
  X(kAsk, "ask",                                                                                 \
    "a pod's or claim's GPU ask: quantities, ranges, conflicts, tier modes, MPS user")           \
  X(kNodeName, "node-name", "a GPU pod with spec.nodeName")                                      \
  X(kTooLarge, "too-large", "more memory than any GPU in the cluster has")                       \
  X(kPriorityClass, "priority-class", "priorityClassName does not match the tessera priority")   \
  X(kQuota, "quota", "the namespace's quota")                                                    \
  X(kFrozenAsk, "frozen-ask", "an update changing the ask's annotations")                        \
  X(kBinding, "binding", "a Binding carrying a decision, not from the scheduler")

enum class DenialRule : int {
#define TESSERA_RULE_ENUM(e, name, help) e,
  TESSERA_ADMISSION_RULES(TESSERA_RULE_ENUM)
#undef TESSERA_RULE_ENUM
};
inline constexpr std::string_view kDenialRuleNames[] = {
#define TESSERA_RULE_NAME(e, name, help) name,
    TESSERA_ADMISSION_RULES(TESSERA_RULE_NAME)
#undef TESSERA_RULE_NAME
};
inline constexpr std::size_t kDenialRules = std::size(kDenialRuleNames);

// A refused object (a pod, or on the DRA path a claim or claim template), for the Event the
// scheduler posts about it.
struct Denial {
  DenialRule rule;
  std::string namespace_name, name;  // may be empty (generateName, or no review at all)
  std::string message;
  bool dry_run = false;
  std::string api_version = "v1", kind = "Pod";  // the Event's involvedObject
};

struct WebhookOptions {
  // Users that may write decisions (the scheduler's service account, e.g.
  // "system:serviceaccount:tessera-system:tessera-scheduler").
  std::vector<std::string> scheduler_users;
  // kube-scheduler profile that calls tessera-scheduler.
  std::string scheduler_name = "default-scheduler";
  // Pods addressed to these schedulers are taken over (the seeds' KAI manifests).
  std::vector<std::string> adopt_scheduler_names = {"kai-scheduler"};
  // Called for every denial (from the serving thread: must not block).
  std::function<void(const Denial&)> on_denial;
  // Claims count against quotas (the quota book is fed by a watch of ResourceClaims): without
  // the watch a claim would count only while its admission is remembered, so not at all.
  bool count_claims = false;
};

// What the webhooks need to know of the cluster (from the scheduler's own watches).
struct ClusterView {
  std::function<std::uint64_t()> largest_gpu_memory;  // 0: no GPU node known yet
  // A PriorityClass's value, nullopt if it does not exist.
  std::function<std::optional<std::int32_t>(const std::string&)> priority_class_value;
};

class Admission {
 public:
  Admission(const policy::Policy* policy, WebhookOptions options, ClusterView view,
            QuotaBook* quotas);

  // Both take an AdmissionReview body and return the AdmissionReview answer; a body that is
  // not a review gets a denial naming the field (uid "" when even that is missing).
  nlohmann::json Mutate(const nlohmann::json& review);
  nlohmann::json Validate(const nlohmann::json& review);

  // The JSON Patch Mutate would apply to a pod (empty array: nothing to change).
  nlohmann::json MutationsFor(const nlohmann::json& pod) const;

  // For /metrics: reviews answered per webhook, denials per rule.
  std::uint64_t mutate_reviews() const { return mutate_reviews_.load(); }
  std::uint64_t validate_reviews() const { return validate_reviews_.load(); }
  std::uint64_t denials(DenialRule rule) const {
    return denials_[static_cast<std::size_t>(rule)].load();
  }

 private:
  nlohmann::json ValidatePodCreate(const AdmissionRequest& r);
  nlohmann::json ValidatePodUpdate(const AdmissionRequest& r);
  nlohmann::json ValidateBinding(const AdmissionRequest& r);
  nlohmann::json ValidateClaim(const AdmissionRequest& r);
  bool IsScheduler(const AdmissionRequest& r) const;
  nlohmann::json Deny(DenialRule rule, const AdmissionRequest& r, int code,
                      const std::string& message);

  const policy::Policy* policy_;
  WebhookOptions options_;
  ClusterView view_;
  QuotaBook* quotas_;
  std::atomic<std::uint64_t> mutate_reviews_{0}, validate_reviews_{0};
  std::array<std::atomic<std::uint64_t>, kDenialRules> denials_{};
};

}  // namespace tessera::webhook
