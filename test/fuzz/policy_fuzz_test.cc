// Fuzzes the policy parser: no input may crash it, throw out of it, or yield a policy that
// breaks its own invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto policy = tessera::policy::ParsePolicy(text);
  if (!policy.ok()) {
    if (policy.status().code() != tessera::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  for (const auto& row : tessera::kTrustTiers) {
    const auto& rule = policy->Rule(row.value);
    if (rule.modes.empty() || rule.Allows(tessera::SharingMode::kNative)) std::abort();
  }
  (void)tessera::policy::ExplainPolicy(*policy);
  (void)tessera::policy::PolicyToJson(*policy);
  return 0;
}
