#include "contract/pod_ask.h"

#include <gtest/gtest.h>

#include "contract/contract_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::contract {
namespace {

using contract::testing::MakePod;
using contract::testing::PodSpec;

StatusOr<PodAsk> Ask(const PodSpec& s, const policy::Policy& p = policy::DefaultPolicy()) {
  return ParsePodAsk(MakePod(s), p);
}

TEST(PodAsk, MemoryOnlyIsBestEffortCompute) {
  PodSpec s;
  s.limits["tessera.dev/gpu-memory"] = "4Gi";
  auto a = Ask(s);
  ASSERT_OK(a);
  ASSERT_TRUE(a->wants_gpu());
  EXPECT_EQ(a->container, "main");
  EXPECT_EQ(a->request.gpu_count, 1U);
  EXPECT_EQ(a->request.gpu_milli, 0);
  EXPECT_EQ(a->request.gpu_memory_bytes, 4ULL << 30);
  EXPECT_EQ(a->request.mode, SharingMode::kShared);
}

TEST(PodAsk, CoresOnlyTakesThatShareOfTheChosenGpusMemory) {
  PodSpec s;
  s.limits["tessera.dev/gpu-cores"] = "30";
  auto a = Ask(s);
  ASSERT_OK(a);
  EXPECT_EQ(a->request.gpu_milli, 300);
  EXPECT_EQ(a->request.gpu_memory_bytes, 0U);
  EXPECT_EQ(a->request.memory_ppm, 300'000U);
}

TEST(PodAsk, WholeGpusAreExclusive) {
  PodSpec s;
  s.limits["tessera.dev/gpu"] = "2";
  auto a = Ask(s);
  ASSERT_OK(a);
  EXPECT_EQ(a->request.gpu_count, 2U);
  EXPECT_EQ(a->request.gpu_milli, 1000);
  EXPECT_EQ(a->request.mode, SharingMode::kExclusive);
}

TEST(PodAsk, KaiAnnotationsAreTranslated) {
  PodSpec s;
  s.annotations["gpu-memory"] = "2000";
  auto a = Ask(s);
  ASSERT_OK(a);
  EXPECT_EQ(a->request.gpu_memory_bytes, 2000ULL << 20);
  PodSpec f;
  f.annotations["gpu-fraction"] = "0.5";
  auto b = Ask(f);
  ASSERT_OK(b);
  EXPECT_EQ(b->request.memory_ppm, 500'000U);
  EXPECT_EQ(b->request.gpu_milli, 0);
}

TEST(PodAsk, PriorityAndModeAnnotations) {
  PodSpec s;
  s.limits["tessera.dev/gpu-memory"] = "1Gi";
  s.annotations["tessera.dev/priority"] = "latency-critical";
  s.annotations["tessera.dev/mode"] = "mps";
  s.annotations["tessera.dev/mps-user"] = "1000";
  s.host_pid = true;
  s.run_as_user = 1000;
  s.priority = 1000;
  auto a = Ask(s);
  ASSERT_OK(a);
  EXPECT_EQ(a->priority, PriorityClass::kLatencyCritical);
  EXPECT_EQ(a->request.mode, SharingMode::kMps);
  EXPECT_EQ(a->request.uid, 1000U);
  EXPECT_EQ(a->k8s_priority, 1000);
}

TEST(PodAsk, ComputeModeAndPeriodAnnotations) {
  PodSpec s;
  s.limits["tessera.dev/gpu-cores"] = "30";
  auto plain = Ask(s);
  ASSERT_OK(plain);
  EXPECT_EQ(plain->compute, ComputeMode::kHard);
  EXPECT_EQ(plain->compute_window_ms, 0U);
  s.annotations["tessera.dev/compute-window-ms"] = "1000";
  auto windowed = Ask(s);
  ASSERT_OK(windowed);
  EXPECT_EQ(windowed->compute_window_ms, 1000U);
  s.annotations.erase("tessera.dev/compute-window-ms");
  s.annotations["tessera.dev/compute"] = "work-conserving";
  auto lending = Ask(s);
  ASSERT_OK(lending);
  EXPECT_EQ(lending->compute, ComputeMode::kWorkConserving);
}

// Under MPS the share is the client's SM limit: below the floor it is refused, at the floor not.
TEST(PodAsk, AnMpsSmLimitBelowTheFloorIsRefused) {
  PodSpec s;
  s.limits["tessera.dev/gpu-cores"] = "5";
  s.annotations["tessera.dev/mode"] = "mps";
  s.annotations["tessera.dev/mps-user"] = "1000";
  s.host_pid = true;
  s.run_as_user = 1000;
  auto low = Ask(s);
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find("resources.limits[tessera.dev/gpu-cores]: 5 under mode "
                                        "mps is an SM limit below the floor of 10 %; accepted: "
                                        "10-100, or mode shared"),
            std::string::npos)
      << low.status().message();
  s.limits["tessera.dev/gpu-cores"] = "10";
  EXPECT_OK(Ask(s));
  s.limits["tessera.dev/gpu-cores"] = "5";
  s.annotations["tessera.dev/mode"] = "shared";  // a time share of 5 % is fine
  EXPECT_OK(Ask(s));
}

TEST(PodAsk, MpsNeedsTheHostPidNamespace) {
  PodSpec s;
  s.limits["tessera.dev/gpu-memory"] = "1Gi";
  s.annotations["tessera.dev/mode"] = "mps";
  s.annotations["tessera.dev/mps-user"] = "1000";
  s.run_as_user = 1000;
  auto a = Ask(s);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("mode mps needs spec.hostPID: true"), std::string::npos)
      << a.status().message();
}

TEST(PodAsk, MpsNeedsTheContainerToRunAsTheNamedUser) {
  PodSpec s;
  s.limits["tessera.dev/gpu-memory"] = "1Gi";
  s.annotations["tessera.dev/mode"] = "mps";
  s.annotations["tessera.dev/mps-user"] = "1000";
  s.host_pid = true;
  auto unset = Ask(s);
  ASSERT_FALSE(unset.ok());
  EXPECT_NE(unset.status().message().find(
                "needs securityContext.runAsUser (pod or container main) equal to "
                "tessera.dev/mps-user 1000 (none is set)"),
            std::string::npos)
      << unset.status().message();
  s.run_as_user = 0;
  auto other = Ask(s);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("(it is 0)"), std::string::npos)
      << other.status().message();
  s.run_as_user = 1000;
  EXPECT_TRUE(Ask(s).ok());
}

