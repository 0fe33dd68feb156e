#include "placement/scheduler.h"

#include <map>

#include <gtest/gtest.h>

#include "placement/placement_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::placement {
namespace {

Node MakeNode(const std::string& name, int gpus) {
  return testing::MakeNode(name, gpus, 16000, 64LL << 30, "T4");
}

Request Pod(std::uint32_t k, std::int32_t milli, std::int64_t cpu = 1000) {
  Request r;
  r.name = "p";
  r.cpu_milli = cpu;
  r.gpu_count = k;
  r.gpu_milli = milli;
  return r;
}

TEST(Scheduler, TiesGoToTheSmallestRank) {
  auto cluster = Cluster::Create({MakeNode("a", 2), MakeNode("b", 2), MakeNode("c", 2)});
  ASSERT_OK(cluster);
  GpuPackingPolicy policy;
  Scheduler scheduler(&*cluster, &policy, {2, 0, 1});
  auto a = scheduler.Place(Pod(1, 500));
  ASSERT_OK(a);
  EXPECT_EQ(a->node, 1U);  // all empty nodes tie; node 1 has rank 0
  auto b = scheduler.Place(Pod(1, 300));
  ASSERT_OK(b);
  EXPECT_EQ(b->node, 1U);  // packing: the partly used GPU scores best
  EXPECT_EQ(b->gpus[0].gpu, a->gpus[0].gpu);
}

TEST(Scheduler, ConsidersOnlyTheGivenNodes) {
  auto cluster = Cluster::Create({MakeNode("a", 2), MakeNode("b", 2), MakeNode("c", 2)});
  ASSERT_OK(cluster);
  GpuPackingPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  const std::vector<std::uint32_t> only_c = {2};
  auto a = scheduler.Decide(Pod(1, 500), only_c);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node, 2U);  // without the subset node 0 (rank 0) would win
  const std::vector<std::uint32_t> b_and_c = {1, 2};
  auto b = scheduler.Decide(Pod(1, 500), b_and_c);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->node, 1U);
  EXPECT_FALSE(scheduler.Decide(Pod(3, 1000), b_and_c).has_value());  // 2 GPUs per node
}

TEST(Scheduler, MemoryAsPpmOfTheChosenGpuRoundsDownToAMiB) {
  Node n = MakeNode("a", 1);
  n.gpus[0].memory_bytes = (16ULL << 30) + 12345;  // not a MiB multiple
  auto cluster = Cluster::Create({n});
  ASSERT_OK(cluster);
  Request q = Pod(1, 300);
  q.memory_ppm = 300'000;  // 30 %
  const std::uint64_t exact = ((16ULL << 30) + 12345) * 3 / 10;
  EXPECT_EQ(MemoryOn(cluster->node(0).gpus[0], q), exact / (1ULL << 20) * (1ULL << 20));
  q.gpu_memory_bytes = 5;  // explicit bytes win
  EXPECT_EQ(MemoryOn(cluster->node(0).gpus[0], q), 5U);
  Request r = Pod(1, 500);  // neither: the trace's milli convention, exact
  EXPECT_EQ(MemoryOn(cluster->node(0).gpus[0], r), ((16ULL << 30) + 12345) / 2);
}

TEST(Scheduler, FailsWhenNothingFitsAndChangesNothing) {
  auto cluster = Cluster::Create({MakeNode("a", 1)});
  ASSERT_OK(cluster);
  BestFitPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  const auto before = cluster->state(0).gpu_milli_free;
  auto r = scheduler.Place(Pod(2, 1000));
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cluster->state(0).gpu_milli_free, before);
}

TEST(Scheduler, NeverChoosesUnhealthyGpus) {
  auto cluster = Cluster::Create({MakeNode("a", 2), MakeNode("b", 2)});
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->SetGpuHealth(0, 0, false));
  ASSERT_OK(cluster->SetGpuHealth(0, 1, false));
  ASSERT_OK(cluster->SetGpuHealth(1, 0, false));
  DotProductPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  for (int i = 0; i < 3; ++i) {
    auto r = scheduler.Place(Pod(1, 300));
    ASSERT_OK(r);
    EXPECT_EQ(r->node, 1U);
    EXPECT_EQ(r->gpus[0].gpu, 1U);
  }
  EXPECT_FALSE(scheduler.Place(Pod(1, 300)).ok());
}

TEST(Scheduler, CachedScoresFollowStateChanges) {
  // The same request shape twice: the second decision must see the first placement.
  auto cluster = Cluster::Create({MakeNode("a", 1), MakeNode("b", 1)});
  ASSERT_OK(cluster);
  BestFitPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  auto first = scheduler.Place(Pod(1, 600));
  ASSERT_OK(first);
  auto second = scheduler.Place(Pod(1, 600));
  ASSERT_OK(second);
  EXPECT_NE(first->node, second->node);
  ASSERT_OK(scheduler.Release(Pod(1, 600), *first));
  auto third = scheduler.Place(Pod(1, 600));
  ASSERT_OK(third);
  EXPECT_EQ(third->node, first->node);
}

