#include "extender/ledger.h"

#include <gtest/gtest.h>

#include "tessera/names.h"

#include "contract/contract_testing.h"
#include "testutil/fake_clock.h"
#include "testutil/status_matchers.h"

namespace tessera::extender {

using contract::Decision;
using contract::EncodeDecision;
namespace {

using contract::testing::FractionalPod;
using contract::testing::MakeNode;
using contract::testing::MakePod;
using contract::testing::PodSpec;
using namespace std::chrono_literals;

constexpr std::uint64_t kGiB = 1ULL << 30;

class LedgerTest : public ::testing::Test {
 protected:
  LedgerTest() : ledger_(policy::DefaultPolicy(), Options(), clock_) {}
  static LedgerOptions Options() {
    LedgerOptions o;
    o.reservation_ttl = 30s;
    o.relist_grace = 60s;
    return o;
  }
  // Filter on `nodes`, then bind where it chose. Returns the node ("" if unschedulable).
  std::string Place(const nlohmann::json& pod, const std::vector<std::string>& nodes) {
    FilterOutcome o = ledger_.Filter(pod, nodes);
    EXPECT_TRUE(o.error.empty()) << o.error;
    if (o.nodes.empty()) return "";
    EXPECT_EQ(o.nodes.size(), 1U);
    const std::string uid = pod["metadata"]["uid"];
    EXPECT_OK(ledger_.BeginBind(uid, o.nodes[0]));
    ledger_.FinishBind(uid, true);
    return o.nodes[0];
  }
  std::uint64_t MemoryUsed(const std::string& node) {
    std::uint64_t used = 0;
    for (const GpuBooks& b : ledger_.Books()) {
      if (b.node == node) used += b.memory_used;
    }
    return used;
  }

  testutil::FakeClock clock_;
  Ledger ledger_;
};

TEST_F(LedgerTest, ShowdownFourPodsShareOneGpuAndTheFifthIsToldWhy) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  EXPECT_EQ(Place(FractionalPod("inference-1", "2Gi"), {"g1"}), "g1");
  EXPECT_EQ(Place(FractionalPod("inference-2", "2Gi"), {"g1"}), "g1");
  EXPECT_EQ(Place(FractionalPod("training", "8Gi"), {"g1"}), "g1");
  EXPECT_EQ(Place(FractionalPod("preprocessing", "3Gi"), {"g1"}), "g1");
  EXPECT_EQ(MemoryUsed("g1"), 15 * kGiB);
  FilterOutcome o = ledger_.Filter(FractionalPod("fifth", "2Gi"), {"g1"});
  EXPECT_TRUE(o.nodes.empty());
  EXPECT_EQ(o.failed["g1"], "tessera: no GPU with the asked memory free");
  EXPECT_EQ(ledger_.Books().front().pods.size(), 4U);
}

TEST_F(LedgerTest, AReservationHoldsTheGpuBeforeBind) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  FilterOutcome a = ledger_.Filter(FractionalPod("a", "10Gi"), {"g1"});
  ASSERT_EQ(a.nodes, std::vector<std::string>{"g1"});
  // Not bound yet: a second pod must not get the same memory.
  FilterOutcome b = ledger_.Filter(FractionalPod("b", "10Gi"), {"g1"});
  EXPECT_TRUE(b.nodes.empty());
  EXPECT_EQ(ledger_.reservations(), 1U);
  // Asked again for the same pod: the same reservation, not a second one.
  FilterOutcome again = ledger_.Filter(FractionalPod("a", "10Gi"), {"g1"});
  EXPECT_EQ(again.nodes, std::vector<std::string>{"g1"});
  EXPECT_EQ(MemoryUsed("g1"), 10 * kGiB);
}

TEST_F(LedgerTest, ExpiredReservationsAreReleasedAndCannotBind) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(ledger_.Filter(FractionalPod("a", "10Gi"), {"g1"}).nodes.size(), 1U);
  clock_.Advance(29s);
  EXPECT_EQ(ledger_.ExpireReservations(), 0U);
  clock_.Advance(2s);
  EXPECT_EQ(ledger_.ExpireReservations(), 1U);
  EXPECT_EQ(MemoryUsed("g1"), 0U);
  EXPECT_EQ(ledger_.BeginBind("uid-a", "g1").status().code(), StatusCode::kNotFound);
  // A reservation being bound does not expire.
  ASSERT_EQ(ledger_.Filter(FractionalPod("b", "10Gi"), {"g1"}).nodes.size(), 1U);
  ASSERT_OK(ledger_.BeginBind("uid-b", "g1"));
  clock_.Advance(120s);
  EXPECT_EQ(ledger_.ExpireReservations(), 0U);
}