TEST(PodAsk, TierComesFromThePolicyNotFromThePod) {
  auto policy = policy::ParsePolicy(
      "version: v1\ntierAssignment:\n  defaultTier: team\n  namespaces:\n    bank: customer\n");
  ASSERT_OK(policy);
  PodSpec s;
  s.ns = "bank";
  s.limits["tessera.dev/gpu-memory"] = "1Gi";
  s.annotations["tessera.dev/trust"] = "team";  // ignored: trust comes from the administrator
  auto a = Ask(s, *policy);
  ASSERT_OK(a);
  EXPECT_EQ(a->request.tier, TrustTier::kCustomer);
  EXPECT_EQ(a->request.co_tenancy, policy::CoTenancy::kSameNamespace);
}

TEST(PodAsk, NothingAskedIsNotAnError) {
  PodSpec s;
  s.limits["cpu"] = "1";
  auto a = Ask(s);
  ASSERT_OK(a);
  EXPECT_FALSE(a->wants_gpu());
}

struct BadCase {
  const char* what;
  std::map<std::string, std::string> limits;
  std::map<std::string, std::string> annotations;
  const char* message;  // a substring the error must contain
};

class PodAskErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(PodAskErrors, NameTheFieldAndTheAcceptedForm) {
  PodSpec s;
  s.name = "train-0";
  s.limits = GetParam().limits;
  s.annotations = GetParam().annotations;
  auto a = Ask(s);
  ASSERT_FALSE(a.ok()) << GetParam().what;
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find(GetParam().message), std::string::npos)
      << GetParam().what << ": " << a.status().message();
  EXPECT_NE(a.status().message().find("default/train-0"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PodAskErrors,
    ::testing::Values(
        BadCase{"cores over 100", {{"tessera.dev/gpu-cores", "150"}}, {}, "whole percent, 1-100"},
        BadCase{"compute mode unknown",
                {{"tessera.dev/gpu-cores", "30"}},
                {{"tessera.dev/compute", "soft"}},
                "annotation tessera.dev/compute"},
        BadCase{"compute period too short",
                {{"tessera.dev/gpu-cores", "30"}},
                {{"tessera.dev/compute-window-ms", "5"}},
                "expected whole ms, 10-60000"},
        BadCase{"compute period not a number",
                {{"tessera.dev/gpu-cores", "30"}},
                {{"tessera.dev/compute-window-ms", "1s"}},
                "tessera.dev/compute-window-ms: \"1s\""},
        BadCase{
            "compute period on a lending share",
            {{"tessera.dev/gpu-cores", "30"}},
            {{"tessera.dev/compute", "work-conserving"}, {"tessera.dev/compute-window-ms", "1000"}},
            "on a hard tessera.dev/gpu-cores share"},
        BadCase{"compute period without cores",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/compute-window-ms", "1000"}},
                "on a hard tessera.dev/gpu-cores share"},
        BadCase{"cores zero", {{"tessera.dev/gpu-cores", "0"}}, {}, "whole percent, 1-100"},
        BadCase{"cores fraction", {{"tessera.dev/gpu-cores", "2.5"}}, {}, "gpu-cores]"},
        BadCase{"memory garbage", {{"tessera.dev/gpu-memory", "lots"}}, {}, "gpu-memory]"},
        BadCase{"memory zero", {{"tessera.dev/gpu-memory", "0"}}, {}, "more than 0"},
        BadCase{"gpus zero", {{"tessera.dev/gpu", "0"}}, {}, "whole number of GPUs"},
        BadCase{"gpus too many",
                {{"tessera.dev/gpu", "17"}},
                {},
                "whole number of GPUs, 1-16 per container"},
        BadCase{"whole and fraction",
                {{"tessera.dev/gpu", "1"}, {"tessera.dev/gpu-memory", "1Gi"}},
                {},
                "excludes gpu-memory"},
        BadCase{"kai twice", {}, {{"gpu-memory", "100"}, {"gpu-fraction", "0.5"}}, "twice"},
        BadCase{"kai and limits",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"gpu-fraction", "0.5"}},
                "both ask"},
        BadCase{"kai fraction over one", {}, {{"gpu-fraction", "1.5"}}, "gpu-fraction"},
        BadCase{"bad priority",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/priority", "urgent"}},
                "latency-critical"},
        BadCase{"bad mode",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/mode", "turbo"}},
                "tessera.dev/mode"},
        BadCase{"exclusive fraction",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/mode", "exclusive"}},
                "shared or mps"},
        BadCase{"shared whole",
                {{"tessera.dev/gpu", "1"}},
                {{"tessera.dev/mode", "shared"}},
                "use exclusive"},
        BadCase{"mps without user",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/mode", "mps"}},
                "mps-user"},
        BadCase{"native",
                {{"tessera.dev/gpu-memory", "1Gi"}},
                {{"tessera.dev/mode", "native"}},
                "not allowed"}));