// Scores node `favourite` highest; its epoch is the favourite, so changing it must not be hidden
// by cached scores.
class FavouritePolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "favourite"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
               GpuMask usable) override {
    return {node == favourite ? 100 : 0, BestGpus(cluster.state(node), *r.request, usable)};
  }
  std::uint64_t epoch() const override { return favourite; }
  std::size_t favourite = 0;
};

TEST(Scheduler, CachedScoresFollowThePolicyEpoch) {
  auto cluster = Cluster::Create({MakeNode("a", 1), MakeNode("b", 1)});
  ASSERT_OK(cluster);
  FavouritePolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  auto first = scheduler.Decide(Pod(1, 100));  // nothing placed: node versions stay the same
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->node, 0U);
  policy.favourite = 1;
  auto second = scheduler.Decide(Pod(1, 100));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->node, 1U);
}

// Records the usable GPUs the Scheduler hands it; a new epoch per decision forces rescoring.
class UsableRecorder final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "usable-recorder"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
               GpuMask usable) override {
    seen[node] = usable;
    return {0, BestGpus(cluster.state(node), *r.request, usable)};
  }
  std::uint64_t epoch() const override { return epoch_now; }
  std::uint64_t epoch_now = 0;
  std::map<std::size_t, GpuMask> seen;
};

// A rescore (same node versions, new epoch) sees the GPUs the filter would find now: kept in
// the cache while no node has more than 31 GPUs, recomputed otherwise.
void CheckRescoresSeeTheFiltersGpus(std::vector<Node> nodes, int requests) {
  auto cluster = Cluster::Create(std::move(nodes));
  ASSERT_OK(cluster);
  UsableRecorder policy;
  Scheduler scheduler(&*cluster, &policy);
  for (int i = 0; i < requests; ++i) {
    const Request q = Pod(1, 300 + 100 * (i % 3), 10);
    ++policy.epoch_now;
    ASSERT_OK(scheduler.Place(q));
    for (int again = 0; again < 2; ++again) {  // no state change, new epoch: rescored from cache
      policy.seen.clear();
      ++policy.epoch_now;
      ASSERT_TRUE(scheduler.Decide(q).has_value());
      const ResolvedRequest r = cluster->Resolve(q);
      for (std::size_t node = 0; node < cluster->size(); ++node) {
        const GpuMask now = cluster->UsableGpus(node, r);
        if (now == 0) continue;  // infeasible: not scored
        ASSERT_EQ(policy.seen.count(node), 1U) << "node " << node << " request " << i;
        EXPECT_EQ(policy.seen[node], now) << "node " << node << " request " << i;
      }
    }
  }
}

TEST(Scheduler, ARescoreGetsTheUsableGpusKeptByTheFilter) {
  CheckRescoresSeeTheFiltersGpus({MakeNode("narrow", 4), MakeNode("widest-kept", 31)}, 60);
}

TEST(Scheduler, ARescoreRecomputesUsableGpusWhenANodeIsTooWideToKeepThem) {
  CheckRescoresSeeTheFiltersGpus({MakeNode("wide", 40), MakeNode("narrow", 4)}, 60);
}

TEST(Scheduler, RandomPicksOnlyFeasibleNodes) {
  auto cluster = Cluster::Create({MakeNode("a", 1), MakeNode("b", 1), MakeNode("c", 1)});
  ASSERT_OK(cluster);
  Rand rand(std::make_unique<SplitMixSource>(1));
  RandomPolicy policy(&rand);
  Scheduler scheduler(&*cluster, &policy);
  ASSERT_OK(cluster->SetNodeCordoned(1, true));
  for (int i = 0; i < 2; ++i) {
    auto r = scheduler.Place(Pod(1, 1000));
    ASSERT_OK(r);
    EXPECT_NE(r->node, 1U);
  }
  EXPECT_FALSE(scheduler.Place(Pod(1, 1000)).ok());
}

TEST(Scheduler, CoTenancyForbidsForeignTenantsOnTheChosenGpu) {
  auto cluster = Cluster::Create({MakeNode("a", 1), MakeNode("b", 1)});
  ASSERT_OK(cluster);
  GpuPackingPolicy policy;  // would pack both onto one GPU if allowed
  Scheduler scheduler(&*cluster, &policy);
  Request team = Pod(1, 300);
  team.namespace_name = "team";
  auto a = scheduler.Place(team);
  ASSERT_OK(a);
  Request customer = Pod(1, 300);
  customer.namespace_name = "customer";
  customer.tier = TrustTier::kCustomer;
  ApplyTrustPolicy(policy::DefaultPolicy(), customer);
  auto b = scheduler.Place(customer);
  ASSERT_OK(b);
  EXPECT_NE(a->node, b->node);
}

}  // namespace
}  // namespace tessera::placement