TEST_F(LedgerTest, FailedBindRollsBack) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(ledger_.Filter(FractionalPod("a", "10Gi"), {"g1"}).nodes.size(), 1U);
  EXPECT_EQ(ledger_.BeginBind("uid-a", "g2").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_OK(ledger_.BeginBind("uid-a", "g1"));
  ledger_.FinishBind("uid-a", false);
  EXPECT_EQ(MemoryUsed("g1"), 0U);
  EXPECT_EQ(ledger_.reservations(), 0U);
}

TEST_F(LedgerTest, OnlyTheOfferedNodesAreCandidates) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));
  FilterOutcome o = ledger_.Filter(FractionalPod("a", "1Gi"), {"g2", "cpu-node"});
  EXPECT_EQ(o.nodes, std::vector<std::string>{"g2"});
  EXPECT_EQ(o.unresolvable["cpu-node"], "tessera: no tessera GPUs on the node");
}

// A node on the DRA path (labelled by its agent) is kube-scheduler's allocator's to fill: the
// ledger leaves its GPUs out and its filter says why; labelled back, it is counted again.
TEST_F(LedgerTest, ANodeOnTheDraPathIsLeftOutAndTheFilterSaysWhy) {
  nlohmann::json node = MakeNode("g1", 1, 16 * kGiB);
  node["metadata"]["labels"][std::string(names::kLabelAllocationPath)] = "dra";
  ledger_.UpsertNode(node);
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));
  FilterOutcome o = ledger_.Filter(FractionalPod("a", "1Gi"), {"g1", "g2"});
  EXPECT_EQ(o.nodes, std::vector<std::string>{"g2"});
  EXPECT_NE(o.unresolvable["g1"].find("through DRA"), std::string::npos) << o.unresolvable["g1"];
  for (const GpuBooks& b : ledger_.Books()) EXPECT_NE(b.node, "g1");
  ledger_.FinishBind("uid-a", false);
  // Its GPUs still bound what admission lets a claim ask.
  nlohmann::json big = MakeNode("g3", 1, 141 * kGiB);
  big["metadata"]["labels"][std::string(names::kLabelAllocationPath)] = "dra";
  ledger_.UpsertNode(big);
  EXPECT_EQ(ledger_.LargestGpuMemory(), 141 * kGiB);
  ledger_.DeleteNode("g3");
  EXPECT_EQ(ledger_.LargestGpuMemory(), 16 * kGiB);

  node["metadata"]["labels"][std::string(names::kLabelAllocationPath)] = "device-plugin";
  ledger_.UpsertNode(node);
  EXPECT_EQ(Place(FractionalPod("b", "12Gi"), {"g1"}), "g1");
  ledger_.DeleteNode("g1");
  EXPECT_EQ(ledger_.Filter(FractionalPod("c", "1Gi"), {"g1"}).unresolvable["g1"],
            "tessera: no tessera GPUs on the node");
}

TEST_F(LedgerTest, UnhealthyAndCordonedGpusAreExcluded) {
  nlohmann::json node = MakeNode("g1", 2, 16 * kGiB);
  ledger_.UpsertNode(node);
  EXPECT_EQ(Place(FractionalPod("a", "12Gi"), {"g1"}), "g1");
  auto inv = nlohmann::json::parse(
      node["metadata"]["annotations"]["tessera.dev/gpu-inventory"].get<std::string>());
  inv["gpus"][1]["health"] = "unhealthy";
  node["metadata"]["annotations"]["tessera.dev/gpu-inventory"] = inv.dump();
  ledger_.UpsertNode(node);  // in place: same hardware
  FilterOutcome o = ledger_.Filter(FractionalPod("b", "12Gi"), {"g1"});
  EXPECT_TRUE(o.nodes.empty());
  inv["gpus"][1]["health"] = "healthy";
  node["metadata"]["annotations"]["tessera.dev/gpu-inventory"] = inv.dump();
  node["metadata"]["annotations"]["tessera.dev/gpu-cordon"] = contract::testing::GpuUuid("g1", 1);
  ledger_.UpsertNode(node);
  EXPECT_TRUE(ledger_.Filter(FractionalPod("b", "12Gi"), {"g1"}).nodes.empty());
  node["metadata"]["annotations"].erase("tessera.dev/gpu-cordon");
  ledger_.UpsertNode(node);
  EXPECT_EQ(Place(FractionalPod("b", "12Gi"), {"g1"}), "g1");
  EXPECT_EQ(MemoryUsed("g1"), 24 * kGiB);  // the first pod stayed counted throughout
}

