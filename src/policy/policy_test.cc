#include "policy/policy.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera::policy {
namespace {

TEST(Policy, ExampleFileIsValid) {
  auto policy = LoadPolicyFile(TESSERA_EXAMPLE_POLICY);
  ASSERT_OK(policy);
  EXPECT_EQ(*policy->TierOf("fraud-detection", std::nullopt), TrustTier::kRegulated);
  EXPECT_EQ(*policy->TierOf("unlisted", std::nullopt), TrustTier::kTeam);
  EXPECT_EQ(*policy->TierOf("unlisted", "customer"), TrustTier::kCustomer);
  // The explicit mapping wins over a label.
  EXPECT_EQ(*policy->TierOf("fraud-detection", "team"), TrustTier::kRegulated);
  EXPECT_TRUE(policy->Rule(TrustTier::kRegulated).Allows(SharingMode::kMig));
  EXPECT_EQ(*policy->QuotaOf("data-analytics")->gpu_memory_bytes, 64ULL << 30);
  EXPECT_EQ(*policy->QuotaOf("data-analytics")->gpu_cores_percent, 400u);
  EXPECT_EQ(*policy->QuotaOf("data-analytics")->gpus, 2u);
  EXPECT_EQ(policy->QuotaOf("engineering"), nullptr);
  EXPECT_TRUE(policy->warnings.empty());
}

TEST(Policy, LabelIsIgnoredUnlessHonoured) {
  auto policy = ParsePolicy("version: v1\ntierAssignment: {defaultTier: department}\n");
  ASSERT_OK(policy);
  EXPECT_EQ(*policy->TierOf("ns", "team"), TrustTier::kDepartment);
}

TEST(Policy, LabelNamingNoTierIsAnError) {
  auto policy = ParsePolicy("version: v1\ntierAssignment: {honorNamespaceLabel: true}\n");
  ASSERT_OK(policy);
  auto tier = policy->TierOf("ns", "trusted");
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.status().message().find("tessera.dev/trust"), std::string::npos);
  EXPECT_NE(tier.status().message().find("accepted: team, department"), std::string::npos);
}

TEST(Policy, DefaultsFollowTheDecisionFramework) {
  const Policy p = DefaultPolicy();
  const Tenant team_a{"a", TrustTier::kTeam}, team_b{"b", TrustTier::kTeam};
  const Tenant dept_a{"c", TrustTier::kDepartment}, dept_b{"d", TrustTier::kDepartment};
  const Tenant cust_a{"e", TrustTier::kCustomer}, cust_a2{"e", TrustTier::kCustomer};
  const Tenant cust_b{"f", TrustTier::kCustomer};
  const Tenant reg{"g", TrustTier::kRegulated}, reg2{"g", TrustTier::kRegulated};
  EXPECT_TRUE(p.MayShareGpu(team_a, team_b));
  EXPECT_TRUE(p.MayShareGpu(dept_a, dept_b));
  EXPECT_FALSE(p.MayShareGpu(team_a, dept_a));  // department only within its tier
  EXPECT_TRUE(p.MayShareGpu(cust_a, cust_a2));
  EXPECT_FALSE(p.MayShareGpu(cust_a, cust_b));  // scenario 6: never another namespace
  EXPECT_FALSE(p.MayShareGpu(cust_a, team_a));
  EXPECT_FALSE(p.MayShareGpu(reg, reg2));  // dedicated GPUs
  EXPECT_FALSE(p.Rule(TrustTier::kRegulated).Allows(SharingMode::kShared));
  EXPECT_TRUE(p.Rule(TrustTier::kTeam).Allows(SharingMode::kMps));
  EXPECT_FALSE(p.Rule(TrustTier::kCustomer).Allows(SharingMode::kMps));
}

struct BadPolicy {
  const char* name;
  const char* yaml;
  const char* expect;  // the field path and the message fragment
};

