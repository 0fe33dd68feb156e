#include "placement/scheduler.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "placement/placement_testing.h"
#include "placement/tessera_policy.h"
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

// Scores nodes of `favourite` GPUs highest (a cacheable score depends on the node's state, not
// its name); its epoch is the favourite, so changing it must not be hidden by cached scores.
class FavouritePolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "favourite"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
               GpuMask usable) override {
    return {cluster.node(node).gpus.size() == favourite ? 100 : 0,
            BestGpus(cluster.state(node), *r.request, usable)};
  }
  std::uint64_t epoch() const override { return favourite; }
  std::size_t favourite = 1;
};

TEST(Scheduler, CachedScoresFollowThePolicyEpoch) {
  auto cluster = Cluster::Create({MakeNode("a", 1), MakeNode("b", 2)});
  ASSERT_OK(cluster);
  FavouritePolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  auto first = scheduler.Decide(Pod(1, 100));  // nothing placed: node versions stay the same
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->node, 0U);
  policy.favourite = 2;
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

// ---- Node classes: the same decisions as filtering and scoring every node -------------------

// The reference: filter every candidate, score each feasible one with the policy (no cache, no
// classes), take the best score, then the lowest rank, then the lowest index.
std::optional<Allocation> Reference(Cluster& cluster, PlacementPolicy& policy, const Request& q,
                                    const std::vector<std::uint32_t>& ranks,
                                    const std::vector<std::uint32_t>& nodes, bool observe) {
  if (observe) policy.Observe(q);
  const ResolvedRequest r = cluster.Resolve(q);
  std::optional<std::size_t> best;
  Choice best_choice;
  auto visit = [&](std::size_t i) {
    GpuMask usable = 0;
    if (!cluster.Feasible(i, r, &usable)) return;
    const Choice c = policy.Score(cluster, i, r, usable);
    if (!best.has_value() || c.score > best_choice.score ||
        (c.score == best_choice.score && ranks[i] < ranks[*best])) {
      best = i;
      best_choice = c;
    }
  };
  if (nodes.empty()) {
    for (std::size_t i = 0; i < cluster.size(); ++i) visit(i);
  } else {
    for (const std::uint32_t i : nodes) visit(i);
  }
  if (!best.has_value()) return std::nullopt;
  Allocation a;
  a.node = static_cast<std::uint32_t>(*best);
  for (GpuMask m = best_choice.gpus; m != 0; m &= m - 1) {
    a.gpus.push_back(cluster.ShareOn(*best, LowestBit(m), r));
  }
  return a;
}

// A small cluster of replicated node types (many nodes in equal states, as in a scaled trace):
// one-model nodes of 1, 2, 4 and 8 GPUs and a two-model node, `copies` of each.
std::vector<Node> ReplicatedNodes(int copies) {
  std::vector<Node> nodes;
  for (int c = 0; c < copies; ++c) {
    const std::string s = "-" + std::to_string(c);
    nodes.push_back(testing::MakeNode("t4" + s, 4, 32000, 128LL << 30, "T4"));
    nodes.push_back(testing::MakeNode("g2" + s, 8, 96000, 512LL << 30, "G2"));
    nodes.push_back(testing::MakeNode("p100" + s, 2, 64000, 256LL << 30, "P100"));
    nodes.push_back(testing::MakeNode("a10" + s, 1, 8000, 32LL << 30, "A10"));
    Node mixed = testing::MakeNode("mixed" + s, 2, 48000, 192LL << 30, "T4");
    mixed.gpus.push_back(testing::MakeNode("x", 1, 0, 0, "P100").gpus[0]);
    mixed.gpus[2].memory_bytes = 12ULL << 30;
    nodes.push_back(mixed);
  }
  return nodes;
}

WorkloadProfile SmallProfile() {
  WorkloadProfile p;
  p.items = {{4000, 1000, 1, {}, 0.4},
             {2000, 500, 1, {}, 0.3},
             {8000, 1000, 2, {}, 0.2},
             {1000, 0, 0, {}, 0.1}};
  return p;
}

