#include "extender/extender.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include "contract/contract_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::extender {

using contract::GenerateSigningKeyPem;
using contract::ParseDecision;
using contract::Signer;
using contract::Verifier;
namespace {

using contract::testing::FractionalPod;
using contract::testing::MakeNode;
using nlohmann::json;

constexpr std::uint64_t kGiB = 1ULL << 30;

// Records what a bind wrote; fails on demand.
class FakeWriter : public PodWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override {
    std::lock_guard lock(mu);
    if (lose_bind_answer) {
      bound[uid] = node;
      annotated[uid] = annotations;
      return UnavailableError("bind: connection reset (injected)");
    }
    if (fail_bind) return UnavailableError("bind: injected");
    bound[uid] = node;
    annotated[uid] = annotations;
    return Status::Ok();
  }
  StatusOr<std::string> NodeNameOf(const std::string&, const std::string&,
                                   const std::string& uid) override {
    std::lock_guard lock(mu);
    auto it = bound.find(uid);
    return it == bound.end() ? std::string() : it->second;
  }

  std::mutex mu;
  bool fail_bind = false;
  bool lose_bind_answer = false;
  std::map<std::string, std::map<std::string, std::string>> annotated;
  std::map<std::string, std::string> bound;
};

class ExtenderTest : public ::testing::Test {
 protected:
  ExtenderTest()
      : ledger_(policy::DefaultPolicy(), LedgerOptions{}, Clock::Real()),
        signer_(NewSigner()),
        extender_(&ledger_, &writer_, &signer_, "test-key", [] { return 1796000000; }) {
    extender_.SetSynced(true);
  }
  static Signer NewSigner() {
    auto signer = Signer::FromPem(*GenerateSigningKeyPem());
    return std::move(*signer);
  }
  static json Args(const json& pod, const std::vector<std::string>& nodes) {
    return {{"Pod", pod}, {"NodeNames", nodes}};
  }
  static json BindArgs(const json& pod, const std::string& node) {
    return {{"PodName", pod["metadata"]["name"]},
            {"PodNamespace", pod["metadata"]["namespace"]},
            {"PodUID", pod["metadata"]["uid"]},
            {"Node", node}};
  }

  Ledger ledger_;
  FakeWriter writer_;
  Signer signer_;
  Extender extender_;
};

TEST_F(ExtenderTest, FilterBindWritesASignedDecision) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));
  json pod = FractionalPod("a", "4Gi", "25");
  json f = extender_.Filter(Args(pod, {"g1", "g2"}));
  ASSERT_EQ(f["NodeNames"].size(), 1U) << f.dump();
  const std::string node = f["NodeNames"][0];
  json p = extender_.Prioritize(Args(pod, {"g1", "g2"}));
  for (const json& h : p) EXPECT_EQ(h["Score"], h["Host"] == node ? 10 : 0);
  json b = extender_.Bind(BindArgs(pod, node));
  EXPECT_EQ(b["Error"], "") << b.dump();
  ASSERT_EQ(writer_.bound["uid-a"], node);
  const auto& ann = writer_.annotated["uid-a"];
  const std::string text = ann.at("tessera.dev/decision");
  auto d = ParseDecision(text);
  ASSERT_OK(d);
  EXPECT_EQ(d->pod_uid, "uid-a");
  EXPECT_EQ(d->node, node);
  EXPECT_EQ(d->key_id, "test-key");
  ASSERT_EQ(d->containers.size(), 1U);
  EXPECT_EQ(d->containers[0].name, "main");
  EXPECT_EQ(d->containers[0].devices[0].memory_bytes, 4 * kGiB);
  EXPECT_EQ(d->containers[0].devices[0].cores_percent, 25U);
  auto verifier = Verifier::FromPem(signer_.PublicKeyPem());
  ASSERT_OK(verifier);
  EXPECT_OK(verifier->Verify(text, ann.at("tessera.dev/decision-signature")));
}

TEST_F(ExtenderTest, AFailedBindRollsTheReservationBack) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json pod = FractionalPod("a", "12Gi");
  ASSERT_EQ(extender_.Filter(Args(pod, {"g1"}))["NodeNames"].size(), 1U);
  writer_.fail_bind = true;
  json b = extender_.Bind(BindArgs(pod, "g1"));
  EXPECT_NE(b["Error"].get<std::string>().find("injected"), std::string::npos);
  EXPECT_EQ(ledger_.reservations(), 0U);
  // The memory is free again for another pod.
  writer_.fail_bind = false;
  json other = FractionalPod("b", "12Gi");
  ASSERT_EQ(extender_.Filter(Args(other, {"g1"}))["NodeNames"].size(), 1U);
  EXPECT_EQ(extender_.Bind(BindArgs(other, "g1"))["Error"], "");
}

// Every counter is a counter family of the metric list, and counts what its help says.
TEST_F(ExtenderTest, CountersAreTheMetricListsSchedulerCounters) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json pod = FractionalPod("a", "12Gi");
  ASSERT_EQ(extender_.Filter(Args(pod, {"g1"}))["NodeNames"].size(), 1U);
  writer_.fail_bind = true;
  extender_.Bind(BindArgs(pod, "g1"));
  std::map<std::string, std::uint64_t> seen;
  extender_.counters().ForEach([&](std::string_view metric, std::uint64_t value) {
    const auto row = std::find_if(std::begin(names::kAllMetrics), std::end(names::kAllMetrics),
                                  [&](const names::MetricInfo& m) { return m.name == metric; });
    ASSERT_NE(row, std::end(names::kAllMetrics)) << metric;
    EXPECT_EQ(row->type, "counter") << metric;
    seen[std::string(metric)] = value;
  });
  EXPECT_EQ(seen.size(), 7U);
  EXPECT_EQ(seen["tessera_scheduler_filters_total"], 1U);
  EXPECT_EQ(seen["tessera_scheduler_binds_total"], 1U);
  EXPECT_EQ(seen["tessera_scheduler_bind_failures_total"], 1U);
  EXPECT_EQ(seen["tessera_scheduler_decisions_total"], 0U);
}