// What the API server holds after a bind: nodeName and the decision annotation.
nlohmann::json BoundPod(nlohmann::json pod, const std::string& node, const Reservation& r) {
  Decision d;
  d.pod_uid = pod["metadata"]["uid"];
  d.pod_namespace = pod["metadata"]["namespace"];
  d.pod_name = pod["metadata"]["name"];
  d.node = node;
  d.tier = r.tier;
  d.priority = r.priority;
  d.issued_at = "2026-11-30T00:00:00Z";
  d.key_id = "k";
  d.containers = {r.container};
  pod["spec"]["nodeName"] = node;
  pod["metadata"]["annotations"]["tessera.dev/decision"] = EncodeDecision(d);
  return pod;
}

TEST_F(LedgerTest, ARestartedLedgerRebuildsFromTheApi) {
  std::vector<nlohmann::json> nodes = {MakeNode("g1", 2, 16 * kGiB), MakeNode("g2", 2, 16 * kGiB)};
  for (const auto& n : nodes) ledger_.UpsertNode(n);
  std::vector<nlohmann::json> api;
  for (int i = 0; i < 6; ++i) {
    nlohmann::json pod = FractionalPod("p" + std::to_string(i), std::to_string(3 + i) + "Gi",
                                       std::to_string(10 + i));
    const std::string node = Place(pod, {"g1", "g2"});
    ASSERT_FALSE(node.empty());
    auto r = ledger_.BeginBind(pod["metadata"]["uid"], node);  // bound: returns the same
    ASSERT_OK(r);
    api.push_back(BoundPod(pod, node, *r));
  }
  // A pod reserved but never bound is not in the API: the restarted ledger must not count it.
  ASSERT_EQ(ledger_.Filter(FractionalPod("unbound", "1Gi"), {"g1", "g2"}).nodes.size(), 1U);

  Ledger restarted(policy::DefaultPolicy(), LedgerOptions{}, clock_);
  restarted.ReplaceNodes(nodes);
  restarted.ReplacePods(api);
  EXPECT_EQ(restarted.bound(), 6U);
  std::vector<GpuBooks> before = ledger_.Books();
  std::vector<GpuBooks> after = restarted.Books();
  ASSERT_EQ(before.size(), after.size());
  std::uint64_t diff = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].uuid, after[i].uuid);
    EXPECT_EQ(before[i].milli_used, after[i].milli_used);
    diff += before[i].memory_used - after[i].memory_used;
  }
  EXPECT_EQ(diff, 1 * kGiB);  // exactly the unbound reservation
}

TEST_F(LedgerTest, DecisionsNamingAnotherPodOrNodeAreIgnored) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  Reservation r;
  r.node = "g1";
  r.container = {
      "main", SharingMode::kShared, {{contract::testing::GpuUuid("g1", 0), 4 * kGiB, 0}}};
  nlohmann::json pod = BoundPod(FractionalPod("a", "4Gi"), "g1", r);
  nlohmann::json copied = pod;
  copied["metadata"]["uid"] = "uid-other";  // annotation copied onto another pod
  ledger_.ObservePod(copied);
  EXPECT_EQ(ledger_.bound(), 0U);
  ledger_.ObservePod(pod);
  EXPECT_EQ(ledger_.bound(), 1U);
  EXPECT_EQ(MemoryUsed("g1"), 4 * kGiB);
}

TEST_F(LedgerTest, RelistKeepsFreshBindsAndDropsVanishedPods) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(Place(FractionalPod("a", "4Gi"), {"g1"}), "g1");
  ledger_.ReplacePods({});  // a list taken before our Binding landed
  EXPECT_EQ(MemoryUsed("g1"), 4 * kGiB);
  clock_.Advance(61s);
  ledger_.ReplacePods({});  // still not there a minute later: the pod is gone
  EXPECT_EQ(MemoryUsed("g1"), 0U);
}

TEST_F(LedgerTest, DeletedAndFinishedPodsReleaseTheirGpus) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  nlohmann::json a = FractionalPod("a", "4Gi");
  nlohmann::json b = FractionalPod("b", "4Gi");
  ASSERT_EQ(Place(a, {"g1"}), "g1");
  ASSERT_EQ(Place(b, {"g1"}), "g1");
  ledger_.ForgetPod(a);
  EXPECT_EQ(MemoryUsed("g1"), 4 * kGiB);
  b["spec"]["nodeName"] = "g1";
  b["status"]["phase"] = "Succeeded";
  ledger_.ObservePod(b);
  EXPECT_EQ(MemoryUsed("g1"), 0U);
}