// Replays a deterministic mix of arrivals, departures, cordons, health changes and decisions
// over candidate subsets on two copies of a cluster: one through the Scheduler (node classes,
// caches), one through Reference; every decision must be the same node with the same shares.
void CheckClassesDecideAsEveryNode(const std::string& policy_name) {
  auto make_policy = [&](const Cluster& cluster) -> std::unique_ptr<PlacementPolicy> {
    if (policy_name == "tessera") {
      TesseraPolicy::Options options;
      options.rebuild_stride = 16;  // many epochs
      options.half_life = 64;
      return std::make_unique<TesseraPolicy>(cluster, options);
    }
    return MakePolicy(ParsePolicyKind(policy_name).value(), cluster, SmallProfile(), nullptr);
  };
  auto a = Cluster::Create(ReplicatedNodes(6));
  auto b = Cluster::Create(ReplicatedNodes(6));
  ASSERT_OK(a);
  ASSERT_OK(b);
  std::mt19937 rng(7);
  std::vector<std::uint32_t> ranks(a->size());
  for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<std::uint32_t>(i);
  for (std::size_t i = ranks.size() - 1; i > 0; --i) std::swap(ranks[i], ranks[rng() % (i + 1)]);
  if (policy_name == "best-fit") ranks[3] = ranks[4];  // a repeated rank: ties go to the index
  auto policy_a = make_policy(*a);
  auto policy_b = make_policy(*b);
  Scheduler scheduler(&*a, policy_a.get(), ranks);
  std::vector<std::pair<Request, Allocation>> placed;
  std::deque<Request> requests;  // stable addresses for the requests on the ledger
  constexpr std::uint32_t kCounts[] = {0, 1, 1, 1, 1, 2, 4, 8};
  constexpr std::int64_t kCpus[] = {0, 1000, 2000, 4000, 16000};
  constexpr std::int64_t kMemory[] = {0, 1LL << 30, 8LL << 30, 100LL << 30};
  int decisions = 0;
  int shared = 0;  // decisions taken while some nodes shared a class
  for (int step = 0; step < 1500; ++step) {
    Request q;
    q.name = "p" + std::to_string(step);
    q.cpu_milli = kCpus[rng() % 5];
    q.memory_bytes = kMemory[rng() % 4];
    q.gpu_count = kCounts[rng() % 8];
    q.gpu_milli = q.gpu_count == 0  ? 0
                  : q.gpu_count > 1 ? 1000
                                    : static_cast<std::int32_t>(100 * (1 + rng() % 10));
    if (q.gpu_count > 0 && rng() % 6 == 0) q.models = {rng() % 2 == 0 ? "T4" : "P100"};
    if (step % 5 == 4) {  // a retry over a subset: decided, not placed, not observed
      std::vector<std::uint32_t> subset;
      for (std::uint32_t i = 0; i < a->size(); ++i) {
        if (rng() % 2 == 0) subset.push_back(i);
      }
      const auto got = scheduler.Decide(q, subset, false);
      const auto want = Reference(*b, *policy_b, q, ranks, subset, false);
      ASSERT_EQ(got.has_value(), want.has_value()) << policy_name << " step " << step;
      if (got.has_value()) {
        ASSERT_EQ(got->node, want->node) << policy_name << " step " << step;
      }
      continue;
    }
    const auto got = scheduler.Decide(q);
    const auto want = Reference(*b, *policy_b, q, ranks, {}, true);
    ++decisions;
    if (scheduler.classes() < a->size()) ++shared;
    ASSERT_EQ(got.has_value(), want.has_value()) << policy_name << " step " << step;
    if (got.has_value()) {
      ASSERT_EQ(got->node, want->node) << policy_name << " step " << step;
      ASSERT_EQ(got->gpus.size(), want->gpus.size());
      for (std::size_t g = 0; g < got->gpus.size(); ++g) {
        ASSERT_EQ(got->gpus[g].gpu, want->gpus[g].gpu) << policy_name << " step " << step;
        ASSERT_EQ(got->gpus[g].memory_bytes, want->gpus[g].memory_bytes);
      }
      requests.push_back(q);
      ASSERT_OK(a->Add(a->Resolve(requests.back()), *got));
      ASSERT_OK(b->Add(b->Resolve(requests.back()), *want));
      placed.emplace_back(requests.back(), *got);
    }
    if (step % 3 == 2 && !placed.empty()) {  // a departure
      const std::size_t k = rng() % placed.size();
      ASSERT_OK(scheduler.Release(placed[k].first, placed[k].second));
      ASSERT_OK(b->Remove(b->Resolve(placed[k].first), placed[k].second));
      placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(k));
    }
    if (step % 97 == 50) {  // cordons and health come and go
      const std::size_t node = rng() % a->size();
      const bool on = step % 2 == 0;
      ASSERT_OK(a->SetNodeCordoned(node, on));
      ASSERT_OK(b->SetNodeCordoned(node, on));
      const std::size_t gpu_node = rng() % a->size();
      ASSERT_OK(a->SetGpuHealth(gpu_node, 0, !on));
      ASSERT_OK(b->SetGpuHealth(gpu_node, 0, !on));
    }
  }
  EXPECT_GT(decisions, 1000);
  EXPECT_GT(shared, 100) << policy_name;  // equal states did share a class
}

