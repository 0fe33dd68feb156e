#include "agent/node_agent.h"

#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent/agent_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::agent {
namespace {

using std::chrono::milliseconds;

LoopOptions Fast(std::string gpus = "all") {
  LoopOptions o;
  o.node_name = "n1";
  o.agent_version = "test";
  o.managed = *ParseManagedSpec(gpus);
  o.interval = milliseconds(20);
  o.retry_initial = milliseconds(1);
  o.retry_max = milliseconds(4);
  return o;
}

TEST(PrintInventory, WritesTheAnnotationJson) {
  FakeGpuSource source({MakeGpu(0), MakeGpu(1)});
  std::ostringstream out;
  ASSERT_OK(PrintInventory(source, "n1", "test", *ParseManagedSpec("1"), out));
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["generation"], 1);
  EXPECT_EQ(j["gpus"][0]["managed"], false);
  EXPECT_EQ(j["gpus"][1]["managed"], true);
}

TEST(RunAgentLoop, PublishesAndMarksAGpuUnhealthyOnAnEvent) {
  FakeGpuSource source({MakeGpu(0), MakeGpu(1)});
  std::vector<Inventory> published;
  const Status ran = RunAgentLoop(
      Fast(), source,
      [&](const Inventory& inventory) {
        published.push_back(inventory);
        if (published.size() == 1) source.Push({"GPU-00000001", "XID 79"});
        return Status::Ok();
      },
      [&] { return published.size() >= 4; });
  ASSERT_OK(ran);
  EXPECT_EQ(published[0].generation, 1);
  EXPECT_TRUE(published[0].content.gpus[1].healthy);
  // The event publishes at once (no wait for the interval) as generation 2 ...
  EXPECT_EQ(published[1].generation, 2);
  EXPECT_FALSE(published[1].content.gpus[1].healthy);
  EXPECT_EQ(published[1].content.gpus[1].health_reason, "XID 79");
  EXPECT_TRUE(published[1].content.gpus[0].healthy);
  // ... and rediscovery after each interval keeps it (sticky) without a new generation.
  EXPECT_EQ(published[3].generation, 2);
  EXPECT_FALSE(published[3].content.gpus[1].healthy);
  EXPECT_GE(source.discoveries(), 3);
}

// A GPU NVIDIA's device plugin handed out (kubelet's PodResources says so) is not tessera's:
// reported unmanaged, and managed again once released.
TEST(RunAgentLoop, GpusAnotherPluginHandedOutAreNotManaged) {
  FakeGpuSource source({MakeGpu(0), MakeGpu(1)});
  std::set<std::string> taken = {"GPU-00000001"};
  LoopOptions options = Fast();
  options.taken_by_others = [&] { return taken; };
  std::vector<Inventory> published;
  const Status ran = RunAgentLoop(
      options, source,
      [&](const Inventory& inventory) {
        published.push_back(inventory);
        if (published.size() == 1) taken.clear();  // the other plugin's pod ended
        return Status::Ok();
      },
      [&] { return published.size() >= 3; });
  ASSERT_OK(ran);
  EXPECT_TRUE(published[0].content.gpus[0].managed);
  EXPECT_FALSE(published[0].content.gpus[1].managed);
  EXPECT_TRUE(published.back().content.gpus[1].managed);
}

TEST(RunAgentLoop, RetriesAFailedPublish) {
  FakeGpuSource source({MakeGpu(0)});
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  const Status ran = RunAgentLoop(
      Fast(), source,
      [&](const Inventory& inventory) {
        EXPECT_EQ(inventory.generation, 1);
        return ++calls < 3 ? UnavailableError("apiserver down") : Status::Ok();
      },
      [&] { return calls >= 3; });
  ASSERT_OK(ran);
  // Two retries with 1-4 ms backoff: well before the 20 ms interval would have fired twice.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(40));
}

TEST(RunAgentLoop, ContinuesAfterTheNodesGeneration) {
  FakeGpuSource source({MakeGpu(0)});
  LoopOptions o = Fast();
  o.continue_after_generation = 7;
  std::int64_t generation = 0;
  ASSERT_OK(RunAgentLoop(
      o, source,
      [&](const Inventory& i) {
        generation = i.generation;
        return Status::Ok();
      },
      [&] { return generation != 0; }));
  EXPECT_EQ(generation, 8);
}

TEST(RunAgentLoop, UnknownManagedGpuIsAnError) {
  FakeGpuSource source({MakeGpu(0)});
  const Status ran = RunAgentLoop(
      Fast("1"), source, [](const Inventory&) { return Status::Ok(); }, [] { return false; });
  EXPECT_EQ(ran.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::agent
