#include "advise/advise.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera::advise {
namespace {

bool Recommends(const Advice& a, Option o) {
  return std::any_of(a.recommended.begin(), a.recommended.end(),
                     [&](const Recommendation& r) { return r.option == o; });
}
bool RulesOut(const Advice& a, Option o) {
  return std::any_of(a.ruled_out.begin(), a.ruled_out.end(),
                     [&](const RuledOut& r) { return r.option == o; });
}

Request MakeRequest(TrustTier tier, const char* gpu = nullptr, const char* workloads = nullptr) {
  Request r;
  r.tier = tier;
  if (gpu != nullptr) r.gpu = *FindGpuModel(gpu);
  if (workloads != nullptr) r.workloads = *ParseWorkloads(workloads);
  return r;
}

TEST(Advise, KnowsGpuModelsAndMig) {
  EXPECT_EQ(FindGpuModel("H200")->mig_max_instances, 7u);
  EXPECT_EQ(FindGpuModel("h200")->memory_gib, 141u);
  EXPECT_EQ(FindGpuModel("A30")->mig_max_instances, 4u);
  EXPECT_EQ(FindGpuModel("RTX PRO 6000")->name, "RTX PRO 6000");
  EXPECT_EQ(FindGpuModel("rtx-pro-6000")->name, "RTX PRO 6000");
  EXPECT_EQ(FindGpuModel("T4")->mig_max_instances, 0u);
  auto bad = FindGpuModel("GTX 1080");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--gpu: \"GTX 1080\" is not a known GPU model; accepted: "
                                        "A100, A30, H100, H200, B200, RTX PRO 6000"),
            std::string::npos)
      << bad.status().message();
}

TEST(Advise, ParsesWorkloads) {
  auto w = ParseWorkloads("inference,training,inference");
  ASSERT_OK(w);
  EXPECT_EQ(w->size(), 2u);
  EXPECT_FALSE(ParseWorkloads("").ok());
  EXPECT_FALSE(ParseWorkloads("inference,").ok());
  auto bad = ParseWorkloads("inference,serving");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"serving\" is not a workload; accepted:"),
            std::string::npos);
}

TEST(Advise, TeamSharesWithEnforcement) {
  Advice a = Advise(MakeRequest(TrustTier::kTeam, "H200", "inference,training"));
  ASSERT_FALSE(a.recommended.empty());
  EXPECT_EQ(a.recommended.front().option, Option::kShared);
  EXPECT_TRUE(Recommends(a, Option::kMps));
  EXPECT_TRUE(Recommends(a, Option::kMig));
  EXPECT_FALSE(a.recommended.front().enforces.empty());
  EXPECT_FALSE(a.recommended.front().cannot.empty());
}

TEST(Advise, TeamInferenceOnlyPrefersMps) {
  Advice a = Advise(MakeRequest(TrustTier::kTeam, "H200", "inference"));
  EXPECT_EQ(a.recommended.front().option, Option::kMps);
}

TEST(Advise, DepartmentGetsHardwareBoundaryAndNoMps) {
  Advice a = Advise(MakeRequest(TrustTier::kDepartment, "H100"));
  EXPECT_EQ(a.recommended.front().option, Option::kMig);
  EXPECT_TRUE(RulesOut(a, Option::kMps));
  Advice t4 = Advise(MakeRequest(TrustTier::kDepartment, "T4"));
  EXPECT_FALSE(Recommends(t4, Option::kMig));
  EXPECT_TRUE(RulesOut(t4, Option::kMig));
}

TEST(Advise, CustomerGetsDedicatedAndVgpuOnlyWithLicences) {
  Request r = MakeRequest(TrustTier::kCustomer, "A100");
  Advice a = Advise(r);
  EXPECT_EQ(a.recommended.front().option, Option::kExclusive);
  EXPECT_TRUE(RulesOut(a, Option::kVgpu));
  EXPECT_TRUE(RulesOut(a, Option::kMps));
  r.vgpu_licensed = true;
  Advice licensed = Advise(r);
  EXPECT_TRUE(Recommends(licensed, Option::kVgpu));
}

TEST(Advise, RegulatedIsDedicated) {
  Advice a = Advise(MakeRequest(TrustTier::kRegulated, "H200"));
  EXPECT_EQ(a.recommended.front().option, Option::kExclusive);
  EXPECT_TRUE(RulesOut(a, Option::kShared));
  EXPECT_TRUE(RulesOut(a, Option::kMps));
}

TEST(Advise, PolicyNarrowsTheAdvice) {
  auto policy = policy::ParsePolicy("version: v1\ntiers:\n  team: {modes: [exclusive]}\n");
  ASSERT_OK(policy);
  Request r = MakeRequest(TrustTier::kTeam, "H200", "training");
  r.policy = &*policy;
  Advice a = Advise(r);
  ASSERT_EQ(a.recommended.size(), 1u);
  EXPECT_EQ(a.recommended.front().option, Option::kExclusive);
  EXPECT_TRUE(RulesOut(a, Option::kShared));
}

TEST(Advise, RendersTextAndJson) {
  Advice a = Advise(MakeRequest(TrustTier::kCustomer, "H200", "inference"));
  const std::string text = RenderText(a);
  EXPECT_NE(text.find("1. exclusive"), std::string::npos) << text;
  EXPECT_NE(text.find("vGPU"), std::string::npos);
  EXPECT_NE(text.find("virtual machine"), std::string::npos);
  const std::string json = RenderJson(a);
  EXPECT_NE(json.find("\"tier\": \"customer\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"migMaxInstances\": 7"), std::string::npos);
}

}  // namespace
}  // namespace tessera::advise
