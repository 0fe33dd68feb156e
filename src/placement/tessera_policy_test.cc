#include "placement/tessera_policy.h"

#include <gtest/gtest.h>

#include "placement/placement_testing.h"
#include "placement/scheduler.h"
#include "testutil/status_matchers.h"

namespace tessera::placement {
namespace {

Node MakeNode(const std::string& name, int gpus, std::int64_t cpu = 64000) {
  return testing::MakeNode(name, gpus, cpu);
}

Request Pod(const std::string& name, std::int64_t cpu, std::uint32_t k, std::int32_t milli) {
  Request r;
  r.name = name;
  r.cpu_milli = cpu;
  r.gpu_count = k;
  r.gpu_milli = milli;
  return r;
}

// Records what the scheduler shows the policy, in order.
class Spy final : public PlacementPolicy {
 public:
  explicit Spy(const Cluster& c) : inner_(c) {}
  std::string_view name() const override { return "spy"; }
  void Observe(const Request& r) override {
    observed.push_back(r.name);
    inner_.Observe(r);
  }
  Choice Score(const Cluster& c, std::size_t node, const ResolvedRequest& r,
               GpuMask usable) override {
    scored.push_back(r.request->name);
    return inner_.Score(c, node, r, usable);
  }
  bool cacheable() const override { return inner_.cacheable(); }
  std::vector<std::string> observed, scored;

