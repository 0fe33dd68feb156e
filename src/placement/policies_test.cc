#include "placement/policies.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include <gtest/gtest.h>

#include "placement/placement_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::placement {
namespace {

Node MakeNode(const std::string& name, int gpus, std::int64_t cpu = 96000) {
  return testing::MakeNode(name, gpus, cpu);
}

Request Pod(std::int64_t cpu, std::uint32_t k, std::int32_t milli) {
  Request r;
  r.name = "p";
  r.cpu_milli = cpu;
  r.gpu_count = k;
  r.gpu_milli = milli;
  return r;
}

class PoliciesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Cluster::Create({MakeNode("n0", 8)});
    ASSERT_OK(c);
    cluster_.emplace(std::move(c).value());
  }
  // Places `milli` on GPU `gpu` of node 0 (1 CPU core).
  void Put(std::uint32_t gpu, std::int32_t milli) {
    keep_.push_back(Pod(1000, 1, milli));
    const ResolvedRequest r = cluster_->Resolve(keep_.back());
    ASSERT_OK(cluster_->Add(r, {0, {cluster_->ShareOn(0, gpu, r)}}));
  }
  Choice Score(PlacementPolicy& p, const Request& q) {
    const ResolvedRequest r = cluster_->Resolve(q);
    GpuMask usable = 0;
    EXPECT_TRUE(cluster_->Feasible(0, r, &usable));
    return p.Score(*cluster_, 0, r, usable);
  }
  std::optional<Cluster> cluster_;
  std::deque<Request> keep_;
};

TEST_F(PoliciesTest, BestGpuChoice) {
  Put(0, 500);  // free 500
  Put(1, 800);  // free 200
  Put(2, 700);  // free 300
  const Request q = Pod(1000, 1, 250);
  GpuMask usable = cluster_->UsableGpus(0, cluster_->Resolve(q));
  EXPECT_EQ(BestGpus(cluster_->state(0), q, usable), 1ULL << 2);  // least free that fits
  const Request whole = Pod(1000, 2, 1000);
  usable = cluster_->UsableGpus(0, cluster_->Resolve(whole));
  EXPECT_EQ(BestGpus(cluster_->state(0), whole, usable), 0b11000ULL);
}

TEST_F(PoliciesTest, GpuPackingScores) {
  GpuPackingPolicy p;
  EXPECT_EQ(Score(p, Pod(1000, 1, 500)).score, 25);  // all 8 free: 33 - 8
  Put(0, 400);                                       // free 600 on GPU 0
  EXPECT_EQ(Score(p, Pod(1000, 1, 500)).score, 94);  // 100 - floor(60 / 10)
  EXPECT_EQ(Score(p, Pod(1000, 1, 700)).score, 49);  // takes a fully free GPU: 50 - 1
  EXPECT_EQ(Score(p, Pod(1000, 2, 1000)).score, 48);
  EXPECT_EQ(Score(p, Pod(1000, 0, 0)).score, 0);
}

TEST_F(PoliciesTest, GpuClusteringScores) {
  GpuClusteringPolicy p;
  EXPECT_EQ(Score(p, Pod(1000, 1, 500)).score, 25);  // empty node: base 0 + 25
  Put(0, 400);
  // base = 25 * (8000 - 7600) / 8000 = 1; same tag only: + 75.
  EXPECT_EQ(Score(p, Pod(1000, 1, 500)).score, 76);
  EXPECT_EQ(Score(p, Pod(1000, 1, 1000)).score, 1);  // different tag on a used node
  EXPECT_EQ(Score(p, Pod(1000, 0, 0)).score, 0);
}

TEST_F(PoliciesTest, DotProductAndBestFitScores) {
  DotProductPolicy dot;
  BestFitPolicy best;
  const Request q = Pod(16000, 1, 500);
  // v = (96000/128000)(16000/128000) + (8000/8000)(500/8000) = 0.09375 + 0.0625
  EXPECT_EQ(Score(dot, q).score, static_cast<int>(100 * (1 - (0.09375 + 0.0625) / 2)));
  // x = ((96000-16000)/128000) * 0.5 + ((8000-500)/8000) * 0.5
  EXPECT_EQ(Score(best, q).score, static_cast<int>((1 - (0.3125 + 0.46875)) * 100));
}

