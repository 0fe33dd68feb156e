// `tessera demo --real-node`'s own logic on known inputs (no cluster): the pod template's checks
// and how a pod's process output is judged. The run itself is exercised by realnode_e2e.
#include <gtest/gtest.h>

#include "demo/demo.h"

namespace tessera::demo {
namespace {

TEST(PodTemplate, TakesTheImageAndWhatTheContainersNeed) {
  auto t = ParsePodTemplate(R"({"image": "tessera.dev/test/cuda-client:1", "client": "/bin/c",
      "schedulerName": "tessera", "env": [{"name": "A", "value": "1"}],
      "volumes": [{"name": "v", "hostPath": {"path": "/x"}}],
      "volumeMounts": [{"name": "v", "mountPath": "/x"}]})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->image, "tessera.dev/test/cuda-client:1");
  EXPECT_EQ(t->client, "/bin/c");
  EXPECT_EQ(t->scheduler_name, "tessera");
  EXPECT_NE(t->env_json.find("\"A\""), std::string::npos);
  EXPECT_NE(t->mounts_json.find("/x"), std::string::npos);
  auto plain = ParsePodTemplate(R"({"image": "i"})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->client, "hook_client");
  EXPECT_EQ(plain->scheduler_name, "tessera");  // the chart's profile
  EXPECT_EQ(plain->env_json, "[]");
}

TEST(PodTemplate, BadInputNamesTheFieldAndTheAcceptedForm) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "expected a JSON object"},
      {"[1]", "expected a JSON object"},
      {R"({})", "image: required"},
      {R"({"image": ""})", "image: expected a non-empty string"},
      {R"({"image": 7})", "image: expected a non-empty string"},
      {R"({"image": "i", "client": false})", "client: expected a non-empty string"},
      {R"({"image": "i", "env": {"A": "1"}})", "env: expected a JSON array of EnvVar objects"},
      {R"({"image": "i", "volumes": [{"hostPath": {}}]})", "volumes: every item must be"},
      {R"({"image": "i", "volumeMounts": ["x"]})", "volumeMounts: every item must be"},
      {R"({"image": "i", "command": ["x"]})", "unknown field \"command\"; accepted: image"},
  };
  for (const auto& c : cases) {
    auto t = ParsePodTemplate(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidInput) << c.text;
    EXPECT_NE(t.status().message().find(c.says), std::string::npos)
        << c.text << ": " << t.status().message();
  }
}

RealPodResult Judged(std::uint64_t cap, const std::string& log) {
  RealPodResult r;
  r.outcome = Outcome::kPlaced;
  r.cap_bytes = cap;
  ReadClientOutput(log, &r);
  return r;
}

TEST(RealNodeDemo, APodIsAsExpectedOnlyWhenRefusedAtItsOwnCap) {
  constexpr std::uint64_t kGiB = 1ULL << 30;
  const std::string at_cap =
      "context_result=0\nallocated=8589934592 last_result=2\n"
      "info_result=0 free=0 total=8589934592\ndevice_total=17179869184\n";
  const RealPodResult ok = Judged(8 * kGiB, at_cap);
  EXPECT_TRUE(ok.as_expected);
  EXPECT_TRUE(ok.ran);
  EXPECT_EQ(ok.allocated, 8 * kGiB);
  EXPECT_EQ(ok.last_result, 2);
  EXPECT_EQ(ok.total, 8 * kGiB);
  EXPECT_EQ(ok.output.size(), 4u);
  // The client's three lines: allocated, the CUresult that refused, cuMemGetInfo's free and total.
  const auto log = [](const char* allocated, const char* last, const char* free,
                      const char* total) {
    return std::string("context_result=0\nallocated=") + allocated + " last_result=" + last +
           "\ninfo_result=0 free=" + free + " total=" + total + "\n";
  };
  const struct {
    std::uint64_t cap;
    std::string log;
    bool expected;
    const char* what;
  } cases[] = {
      {3000ULL << 20, log("3087007744", "2", "58720256", "3145728000"), true,
       "3000Mi in 64 MiB steps: refused at 2944 MiB (one more step would pass the cap)"},
      {8 * kGiB, log("8053063680", "2", "0", "8589934592"), true,
       "its CUDA context counts against the cap on a real GPU: 512 MiB short, nothing free"},
      {8 * kGiB, log("8522825728", "2", "67108864", "8589934592"), false, "a whole step free"},
      {8 * kGiB, log("9663676416", "2", "0", "8589934592"), false, "past the cap"},
      {8 * kGiB, log("8589934592", "999", "0", "8589934592"), false, "refused for another reason"},
      {8 * kGiB, log("8589934592", "2", "0", "17179869184"), false, "a total that is not the cap"},
      {8 * kGiB, log("x", "2", "0", "8589934592"), false, "an allocation it cannot read"},
      {8 * kGiB, "context_result=100\n", false, "no context"},
      {8 * kGiB, "", false, "nothing printed"},
      {0, at_cap, false, "no decision read: no cap to hold it to"},
  };
  for (const auto& c : cases) EXPECT_EQ(Judged(c.cap, c.log).as_expected, c.expected) << c.what;
}

}  // namespace
}  // namespace tessera::demo