TEST_F(LedgerTest, NodeChangesRebuildWithoutLosingPods) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(Place(FractionalPod("a", "4Gi"), {"g1"}), "g1");
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));  // new node: rebuild
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));  // unchanged
  EXPECT_EQ(Place(FractionalPod("b", "14Gi"), {"g1", "g2"}), "g2");
  EXPECT_EQ(MemoryUsed("g1"), 4 * kGiB);
  ledger_.DeleteNode("g2");
  EXPECT_TRUE(ledger_.Filter(FractionalPod("c", "14Gi"), {"g1", "g2"}).nodes.empty());
}

TEST_F(LedgerTest, ThePolicyKeepsWhatItLearnedAcrossNodeChangesAndCountsEachPodOnce) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  EXPECT_EQ(Place(FractionalPod("a", "4Gi"), {"g1"}), "g1");
  EXPECT_EQ(Place(FractionalPod("b", "4Gi"), {"g1"}), "g1");
  EXPECT_EQ(ledger_.arrivals_observed(), 2U);        // tessera's policy is the default
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));  // the cluster model is rebuilt
  EXPECT_EQ(Place(FractionalPod("c", "4Gi"), {"g1", "g2"}), "g1");
  EXPECT_EQ(ledger_.arrivals_observed(), 3U);
  // A pod no node can take, asked about three times, is one arrival.
  const nlohmann::json huge = FractionalPod("huge", "15Gi");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ledger_.Filter(huge, {"g1"}).nodes.empty());
  EXPECT_EQ(ledger_.arrivals_observed(), 4U);
  // So is a pod whose bind failed and which is decided again.
  const nlohmann::json d = FractionalPod("d", "2Gi");
  FilterOutcome first = ledger_.Filter(d, {"g2"});
  ASSERT_EQ(first.nodes.size(), 1U);
  ASSERT_OK(ledger_.BeginBind("uid-d", first.nodes[0]));
  ledger_.FinishBind("uid-d", false);
  EXPECT_EQ(ledger_.Filter(d, {"g2"}).nodes.size(), 1U);
  EXPECT_EQ(ledger_.arrivals_observed(), 5U);
}

TEST_F(LedgerTest, WholeGpusTakeIdleGpusOnly) {
  ledger_.UpsertNode(MakeNode("g1", 2, 16 * kGiB));
  ASSERT_EQ(Place(FractionalPod("small", "1Gi"), {"g1"}), "g1");
  PodSpec whole;
  whole.name = "whole";
  whole.uid = "uid-whole";
  whole.limits["tessera.dev/gpu"] = "2";
  FilterOutcome o = ledger_.Filter(MakePod(whole), {"g1"});
  EXPECT_TRUE(o.nodes.empty());
  EXPECT_EQ(o.failed["g1"], "tessera: not enough idle GPUs");
  whole.limits["tessera.dev/gpu"] = "1";
  EXPECT_EQ(Place(MakePod(whole), {"g1"}), "g1");
  auto r = ledger_.BeginBind("uid-whole", "g1");
  ASSERT_OK(r);
  ASSERT_EQ(r->container.devices.size(), 1U);
  EXPECT_EQ(r->container.devices[0].memory_bytes, 16 * kGiB);
  EXPECT_EQ(r->container.devices[0].cores_percent, 100U);
  EXPECT_EQ(r->container.mode, SharingMode::kExclusive);
}

