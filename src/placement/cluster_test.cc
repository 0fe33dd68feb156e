#include "placement/cluster.h"

#include <random>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera::placement {
namespace {

Node MakeNode(const std::string& name, int gpus, const std::string& model = "T4",
              std::int64_t cpu = 32000) {
  Node n;
  n.name = name;
  n.cpu_milli = cpu;
  n.memory_bytes = 64LL << 30;
  for (int g = 0; g < gpus; ++g) {
    Gpu gpu;
    gpu.uuid = name + "-" + std::to_string(g);
    gpu.model = model;
    gpu.memory_bytes = 16ULL << 30;
    n.gpus.push_back(gpu);
  }
  return n;
}

Request Fraction(std::int32_t milli, const std::string& ns = "a") {
  Request r;
  r.name = "p";
  r.cpu_milli = 1000;
  r.memory_bytes = 1LL << 30;
  r.gpu_count = 1;
  r.gpu_milli = milli;
  r.namespace_name = ns;
  return r;
}

// Everything the ledger holds, except the version counter.
std::string Snapshot(const Cluster& c) {
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const NodeState& n = c.state(i);
    s += std::to_string(n.cpu_free) + "/" + std::to_string(n.memory_free) + "/" +
         std::to_string(n.pods) + "/" + std::to_string(n.gpu_milli_free) + "[";
    for (const auto& [shape, count] : n.gpu_pod_shapes) {
      s += std::to_string(shape) + "x" + std::to_string(count) + ",";
    }
    for (const GpuState& g : n.gpus) {
      s += std::to_string(g.milli_free) + ":" + std::to_string(g.memory_free) + ":" +
           std::to_string(g.mig_used) + ":" + std::to_string(g.tenants.size()) + ":" +
           (g.open() ? "o" : "r") + ";";
    }
    s += "]";
  }
  return s;
}

TEST(Cluster, RejectsDuplicateNamesAndBadPeers) {
  EXPECT_FALSE(Cluster::Create({MakeNode("a", 1), MakeNode("a", 1)}).ok());
  Node n = MakeNode("a", 2);
  n.gpus[0].nvlink_peers = {5};
  EXPECT_FALSE(Cluster::Create({n}).ok());
  n.gpus[0].nvlink_peers = {1};
  EXPECT_OK(Cluster::Create({n}));
}

TEST(Cluster, AddAndRemoveAreExactInverses) {
  // Property test: random requests added and removed in random order always restore the
  // exact prior ledger, and the ledger never goes negative.
  std::mt19937 gen(1234);
  auto cluster = Cluster::Create({MakeNode("n0", 8), MakeNode("n1", 2, "P100"), MakeNode("n2", 4)});
  ASSERT_OK(cluster);
  const std::string empty = Snapshot(*cluster);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::pair<Request, Allocation>> placed;
    std::vector<std::string> snapshots;
    for (int i = 0; i < 40; ++i) {
      Request q;
      q.name = "p" + std::to_string(i);
      q.cpu_milli = std::uniform_int_distribution<std::int64_t>(0, 4000)(gen);
      q.memory_bytes = std::uniform_int_distribution<std::int64_t>(0, 4)(gen) << 30;
      const int kind = std::uniform_int_distribution<int>(0, 2)(gen);
      q.gpu_count = kind == 0 ? 0U : (kind == 1 ? 1U : 2U);
      q.gpu_milli =
          kind == 0 ? 0 : (kind == 1 ? std::uniform_int_distribution<int>(1, 1000)(gen) : 1000);
      q.namespace_name = std::uniform_int_distribution<int>(0, 1)(gen) == 0 ? "x" : "y";
      q.co_tenancy = std::uniform_int_distribution<int>(0, 1)(gen) == 0
                         ? policy::CoTenancy::kAny
                         : policy::CoTenancy::kSameNamespace;
      const ResolvedRequest r = cluster->Resolve(q);
      const std::size_t node = std::uniform_int_distribution<std::size_t>(0, 2)(gen);
      GpuMask usable = 0;
      if (!cluster->Feasible(node, r, &usable)) continue;
      Allocation a;
      a.node = static_cast<std::uint32_t>(node);
      for (std::uint32_t g = 0; g < 64 && a.gpus.size() < q.gpu_count; ++g) {
        if ((usable >> g) & 1ULL) a.gpus.push_back(cluster->ShareOn(node, g, r));
      }
      snapshots.push_back(Snapshot(*cluster));
      ASSERT_OK(cluster->Add(r, a));
      placed.emplace_back(std::move(q), std::move(a));
    }
    // Remove in reverse: each step restores the snapshot taken before the matching Add.
    while (!placed.empty()) {
      auto& [q, a] = placed.back();
      ASSERT_OK(cluster->Remove(cluster->Resolve(q), a));
      EXPECT_EQ(Snapshot(*cluster), snapshots.back());
      placed.pop_back();
      snapshots.pop_back();
    }
    EXPECT_EQ(Snapshot(*cluster), empty);
  }
}