 private:
  TesseraPolicy inner_;
};

TEST(TesseraPolicyTest, SeesOnlyArrivalsSoFar) {
  auto c = Cluster::Create({MakeNode("n0", 8), MakeNode("n1", 8)});
  ASSERT_OK(c);
  Spy spy(*c);
  Scheduler s(&*c, &spy);
  const std::vector<Request> future = {Pod("a", 1000, 1, 500), Pod("b", 1000, 2, 1000),
                                       Pod("c", 0, 0, 0)};
  for (std::size_t i = 0; i < future.size(); ++i) {
    ASSERT_OK(s.Place(future[i]));
    // Observed exactly the arrivals up to and including this one, and scored no later one.
    ASSERT_EQ(spy.observed.size(), i + 1);
    EXPECT_EQ(spy.observed.back(), future[i].name);
    for (const std::string& n : spy.scored) EXPECT_LE(n, future[i].name);
  }
}

TEST(TesseraPolicyTest, WorkloadIsLearnedFromArrivals) {
  auto c = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  EXPECT_TRUE(p.target().items.empty());  // knows nothing before the first arrival
  p.Observe(Pod("a", 2000, 1, 250));
  ASSERT_EQ(p.target().items.size(), 1U);
  EXPECT_EQ(p.target().items[0].gpu_milli, 250);
  for (int i = 0; i < 9; ++i) p.Observe(Pod("b", 4000, 2, 1000));
  double w = 0;
  for (const auto& item : p.target().items) {
    if (item.gpu_count == 2) w = item.weight;
  }
  EXPECT_GT(w, 0.8);  // the popular shape dominates
  EXPECT_EQ(p.observed(), 10U);
}

// The arrivals after which the target workload was rebuilt (the epoch moved), up to `n`.
std::vector<std::uint64_t> RebuildArrivals(TesseraPolicy& p, std::uint64_t n) {
  std::vector<std::uint64_t> at;
  for (std::uint64_t i = 1; i <= n; ++i) {
    const std::uint64_t epoch = p.epoch();
    p.Observe(Pod("p" + std::to_string(i), 1000, 1, 500));
    if (p.epoch() != epoch) at.push_back(i);
  }
  return at;
}

TEST(TesseraPolicyTest, RebuildsDoubleThenFollowTheClusterSize) {
  std::vector<Node> nodes;
  for (int i = 0; i < 10; ++i) nodes.push_back(MakeNode("n" + std::to_string(i), 8));
  auto c = Cluster::Create(nodes);
  ASSERT_OK(c);
  TesseraPolicy::Options o;
  o.rebuild_stride = 4;
  o.rebuild_per_node = 1.5;  // 15 arrivals per rebuild at 10 nodes: more than the floor of 4
  TesseraPolicy p(*c, o);
  EXPECT_EQ(p.RebuildStride(), 15U);
  EXPECT_EQ(RebuildArrivals(p, 60), (std::vector<std::uint64_t>{1, 2, 4, 8, 16, 31, 46}));

  o.rebuild_per_node = 0.2;  // 2 per rebuild at 10 nodes: the floor wins
  TesseraPolicy floor(*c, o);
  EXPECT_EQ(floor.RebuildStride(), 4U);
  EXPECT_EQ(RebuildArrivals(floor, 20), (std::vector<std::uint64_t>{1, 2, 4, 8, 12, 16, 20}));

  o.rebuild_per_node = 0;  // a fixed stride
  TesseraPolicy fixed(*c, o);
  EXPECT_EQ(fixed.RebuildStride(), 4U);
}

TEST(TesseraPolicyTest, DefaultStrideIs256AtThePapersClusterAndScalesBeyond) {
  const auto stride = [](int n) {
    std::vector<Node> nodes;
    for (int i = 0; i < n; ++i) nodes.push_back(MakeNode("n" + std::to_string(i), 1));
    auto c = Cluster::Create(nodes);
    EXPECT_TRUE(c.ok());
    return TesseraPolicy(*c).RebuildStride();
  };
  EXPECT_EQ(stride(2), 256U);
  EXPECT_EQ(stride(1213), 256U);    // the paper's cluster: as before
  EXPECT_EQ(stride(12130), 2560U);  // ten times the cluster: ten times the stride
  // Default options on a small cluster: 1, 2, 4, ..., 256, then every 256.
  auto c = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  EXPECT_EQ(RebuildArrivals(p, 800),
            (std::vector<std::uint64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768}));
}

TEST(TesseraPolicyTest, ContinueFromKeepsTheEstimateOnAnotherCluster) {
  auto before = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(before);
  TesseraPolicy old_policy(*before);
  // Eight arrivals: the old policy's last rebuild (at 1, 2, 4, 8) saw them all.
  for (int i = 0; i < 6; ++i) old_policy.Observe(Pod("a", 2000, 1, 250));
  for (int i = 0; i < 2; ++i) old_policy.Observe(Pod("b", 4000, 2, 1000));
  auto after = Cluster::Create({MakeNode("n0", 8), MakeNode("n1", 4)});  // a node joined
  ASSERT_OK(after);
  TesseraPolicy next(*after);
  next.ContinueFrom(old_policy);
  EXPECT_EQ(next.observed(), 8U);
  ASSERT_EQ(next.target().items.size(), old_policy.target().items.size());
  for (std::size_t i = 0; i < next.target().items.size(); ++i) {
    EXPECT_EQ(next.target().items[i].gpu_milli, old_policy.target().items[i].gpu_milli);
    EXPECT_DOUBLE_EQ(next.target().items[i].weight, old_policy.target().items[i].weight);
  }
  // It goes on learning from there, and another kind of policy carries nothing over.
  next.Observe(Pod("c", 1000, 1, 500));
  EXPECT_EQ(next.observed(), 9U);
  BestFitPolicy best_fit;
  TesseraPolicy fresh(*after);
  fresh.ContinueFrom(best_fit);
  EXPECT_EQ(fresh.observed(), 0U);
}

TEST(TesseraPolicyTest, ARetryIsNotShownAsAnotherArrival) {
  auto c = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(c);
  Spy spy(*c);
  Scheduler s(&*c, &spy);
  const Request big = Pod("big", 1000, 4, 1000);  // fits nowhere
  EXPECT_FALSE(s.Decide(big).has_value());
  EXPECT_FALSE(s.Decide(big, {}, /*observe=*/false).has_value());
  EXPECT_EQ(spy.observed.size(), 1U);
}

TEST(TesseraPolicyTest, PriorSeedsTheEstimate) {
  auto c = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(c);
  WorkloadProfile prior;
  prior.items.push_back({8000, 1000, 8, {}, 1.0});
  TesseraPolicy::Options o;
  o.prior_weight = 100;
  TesseraPolicy p(*c, o, &prior);
  ASSERT_EQ(p.target().items.size(), 1U);
  EXPECT_EQ(p.target().items[0].gpu_count, 8U);
}

// Equal fragmentation scores: the tie goes to the node whose free CPU stays in step with its
// free GPU at the observed demand ratio, whatever the node rank says.
TEST(TesseraPolicyTest, TiesKeepCpuInStepWithGpus) {
  auto c = Cluster::Create({MakeNode("lean", 1, 8000), MakeNode("rich", 1, 64000)});
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  for (int i = 0; i < 20; ++i) p.Observe(Pod("w" + std::to_string(i), 16000, 1, 1000));
  Scheduler s(&*c, &p);  // the rank alone would pick "lean"
  const auto d = s.Decide(Pod("cpu", 4000, 0, 0));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->node, 1U);  // CPU is what "rich" has in excess
}

