#include "agent/inventory.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/names.h"

#include "agent/agent_testing.h"
#include "contract/inventory.h"
#include "testutil/status_matchers.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

json NodeWith(const std::string& annotation, const std::string& name = "gpu-node-1") {
  return json{{"metadata",
               {{"name", name},
                {"annotations", {{std::string(names::kAnnotationInventory), annotation}}}}}};
}

std::vector<GpuFacts> ThreeGpus() {
  std::vector<GpuFacts> gpus = {MakeGpu(0), MakeGpu(1), MakeGpu(2)};
  gpus[2].mig_enabled = true;
  gpus[2].mig_instances = {{"MIG-a", "1g.10gb", 10ULL << 30, 16},
                           {"MIG-b", "2g.20gb", 20ULL << 30, 32}};
  return gpus;
}

TEST(Inventory, RoundTripsThroughTheSchedulersParser) {
  const std::vector<GpuFacts> gpus = ThreeGpus();
  InventoryTracker tracker;
  tracker.Update(BuildContent("gpu-node-1", "0.1.0", gpus, {gpus[0].uuid, gpus[2].uuid},
                              {{gpus[2].uuid, "XID 79"}}),
                 system_clock::from_time_t(1'800'000'000));
  const std::string text = ToJson(tracker.current());

  StatusOr<placement::Node> node = contract::ParseNodeInventory(NodeWith(text));
  ASSERT_OK(node);
  ASSERT_EQ(node->gpus.size(), 2u);  // GPU 1 is managed: false
  EXPECT_EQ(node->gpus[0].uuid, gpus[0].uuid);
  EXPECT_EQ(node->gpus[0].model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(node->gpus[0].memory_bytes, 80ULL << 30);
  EXPECT_EQ(node->gpus[0].sm_count, 132u);
  EXPECT_EQ(node->gpus[0].numa_node, 0);
  EXPECT_TRUE(node->gpus[0].healthy);
  EXPECT_EQ(node->gpus[1].uuid, gpus[2].uuid);
  EXPECT_FALSE(node->gpus[1].healthy);
  EXPECT_TRUE(node->gpus[1].mig_enabled);

  // The contract's fields, exactly (docs/design/0002 §5).
  const json j = json::parse(text);
  EXPECT_EQ(j["apiVersion"], "tessera.dev/inventory/v1");
  EXPECT_EQ(j["node"], "gpu-node-1");
  EXPECT_EQ(j["agentVersion"], "0.1.0");
  EXPECT_EQ(j["generation"], 1);
  EXPECT_EQ(j["updatedAt"], "2027-01-15T08:00:00Z");
  ASSERT_EQ(j["gpus"].size(), 3u);
  const json& g1 = j["gpus"][1];
  EXPECT_EQ(g1["index"], 1);
  EXPECT_EQ(g1["managed"], false);
  EXPECT_EQ(g1["health"], "healthy");
  EXPECT_EQ(g1["healthReason"], "");
  EXPECT_EQ(g1["mig"], json::parse(R"({"mode":"disabled","instances":[]})"));
  const json& g2 = j["gpus"][2];
  EXPECT_EQ(g2["health"], "unhealthy");
  EXPECT_EQ(g2["healthReason"], "XID 79");
  EXPECT_EQ(g2["mig"]["mode"], "enabled");
  EXPECT_EQ(g2["mig"]["instances"][1],
            json::parse(
                R"({"uuid":"MIG-b","profile":"2g.20gb","memoryBytes":21474836480,"smCount":32})"));
  std::vector<std::string> keys;
  for (const auto& [key, value] : g2.items()) keys.push_back(key);
  EXPECT_EQ(keys.size(), 10u);  // exactly the contract's fields
}

TEST(Inventory, EscapesStringsAndKeepsUnknownNumaAsMinusOne) {
  GpuFacts odd = MakeGpu(0);
  odd.model = "Quote\" back\\slash \x01";
  odd.numa_node = -1;
  odd.sm_count = 0;
  InventoryTracker tracker;
  tracker.Update(BuildContent("n", "v", {odd}, {odd.uuid}, {}), system_clock::now());
  const json j = json::parse(ToJson(tracker.current()));
  EXPECT_EQ(j["gpus"][0]["model"], odd.model);
  EXPECT_EQ(j["gpus"][0]["numaNode"], -1);
  EXPECT_EQ(j["gpus"][0]["smCount"], 0);
  ASSERT_OK(contract::ParseNodeInventory(NodeWith(ToJson(tracker.current()), "n")));
}

TEST(InventoryTracker, GenerationMovesOnlyWithTheContent) {
  const std::vector<GpuFacts> gpus = {MakeGpu(0), MakeGpu(1)};
  const std::set<std::string> all = {gpus[0].uuid, gpus[1].uuid};
  const auto t0 = system_clock::from_time_t(1'800'000'000);
  InventoryTracker tracker;
  EXPECT_TRUE(tracker.Update(BuildContent("n", "v", gpus, all, {}), t0));
  EXPECT_EQ(tracker.current().generation, 1);
  // Same content later: nothing moves, not even updatedAt.
  EXPECT_FALSE(tracker.Update(BuildContent("n", "v", gpus, all, {}), t0 + std::chrono::hours(1)));
  EXPECT_EQ(tracker.current().generation, 1);
  EXPECT_EQ(tracker.current().updated_at, t0);
  // Health changes the content.
  EXPECT_TRUE(tracker.Update(BuildContent("n", "v", gpus, all, {{gpus[1].uuid, "XID 48"}}),
                             t0 + std::chrono::hours(2)));
  EXPECT_EQ(tracker.current().generation, 2);
  EXPECT_EQ(tracker.current().updated_at, t0 + std::chrono::hours(2));
  // So does ownership.
  EXPECT_TRUE(
      tracker.Update(BuildContent("n", "v", gpus, {gpus[0].uuid}, {{gpus[1].uuid, "XID 48"}}), t0));
  EXPECT_EQ(tracker.current().generation, 3);
}

TEST(InventoryTracker, ContinuesAfterTheGenerationOnTheNode) {
  InventoryTracker tracker;
  tracker.ContinueAfter(41);
  tracker.Update(BuildContent("n", "v", {MakeGpu(0)}, {}, {}), system_clock::now());
  EXPECT_EQ(tracker.current().generation, 42);
}

TEST(Inventory, SumsManagedHealthyGpusOnly) {
  std::vector<GpuFacts> gpus = {MakeGpu(0, 80ULL << 30), MakeGpu(1, 40ULL << 30),
                                MakeGpu(2, 16ULL << 30)};
  const InventoryContent content = BuildContent("n", "v", gpus, {gpus[0].uuid, gpus[1].uuid},
                                                {{gpus[1].uuid, "ECC double-bit"}});
  const NodeResources sums = SumResources(content);
  EXPECT_EQ(sums, (NodeResources{1, 80ULL << 30, 100, 32}));
  const auto quantities = ResourceQuantities(sums);
  ASSERT_EQ(quantities.size(), 4u);
  EXPECT_EQ(quantities[0], std::make_pair(std::string("tessera.dev/gpu"), std::string("1")));
  EXPECT_EQ(quantities[1],
            std::make_pair(std::string("tessera.dev/gpu-memory"), std::to_string(80ULL << 30)));
  EXPECT_EQ(quantities[2],
            std::make_pair(std::string("tessera.dev/gpu-cores"), std::string("100")));
  EXPECT_EQ(quantities[3], std::make_pair(std::string("tessera.dev/gpu-slot"), std::string("32")));
}

TEST(ManagedSpec, ParsesAllUuidsAndIndices) {
  StatusOr<ManagedSpec> all = ParseManagedSpec(" all ");
  ASSERT_OK(all);
  EXPECT_TRUE(all->all);
  StatusOr<ManagedSpec> list = ParseManagedSpec("GPU-00000001, 2");
  ASSERT_OK(list);
  EXPECT_FALSE(list->all);
  EXPECT_EQ(list->uuids, std::vector<std::string>{"GPU-00000001"});
  EXPECT_EQ(list->indices, std::vector<int>{2});
}

TEST(ManagedSpec, RejectsBadItemsNamingTheFlag) {
  for (const char* bad : {"", "all,0", "0,,1", "0,", "gpu0", "-1", "1.5", "0,0", "99999"}) {
    StatusOr<ManagedSpec> spec = ParseManagedSpec(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(spec.status().message().rfind("--gpus: ", 0), 0u) << spec.status().message();
  }
}

TEST(ManagedSpec, ResolvesAgainstTheGpusPresent) {
  const std::vector<GpuFacts> gpus = {MakeGpu(0), MakeGpu(1), MakeGpu(2)};
  StatusOr<std::set<std::string>> some = ResolveManaged(*ParseManagedSpec("2,GPU-00000000"), gpus);
  ASSERT_OK(some);
  EXPECT_EQ(*some, (std::set<std::string>{"GPU-00000000", "GPU-00000002"}));
  EXPECT_EQ(ResolveManaged(*ParseManagedSpec("all"), gpus)->size(), 3u);

  StatusOr<std::set<std::string>> missing = ResolveManaged(*ParseManagedSpec("3"), gpus);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--gpus: no GPU with index 3 on this node (3 GPUs)");
  EXPECT_FALSE(ResolveManaged(*ParseManagedSpec("GPU-nope"), gpus).ok());
  EXPECT_FALSE(ResolveManaged(*ParseManagedSpec("GPU-00000001,1"), gpus).ok());
}

}  // namespace
}  // namespace tessera::agent