const BadPolicy kBadPolicies[] = {
    {"NotYaml", "version: [v1", "not valid YAML (line"},
    {"MissingVersion", "tiers: {}\n", "version: is missing; accepted: v1"},
    {"WrongVersion", "version: v2\n", "version (line 1): is \"v2\"; accepted: v1"},
    {"NotAMapping", "- a\n- b\n", "(document) (line 1): is a list; accepted: a mapping"},
    {"UnknownTopField", "version: v1\ntier: {}\n",
     "tier (line 2): is not a known field; accepted: version, tierAssignment"},
    {"UnknownTier", "version: v1\ntiers:\n  partner: {modes: [shared]}\n",
     "tiers.partner (line 3): is not a known field; accepted: team, department, customer, "
     "regulated"},
    {"UnknownMode", "version: v1\ntiers:\n  team: {modes: [timeslicing]}\n",
     "tiers.team.modes[0] (line 3): \"timeslicing\" is not a sharing mode; accepted: shared"},
    {"NativeMode", "version: v1\ntiers:\n  team: {modes: [native]}\n",
     "\"native\" is a measurement baseline"},
    {"DuplicateMode", "version: v1\ntiers:\n  team: {modes: [shared, shared]}\n",
     "tiers.team.modes[1] (line 3): \"shared\" is listed twice"},
    {"EmptyModes", "version: v1\ntiers:\n  team: {modes: []}\n",
     "tiers.team.modes (line 3): is a list; accepted: a non-empty list"},
    {"BadCoTenancy", "version: v1\ntiers:\n  team: {coTenancy: anyone}\n",
     "tiers.team.coTenancy (line 3): \"anyone\" is not a co-tenancy rule; accepted: any, "
     "same-tier, same-namespace, none"},
    {"BadEnforcement", "version: v1\ntiers:\n  team: {enforcement: open}\n",
     "accepted: fail-open, fail-closed"},
    {"BadDrift", "version: v1\ntiers:\n  team: {onDrift: ignore}\n",
     "tiers.team.onDrift (line 3): \"ignore\" is not a drift action; accepted: report, kill, "
     "evict"},
    {"Contradiction", "version: v1\ntiers:\n  team: {modes: [shared], coTenancy: none}\n",
     "coTenancy \"none\" contradicts the sharing modes shared/mps"},
    {"BadDefaultTier", "version: v1\ntierAssignment: {defaultTier: gold}\n",
     "tierAssignment.defaultTier (line 2): \"gold\" is not a trust tier; accepted: team"},
    {"BadNamespaceName", "version: v1\ntierAssignment:\n  namespaces: {Bad_NS: team}\n",
     "tierAssignment.namespaces.Bad_NS (line 3): \"Bad_NS\" accepted: a Kubernetes namespace"},
    {"BadLabelBool", "version: v1\ntierAssignment: {honorNamespaceLabel: maybe}\n",
     "\"maybe\" is not a boolean; accepted: true, false"},
    {"BadQuotaMemory", "version: v1\nquotas:\n  ns: {gpuMemory: 4 Gi}\n",
     "quotas.ns.gpuMemory (line 3): \"4 Gi\" contains whitespace at position 1"},
    {"BadQuotaCores", "version: v1\nquotas:\n  ns: {gpuCores: 12.5}\n",
     "quotas.ns.gpuCores (line 3): \"12.5\" is not a whole number of percent"},
    {"BadQuotaGpus", "version: v1\nquotas:\n  ns: {gpus: -1}\n",
     "quotas.ns.gpus (line 3): \"-1\" is not a GPU count"},
    {"EmptyQuota", "version: v1\nquotas:\n  ns: {}\n", "quotas.ns (line 3): is empty"},
    {"UnknownQuotaField", "version: v1\nquotas:\n  ns: {memory: 4Gi}\n",
     "quotas.ns.memory (line 3): is not a known field; accepted: gpuMemory, gpuCores, gpus"},
    {"DuplicateKey", "version: v1\nquotas:\n  ns: {gpus: 1}\n  ns: {gpus: 2}\n",
     "quotas.ns (line 4): is given twice"},
    {"BadPriorityClass", "version: v1\npriorityClasses: {urgent: x}\n",
     "priorityClasses.urgent (line 2): is not a known field; accepted: latency-critical"},
    {"BadPriorityClassName", "version: v1\npriorityClasses: {normal: Not_Valid}\n",
     "priorityClasses.normal (line 2): \"Not_Valid\" is not a PriorityClass name"},
    {"NonAsciiTier", "version: v1\ntierAssignment: {defaultTier: \"t\xc3\xa9\x61m\"}\n",
     "\"t\\xc3\\xa9am\" is not a trust tier"},
};

