// The dependency-free half of the policy: the built-in default, tiers, co-tenancy and quotas
// (the GPU host builds it for `tessera doctor`; parsing, which needs YAML, is policy.cc).
#include <algorithm>

#include "tessera/names.h"

#include "policy/policy.h"
#include "policy/rows.h"

namespace tessera::policy {

using internal::kCoTenancyRows;
using internal::kDriftRows;
using internal::kEnforcementRows;

std::string_view Name(CoTenancy value) { return NameIn(kCoTenancyRows, value); }
std::string_view Name(Enforcement value) { return NameIn(kEnforcementRows, value); }
std::string_view Name(DriftAction value) { return NameIn(kDriftRows, value); }

bool TierRule::Allows(SharingMode mode) const {
  return std::find(modes.begin(), modes.end(), mode) != modes.end();
}

StatusOr<TrustTier> Policy::TierOf(std::string_view namespace_name,
                                   std::optional<std::string_view> trust_label) const {
  if (auto it = namespaces.find(namespace_name); it != namespaces.end()) return it->second;
  if (honor_namespace_label && trust_label) {
    auto tier = ParseTrustTier(*trust_label);
    if (!tier.ok()) {
      return tier.status().WithContext("namespace " + std::string(namespace_name) + " label " +
                                       std::string(names::kLabelTrust));
    }
    return *tier;
  }
  return default_tier;
}

bool Policy::MayShareGpu(const Tenant& a, const Tenant& b) const {
  const auto allows = [&](const Tenant& self, const Tenant& other) {
    switch (Rule(self.tier).co_tenancy) {
      case CoTenancy::kAny:
        return true;
      case CoTenancy::kSameTier:
        return self.tier == other.tier;
      case CoTenancy::kSameNamespace:
        return self.namespace_name == other.namespace_name;
      case CoTenancy::kNone:
        return false;
    }
    return false;
  };
  return allows(a, b) && allows(b, a);
}

const Quota* Policy::QuotaOf(std::string_view namespace_name) const {
  auto it = quotas.find(namespace_name);
  return it == quotas.end() ? nullptr : &it->second;
}

Policy DefaultPolicy() {
  Policy p;
  using enum SharingMode;
  auto& team = p.tiers[static_cast<std::size_t>(TrustTier::kTeam)];
  team = {{kShared, kMps, kMig, kExclusive},
          CoTenancy::kAny,
          Enforcement::kFailOpen,
          DriftAction::kReport,
          false};
  auto& department = p.tiers[static_cast<std::size_t>(TrustTier::kDepartment)];
  department = {{kMig, kShared, kExclusive},
                CoTenancy::kSameTier,
                Enforcement::kFailClosed,
                DriftAction::kKill,
                false};
  auto& customer = p.tiers[static_cast<std::size_t>(TrustTier::kCustomer)];
  customer = {{kExclusive, kMig, kShared},
              CoTenancy::kSameNamespace,
              Enforcement::kFailClosed,
              DriftAction::kEvict,
              false};
  auto& regulated = p.tiers[static_cast<std::size_t>(TrustTier::kRegulated)];
  regulated = {
      {kExclusive}, CoTenancy::kNone, Enforcement::kFailClosed, DriftAction::kEvict, false};
  p.priority_classes = {"tessera-latency-critical", "tessera-normal", "tessera-best-effort"};
  return p;
}

}  // namespace tessera::policy