TEST_F(ExtenderTest, ALostBindAnswerIsSettledByAskingTheApi) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json pod = FractionalPod("a", "12Gi");
  ASSERT_EQ(extender_.Filter(Args(pod, {"g1"}))["NodeNames"].size(), 1U);
  writer_.lose_bind_answer = true;
  EXPECT_EQ(extender_.Bind(BindArgs(pod, "g1"))["Error"], "");
  EXPECT_EQ(ledger_.bound(), 1U);  // kept: the pod really is bound there
}

TEST_F(ExtenderTest, BindWithoutReservationFails) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json b = extender_.Bind(BindArgs(FractionalPod("a", "1Gi"), "g1"));
  EXPECT_NE(b["Error"].get<std::string>().find("no GPU reservation"), std::string::npos);
  EXPECT_TRUE(writer_.annotated.empty());
}

TEST_F(ExtenderTest, BadPodsAreUnresolvableEverywhereWithTheReason) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json f = extender_.Filter(Args(FractionalPod("a", "1Gi", "250"), {"g1"}));
  EXPECT_TRUE(f["NodeNames"].empty());
  EXPECT_NE(f["FailedAndUnresolvableNodes"]["g1"].get<std::string>().find("1-100"),
            std::string::npos);
  EXPECT_EQ(extender_.Filter(json::object())["Error"],
            "tessera-scheduler: ExtenderArgs.Pod: missing");
  json anonymous = FractionalPod("anon", "1Gi");
  anonymous["metadata"].erase("uid");
  const json f2 = extender_.Filter(Args(anonymous, {"g1"}));
  EXPECT_TRUE(f2["NodeNames"].empty());
  EXPECT_NE(f2["Error"].get<std::string>().find("ExtenderArgs.Pod.metadata.uid: missing"),
            std::string::npos)
      << f2.dump();
}

TEST_F(ExtenderTest, NothingIsAnsweredBeforeTheFirstSync) {
  extender_.SetSynced(false);
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json f = extender_.Filter(Args(FractionalPod("a", "1Gi"), {"g1"}));
  EXPECT_NE(f["Error"].get<std::string>().find("still reading"), std::string::npos);
}

TEST_F(ExtenderTest, PreemptSpeaksMetaVictims) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  json be = FractionalPod("be", "16Gi", "", 0);
  ASSERT_EQ(extender_.Filter(Args(be, {"g1"}))["NodeNames"].size(), 1U);
  ASSERT_EQ(extender_.Bind(BindArgs(be, "g1"))["Error"], "");
  json lc = FractionalPod("lc", "4Gi", "", 1000);
  json args = {{"Pod", lc},
               {"NodeNameToVictims", nullptr},
               {"NodeNameToMetaVictims",
                {{"g1", {{"Pods", {{{"UID", "uid-be"}}}}, {"NumPDBViolations", 0}}}}}};
  json r = extender_.Preempt(args);
  EXPECT_EQ(r["NodeNameToMetaVictims"]["g1"]["Pods"][0]["UID"], "uid-be") << r.dump();
}

// Many kube-scheduler goroutines binding at once while filters continue: the decisions written
// never put more on a GPU than it has.
TEST_F(ExtenderTest, ConcurrentFiltersAndBindsNeverOvercommit) {
  const std::vector<std::string> nodes = {"g1", "g2", "g3"};
  for (const auto& n : nodes) ledger_.UpsertNode(MakeNode(n, 2, 16 * kGiB));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        json pod = FractionalPod("t" + std::to_string(t) + "-" + std::to_string(i),
                                 std::to_string(1 + (t + i) % 5) + "Gi",
                                 std::to_string(5 + 5 * ((t * i) % 4)));
        json f = extender_.Filter(Args(pod, nodes));
        if (f["NodeNames"].empty()) continue;
        (void)extender_.Bind(BindArgs(pod, f["NodeNames"][0]));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::map<std::string, std::uint64_t> memory;
  std::map<std::string, std::uint32_t> cores;
  for (const auto& [uid, ann] : writer_.annotated) {
    auto d = ParseDecision(ann.at("tessera.dev/decision"));
    ASSERT_OK(d);
    for (const auto& dev : d->containers[0].devices) {
      memory[dev.uuid] += dev.memory_bytes;
      cores[dev.uuid] += dev.cores_percent;
    }
  }
  EXPECT_EQ(writer_.bound.size(), writer_.annotated.size());
  EXPECT_GT(writer_.bound.size(), 20U);
  for (const auto& [uuid, m] : memory) EXPECT_LE(m, 16 * kGiB) << uuid;
  for (const auto& [uuid, c] : cores) EXPECT_LE(c, 100U) << uuid;
  EXPECT_EQ(ledger_.reservations(), 0U);
}

}  // namespace
}  // namespace tessera::extender