class BadPolicyTest : public ::testing::TestWithParam<BadPolicy> {};

TEST_P(BadPolicyTest, IsRejectedNamingFieldAndAcceptedForm) {
  const auto& c = GetParam();
  auto policy = ParsePolicy(c.yaml);
  ASSERT_FALSE(policy.ok()) << c.name;
  EXPECT_EQ(policy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(policy.status().message().find(c.expect), std::string::npos)
      << "want: " << c.expect << "\ngot:  " << policy.status().message();
  EXPECT_NE(policy.status().message().find("nothing was applied"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Table, BadPolicyTest, ::testing::ValuesIn(kBadPolicies),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Policy, ReportsEveryProblemAtOnce) {
  auto policy = ParsePolicy(
      "version: v1\ntiers:\n  team: {coTenancy: x, onDrift: y}\nquotas:\n  ns: {gpus: z}\n");
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.status().message().find("(3 problems;"), std::string::npos)
      << policy.status().message();
}

TEST(Policy, WarnsWhereWeakerThanTheFramework) {
  auto policy = ParsePolicy(
      "version: v1\ntiers:\n  customer: {coTenancy: any}\n  regulated: {modes: [shared], "
      "coTenancy: same-namespace}\n  department: {modes: [mps]}\n");
  ASSERT_OK(policy);
  EXPECT_EQ(policy->warnings.size(), 3u);
  EXPECT_NE(ExplainPolicy(*policy).find("Warnings"), std::string::npos);
}

TEST(Policy, ExplainsAndSerializes) {
  auto policy = LoadPolicyFile(TESSERA_EXAMPLE_POLICY);
  ASSERT_OK(policy);
  const std::string text = ExplainPolicy(*policy);
  EXPECT_NE(text.find("namespace acme-corp -> customer"), std::string::npos) << text;
  EXPECT_NE(text.find("data-analytics: GPU memory 64Gi compute 400% whole GPUs 2"),
            std::string::npos)
      << text;
  const std::string json = PolicyToJson(*policy);
  EXPECT_NE(json.find("\"coTenancy\": \"same-namespace\""), std::string::npos) << json;
}

TEST(Policy, MissingFileIsNotFound) {
  auto policy = LoadPolicyFile("/nonexistent/policy.yaml");
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), StatusCode::kNotFound);
}

// A file far larger than any policy is refused at once, naming the limit (parsed, a 50 MB one
// took seconds and gigabytes); a device is refused as not a regular file.
TEST(Policy, AnOversizedOrSpecialFileIsRefusedBeforeParsing) {
  const std::string path = ::testing::TempDir() + "/huge-policy.yaml";
  {
    std::ofstream f(path);
    f << "version: v1\ntierAssignment:\n  namespaces:\n";
    for (int i = 0; i < 300'000; ++i) f << "    namespace-" << i << ": team\n";
  }
  auto huge = LoadPolicyFile(path);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(huge.status().message().find("larger than the limit of 4194304 bytes"),
            std::string::npos)
      << huge.status().message();
  auto device = LoadPolicyFile("/dev/zero");
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.status().message().find("a character device"), std::string::npos)
      << device.status().message();
}

}  // namespace
}  // namespace tessera::policy
