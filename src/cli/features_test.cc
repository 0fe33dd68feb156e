// Every entry of the feature list (src/advise/features.h) against the code: a built feature must
// be reachable (its command, names and admission path exist and take it), an unbuilt one must
// still be refused or absent. Building MIG placement, a DRA driver or copy-engine accounting
// makes this test fail until the list (and so `tessera advise`) says so.
#include "advise/features.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/names.h"

#include "advise/advise.h"
#include "cli/commands.h"
#include "contract/pod_ask.h"
#include "policy/policy.h"

namespace tessera::advise {
namespace {

bool HasName(std::string_view value) {
  return std::any_of(std::begin(names::kAllNames), std::end(names::kAllNames),
                     [&](const names::NameInfo& n) { return n.value == value; });
}

bool AnyNameContains(std::string_view part) {
  return std::any_of(std::begin(names::kAllNames), std::end(names::kAllNames),
                     [&](const names::NameInfo& n) { return n.value.find(part) != n.value.npos; });
}

// A pod of namespace `ns` asking for 4 GiB of one shared GPU, with these annotations.
StatusOr<contract::PodAsk> Ask(const nlohmann::json& annotations) {
  nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "p"}, {"namespace", "ml"}, {"uid", "u"}, {"annotations", annotations}}},
      {"spec",
       {{"containers",
         {{{"name", "c"},
           {"resources",
            {{"limits",
              {{"tessera.dev/gpu-memory", "4Gi"}, {"tessera.dev/gpu-cores", "30"}}}}}}}}}}};
  return contract::ParsePodAsk(pod, policy::DefaultPolicy());
}

std::map<FeatureId, std::function<bool()>> Checks() {
  return {
      {FeatureId::kMemoryCaps,
       [] { return cli::FindCommand("run") != nullptr && HasName("TESSERA_LIMITS_FILE"); }},
      {FeatureId::kComputeShares,
       [] {
         auto ask = Ask({{"tessera.dev/priority", "latency-critical"}});
         return ask.ok() && HasName("tessera_container_gpu_busy_seconds_total");
       }},
      {FeatureId::kMpsSpatialPriority,
       [] {
         return HasName("tessera.dev/mps-user") &&
                cli::UsageOf("run").find("--mps-lc-reserve") != std::string_view::npos;
       }},
      {FeatureId::kDrift,
       [] {
         return cli::FindCommand("drift") != nullptr &&
                HasName("tessera_node_drift_over_cap_total");
       }},
      {FeatureId::kPlacement,
       [] { return HasName("tessera.dev/decision") && HasName("tessera.dev/decision-signature"); }},
      // Not built: admission refuses mode mig; no DRA names; no copy-engine metric.
      {FeatureId::kMigPlacement,
       [] {
         return Ask({{"tessera.dev/mode", "mig"}}).ok();
       }},
      {FeatureId::kDraDriver,
       [] {
         return AnyNameContains("resource.k8s.io") || AnyNameContains("ResourceClaim") ||
                AnyNameContains("DeviceClass") || cli::FindCommand("dra") != nullptr;
       }},
      {FeatureId::kCopyEngineTime, [] { return AnyNameContains("copy"); }},
  };
}

TEST(Features, EveryEntryIsWhatTheCodeDoes) {
  const auto checks = Checks();
  for (const Feature& f : kFeatures) {
    const auto check = checks.find(f.id);
    ASSERT_NE(check, checks.end()) << f.name << ": no check (add one here)";
    EXPECT_EQ(check->second(), f.built)
        << f.name << " is listed as " << (f.built ? "built" : "not built")
        << " but the code says otherwise: update src/advise/features.h";
  }
}

TEST(Features, AdviseSaysExactlyTheList) {
  Request request;
  request.tier = TrustTier::kTeam;
  const std::string text = RenderText(Advise(request));
  const std::size_t built = text.find("this release builds: ");
  const std::size_t missing = text.find("not built yet: ");
  ASSERT_NE(built, std::string::npos) << text;
  ASSERT_NE(missing, std::string::npos) << text;
  for (const Feature& f : kFeatures) {
    const std::size_t at = text.find(f.text);
    ASSERT_NE(at, std::string::npos) << f.name << " is not in the advice:\n" << text;
    EXPECT_EQ(at > missing, !f.built) << f.name << " is said on the wrong side";
  }
  EXPECT_EQ(text.find("not yet in this release"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera::advise