// A rare shape (eight GPUs, 100 CPUs: too rare for the fragmentation target) that only one node
// can host: a small share goes elsewhere, so the host stays whole.
TEST(TesseraPolicyTest, TiesSpareTheOnlyHostOfAMultiGpuShape) {
  auto c = Cluster::Create({MakeNode("host", 8, 128000), MakeNode("other", 8, 96000)});
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  for (int i = 0; i < 100; ++i) p.Observe(Pod("s" + std::to_string(i), 1000, 1, 500));
  p.Observe(Pod("big0", 100000, 8, 1000));
  p.Observe(Pod("big1", 100000, 8, 1000));
  for (int i = 0; i < 25; ++i) p.Observe(Pod("t" + std::to_string(i), 1000, 1, 500));
  // The decision's own arrival is the 128th: the estimate is rebuilt with everything above.
  for (const auto& item : p.target().items) EXPECT_EQ(item.gpu_count, 1U);  // not in the target
  Scheduler s(&*c, &p);  // the rank alone would pick "host"
  const auto d = s.Decide(Pod("small", 1000, 1, 500));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->node, 1U);
}

// The expected cost is added to the fragmentation delta, before FGD's sigmoid: a placement that
// FGD's delta prefers by a step (filling a partly used GPU) but that takes the CPU the only host
// of a multi-GPU shape needs loses to one that FGD's delta alone would rank lower.
TEST(TesseraPolicyTest, TheCostOutweighsASmallFragmentationGain) {
  auto c = Cluster::Create({MakeNode("host", 8, 128000), MakeNode("other", 8, 96000)});
  ASSERT_OK(c);
  // One of host's GPUs is 700 milli used: a 300-milli share fills it exactly.
  const Request used = Pod("used", 1000, 1, 700);
  const ResolvedRequest ru = c->Resolve(used);
  Allocation a;
  a.node = 0;
  a.gpus.push_back(c->ShareOn(0, 0, ru));
  ASSERT_OK(c->Add(ru, a));
  TesseraPolicy p(*c);
  for (int i = 0; i < 62; ++i) {
    p.Observe(Pod("w" + std::to_string(i), 1000, 1, 1000));
    p.Observe(Pod("s" + std::to_string(i), 1000, 1, 300));
  }
  // Four GPUs with 100 CPUs: rare (not in the target), and only "host" has the CPUs.
  for (int i = 0; i < 3; ++i) p.Observe(Pod("big" + std::to_string(i), 100000, 4, 1000));
  for (const auto& item : p.target().items) ASSERT_EQ(item.gpu_count, 1U);
  // On "host" the share fills the 300 free milli (FGD's delta: -150, score 53); on "other" it
  // opens a whole GPU (+350, score 41). But 30 CPUs on "host" leave it 98: no longer a host.
  Scheduler s(&*c, &p);  // the decision's own arrival is the 128th: a rebuild sees all above
  const auto d = s.Decide(Pod("q", 30000, 1, 300));
  ASSERT_TRUE(d.has_value());
  EXPECT_GT(p.MultiGpuValue(4, 1000, 100000), 1000.0);
  EXPECT_EQ(d->node, 1U);
}