TEST_F(PoliciesTest, FgdPrefersTheGpuThatLeavesLessFragment) {
  // Profile: only whole-GPU pods. A fractional pod on an already used GPU fragments nothing
  // new; on a fully free GPU it turns 1000 usable milli into fragment.
  WorkloadProfile profile;
  profile.items.push_back({1000, 1000, 1, {}, 1.0});
  Put(3, 500);
  FgdPolicy fgd(*cluster_, profile);
  const Choice c = Score(fgd, Pod(1000, 1, 300));
  EXPECT_EQ(c.gpus, 1ULL << 3);
  // GPU 3's 500 free milli were already fragment; 300 of them get used: delta = +300.
  EXPECT_EQ(c.score, static_cast<int>(100 / (1 + std::exp(-0.3))));
}

TEST(Fragmentation, CountsWhatTypicalPodsCannotUse) {
  Node n = MakeNode("n0", 2, 8000);
  auto cluster = Cluster::Create({n});
  ASSERT_OK(cluster);
  WorkloadProfile profile;
  profile.items.push_back({1000, 600, 1, {}, 0.5});  // fits GPU 1 only once GPU 0 has 500 free
  profile.items.push_back({1000, 0, 0, {}, 0.5});    // CPU-only: all idle GPU is fragment
  const Fragmentation frag(*cluster, profile);
  const std::int32_t free[] = {500, 1000};
  EXPECT_DOUBLE_EQ(frag.Of(0, 8000, free, 2), 0.5 * 500 + 0.5 * 1500);
  EXPECT_DOUBLE_EQ(frag.Of(0, 500, free, 2), 0.5 * 1500 + 0.5 * 1500);  // CPU short
}

TEST(Fragmentation, SortedFastPathEqualsOfBitForBit) {
  Node a = MakeNode("a", 8, 64000);
  Node b = testing::MakeNode("b", 4, 32000, 128LL << 30, "G3");
  auto cluster = Cluster::Create({a, b});
  ASSERT_OK(cluster);
  WorkloadProfile profile;  // shapes across the categories of F: CPU-only, fractional, multi-GPU
  profile.items.push_back({4000, 0, 0, {}, 0.2});
  profile.items.push_back({8000, 250, 1, {}, 0.1});
  profile.items.push_back({2000, 500, 1, {"G3"}, 0.15});
  profile.items.push_back({16000, 1000, 2, {}, 0.25});
  profile.items.push_back({30000, 1000, 4, {"G2"}, 0.1});
  profile.items.push_back({1000, 500, 1, {}, 0.2});
  const Fragmentation frag(*cluster, profile);
  std::uint64_t x = 12345;
  auto next = [&x](std::uint64_t mod) {  // splitmix64
    x += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (z ^ (z >> 31)) % mod;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t node = static_cast<std::size_t>(trial % 2);
    const std::size_t gpus = node == 0 ? 8 : 4;
    std::int32_t free[8];
    for (std::size_t g = 0; g < gpus; ++g) {
      free[g] = static_cast<std::int32_t>(next(5) == 0 ? 1000 : next(1001));
    }
    std::int32_t sorted[8];
    std::copy(free, free + gpus, sorted);
    std::sort(sorted, sorted + gpus);
    const auto cpu = static_cast<std::int64_t>(next(40000));
    EXPECT_EQ(frag.Of(node, cpu, free, gpus), frag.OfSorted(node, cpu, sorted, gpus))
        << "trial " << trial;
  }
}

TEST(PolicyKind, ParsesOurAndThePublishedNames) {
  EXPECT_EQ(*ParsePolicyKind("fgd"), PolicyKind::kFgd);
  EXPECT_EQ(*ParsePolicyKind("06-FGD"), PolicyKind::kFgd);
  EXPECT_EQ(*ParsePolicyKind("DotProd"), PolicyKind::kDotProduct);
  EXPECT_EQ(*ParsePolicyKind("best-fit"), PolicyKind::kBestFit);
  EXPECT_EQ(*ParsePolicyKind("GpuPacking"), PolicyKind::kGpuPacking);
  EXPECT_FALSE(ParsePolicyKind("worst-fit").ok());
}

}  // namespace
}  // namespace tessera::placement
