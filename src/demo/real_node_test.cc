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
  // 3000Mi in 64 MiB steps: refused at 2944 MiB (one more step would pass the cap).
  EXPECT_TRUE(Judged(3000ULL << 20,
                     "context_result=0\nallocated=3087007744 last_result=2\n"
                     "info_result=0 free=58720256 total=3145728000\n")
                  .as_expected);
  // Refused a step early, past the cap, for another reason, a total that is not the cap, no
  // context, or nothing printed: not as expected.
  EXPECT_FALSE(Judged(8 * kGiB,
                      "context_result=0\nallocated=8522825728 last_result=2\n"
                      "info_result=0 free=0 total=8589934592\n")
                   .as_expected);
  EXPECT_FALSE(Judged(8 * kGiB,
                      "context_result=0\nallocated=9663676416 last_result=2\n"
                      "info_result=0 free=0 total=8589934592\n")
                   .as_expected);
  EXPECT_FALSE(Judged(8 * kGiB,
                      "context_result=0\nallocated=8589934592 last_result=999\n"
                      "info_result=0 free=0 total=8589934592\n")
                   .as_expected);
  EXPECT_FALSE(Judged(8 * kGiB,
                      "context_result=0\nallocated=8589934592 last_result=2\n"
                      "info_result=0 free=0 total=17179869184\n")
                   .as_expected);
  EXPECT_FALSE(Judged(8 * kGiB, "context_result=100\n").as_expected);
  EXPECT_FALSE(Judged(8 * kGiB, "").as_expected);
  EXPECT_FALSE(Judged(0, at_cap).as_expected);  // no decision read: no cap to hold it to
  EXPECT_FALSE(Judged(8 * kGiB, "context_result=0\nallocated=x last_result=2\ntotal=8589934592\n")
                   .as_expected);
}

}  // namespace
}  // namespace tessera::demo