TEST(TesseraPolicyTest, HostsAreScarceForEveryShapeThatNeedsThem) {
  // Six nodes of 8 GPUs host both 4-GPU and 8-GPU pods. Four 4-GPU pods alone would not make
  // those hosts scarce, but eight 8-GPU pods compete for the same nodes: the 4-GPU shape is
  // valued by the demand of both (a node that can host an 8-GPU pod can host a 4-GPU one).
  std::vector<Node> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(MakeNode("n" + std::to_string(i), 8, 64000));
  auto c = Cluster::Create(nodes);
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  for (int i = 0; i < 20; ++i) p.Observe(Pod("s" + std::to_string(i), 1000, 1, 500));
  for (int i = 0; i < 4; ++i) p.Observe(Pod("q" + std::to_string(i), 8000, 4, 1000));
  for (int i = 0; i < 8; ++i) p.Observe(Pod("e" + std::to_string(i), 16000, 8, 1000));
  ASSERT_EQ(p.observed(), 32U);  // a rebuild at the 32nd arrival saw all of them
  // Alone the 4-GPU shape's expected demand (2 pods) against 6 hosts is worth ~2 % of a pod;
  // with the 8-GPU pods' (4 more) well over a third.
  EXPECT_GT(p.MultiGpuValue(4, 1000, 8000), 0.3 * 4 * 1000);
  EXPECT_GT(p.MultiGpuValue(8, 1000, 16000), 0.0);
}

// Within a node a share fills the partly used GPU rather than opening a whole one.
TEST(TesseraPolicyTest, PacksSharesOntoUsedGpus) {
  auto c = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(c);
  const Request first = Pod("first", 1000, 1, 500);
  const ResolvedRequest rf = c->Resolve(first);
  Allocation a;
  a.node = 0;
  a.gpus.push_back(c->ShareOn(0, 3, rf));
  ASSERT_OK(c->Add(rf, a));
  TesseraPolicy p(*c);
  p.Observe(Pod("w1", 1000, 8, 1000));
  Scheduler s(&*c, &p);
  const auto d = s.Decide(Pod("small", 1000, 1, 500));
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->gpus.size(), 1U);
  EXPECT_EQ(d->gpus[0].gpu, 3U);
}

TEST(TesseraPolicyTest, ScoresFollowTheWorkloadEpoch) {
  auto c = Cluster::Create({MakeNode("n0", 8)});
  ASSERT_OK(c);
  TesseraPolicy p(*c);
  EXPECT_TRUE(p.cacheable());  // the Scheduler keys cached scores on the epoch
  const std::uint64_t e0 = p.epoch();
  p.Observe(Pod("a", 1000, 1, 500));
  EXPECT_GT(p.epoch(), e0);
}

// Nodes that started in the same state share scores only while they stay in it: a node that
// has changed is scored for its own state.
TEST(TesseraPolicyTest, IdenticalNodesShareScoresOnlyWhileUnchanged) {
  auto c = Cluster::Create({MakeNode("n0", 8), MakeNode("n1", 8), MakeNode("n2", 8)});
  ASSERT_OK(c);
  TesseraPolicy shared(*c);  // scores n0 first, so n1 could reuse n0's score
  TesseraPolicy alone(*c);   // scores n1 only
  for (TesseraPolicy* p : {&shared, &alone}) {
    for (int i = 0; i < 8; ++i) p->Observe(Pod("w" + std::to_string(i), 8000, 1, 300));
    p->Observe(Pod("m", 32000, 4, 1000));
  }
  const Request q = Pod("q", 4000, 1, 300);
  const ResolvedRequest r = c->Resolve(q);
  const Choice n0 = shared.Score(*c, 0, r, c->UsableGpus(0, r));
  EXPECT_EQ(shared.Score(*c, 2, r, c->UsableGpus(2, r)).score, n0.score);  // unchanged: shared
  // CPU only: n1's usable GPUs stay those of n0, so only its version tells them apart.
  const Request cpu_only = Pod("cpu", 60000, 0, 0);  // outlives rb, which points to it
  const ResolvedRequest rb = c->Resolve(cpu_only);
  Allocation a;
  a.node = 1;
  ASSERT_OK(c->Add(rb, a));
  ASSERT_EQ(c->UsableGpus(1, r), c->UsableGpus(0, r));
  const Choice mine = shared.Score(*c, 1, r, c->UsableGpus(1, r));
  const Choice fresh = alone.Score(*c, 1, r, c->UsableGpus(1, r));
  EXPECT_EQ(mine.score, fresh.score);
  EXPECT_EQ(mine.gpus, fresh.gpus);
  EXPECT_NE(mine.score, n0.score);  // n1's CPU is mostly gone: its score is its own
}

}  // namespace
}  // namespace tessera::placement