TEST(Cluster, UsableGpusAgreesWithWhatAddAccepts) {
  // Property test of UsableGpus' fast path: for random one-GPU requests (milli, explicit memory,
  // memory ppm, model sets, co-tenancy, MPS) on nodes of uniform and mixed GPU sizes and models,
  // some GPUs unhealthy or cordoned or in MIG mode, a GPU is usable iff Add accepts a share on
  // it; a cordoned node has none.
  std::mt19937 gen(99);
  Node mixed = MakeNode("mixed", 4, "T4");
  mixed.gpus[1].memory_bytes = 32ULL << 30;
  mixed.gpus[2].model = "V100";
  Node sick = MakeNode("sick", 4, "V100");
  sick.gpus[0].healthy = false;
  Node mig = MakeNode("mig", 3, "A100");
  mig.gpus[1].mig_enabled = true;
  mig.gpus[1].mig_instances = {"3g.40gb", "1g.10gb"};
  auto cluster = Cluster::Create({MakeNode("uniform", 8, "T4"), mixed, sick,
                                  MakeNode("p100", 2, "P100"), mig, MakeNode("cordoned", 2, "T4")});
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->SetGpuCordoned(2, 3, true));
  ASSERT_OK(cluster->SetNodeCordoned(5, true));
  auto pick = [&](int hi) { return std::uniform_int_distribution<int>(0, hi)(gen); };
  int usable_seen = 0, unusable_seen = 0;
  for (int i = 0; i < 3000; ++i) {
    Request q = Fraction(pick(4) == 0 ? 1000 : 50 * (1 + pick(19)), pick(1) == 0 ? "x" : "y");
    q.name = "p" + std::to_string(i);
    q.cpu_milli = 0;
    q.memory_bytes = 0;
    if (pick(3) == 0) q.gpu_memory_bytes = static_cast<std::uint64_t>(1 + pick(20)) << 30;
    if (pick(3) == 0) q.memory_ppm = static_cast<std::uint32_t>(pick(1'000'000));
    if (pick(3) == 0) q.models = {pick(1) == 0 ? "V100" : "T4"};
    if (pick(2) == 0) q.co_tenancy = policy::CoTenancy::kSameNamespace;
    if (pick(5) == 0) {
      q.mode = SharingMode::kMps;
      q.uid = static_cast<std::uint32_t>(pick(1));
    }
    if (pick(9) == 0) q.mig_profile = pick(1) == 0 ? "3g.40gb" : "1g.10gb";
    if (pick(19) == 0) q.gpu_milli = 0;  // memory or a MIG instance alone
    const ResolvedRequest r = cluster->Resolve(q);
    const std::size_t node = static_cast<std::size_t>(pick(5));
    const GpuMask usable = cluster->UsableGpus(node, r);
    if (cluster->node(node).cordoned) {  // the ledger still records there; nothing is usable
      EXPECT_EQ(usable, 0U) << "request " << i;
      continue;
    }
    for (std::size_t g = 0; g < cluster->node(node).gpus.size(); ++g) {
      const Allocation a{static_cast<std::uint32_t>(node), {cluster->ShareOn(node, g, r)}};
      const bool added = cluster->Add(r, a).ok();
      EXPECT_EQ(added, ((usable >> g) & 1ULL) != 0)
          << "request " << i << " node " << node << " GPU " << g;
      (added ? usable_seen : unusable_seen)++;
      // Keep about half of what fits, so that GPUs fill up and gain tenants.
      if (added && pick(1) == 0) {
        ASSERT_OK(cluster->Remove(r, a));
      }
    }
    if (pick(200) == 0) cluster->Reset();
  }
  EXPECT_GT(usable_seen, 100);
  EXPECT_GT(unusable_seen, 100);
}