TEST_F(LedgerTest, PreemptChoosesTheFewestLowerPriorityPodsOnOneGpu) {
  ledger_.UpsertNode(MakeNode("g1", 2, 16 * kGiB));
  ASSERT_EQ(Place(FractionalPod("be-1", "8Gi", "", 0), {"g1"}), "g1");
  ASSERT_EQ(Place(FractionalPod("be-2", "8Gi", "", 0), {"g1"}), "g1");
  ASSERT_EQ(Place(FractionalPod("be-3", "6Gi", "", 0), {"g1"}), "g1");
  ASSERT_EQ(Place(FractionalPod("hi-1", "10Gi", "", 2000), {"g1"}), "g1");
  // GPU 0: 8 + 8; GPU 1: 6 + 10 (best-fit packs). Full.
  nlohmann::json lc = FractionalPod("lc", "8Gi", "", 1000);
  ASSERT_TRUE(ledger_.Filter(lc, {"g1"}).nodes.empty());
  auto victims = ledger_.Preempt(lc, {{"g1", {"uid-be-1", "uid-hi-1", "cpu-pod"}}});
  ASSERT_EQ(victims.size(), 1U);
  std::vector<std::string> v = victims["g1"];
  // The non-tessera victim kube-scheduler chose stays; one 8 GiB best-effort pod goes (or the
  // 6 GiB one on GPU 1 would not make room beside the higher-priority 10 GiB pod).
  ASSERT_EQ(v.size(), 2U);
  EXPECT_EQ(v[0], "cpu-pod");
  EXPECT_TRUE(v[1] == "uid-be-1" || v[1] == "uid-be-2") << v[1];
  // The ledger is unchanged by the dry run.
  EXPECT_EQ(MemoryUsed("g1"), 32 * kGiB);
  // A pod of lower priority than everything there preempts nothing.
  EXPECT_TRUE(ledger_.Preempt(FractionalPod("low", "8Gi", "", -5), {{"g1", {"uid-be-1"}}}).empty());
  // Unknown nodes are dropped.
  EXPECT_TRUE(ledger_.Preempt(lc, {{"nowhere", {"x"}}}).empty());
}

TEST_F(LedgerTest, ExplainGivesEveryGpusVerdictAndReservesNothing) {
  nlohmann::json node = MakeNode("g1", 3, 16 * kGiB);
  node["metadata"]["annotations"]["tessera.dev/gpu-cordon"] = contract::testing::GpuUuid("g1", 2);
  ledger_.UpsertNode(node);
  ASSERT_EQ(Place(FractionalPod("big", "12Gi", "80"), {"g1"}), "g1");
  auto v = ledger_.Explain(FractionalPod("next", "8Gi", "30"));
  ASSERT_OK(v);
  ASSERT_EQ(v->size(), 3U);
  EXPECT_EQ((*v)[0].why, "compute: 20% free, asks 30%");
  EXPECT_TRUE((*v)[1].fits);
  EXPECT_EQ((*v)[2].why, "GPU cordoned (tessera.dev/gpu-cordon)");
  auto memory = ledger_.Explain(FractionalPod("next", "8Gi", "10"));
  ASSERT_OK(memory);
  EXPECT_EQ((*memory)[0].why, "memory: 4.00 GiB free, asks 8.00 GiB");
  EXPECT_EQ(ledger_.reservations(), 0U);
  EXPECT_FALSE(ledger_.Explain(FractionalPod("bad", "1Gi", "900")).ok());
}

// Found by review: a running pod must stay counted whatever the GPU's state says later.
TEST_F(LedgerTest, BoundPodsStayCountedOnCordonedGpusAcrossRebuilds) {
  nlohmann::json node = MakeNode("g1", 1, 16 * kGiB);
  ledger_.UpsertNode(node);
  nlohmann::json a = FractionalPod("a", "10Gi");
  ASSERT_EQ(Place(a, {"g1"}), "g1");
  node["metadata"]["annotations"]["tessera.dev/gpu-cordon"] = contract::testing::GpuUuid("g1", 0);
  ledger_.UpsertNode(node);
  ledger_.UpsertNode(MakeNode("g2", 1, 16 * kGiB));  // a node joins: full rebuild
  EXPECT_EQ(MemoryUsed("g1"), 10 * kGiB);
  node["metadata"]["annotations"].erase("tessera.dev/gpu-cordon");
  ledger_.UpsertNode(node);
  EXPECT_TRUE(ledger_.Filter(FractionalPod("b", "10Gi"), {"g1"}).nodes.empty());
}

TEST_F(LedgerTest, APlacementLearnedAfterTheFactIsCountedEvenBeyondCapacity) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  // b got the GPU while a's bind answer was lost and a was rolled back; then the watch shows a
  // bound there after all.
  ASSERT_EQ(Place(FractionalPod("b", "10Gi"), {"g1"}), "g1");
  Reservation r;
  r.node = "g1";
  r.container = {
      "main", SharingMode::kShared, {{contract::testing::GpuUuid("g1", 0), 10 * kGiB, 0}}};
  nlohmann::json a = BoundPod(FractionalPod("a", "10Gi"), "g1", r);
  ledger_.ObservePod(a);
  EXPECT_EQ(MemoryUsed("g1"), 16 * kGiB);  // full (4 GiB over-committed, on the books)
  EXPECT_TRUE(ledger_.Filter(FractionalPod("c", "1Gi"), {"g1"}).nodes.empty());
  ledger_.ForgetPod(a);
  EXPECT_EQ(MemoryUsed("g1"), 10 * kGiB);  // exactly b again
  ledger_.ForgetPod(FractionalPod("b", "10Gi"));
  EXPECT_EQ(MemoryUsed("g1"), 0U);
}

