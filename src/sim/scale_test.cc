#include "sim/scale.h"

#include <set>

#include <gtest/gtest.h>

#include "sim/replay.h"
#include "sim/workload.h"
#include "testutil/status_matchers.h"

namespace tessera::sim {
namespace {

constexpr const char* kData = TESSERA_TRACE_DATA;

std::vector<placement::Node> SmallNodes() {
  auto nodes =
      ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,2,T4\nn1,16000,32768,1,P100\n",
                   "nodes.csv");
  EXPECT_OK(nodes);
  return *nodes;
}

std::vector<TracePod> SmallPods() {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
      "a,1000,100,1,500,\nb,1000,100,1,1000,P100\n\nc,1000,100,0,0,\n",
      "pods.csv");
  EXPECT_OK(pods);
  return *pods;
}

TEST(Scale, ParsesOnlyAnIntegerInRange) {
  ASSERT_OK(ParseScale("10"));
  EXPECT_EQ(*ParseScale("10"), 10);
  EXPECT_EQ(*ParseScale("1"), 1);
  EXPECT_EQ(*ParseScale("100"), 100);
  for (const char* bad : {"0", "101", "-2", "x", "", "1.5", "10 ", "99999999999"}) {
    const auto k = ParseScale(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find("--scale: \"" + std::string(bad) + "\""), std::string::npos)
        << k.status().message();
    EXPECT_NE(k.status().message().find("an integer 1..100"), std::string::npos);
  }
}

TEST(Scale, CopySuffixesSortInCopyOrder) {
  EXPECT_EQ(CopySuffix(0, 3), "");
  EXPECT_EQ(CopySuffix(2, 3), "-c2");
  EXPECT_EQ(CopySuffix(1, 12), "-c01");
  EXPECT_EQ(CopySuffix(11, 12), "-c11");
  EXPECT_EQ(CopySuffix(7, 100), "-c07");
}

TEST(Scale, NodesAreCopiedWithDistinctNamesAndGpuIds) {
  const std::vector<placement::Node> base = SmallNodes();
  auto one = ScaleNodes(base, 1);
  ASSERT_OK(one);
  ASSERT_EQ(one->size(), 2U);
  EXPECT_EQ((*one)[1].name, "n1");

  auto nodes = ScaleNodes(base, 3);
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 6U);
  std::set<std::string> names, uuids;
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const placement::Node& n = (*nodes)[i];
    const placement::Node& original = base[i % base.size()];
    names.insert(n.name);
    EXPECT_EQ(n.cpu_milli, original.cpu_milli);
    EXPECT_EQ(n.memory_bytes, original.memory_bytes);
    ASSERT_EQ(n.gpus.size(), original.gpus.size());
    for (std::size_t g = 0; g < n.gpus.size(); ++g) {
      EXPECT_EQ(n.gpus[g].model, original.gpus[g].model);
      EXPECT_EQ(n.gpus[g].memory_bytes, original.gpus[g].memory_bytes);
      uuids.insert(n.gpus[g].uuid);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"n0", "n1", "n0-c1", "n1-c1", "n0-c2", "n1-c2"}));
  EXPECT_EQ(uuids.size(), 9U);
  EXPECT_TRUE(uuids.contains("n0-c2-gpu1"));
  // Deterministic: the same call, the same list.
  auto again = ScaleNodes(base, 3);
  ASSERT_OK(again);
  for (std::size_t i = 0; i < nodes->size(); ++i) EXPECT_EQ((*again)[i].name, (*nodes)[i].name);
  EXPECT_OK(placement::Cluster::Create(*std::move(nodes)));
}

TEST(Scale, PodsAreCopiedInProportionKeepingTheirLines) {
  const std::vector<TracePod> base = SmallPods();
  auto pods = ScalePods(base, 4);
  ASSERT_OK(pods);
  ASSERT_EQ(pods->size(), 12U);
  std::set<std::string> names;
  for (std::size_t i = 0; i < pods->size(); ++i) {
    const TracePod& p = (*pods)[i];
    const TracePod& original = base[i % base.size()];
    names.insert(p.name);
    EXPECT_EQ(p.line, original.line);
    EXPECT_EQ(p.cpu_milli, original.cpu_milli);
    EXPECT_EQ(p.gpu_milli, original.gpu_milli);
    EXPECT_EQ(p.models, original.models);
    EXPECT_EQ(p.name.substr(0, original.name.size()), original.name);
  }
  EXPECT_EQ(names.size(), 12U);
  EXPECT_EQ(base[2].line, 5U);  // the blank line counts
}