TEST(Cluster, RemoveRefusesWhatIsNotOnTheLedger) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  const Request q = Fraction(500);
  const ResolvedRequest r = cluster->Resolve(q);
  const Allocation a{0, {cluster->ShareOn(0, 0, r)}};
  EXPECT_FALSE(cluster->Remove(r, a).ok());
  ASSERT_OK(cluster->Add(r, a));
  ASSERT_OK(cluster->Remove(r, a));
  EXPECT_FALSE(cluster->Remove(r, a).ok());
}

TEST(Cluster, AddRefusesAnOverfullGpu) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  const Request q = Fraction(600);
  const ResolvedRequest r = cluster->Resolve(q);
  const Allocation a{0, {cluster->ShareOn(0, 0, r)}};
  ASSERT_OK(cluster->Add(r, a));
  const std::string before = Snapshot(*cluster);
  EXPECT_FALSE(cluster->Add(r, a).ok());
  EXPECT_EQ(Snapshot(*cluster), before);  // nothing half-applied
}

TEST(Cluster, TraceMilliMapsToGpuMemory) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  const Request q = Fraction(250);
  const GpuShare share = cluster->ShareOn(0, 0, cluster->Resolve(q));
  EXPECT_EQ(share.memory_bytes, (16ULL << 30) / 4);
}

TEST(Cluster, MemoryRequestsBindIndependentlyOfMilli) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  Request big = Fraction(100);
  big.gpu_memory_bytes = 12ULL << 30;
  const ResolvedRequest rb = cluster->Resolve(big);
  ASSERT_OK(cluster->Add(rb, {0, {cluster->ShareOn(0, 0, rb)}}));
  Request second = Fraction(100);
  second.gpu_memory_bytes = 8ULL << 30;  // milli fits (800 free), memory does not (4 GiB)
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(second)), 0U);
}

TEST(Cluster, UnhealthyAndCordonedGpusAreNeverUsable) {
  auto cluster = Cluster::Create({MakeNode("n0", 3)});
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->SetGpuHealth(0, 0, false));
  ASSERT_OK(cluster->SetGpuCordoned(0, 1, true));
  const Request q = Fraction(100);
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(q)), 0b100U);
  EXPECT_EQ(cluster->state(0).gpu_milli_free, 1000);
  ASSERT_OK(cluster->SetNodeCordoned(0, true));
  GpuMask usable = 0;
  EXPECT_FALSE(cluster->Feasible(0, cluster->Resolve(q), &usable));
}

TEST(Cluster, ForeignTenantBlocksSameNamespaceTier) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  const Request team = Fraction(300, "team-a");
  const ResolvedRequest rt = cluster->Resolve(team);
  ASSERT_OK(cluster->Add(rt, {0, {cluster->ShareOn(0, 0, rt)}}));
  Request customer = Fraction(300, "customer-b");
  customer.tier = TrustTier::kCustomer;
  customer.co_tenancy = policy::CoTenancy::kSameNamespace;
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(customer)), 0U);
  Request own = customer;
  own.namespace_name = "team-a";  // same namespace: allowed by both rules
  own.tier = TrustTier::kTeam;
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(own)), 1U);
  // And the other way round: a customer pod on the GPU keeps foreign pods out.
  auto c2 = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(c2);
  const ResolvedRequest rc = c2->Resolve(customer);
  ASSERT_OK(c2->Add(rc, {0, {c2->ShareOn(0, 0, rc)}}));
  EXPECT_EQ(c2->UsableGpus(0, c2->Resolve(team)), 0U);
}

