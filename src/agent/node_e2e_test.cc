// tessera-node against the real control plane (etcd + kube-apiserver from test/e2e/harness),
// with the fake NVML: a Node object gets the inventory annotation, the gpu-node label and the
// node-level sums; an XID injected into the running agent makes that GPU unhealthy on the Node.
// Needs TESSERA_TESTCLUSTER (fails without it).
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/inventory.h"
#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"

namespace tessera::agent {
namespace {

using k8s::Json;
using std::chrono::seconds;

constexpr std::uint64_t kGpuMemory = 16ULL << 30;

std::string Allocatable(const Json& node, const std::string& name) {
  const Json& a = node["status"]["allocatable"];
  return a.contains(name) ? a[name].get<std::string>() : std::string();
}
std::uint64_t Quantity(const std::string& text) {
  StatusOr<std::uint64_t> q = ParseQuantity(text);
  return q.ok() ? *q : ~0ULL;
}

// Polls the Node until `done` holds (or 60 s pass); returns the last Node read.
Json WaitForNode(k8s::Client& client, const std::string& name,
                 const std::function<bool(const Json&)>& done) {
  Json node;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    StatusOr<Json> got = client.Get(k8s::NodePath(name));
    if (got.ok()) {
      node = *got;
      if (done(node)) return node;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return node;
}

TEST(NodeE2e, PublishesInventoryAndHealthToTheNode) {
  StatusOr<std::unique_ptr<e2e::TestCluster>> cluster = e2e::TestCluster::Start();
  ASSERT_OK(cluster);
  StatusOr<k8s::Config> config = k8s::LoadKubeconfig((*cluster)->kubeconfig());
  ASSERT_OK(config);
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  ASSERT_OK(client);
  k8s::Client& api = **client;

  // A Node as a kubelet would have registered it, with an annotation and a resource of its own
  // that tessera-node must leave alone.
  const std::string name = "gpu-node-e2e";
  ASSERT_OK(
      api.Create(k8s::NodesPath(),
                 Json{{"metadata", {{"name", name}, {"annotations", {{"keep.me/a", "1"}}}}}}));
  ASSERT_OK(api.Patch(k8s::NodeStatusPath(name),
                      Json{{"status",
                            {{"capacity", {{"example.com/dongle", "3"}}},
                             {"allocatable", {{"example.com/dongle", "3"}}}}}},
                      k8s::PatchType::kMerge));

  const std::string xid_file = (*cluster)->dir() + "/xid";
  e2e::ChildOptions options;
  options.argv = {TESSERA_NODE_BINARY, "--node-name", name, "--kubeconfig",
                  (*cluster)->kubeconfig(), "--interval-s", "1", "--gpus", "0,1,2", "--log-level",
                  "debug",
                  // No kubelet here: a device-plugin folder that does not exist, whatever the
                  // host has at kubelet's fixed path (a real node on the same machine makes it).
                  "--device-plugin-dir", (*cluster)->dir() + "/no-kubelet/device-plugins",
                  "--state-dir", (*cluster)->dir() + "/state"};
  options.log_path = (*cluster)->dir() + "/tessera-node.log";
  options.env = {{"LD_LIBRARY_PATH", TESSERA_FAKE_NVML_DIR},
                 {"TESSERA_FAKE_GPUS", "4"},
                 {"TESSERA_FAKE_GPU_MEMORY", std::to_string(kGpuMemory)},
                 {"TESSERA_FAKE_SM_COUNT", "108"},
                 {"TESSERA_FAKE_XID_FILE", xid_file}};
  StatusOr<std::unique_ptr<e2e::ChildProcess>> agent = e2e::ChildProcess::Spawn(options);
  ASSERT_OK(agent);

  const std::string key(names::kAnnotationInventory);
  Json node = WaitForNode(api, name, [&](const Json& n) {
    return n["metadata"]["annotations"].contains(key) && !Allocatable(n, "tessera.dev/gpu").empty();
  });
  ASSERT_TRUE(node["metadata"]["annotations"].contains(key)) << (*agent)->LogTail();
  StatusOr<placement::Node> parsed = contract::ParseNodeInventory(node);
  ASSERT_OK(parsed);
  ASSERT_EQ(parsed->gpus.size(), 3u);  // GPU 3 is not managed
  for (const placement::Gpu& gpu : parsed->gpus) {
    EXPECT_TRUE(gpu.healthy);
    EXPECT_EQ(gpu.memory_bytes, kGpuMemory);
    EXPECT_EQ(gpu.sm_count, 108u);
  }
  EXPECT_EQ(node["metadata"]["labels"][std::string(names::kLabelGpuNode)], "true");
  EXPECT_EQ(node["metadata"]["labels"][std::string(names::kLabelAllocationPath)], "device-plugin");
  EXPECT_EQ(node["metadata"]["annotations"]["keep.me/a"], "1");
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu")), 3u);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-memory")), 3 * kGpuMemory);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-cores")), 300u);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-slot")), 96u);
  EXPECT_EQ(Quantity(node["status"]["capacity"]["tessera.dev/gpu"].get<std::string>()), 3u);
  EXPECT_EQ(Allocatable(node, "example.com/dongle"), "3");
  const Json first = Json::parse(node["metadata"]["annotations"][key].get<std::string>());

  // Several intervals with nothing new: the same generation, no rewrite of the annotation.
  std::this_thread::sleep_for(seconds(3));
  StatusOr<Json> later = api.Get(k8s::NodePath(name));
  ASSERT_OK(later);
  EXPECT_EQ((*later)["metadata"]["annotations"][key], node["metadata"]["annotations"][key]);

  // An application XID on GPU 0 changes nothing; XID 79 on GPU 1 makes it unhealthy.
  {
    std::ofstream(xid_file + ".tmp") << "0:13,1:79\n";
    ASSERT_EQ(std::rename((xid_file + ".tmp").c_str(), xid_file.c_str()), 0);
  }
  node = WaitForNode(
      api, name, [&](const Json& n) { return Quantity(Allocatable(n, "tessera.dev/gpu")) == 2; });
  parsed = contract::ParseNodeInventory(node);
  ASSERT_OK(parsed);
  ASSERT_EQ(parsed->gpus.size(), 3u);
  EXPECT_TRUE(parsed->gpus[0].healthy);
  EXPECT_FALSE(parsed->gpus[1].healthy) << (*agent)->LogTail();
  EXPECT_TRUE(parsed->gpus[2].healthy);
  const Json second = Json::parse(node["metadata"]["annotations"][key].get<std::string>());
  EXPECT_EQ(second["gpus"][1]["healthReason"], "XID 79");
  EXPECT_EQ(second["generation"].get<int>(), first["generation"].get<int>() + 1);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-memory")), 2 * kGpuMemory);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-cores")), 200u);
  EXPECT_EQ(Quantity(Allocatable(node, "tessera.dev/gpu-slot")), 64u);
  EXPECT_EQ(Allocatable(node, "example.com/dongle"), "3");

  // SIGTERM: a clean exit.
  const int status = (*agent)->Stop(seconds(10));
  EXPECT_EQ(e2e::DescribeWaitStatus(status), "exit code 0") << (*agent)->LogTail();
}

}  // namespace
}  // namespace tessera::agent
