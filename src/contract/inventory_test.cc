#include "contract/inventory.h"

#include <gtest/gtest.h>

#include "contract/contract_testing.h"
#include "testutil/status_matchers.h"

namespace tessera::contract {
namespace {

using contract::testing::MakeNode;

nlohmann::json WithInventory(nlohmann::json node, const nlohmann::json& inventory) {
  node["metadata"]["annotations"]["tessera.dev/gpu-inventory"] = inventory.dump();
  return node;
}

nlohmann::json InventoryOf(const nlohmann::json& node) {
  return nlohmann::json::parse(
      node["metadata"]["annotations"]["tessera.dev/gpu-inventory"].get<std::string>());
}

TEST(Inventory, ReadsTheContractFormat) {
  auto n = ParseNodeInventory(MakeNode("gpu-node-1", 2, 16ULL << 30));
  ASSERT_OK(n);
  EXPECT_EQ(n->name, "gpu-node-1");
  ASSERT_EQ(n->gpus.size(), 2U);
  EXPECT_EQ(n->gpus[1].memory_bytes, 16ULL << 30);
  EXPECT_EQ(n->gpus[0].model, "NVIDIA H200");
  EXPECT_TRUE(n->gpus[0].healthy);
  EXPECT_FALSE(n->cordoned);
}

TEST(Inventory, HealthCordonsAndUnmanagedGpus) {
  nlohmann::json node = MakeNode("n", 3, 1ULL << 30);
  nlohmann::json inv = InventoryOf(node);
  inv["gpus"][0]["health"] = "unhealthy";
  inv["gpus"][2]["managed"] = false;
  node = WithInventory(node, inv);
  node["metadata"]["annotations"]["tessera.dev/gpu-cordon"] =
      " " + contract::testing::GpuUuid("n", 1) + " ,";
  node["spec"]["unschedulable"] = true;
  auto n = ParseNodeInventory(node);
  ASSERT_OK(n);
  ASSERT_EQ(n->gpus.size(), 2U);  // the unmanaged GPU is not tessera's
  EXPECT_FALSE(n->gpus[0].healthy);
  EXPECT_TRUE(n->gpus[1].cordoned);
  EXPECT_FALSE(n->gpus[0].cordoned);
  EXPECT_TRUE(n->cordoned);
}

TEST(Inventory, MissingIsNotFound) {
  nlohmann::json node = {{"metadata", {{"name", "cpu-only"}}}};
  auto n = ParseNodeInventory(node);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound);
}

TEST(Inventory, BadInventoriesNameTheField) {
  const nlohmann::json good = InventoryOf(MakeNode("n", 1, 1ULL << 30));
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {[](nlohmann::json& i) { i["apiVersion"] = "tessera.dev/inventory/v9"; }, "apiVersion"},
      {[](nlohmann::json& i) { i["node"] = "other"; }, "another node"},
      {[](nlohmann::json& i) { i["gpus"] = 3; }, "gpus: expected an array"},
      {[](nlohmann::json& i) { i["gpus"][0].erase("uuid"); }, "gpus[0].uuid"},
      {[](nlohmann::json& i) { i["gpus"][0]["memoryBytes"] = -1; }, "gpus[0].memoryBytes"},
      {[](nlohmann::json& i) { i["gpus"][0]["memoryBytes"] = "16Gi"; }, "gpus[0].memoryBytes"},
      {[](nlohmann::json& i) { i["gpus"][0]["health"] = "fine"; }, "gpus[0].health"},
      {[](nlohmann::json& i) { i["gpus"].push_back(i["gpus"][0]); }, "listed twice"},
  };
  for (const Case& c : cases) {
    nlohmann::json inv = good;
    c.edit(inv);
    auto n = ParseNodeInventory(WithInventory(MakeNode("n", 1, 1ULL << 30), inv));
    ASSERT_FALSE(n.ok()) << c.message;
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(n.status().message().find(c.message), std::string::npos) << n.status().message();
  }
  nlohmann::json node = MakeNode("n", 1, 1ULL << 30);
  node["metadata"]["annotations"]["tessera.dev/gpu-inventory"] = "{not json";
  EXPECT_FALSE(ParseNodeInventory(node).ok());
}

TEST(Inventory, SameHardwareIgnoresHealthOnly) {
  auto a = ParseNodeInventory(MakeNode("n", 2, 1ULL << 30));
  nlohmann::json node = MakeNode("n", 2, 1ULL << 30);
  nlohmann::json inv = InventoryOf(node);
  inv["gpus"][1]["health"] = "unhealthy";
  auto b = ParseNodeInventory(WithInventory(node, inv));
  auto c = ParseNodeInventory(MakeNode("n", 2, 2ULL << 30));
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  EXPECT_TRUE(SameHardware(*a, *b));
  EXPECT_FALSE(SameHardware(*a, *c));
}

}  // namespace
}  // namespace tessera::contract