TEST(Cluster, ExclusiveAndMpsRules) {
  auto cluster = Cluster::Create({MakeNode("n0", 2)});
  ASSERT_OK(cluster);
  Request excl = Fraction(1000);
  excl.mode = SharingMode::kExclusive;
  const ResolvedRequest re = cluster->Resolve(excl);
  ASSERT_OK(cluster->Add(re, {0, {cluster->ShareOn(0, 0, re)}}));
  Request mps = Fraction(200);
  mps.mode = SharingMode::kMps;
  mps.uid = 1000;
  const ResolvedRequest rm = cluster->Resolve(mps);
  EXPECT_EQ(cluster->UsableGpus(0, rm), 0b10U);
  ASSERT_OK(cluster->Add(rm, {0, {cluster->ShareOn(0, 1, rm)}}));
  Request other_uid = mps;
  other_uid.uid = 2000;
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(other_uid)), 0U);
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(Fraction(200))), 0U);  // shared, uid 0
  EXPECT_EQ(cluster->UsableGpus(0, rm), 0b10U);
}

TEST(Cluster, MigRequestsTakeMatchingInstancesOnly) {
  Node n = MakeNode("n0", 2, "A100");
  n.gpus[1].mig_enabled = true;
  n.gpus[1].mig_instances = {"3g.40gb", "3g.40gb", "1g.10gb"};
  auto cluster = Cluster::Create({n});
  ASSERT_OK(cluster);
  Request mig = Fraction(0);
  mig.mig_profile = "3g.40gb";
  const ResolvedRequest rm = cluster->Resolve(mig);
  EXPECT_EQ(cluster->UsableGpus(0, rm), 0b10U);
  EXPECT_EQ(cluster->UsableGpus(0, cluster->Resolve(Fraction(100))), 0b01U);  // not on MIG GPUs
  for (int i = 0; i < 2; ++i) {
    const Allocation a{0, {cluster->ShareOn(0, 1, rm)}};
    EXPECT_EQ(a.gpus[0].mig_instance, i);
    ASSERT_OK(cluster->Add(rm, a));
  }
  EXPECT_EQ(cluster->UsableGpus(0, rm), 0U);
}

TEST(Cluster, ModelConstraints) {
  auto cluster = Cluster::Create({MakeNode("t4", 1, "T4"), MakeNode("p100", 1, "P100")});
  ASSERT_OK(cluster);
  Request q = Fraction(100);
  q.models = {"P100", "V100M32"};
  const ResolvedRequest r = cluster->Resolve(q);
  GpuMask usable = 0;
  EXPECT_FALSE(cluster->Feasible(0, r, &usable));
  EXPECT_TRUE(cluster->Feasible(1, r, &usable));
}

TEST(Cluster, RecordCountsWhatExistsEvenBeyondCapacityAndRemoveUndoesIt) {
  auto cluster = Cluster::Create({MakeNode("n0", 1)});
  ASSERT_OK(cluster);
  const std::string empty = Snapshot(*cluster);
  Request q;
  q.name = "p";
  q.gpu_count = 1;
  q.gpu_milli = 600;
  q.gpu_memory_bytes = 10ULL << 30;
  const ResolvedRequest r = cluster->Resolve(q);
  Allocation a;
  a.node = 0;
  a.gpus = {GpuShare{0, 600, 10ULL << 30, -1}};
  ASSERT_OK(cluster->Add(r, a));
  const std::string one = Snapshot(*cluster);
  EXPECT_FALSE(cluster->Add(r, a).ok());  // the checked path refuses a second
  ASSERT_OK(cluster->Record(r, a));       // but a pod that is there is counted
  EXPECT_EQ(cluster->state(0).gpus[0].memory_free, 0U);
  EXPECT_EQ(cluster->state(0).gpus[0].memory_over, 4ULL << 30);
  EXPECT_EQ(cluster->state(0).gpus[0].milli_free, 0);
  EXPECT_EQ(cluster->state(0).gpus[0].milli_over, 200);
  ASSERT_OK(cluster->Remove(r, a));
  EXPECT_EQ(Snapshot(*cluster), one);
  ASSERT_OK(cluster->Remove(r, a));
  EXPECT_EQ(Snapshot(*cluster), empty);
  // Record ignores health and cordons too.
  ASSERT_OK(cluster->SetGpuCordoned(0, 0, true));
  EXPECT_FALSE(cluster->Add(r, a).ok());
  ASSERT_OK(cluster->Record(r, a));
  Allocation bad = a;
  bad.gpus[0].gpu = 5;
  EXPECT_FALSE(cluster->Record(r, bad).ok());
}

}  // namespace
}  // namespace tessera::placement