TEST_F(LedgerTest, PreemptOnACordonedGpuLosesNothing) {
  nlohmann::json node = MakeNode("g1", 2, 16 * kGiB);
  ledger_.UpsertNode(node);
  ASSERT_EQ(Place(FractionalPod("a", "10Gi", "", 0), {"g1"}), "g1");
  ASSERT_EQ(Place(FractionalPod("b", "10Gi", "", 0), {"g1"}), "g1");
  node["metadata"]["annotations"]["tessera.dev/gpu-cordon"] = contract::testing::GpuUuid("g1", 0);
  ledger_.UpsertNode(node);
  (void)ledger_.Preempt(FractionalPod("lc", "12Gi", "", 1000), {{"g1", {"uid-a"}}});
  EXPECT_EQ(MemoryUsed("g1"), 20 * kGiB);
}

TEST_F(LedgerTest, ADifferentAskUnderAReservedUidIsRefused) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(ledger_.Filter(FractionalPod("a", "1Gi"), {"g1"}).nodes.size(), 1U);
  FilterOutcome o = ledger_.Filter(FractionalPod("a", "16Gi", "100"), {"g1"});
  EXPECT_TRUE(o.nodes.empty());
  EXPECT_NE(o.error.find("asks differently"), std::string::npos);
  auto r = ledger_.BeginBind("uid-a", "g1");
  ASSERT_OK(r);
  EXPECT_EQ(r->container.devices[0].memory_bytes, 1 * kGiB);
}

TEST_F(LedgerTest, APodKeptAcrossARelistIsReleasedIfTheWatchNeverShowsIt) {
  ledger_.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  ASSERT_EQ(Place(FractionalPod("a", "4Gi"), {"g1"}), "g1");
  clock_.Advance(31s);
  ledger_.ExpireReservations();  // bound, nothing left to expire: no walk until one can
  ledger_.ReplacePods({});       // deleted while the watch was down, or not bound yet in the list
  EXPECT_EQ(MemoryUsed("g1"), 4 * kGiB);
  clock_.Advance(30s);  // 61 s after the bind
  ledger_.ExpireReservations();
  EXPECT_EQ(MemoryUsed("g1"), 0U);
}

TEST_F(LedgerTest, TooManyGpuModelsLeavesTheNodeOutInsteadOfCrashing) {
  for (int i = 0; i < 64; ++i) {
    ledger_.UpsertNode(
        MakeNode("n" + std::to_string(i), 1, 16 * kGiB, "model-" + std::to_string(i)));
  }
  nlohmann::json extra = MakeNode("n64", 1, 16 * kGiB, "model-64");
  ledger_.UpsertNode(extra);
  ledger_.UpsertNode(extra);  // again: no crash
  EXPECT_EQ(ledger_.nodes(), 64U);
  EXPECT_EQ(ledger_.Filter(FractionalPod("a", "1Gi"), {"n64"}).unresolvable["n64"],
            "tessera: the node's GPU inventory is unusable");
}

TEST_F(LedgerTest, DecisionsThatDoNotVerifyAreNotCounted) {
  LedgerOptions o = Options();
  o.verify = [](const std::string&, const std::string& signature) { return signature == "good"; };
  Ledger ledger(policy::DefaultPolicy(), o, clock_);
  ledger.UpsertNode(MakeNode("g1", 1, 16 * kGiB));
  Reservation r;
  r.node = "g1";
  r.container = {
      "main", SharingMode::kShared, {{contract::testing::GpuUuid("g1", 0), 4 * kGiB, 0}}};
  nlohmann::json pod = BoundPod(FractionalPod("a", "4Gi"), "g1", r);
  pod["metadata"]["annotations"]["tessera.dev/decision-signature"] = "forged";
  ledger.ObservePod(pod);
  EXPECT_EQ(ledger.bound(), 0U);
  pod["metadata"]["annotations"]["tessera.dev/decision-signature"] = "good";
  ledger.ObservePod(pod);
  EXPECT_EQ(ledger.bound(), 1U);
}

}  // namespace
}  // namespace tessera::extender