TEST(SchedulerClasses, DecideAsEveryNodeForEveryCacheablePolicy) {
  for (const char* policy :
       {"best-fit", "dot-product", "gpu-packing", "gpu-clustering", "fgd", "tessera"}) {
    CheckClassesDecideAsEveryNode(policy);
  }
}

// The index of classes by free capacity never skips a class the filter accepts: with requests cut
// to the free capacity of some node (its exact free CPU and memory, its k-th largest free GPU
// milli for k GPUs, and one more than each), every decision counts as feasible exactly the nodes
// that Cluster::Feasible accepts, over every node and over subsets.
TEST(SchedulerClasses, TheCapacityIndexSkipsNoFeasibleClass) {
  std::vector<Node> nodes = ReplicatedNodes(3);
  Node wide = testing::MakeNode("wide", 10, 160000, 640LL << 30, "G2");  // more GPUs than indexed
  nodes.push_back(wide);
  Node mig = testing::MakeNode("mig", 2, 32000, 128LL << 30, "A100");
  mig.gpus[0].mig_enabled = true;
  mig.gpus[0].mig_instances = {"1g.5gb", "1g.5gb", "3g.20gb"};
  nodes.push_back(mig);
  auto cluster = Cluster::Create(nodes);
  ASSERT_OK(cluster);
  BestFitPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  std::mt19937 rng(11);
  std::deque<Request> requests;
  std::vector<std::pair<const Request*, Allocation>> placed;
  auto feasible_nodes = [&](const Request& q, const std::vector<std::uint32_t>& subset) {
    const ResolvedRequest r = cluster->Resolve(q);
    std::size_t count = 0;
    GpuMask usable = 0;
    for (std::uint32_t i = 0; i < cluster->size(); ++i) {
      const bool candidate =
          subset.empty() || std::find(subset.begin(), subset.end(), i) != subset.end();
      if (candidate && cluster->Feasible(i, r, &usable)) ++count;
    }
    return count;
  };
  int checked = 0;
  int feasible_checks = 0;
  for (int step = 0; step < 600; ++step) {
    // Fill: shares, whole GPUs, multi-GPU and CPU-only pods; some leave again.
    requests.push_back(Pod(rng() % 4 == 0 ? 0U : static_cast<std::uint32_t>(1 + rng() % 3),
                           static_cast<std::int32_t>(100 * (1 + rng() % 10)), 1000 * (rng() % 8)));
    Request& fill = requests.back();
    if (fill.gpu_count > 1) fill.gpu_milli = 1000;
    if (fill.gpu_count == 0) fill.gpu_milli = 0;
    fill.memory_bytes = static_cast<std::int64_t>(rng() % 16) << 30;
    if (auto a = scheduler.Place(fill); a.ok()) placed.emplace_back(&fill, *a);
    if (step % 3 == 2 && !placed.empty()) {
      const std::size_t k = rng() % placed.size();
      ASSERT_OK(scheduler.Release(*placed[k].first, placed[k].second));
      placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(k));
    }
    if (step % 50 == 25) {
      ASSERT_OK(cluster->SetNodeCordoned(rng() % cluster->size(), step % 100 == 25));
    }
    if (step % 40 == 10) {
      ASSERT_OK(cluster->SetGpuHealth(rng() % cluster->size(), 0, step % 80 == 10));
    }
    // Probe requests at the edge of one node's free capacity.
    const std::size_t j = rng() % cluster->size();
    const NodeState& st = cluster->state(j);
    std::vector<std::int32_t> milli = st.free_milli;
    std::sort(milli.begin(), milli.end(), std::greater<>());
    for (int variant = 0; variant < 8; ++variant) {
      Request q;
      q.name = "probe";
      const int over = variant % 2;  // one more than the node has
      q.cpu_milli = variant < 2 ? st.cpu_free + over : static_cast<std::int64_t>(rng() % 4000);
      q.memory_bytes = variant == 2 || variant == 3 ? st.memory_free + (variant - 2) : 0;
      if (variant >= 4 && !milli.empty()) {
        const std::size_t k = 1 + rng() % (milli.size() + 1);  // up to one GPU more than it has
        q.gpu_count = static_cast<std::uint32_t>(k);
        const std::int32_t m = milli[std::min(k, milli.size()) - 1];
        q.gpu_milli = std::clamp(m + (variant == 5 ? 1 : 0), 1, kMilliPerGpu);
      }
      if (variant == 6 && q.gpu_count > 0) q.models = {rng() % 2 == 0 ? "T4" : "P100"};
      if (variant == 7 && rng() % 3 == 0) {
        q.gpu_count = 1;
        q.gpu_milli = 0;
        q.mig_profile = "1g.5gb";
      }
      const std::size_t want = feasible_nodes(q, {});
      const auto got = scheduler.Decide(q, {}, false);
      ASSERT_EQ(scheduler.last_feasible(), want) << "step " << step << " variant " << variant;
      ASSERT_EQ(got.has_value(), want > 0);
      std::vector<std::uint32_t> subset;
      for (std::uint32_t i = 0; i < cluster->size(); ++i) {
        if (rng() % 2 == 0) subset.push_back(i);
      }
      scheduler.Decide(q, subset, false);
      ASSERT_EQ(scheduler.last_feasible(), feasible_nodes(q, subset)) << "step " << step;
      ++checked;
      if (want > 0 && want < cluster->size()) ++feasible_checks;
    }
  }
  EXPECT_GT(feasible_checks, checked / 4);  // the probes were neither all refused nor all met
}

// Classes follow the cluster when its change log was trimmed (more changes than it keeps between
// two decisions): every node's version is compared instead.
TEST(SchedulerClasses, CatchUpAfterTheChangeLogWasTrimmed) {
  auto cluster = Cluster::Create(ReplicatedNodes(2));
  ASSERT_OK(cluster);
  BestFitPolicy policy;
  Scheduler scheduler(&*cluster, &policy);
  EXPECT_EQ(scheduler.classes(), 5U);  // five node types, all empty
  const std::uint64_t before = cluster->change_end();
  for (int i = 0; i < 5000; ++i) ASSERT_OK(cluster->SetNodeCordoned(0, i % 2 == 1));
  std::span<const std::uint32_t> changed;
  EXPECT_FALSE(cluster->ChangesSince(before, &changed));
  // Node 0 (a T4 node) is cordoned now: a node of its own class, never chosen.
  const Request q = Pod(1, 500);
  const auto a = scheduler.Decide(q);
  ASSERT_TRUE(a.has_value());
  EXPECT_NE(a->node, 0U);
  EXPECT_EQ(scheduler.classes(), 6U);
  EXPECT_EQ(scheduler.last_feasible(), 9U);
}

}  // namespace
}  // namespace tessera::placement
