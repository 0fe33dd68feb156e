// The administrator's policy file (version v1): which trust tier each namespace has, what each
// tier may do (sharing modes, co-tenancy, enforcement, drift response), per-namespace quotas,
// and the mapping of tessera priority classes to Kubernetes PriorityClasses.
//
// The same file is loaded by `tessera advise --policy`, the admission webhook and the scheduler.
// A tier never comes from anything a pod carries: only from this file, which may say to honour
// the `tessera.dev/trust` label on Namespace objects (which only cluster admins can edit).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera::policy {

#define TESSERA_CO_TENANCY(X)                                                            \
  X(kAny, "any", "may share a GPU with any pod whose own tier allows it")                \
  X(kSameTier, "same-tier", "may share a GPU only with namespaces of the same tier")     \
  X(kSameNamespace, "same-namespace", "may share a GPU only with pods of its namespace") \
  X(kNone, "none", "never shares a GPU, not even with its own namespace")

#define TESSERA_ENFORCEMENT(X)                                                                 \
  X(kFailOpen, "fail-open",                                                                    \
    "if tessera's own machinery fails, GPU calls pass through and launches run ungoverned "    \
    "(counted)")                                                                               \
  X(kFailClosed, "fail-closed",                                                                \
    "if tessera's own machinery fails, GPU allocations are refused and launches wait for the " \
    "compute governor (counted)")

#define TESSERA_DRIFT_ACTIONS(X)                                                \
  X(kReport, "report", "usage beyond the decision is reported (Event, metric)") \
  X(kKill, "kill", "the offending process is killed")                           \
  X(kEvict, "evict", "the pod is evicted")

#define TESSERA_POLICY_ENUM(name, text, meaning) name,
enum class CoTenancy : std::uint8_t { TESSERA_CO_TENANCY(TESSERA_POLICY_ENUM) };
enum class Enforcement : std::uint8_t { TESSERA_ENFORCEMENT(TESSERA_POLICY_ENUM) };
enum class DriftAction : std::uint8_t { TESSERA_DRIFT_ACTIONS(TESSERA_POLICY_ENUM) };
#undef TESSERA_POLICY_ENUM

std::string_view Name(CoTenancy value);
std::string_view Name(Enforcement value);
std::string_view Name(DriftAction value);

struct TierRule {
  std::vector<SharingMode> modes;  // in order of preference
  CoTenancy co_tenancy = CoTenancy::kNone;
  Enforcement enforcement = Enforcement::kFailClosed;
  DriftAction on_drift = DriftAction::kReport;
  bool from_file = false;  // false: the built-in default for the tier

  bool Allows(SharingMode mode) const;
};

struct Quota {
  std::optional<std::uint64_t> gpu_memory_bytes;
  std::optional<std::uint32_t> gpu_cores_percent;  // sum of compute shares, 100 = one GPU
  std::optional<std::uint32_t> gpus;               // whole GPUs
};

// A pod as far as co-tenancy is concerned.
struct Tenant {
  std::string namespace_name;
  TrustTier tier = TrustTier::kTeam;
};

struct Policy {
  TrustTier default_tier = TrustTier::kTeam;
  bool honor_namespace_label = false;
  std::map<std::string, TrustTier, std::less<>> namespaces;
  std::array<TierRule, kTrustTiers.size()> tiers;
  std::map<std::string, Quota, std::less<>> quotas;
  std::array<std::string, kPriorityClasses.size()> priority_classes;
  std::vector<std::string> warnings;  // valid, but weaker than the seed's framework advises

  const TierRule& Rule(TrustTier tier) const { return tiers[static_cast<std::size_t>(tier)]; }
  const std::string& KubernetesPriorityClass(PriorityClass priority) const {
    return priority_classes[static_cast<std::size_t>(priority)];
  }
  // The tier of a namespace: the explicit mapping, else the namespace's `tessera.dev/trust`
  // label if the policy honours it, else the default tier. A label naming no tier is an error.
  StatusOr<TrustTier> TierOf(std::string_view namespace_name,
                             std::optional<std::string_view> trust_label) const;
  // Whether two pods may be placed on the same physical GPU (each one's rule must allow the
  // other). Pods of one namespace always have the same tier.
  bool MayShareGpu(const Tenant& a, const Tenant& b) const;
  const Quota* QuotaOf(std::string_view namespace_name) const;
};

// The seed's decision framework as a policy: team shares freely, department shares only within
// its tier, customer never across namespaces, regulated gets dedicated GPUs.
Policy DefaultPolicy();

// Parses and validates a v1 policy document. Every problem is reported, one per line, each
// naming the field path, the line, what was wrong and the accepted values; nothing is partially
// applied.
StatusOr<Policy> ParsePolicy(std::string_view yaml);
StatusOr<Policy> LoadPolicyFile(const std::string& path);

// A human explanation of the effective policy (`tessera advise --policy FILE`).
std::string ExplainPolicy(const Policy& policy);

// The effective policy as JSON text (`--json`).
std::string PolicyToJson(const Policy& policy);

}  // namespace tessera::policy