TEST(PodAsk, RequestsMustEqualLimits) {
  nlohmann::json pod = MakePod(PodSpec{});
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"tessera.dev/gpu-memory", "2Gi"}}},
                                               {"requests", {{"tessera.dev/gpu-memory", "1Gi"}}}};
  auto a = ParsePodAsk(pod, policy::DefaultPolicy());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("requests must equal limits"), std::string::npos);
}

TEST(PodAsk, OneGpuContainerPerPod) {
  nlohmann::json pod = MakePod(PodSpec{});
  nlohmann::json c = {{"name", "second"},
                      {"resources", {{"limits", {{"tessera.dev/gpu-memory", "1Gi"}}}}}};
  pod["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-memory"] = "1Gi";
  pod["spec"]["containers"].push_back(c);
  auto a = ParsePodAsk(pod, policy::DefaultPolicy());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("main and second"), std::string::npos);
}

TEST(PodAsk, GarbageObjectsNeverCrash) {
  for (const char* text : {"null", "[]", "{\"spec\":7}", "{\"spec\":{\"containers\":{}}}",
                           "{\"spec\":{\"containers\":[7,{\"resources\":[]}]}}",
                           "{\"metadata\":{\"annotations\":{\"gpu-fraction\":5}},\"spec\":{}}"}) {
    auto a = ParsePodAsk(nlohmann::json::parse(text), policy::DefaultPolicy());
    if (a.ok()) {
      EXPECT_FALSE(a->wants_gpu()) << text;
    }
  }
}

}  // namespace
}  // namespace tessera::contract
