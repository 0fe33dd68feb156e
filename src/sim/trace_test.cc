#include "sim/trace.h"

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera::sim {
namespace {

constexpr const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,2,T4\nn1,16000,65536,1,P100\n";

TEST(Trace, ParsesNodes) {
  auto nodes = ParseNodeCsv(kNodes, "nodes.csv");
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 2U);
  EXPECT_EQ((*nodes)[0].gpus.size(), 2U);
  EXPECT_EQ((*nodes)[0].memory_bytes, 32768LL << 20);
  EXPECT_EQ((*nodes)[1].gpus[0].model, "P100");
}

TEST(Trace, MalformedRowNamesFileAndLine) {
  auto nodes = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,2,T4\nn1,lots,1,1,T4\n", "nodes.csv");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("nodes.csv:3:"), std::string::npos);
  EXPECT_NE(nodes.status().message().find("cpu_milli"), std::string::npos);
  auto pods = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,2,1\n", "pods.csv");
  ASSERT_FALSE(pods.ok());
  EXPECT_NE(pods.status().message().find("pods.csv:2:"), std::string::npos);
}

TEST(Trace, UnknownGpuModelIsAnError) {
  auto nodes = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,2,X9000\n", "n.csv");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("unknown GPU model \"X9000\""), std::string::npos);
}

TEST(Trace, EmptyListsAreErrors) {
  EXPECT_FALSE(ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\n", "n.csv").ok());
  EXPECT_FALSE(ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "p.csv").ok());
  EXPECT_FALSE(ParsePodCsv("", "p.csv").ok());
}

TEST(Trace, ParsesPodsWithAndWithoutGpuSpec) {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
      "p0,4000,1024,1,460,V100M16|V100M32|V100M32,LS\n"
      "p1,4000,0,0,0,,BE\n"
      "p2,4000,0,2,1000,|P100|,LS\n",
      "p.csv");
  ASSERT_OK(pods);
  EXPECT_EQ((*pods)[0].spec_key, "V100M16|V100M32|V100M32");
  EXPECT_EQ((*pods)[0].models.size(), 3U);
  EXPECT_EQ((*pods)[1].num_gpu, 0U);
  EXPECT_EQ((*pods)[2].spec_key, "P100");
  EXPECT_EQ((*pods)[2].total_milli(), 2000);
  auto five = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,2,1,1500\n", "m.csv");
  ASSERT_OK(five);
  EXPECT_EQ((*five)[0].gpu_milli, 1000);  // clamped as the authors' converter does
  EXPECT_TRUE((*five)[0].models.empty());
}

TEST(Trace, DuplicatePodNamesAreErrors) {
  auto pods =
      ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,2,1,5\np0,1,2,1,5\n", "p.csv");
  ASSERT_FALSE(pods.ok());
  EXPECT_NE(pods.status().message().find("p.csv:3:"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