TEST(Scale, RefusesOutOfRangeAndNamesTheListAlreadyHas) {
  EXPECT_FALSE(ScaleNodes(SmallNodes(), 0).ok());
  EXPECT_FALSE(ScalePods(SmallPods(), kMaxScale + 1).ok());
  std::vector<placement::Node> nodes = SmallNodes();
  nodes[1].name = "n0-c1";
  const auto clash = ScaleNodes(nodes, 2);
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("node \"n0-c1\" (copy 1) is already"), std::string::npos)
      << clash.status().message();
  std::vector<TracePod> pods = SmallPods();
  pods[0].name = "b-c1";
  EXPECT_FALSE(ScalePods(pods, 2).ok());
}

// The scaled default trace is the same experiment k times larger: the same typical pods (FGD's
// target), k times the pods and, after tuning to 130 %, about k times the arrivals.
TEST(Scale, TheScaledTraceKeepsTheMixAndTheTuning) {
  auto nodes = LoadNodeCsv(std::string(kData) + "/openb_node_list_gpu_node.csv");
  auto pods = LoadPodCsv(std::string(kData) + "/openb_pod_list_default.csv");
  ASSERT_OK(nodes);
  ASSERT_OK(pods);
  constexpr int kK = 3;
  auto big_nodes = ScaleNodes(*nodes, kK);
  auto big_pods = ScalePods(*pods, kK);
  ASSERT_OK(big_nodes);
  ASSERT_OK(big_pods);
  EXPECT_EQ(big_nodes->size(), kK * nodes->size());
  EXPECT_EQ(big_pods->size(), kK * pods->size());
  const placement::WorkloadProfile small = TypicalPods(*pods);
  const placement::WorkloadProfile big = TypicalPods(*big_pods);
  ASSERT_EQ(small.items.size(), big.items.size());
  for (std::size_t i = 0; i < small.items.size(); ++i) {
    EXPECT_EQ(small.items[i].cpu_milli, big.items[i].cpu_milli);
    EXPECT_EQ(small.items[i].gpu_milli, big.items[i].gpu_milli);
    EXPECT_EQ(small.items[i].gpu_count, big.items[i].gpu_count);
    EXPECT_NEAR(small.items[i].weight, big.items[i].weight, 1e-12);
  }
  auto input = MakeSimInput(*big_nodes, *big_pods, "default-x3");
  ASSERT_OK(input);
  auto rand = MakeRand(RngKind::kStd, 42);
  ASSERT_OK(rand);
  const Workload w = GenerateWorkload(input->pods, input->cluster.size(),
                                      input->cluster.total_gpu_milli(), **rand);
  EXPECT_EQ(w.ranks.size(), big_nodes->size());
  const double target = 1.3 * static_cast<double>(input->cluster.total_gpu_milli());
  EXPECT_LE(static_cast<double>(w.requested_milli), target);
  EXPECT_GT(static_cast<double>(w.requested_milli), 0.999 * target);
  EXPECT_GT(w.arrival.size(), 3 * 10'000U);
}

// Bad input holds at scale: the replay never crashes and a pod no node can take is a failure
// in every copy.
TEST(Scale, PodsNoNodeCanTakeFailInEveryCopy) {
  auto nodes = ScaleNodes(SmallNodes(), 5);
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
      "a,1000,100,1,500,\nhuge,1000,100,4,1000,\nnomodel,1000,100,1,200,A100\n"
      "cpu,99000,100,0,0,\n",
      "pods.csv");
  ASSERT_OK(nodes);
  ASSERT_OK(pods);
  const std::vector<std::string> why = UnplaceablePods(*pods, *nodes, "pods.csv");
  ASSERT_EQ(why.size(), 3U);
  EXPECT_EQ(why[0], "pods.csv:3: pod \"huge\": num_gpu: 4 is more than any node has (2)");
  EXPECT_EQ(why[1],
            "pods.csv:4: pod \"nomodel\": gpu_spec: \"A100\" names no GPU model of the "
            "node list");
  EXPECT_EQ(why[2], "pods.csv:5: pod \"cpu\": cpu_milli: 99000 is more than any node has (16000)");
  EXPECT_EQ(UnplaceablePods(*pods, *nodes, "pods.csv", 1).back(), "2 more such pods in pods.csv");
  auto big = ScalePods(*pods, 5);
  ASSERT_OK(big);
  auto input = MakeSimInput(*nodes, *big, "bad");
  ASSERT_OK(input);
  for (const auto kind : {placement::PolicyKind::kFgd, placement::PolicyKind::kTessera,
                          placement::PolicyKind::kBestFit, placement::PolicyKind::kRandom}) {
    RunOptions options;
    options.rng = RngKind::kStd;
    options.workload.tune = 2.0;  // tuned up: every pod of every copy arrives (and clones)
    auto run = RunExperiment(*input, kind, 42, options);
    ASSERT_OK(run);
    EXPECT_GE(run->failed_pods, 15U) << placement::Name(kind);
  }
}

}  // namespace
}  // namespace tessera::sim
