#include "contract/claim_ask.h"

#include <gtest/gtest.h>

#include "tessera/names.h"

#include "testutil/status_matchers.h"

namespace tessera::contract {
namespace {

using nlohmann::json;

constexpr std::uint64_t kLargest = std::uint64_t{80} << 30;

json Request(std::string device_class, json capacity = json::object()) {
  json exactly = {{"deviceClassName", std::move(device_class)}};
  if (!capacity.empty()) exactly["capacity"] = {{"requests", std::move(capacity)}};
  return {{"name", "gpu"}, {"exactly", std::move(exactly)}};
}

json Config(json parameters) {
  return {{"opaque", {{"driver", std::string(names::kDraDriver)}, {"parameters", parameters}}}};
}

json GpuConfigOf(json fields) {
  json p = {{"apiVersion", std::string(names::kDraConfigApiVersion)},
            {"kind", std::string(names::kDraConfigKind)}};
  for (const auto& [k, v] : fields.items()) p[k] = v;
  return p;
}

json Spec(std::vector<json> requests, std::vector<json> configs = {}) {
  json devices = {{"requests", requests}};
  if (!configs.empty()) devices["config"] = configs;
  return {{"devices", devices}};
}

Status Check(const json& spec, TrustTier tier = TrustTier::kTeam,
             std::uint64_t largest = kLargest) {
  static const policy::Policy policy = policy::DefaultPolicy();
  return CheckClaimSpec(spec, "ResourceClaim ml/c: spec", policy, tier, largest);
}

TEST(ClaimAsk, MemoryAndCoresOfASharedGpuAreAccepted) {
  EXPECT_OK(
      Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", "12Gi"}, {"cores", "30"}})})));
  EXPECT_OK(Check(Spec({Request("shared.gpu.tessera.dev")})));  // the policy's defaults
  EXPECT_OK(Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", "80Gi"}})})));
  // Not known yet how large the GPUs are: no upper bound but the node's.
  EXPECT_OK(
      Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", "200Gi"}})}), TrustTier::kTeam, 0));
}

// What a claim counts against its namespace's quota: memory rounded up to the request policy's
// 256 MiB steps (1 GiB when it asks none) and cores, times the count; of a request's
// alternatives, the most; nothing for other classes.
TEST(ClaimAsk, UsageIsTheRoundedAskTimesItsCountAndTheLargestAlternative) {
  json two = Request("shared.gpu.tessera.dev", {{"memory", "1000Mi"}, {"cores", "30"}});
  two["exactly"]["count"] = 2;
  json alternatives = {{"name", "alt"},
                       {"firstAvailable",
                        {{{"name", "small"},
                          {"deviceClassName", "shared.gpu.tessera.dev"},
                          {"capacity", {{"requests", {{"memory", "2Gi"}, {"cores", "50"}}}}}},
                         {{"name", "big"},
                          {"deviceClassName", "shared.gpu.tessera.dev"},
                          {"capacity", {{"requests", {{"memory", "8Gi"}}}}}}}}};
  const ClaimUsage u = ClaimUsageOf(Spec({two, Request("shared.gpu.tessera.dev"), alternatives,
                                          Request("gpu.nvidia.com", {{"memory", "40Gi"}})}));
  EXPECT_EQ(u.memory_bytes, (2 * (std::uint64_t{1024} << 20)) + (std::uint64_t{1} << 30) +
                                (std::uint64_t{8} << 30));
  EXPECT_EQ(u.cores_percent, 2 * 30u + 50u);
  EXPECT_EQ(ClaimUsageOf(json::object()).memory_bytes, 0u);
}

TEST(ClaimAsk, ACountOutsideOneToThirtyTwoIsRefused) {
  for (const json& count : {json(0), json(33), json(-1), json("2")}) {
    json r = Request("shared.gpu.tessera.dev", {{"memory", "1Gi"}});
    r["exactly"]["count"] = count;
    const Status st = Check(Spec({r}));
    EXPECT_NE(st.message().find("spec.devices.requests[0].exactly.count: " + count.dump() +
                                " is not a count of GPUs; accepted: a whole number from 1 to 32"),
              std::string::npos)
        << st.message();
  }
}

TEST(ClaimAsk, AllocationModeAllIsRefused) {
  json all = Request("shared.gpu.tessera.dev", {{"memory", "1Gi"}});
  all["exactly"]["allocationMode"] = "All";
  const Status st = Check(Spec({all}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("spec.devices.requests[0].exactly.allocationMode: All asks a share "
                              "of every GPU"),
            std::string::npos)
      << st.message();
}

TEST(ClaimAsk, OtherClassesAndDriversAreNotLookedAt) {
  json other = Request("gpu.nvidia.com", {{"memory", "0"}, {"sm", "x"}});
  json foreign = {{"opaque", {{"driver", "gpu.nvidia.com"}, {"parameters", {{"any", 1}}}}}};
  EXPECT_OK(Check(Spec({other}, {foreign}), TrustTier::kRegulated));
}

TEST(ClaimAsk, ZeroNegativeAndMalformedCapacitiesNameTheFieldAndTheForm) {
  struct Case {
    json capacity;
    std::string field, says;
  };
  const std::vector<Case> cases = {
      {{{"memory", "0"}},
       "spec.devices.requests[0].exactly.capacity.requests.memory",
       "0 asks no memory"},
      {{{"memory", "-1Gi"}}, "capacity.requests.memory", "from 256Mi"},
      {{{"memory", "lots"}}, "capacity.requests.memory", "to 80Gi (what the largest GPU"},
      {{{"memory", 12}}, "capacity.requests.memory", "not a quantity"},
      {{{"cores", "0"}}, "capacity.requests.cores", "from 1 to 100"},
      {{{"cores", "150"}}, "capacity.requests.cores", "150 is not a share"},
      {{{"cores", "-5"}}, "capacity.requests.cores", "whole percent"},
      {{{"gpu-memory", "4Gi"}}, "capacity.requests.gpu-memory", "offer memory (bytes) and cores"},
  };
  for (const Case& c : cases) {
    const Status st = Check(Spec({Request("shared.gpu.tessera.dev", c.capacity)}));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.capacity.dump();
    EXPECT_EQ(st.message().rfind("ResourceClaim ml/c: spec.devices.requests[0].exactly.", 0), 0u)
        << st.message();
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
  }
}

TEST(ClaimAsk, MoreMemoryThanAnyGpuIsOutOfRange) {
  const Status st = Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", "100Gi"}})}));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("100.00 GiB is more than any GPU in the cluster has (largest: "
                              "80.00 GiB"),
            std::string::npos)
      << st.message();
  // An H200's 143771Mi is not whole 256Mi steps: its slice offers at most 143616Mi, and an ask is
  // rounded up to a step, so asking the whole GPU would stay Pending.
  const std::uint64_t h200 = std::uint64_t{143771} << 20;
  EXPECT_EQ(ClaimMemoryMax(h200), std::uint64_t{143616} << 20);
  EXPECT_OK(Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", "143616Mi"}})}),
                  TrustTier::kTeam, h200));
  for (const char* ask : {"143617Mi", "143771Mi"}) {
    const Status s =
        Check(Spec({Request("shared.gpu.tessera.dev", {{"memory", ask}})}), TrustTier::kTeam, h200);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << ask;
    EXPECT_NE(s.message().find("a claim gets at most 143616Mi in 256Mi steps"), std::string::npos)
        << s.message();
  }
}

// What the allocator would give but the node would refuse: admin access (capacity ignored) and a
// toleration of the unhealthy taint.
TEST(ClaimAsk, AdminAccessAndToleratingAnUnhealthyGpuAreRefused) {
  json r = Request("shared.gpu.tessera.dev");
  r["exactly"]["adminAccess"] = true;
  Status st = Check(Spec({r}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("requests[0].exactly.adminAccess: "), std::string::npos)
      << st.message();
  for (const json& toleration : {json{{"key", "gpu.tessera.dev/unhealthy"}, {"operator", "Exists"}},
                                 json{{"operator", "Exists"}}}) {
    r = Request("shared.gpu.tessera.dev");
    r["exactly"]["tolerations"] = {json{{"key", "other"}, {"operator", "Exists"}}, toleration};
    st = Check(Spec({r}));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << toleration.dump();
    EXPECT_NE(st.message().find("requests[0].exactly.tolerations[1]: tolerates "
                                "gpu.tessera.dev/unhealthy"),
              std::string::npos)
        << st.message();
  }
  r = Request("shared.gpu.tessera.dev");
  r["exactly"]["adminAccess"] = false;
  r["exactly"]["tolerations"] = {json{{"key", "other"}, {"operator", "Exists"}}};
  EXPECT_OK(Check(Spec({r})));
}

TEST(ClaimAsk, FirstAvailableSubrequestsAreCheckedEach) {
  json r = {{"name", "gpu"},
            {"firstAvailable",
             {{{"name", "big"},
               {"deviceClassName", "shared.gpu.tessera.dev"},
               {"capacity", {{"requests", {{"memory", "40Gi"}}}}}},
              {{"name", "small"},
               {"deviceClassName", "shared.gpu.tessera.dev"},
               {"capacity", {{"requests", {{"cores", "101"}}}}}}}}};
  const Status st = Check(Spec({r}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("spec.devices.requests[0].firstAvailable[1].capacity.requests.cores"),
            std::string::npos)
      << st.message();
}

TEST(ClaimAsk, AModeTheTierForbidsIsRefusedWithTheClassesItAllows) {
  // The default department tier allows shared, not mps.
  Status st =
      Check(Spec({Request("mps.gpu.tessera.dev", {{"cores", "20"}})}, {}), TrustTier::kDepartment);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("spec.devices.requests[0].exactly.deviceClassName: "
                              "mps.gpu.tessera.dev runs mode mps, which tier department does not "
                              "allow; accepted: shared.gpu.tessera.dev"),
            std::string::npos)
      << st.message();
  // Regulated gets exclusive GPUs only, which the DRA path does not offer yet.
  st = Check(Spec({Request("shared.gpu.tessera.dev")}), TrustTier::kRegulated);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("use tessera.dev/gpu"), std::string::npos) << st.message();
}

TEST(ClaimAsk, OneModeAClaim) {
  json shared = Request("shared.gpu.tessera.dev");
  json mps = Request("mps.gpu.tessera.dev", {{"cores", "20"}});
  mps["name"] = "second";
  const Status st =
      Check(Spec({shared, mps}, {Config(GpuConfigOf({{"mpsUser", 1000}}))}), TrustTier::kTeam);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      st.message().find("spec.devices.requests[1].exactly.deviceClassName: "
                        "mps.gpu.tessera.dev runs mode mps, but "
                        "ResourceClaim ml/c: spec.devices.requests[0].exactly asks mode shared"),
      std::string::npos)
      << st.message();
}

// Alternatives of one request may differ in mode (one of them is allocated); requests may not.
TEST(ClaimAsk, AlternativesMayDifferInModeRequestsMayNot) {
  json r = {{"name", "gpu"},
            {"firstAvailable",
             {{{"name", "shared"}, {"deviceClassName", "shared.gpu.tessera.dev"}},
              {{"name", "mps"},
               {"deviceClassName", "mps.gpu.tessera.dev"},
               {"capacity", {{"requests", {{"cores", "20"}}}}}}}}};
  EXPECT_OK(Check(Spec({r}, {Config(GpuConfigOf({{"mpsUser", 1000}}))})));
  json mps = Request("mps.gpu.tessera.dev", {{"cores", "20"}});
  mps["name"] = "second";
  json shared = Request("shared.gpu.tessera.dev");
  shared["name"] = "third";
  // The mixed request says nothing of the claim's mode; the two others disagree.
  const Status st = Check(Spec({r, mps, shared}, {Config(GpuConfigOf({{"mpsUser", 1000}}))}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("requests[2].exactly.deviceClassName: shared.gpu.tessera.dev runs "
                              "mode shared, but ResourceClaim ml/c: spec.devices.requests[1]"),
            std::string::npos)
      << st.message();
}

// The node applies a config only to the requests it names: mpsUser must reach each mps request.
TEST(ClaimAsk, TheMpsUserMustBeSetForEachMpsRequest) {
  json mps = Request("mps.gpu.tessera.dev", {{"cores", "20"}});
  json scoped = Config(GpuConfigOf({{"mpsUser", 1000}}));
  scoped["requests"] = {"other"};
  Status st = Check(Spec({mps}, {scoped}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("for request gpu whose GpuConfig sets mpsUser"), std::string::npos)
      << st.message();
  scoped["requests"] = {"gpu"};
  EXPECT_OK(Check(Spec({mps}, {scoped})));
  // "gpu" names each of its subrequests; "gpu/mps" that one only.
  json alt = {{"name", "gpu"},
              {"firstAvailable",
               {{{"name", "mps"},
                 {"deviceClassName", "mps.gpu.tessera.dev"},
                 {"capacity", {{"requests", {{"cores", "20"}}}}}}}}};
  EXPECT_OK(Check(Spec({alt}, {scoped})));
  scoped["requests"] = {"gpu/mps"};
  EXPECT_OK(Check(Spec({alt}, {scoped})));
  scoped["requests"] = {"gpu/other"};
  EXPECT_FALSE(Check(Spec({alt}, {scoped})).ok());
}

TEST(ClaimAsk, MpsNeedsItsFloorAndAUser) {
  Status st = Check(Spec({Request("mps.gpu.tessera.dev", {{"cores", "5"}})},
                         {Config(GpuConfigOf({{"mpsUser", 1000}}))}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("from 10 to 100 (under mps also the client's SM limit"),
            std::string::npos)
      << st.message();
  st = Check(Spec({Request("mps.gpu.tessera.dev", {{"cores", "20"}})}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sets mpsUser"), std::string::npos) << st.message();
  EXPECT_OK(Check(Spec({Request("mps.gpu.tessera.dev", {{"cores", "20"}})},
                       {Config(GpuConfigOf({{"mpsUser", 1000}}))})));
}

TEST(ClaimAsk, TheDriversConfigIsCheckedFieldByField) {
  struct Case {
    json parameters;
    StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {GpuConfigOf({{"priority", "latency-critical"}}), StatusCode::kPermissionDenied,
       "config[0].opaque.parameters.priority: latency-critical is set by a DeviceClass's config"},
      {GpuConfigOf({{"priority", "urgent"}}), StatusCode::kInvalidArgument,
       "config[0].opaque.parameters.priority"},
      {GpuConfigOf({{"windowMs", 1}}), StatusCode::kInvalidArgument, "whole milliseconds in"},
      {GpuConfigOf({{"mpsUser", -1}}), StatusCode::kInvalidArgument, "numeric user ID"},
      {GpuConfigOf({{"colour", "red"}}), StatusCode::kInvalidArgument,
       "unknown field (GpuConfig has priority, compute, windowMs, mpsUser)"},
      {{{"apiVersion", "gpu.tessera.dev/v2"}, {"kind", "GpuConfig"}},
       StatusCode::kInvalidArgument,
       "apiVersion/kind must be gpu.tessera.dev/v1alpha1 GpuConfig"},
      {json("text"), StatusCode::kInvalidArgument, "not an object"},
  };
  for (const Case& c : cases) {
    const Status st = Check(Spec({Request("shared.gpu.tessera.dev")}, {Config(c.parameters)}));
    EXPECT_EQ(st.code(), c.code) << c.parameters.dump();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("ResourceClaim ml/c: spec.devices.config[0]"), std::string::npos)
        << st.message();
  }
  EXPECT_OK(Check(Spec(
      {Request("shared.gpu.tessera.dev")},
      {Config(GpuConfigOf(
          {{"priority", "best-effort"}, {"compute", "work-conserving"}, {"windowMs", 100}}))})));
}

TEST(ClaimAsk, AClaimWithoutDevicesIsNotAnError) {
  EXPECT_OK(Check(json::object()));
  EXPECT_OK(Check(json{{"devices", {{"requests", "not a list"}}}}));
}

}  // namespace
}  // namespace tessera::contract
