// tessera as a DRA driver against the real control plane (etcd + kube-apiserver + kube-scheduler
// 1.36 from test/e2e/harness, whose DynamicResources plugin allocates claims): tessera-node with
// `--allocation-path dra` publishes its ResourceSlice (validated by the real API server),
// kube-scheduler's allocator packs claims of memory + cores onto its GPUs with consumable
// capacity and leaves a claim too big for any GPU Pending, and the node's DRA plugin prepares and
// unprepares allocated claims over its gRPC socket.
//
// What is not here yet (docs/design/0022-dra-driver.md): the harness's kubelet (tessera-testcluster
// kubelet) links kubelet's device manager but not its DRA manager, so this test calls the plugin's
// NodePrepareResources / NodeUnprepareResources itself with what kubelet sends (namespace, UID,
// name of each claim); the real kubelet drives it on the real node (realnode-smoke.sh).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sys/stat.h>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/file.h"
#include "tessera/limits.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "agent/dra.h"
#include "agent/slots.h"
#include "dra-health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "e2e/scheduler_harness.h"
#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/object.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"

namespace tessera::agent::dra {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace api = ::k8s::io::kubelet::pkg::apis::dra::v1;

constexpr char kNode[] = "dra-node-1";
constexpr char kNs[] = "dra";
constexpr std::uint64_t kGiB = 1ULL << 30;
// An H100's memory: not a whole number of the request policy's 256Mi steps (ADR 0022).
constexpr std::uint64_t kGpuMemory = 81559ULL << 20;

struct Env {
  std::unique_ptr<e2e::TempFolder> folder;
  std::unique_ptr<e2e::TestCluster> cluster;
  std::unique_ptr<e2e::ChildProcess> kubelet;
  std::unique_ptr<e2e::ChildProcess> agent;
  std::unique_ptr<k8s::Client> client;
  int agent_starts = 0;
  std::string dir(const std::string& sub) const { return folder->path() + "/" + sub; }
};
Env* env = nullptr;

k8s::Client& Api() { return *env->client; }

template <typename F>
bool Eventually(F done, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(200ms);
  }
  return true;
}

Status StartAgent() {
  e2e::ChildOptions o;
  o.argv = {TESSERA_NODE_BINARY,
            "--node-name",
            kNode,
            "--kubeconfig",
            env->cluster->kubeconfig(),
            "--interval-s",
            "1",
            "--cleanup-interval-s",
            "1",
            "--allocation-path",
            "dra",
            "--dra-plugin-dir",
            env->dir("dra"),
            "--plugins-registry-dir",
            env->dir("registry"),
            "--pod-resources-socket",
            env->dir("pod-resources.sock"),
            "--state-dir",
            env->dir("state"),
            "--cdi-dir",
            env->dir("cdi"),
            "--hook-library",
            TESSERA_HOOK_LIBRARY,
            "--driver-lib-dir",
            TESSERA_FAKE_DIR,
            "--log-level",
            "info",
            "--metrics-listen",
            ""};
  o.env = {{"LD_LIBRARY_PATH", TESSERA_FAKE_DIR},
           {"TESSERA_FAKE_GPUS", "2"},
           {"TESSERA_FAKE_GPU_MEMORY", std::to_string(kGpuMemory)},
           {"TESSERA_FAKE_STATE", env->dir("fake-state")},
           {"TESSERA_FAKE_CONTEXT_BYTES", std::to_string(256ULL << 20)},
           {"TESSERA_FAKE_XID_FILE", env->dir("xid")}};
  o.log_path = env->dir("tessera-node." + std::to_string(env->agent_starts++) + ".log");
  auto child = e2e::ChildProcess::Spawn(std::move(o));
  if (!child.ok()) return child.status();
  env->agent = std::move(*child);
  return Status::Ok();
}

json Slice() {
  auto slice = Api().Get(k8s::ResourceSlicePath(SliceName(kNode)));
  return slice.ok() ? *slice : json();
}

class DraE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    auto folder = e2e::TempFolder::Create("tessera-dra-e2e");
    ASSERT_OK(folder);
    env->folder = std::move(*folder);
    for (const char* sub : {"plugins", "results", "state", "cdi", "dra", "registry"})
      std::filesystem::create_directories(env->dir(sub));
    std::ofstream(env->dir("xid")) << "";
    auto cp = e2e::StartControlPlane(env->folder->path(), k8s::FreeLoopbackPort());
    ASSERT_OK(cp);
    env->cluster = std::move(cp->cluster);
    env->client = std::move(cp->api);
    ASSERT_OK(e2e::CreateNamespace(Api(), kNs));
    // The class the chart installs (deploy/helm: DRA mode).
    ASSERT_OK(Api().Create(
        "/apis/resource.k8s.io/v1/deviceclasses",
        json{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "DeviceClass"},
             {"metadata", {{"name", names::kDraClassShared}}},
             {"spec",
              {{"selectors",
                {{{"cel",
                   {{"expression",
                     "device.driver == '" + std::string(names::kDraDriver) + "'"}}}}}}}}}));
    // The node kube-scheduler binds to (Ready, no devices of its own).
    auto kubelet = e2e::StartHarnessKubelet(*env->cluster, kNode, env->folder->path(),
                                            env->dir("kubelet.log"));
    ASSERT_OK(kubelet);
    env->kubelet = std::move(*kubelet);
    ASSERT_OK(StartAgent());
    ASSERT_TRUE(Eventually([] { return Slice().contains("spec"); }, 60s))
        << "no ResourceSlice\n"
        << env->agent->LogTail(40);
  }
  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed() && env->agent)
      std::fprintf(stderr, "tessera-node log tail:\n%s\n", env->agent->LogTail(60).c_str());
    env->agent.reset();
    env->kubelet.reset();
    env->client.reset();
    env->cluster.reset();
    delete env;
    env = nullptr;
  }

  static Status CreateClaimAndPod(const std::string& name, const std::string& memory,
                                  const std::string& cores) {
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", name}, {"namespace", kNs}}},
        {"spec",
         {{"devices",
           {{"requests",
             {{{"name", "gpu"},
               {"exactly",
                {{"deviceClassName", names::kDraClassShared},
                 {"capacity", {{"requests", {{"memory", memory}, {"cores", cores}}}}}}}}}}}}}}};
    TESSERA_RETURN_IF_ERROR(
        Api()
            .Create(std::string("/apis/resource.k8s.io/v1/namespaces/") + kNs + "/resourceclaims",
                    claim)
            .status());
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", kNs}}},
                {"spec",
                 {{"terminationGracePeriodSeconds", 0},
                  {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", name}}}},
                  {"containers",
                   {{{"name", "main"},
                     {"image", "registry.invalid/gpu-workload:1"},
                     {"resources", {{"claims", {{{"name", "gpu"}}}}}}}}}}}};
    return Api().Create(k8s::PodsPath(kNs), pod).status();
  }

  static json Claim(const std::string& name) {
    auto claim = Api().Get(k8s::ResourceClaimPath(kNs, name));
    return claim.ok() ? *claim : json();
  }
  static bool Allocated(const json& claim) {
    return claim.contains("status") && claim["status"].contains("allocation");
  }

  // NodePrepareResources / NodeUnprepareResources as kubelet sends them: the claim's namespace,
  // UID and name.
  static std::unique_ptr<api::DRAPlugin::Stub> Plugin() {
    return api::DRAPlugin::NewStub(grpc::CreateChannel("unix://" + env->dir("dra") + "/dra.sock",
                                                       grpc::InsecureChannelCredentials()));
  }
  static api::Claim ClaimRef(const json& claim) {
    api::Claim c;
    c.set_namespace_(kNs);
    c.set_name(claim["metadata"]["name"].get<std::string>());
    c.set_uid(claim["metadata"]["uid"].get<std::string>());
    return c;
  }
};

TEST_F(DraE2E, TheApiServerAcceptsTheSliceOfEachManagedGpuWithItsCapacities) {
  const json spec = Slice()["spec"];
  EXPECT_EQ(spec["driver"], names::kDraDriver);
  EXPECT_EQ(spec["nodeName"], kNode);
  ASSERT_EQ(spec["devices"].size(), 2u);
  for (const json& d : spec["devices"]) {
    // What kube-scheduler counts: the capacities and their policies survived validation.
    EXPECT_EQ(d["capacity"]["memory"]["value"], "81559Mi") << d.dump();
    EXPECT_EQ(d["capacity"]["cores"]["value"], "100") << d.dump();
    EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "256Mi");
    EXPECT_EQ(d["allowMultipleAllocations"], true) << d.dump();
  }
  // No node-level sums: a device-plugin pod is never placed on (nor admitted to) a DRA node.
  EXPECT_TRUE(Eventually(
      [] {
        auto node = Api().Get(k8s::NodePath(kNode));
        if (!node.ok()) return false;
        const json a = (*node)["status"].value("allocatable", json::object());
        for (const char* r : {"tessera.dev/gpu", "tessera.dev/gpu-memory", "tessera.dev/gpu-cores",
                              "tessera.dev/gpu-slot"}) {
          if (a.value(r, "") != "0") return false;
        }
        // ... and the extender's ledger leaves it out by its label.
        return k8s::StringAt((*node)["metadata"].value("labels", json::object()),
                             names::kLabelAllocationPath) == "dra";
      },
      30s));
  // kubelet deletes a node's slices when it starts: the agent publishes it again.
  ASSERT_OK(Api().Delete(k8s::ResourceSlicePath(SliceName(kNode))));
  EXPECT_TRUE(Eventually([] { return Slice().contains("spec"); }, 30s));
}

TEST_F(DraE2E, KubeSchedulerPacksClaimsWithoutOvercommittingAndThePluginPreparesThem) {
  // Three claims of 30 GiB and 40 % onto two GPUs of 81559Mi: at most two fit a GPU, none is
  // over-committed; a fourth of 100 GiB fits no GPU and its pod stays Pending.
  for (const char* name : {"c1", "c2", "c3"}) ASSERT_OK(CreateClaimAndPod(name, "30Gi", "40"));
  ASSERT_OK(CreateClaimAndPod("huge", "100Gi", "10"));
  ASSERT_TRUE(Eventually(
      [] { return Allocated(Claim("c1")) && Allocated(Claim("c2")) && Allocated(Claim("c3")); },
      90s))
      << Claim("c3").dump();
  std::map<std::string, std::uint64_t> memory, cores;
  for (const char* name : {"c1", "c2", "c3"}) {
    const json result = Claim(name)["status"]["allocation"]["devices"]["results"][0];
    EXPECT_EQ(result["driver"], names::kDraDriver);
    EXPECT_EQ(result["pool"], kNode);
    EXPECT_FALSE(result.value("shareID", "").empty()) << result.dump();
    memory[result["device"]] +=
        *ParseQuantity(result["consumedCapacity"]["memory"].get<std::string>());
    cores[result["device"]] +=
        *ParseQuantity(result["consumedCapacity"]["cores"].get<std::string>());
  }
  for (const auto& [device, bytes] : memory) {
    EXPECT_LE(bytes, kGpuMemory) << device;
    EXPECT_LE(cores[device], 100u) << device;
  }
  std::string pending_reason;
  EXPECT_TRUE(Eventually(
      [&] {
        auto pod = Api().Get(k8s::PodPath(kNs, "huge"));
        if (!pod.ok()) return false;
        for (const json& c : (*pod)["status"].value("conditions", json::array())) {
          if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False")
            pending_reason = c.value("message", "");
        }
        return !pending_reason.empty();
      },
      60s));
  EXPECT_NE(pending_reason.find("claim"), std::string::npos) << pending_reason;
  EXPECT_FALSE(Allocated(Claim("huge")));

  // The node prepares c1 into its slot: the limits file holds what kube-scheduler allocated.
  const json c1 = Claim("c1");
  api::NodePrepareResourcesRequest prepare;
  *prepare.add_claims() = ClaimRef(c1);
  api::NodePrepareResourcesResponse prepared;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(Plugin()->NodePrepareResources(&ctx, prepare, &prepared).ok());
  }
  const std::string uid = c1["metadata"]["uid"];
  ASSERT_EQ(prepared.claims().count(uid), 1u);
  const api::NodePrepareResourceResponse& answer = prepared.claims().at(uid);
  ASSERT_EQ(answer.error(), "");
  ASSERT_EQ(answer.devices_size(), 1);
  EXPECT_EQ(answer.devices(0).device_name(),
            c1["status"]["allocation"]["devices"]["results"][0]["device"]);
  EXPECT_EQ(answer.devices(0).cdi_device_ids(0), "tessera.dev/gpu=" + ClaimSlot(uid));
  const SlotPaths paths = PathsOf(env->dir("state"), env->dir("cdi"), ClaimSlot(uid));
  auto limits = ParseLimitsFile(ReadFile(paths.limits, kMaxLimitsFileBytes).value_or(""));
  ASSERT_OK(limits);
  EXPECT_EQ(limits->pod, std::string(kNs) + "/c1");
  EXPECT_EQ(limits->devices.at(0).memory_bytes, 30 * kGiB);
  EXPECT_EQ(limits->devices.at(0).cores_percent, 40u);
  EXPECT_TRUE(std::filesystem::exists(paths.cdi_spec));

  // A claim that names the wrong UID (replaced since kubelet looked) is refused, nothing written.
  api::NodePrepareResourcesRequest stale;
  api::Claim wrong = ClaimRef(Claim("c2"));
  wrong.set_uid("00000000-0000-4000-8000-000000000000");
  *stale.add_claims() = wrong;
  api::NodePrepareResourcesResponse refused;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(Plugin()->NodePrepareResources(&ctx, stale, &refused).ok());
  }
  EXPECT_NE(refused.claims().at(wrong.uid()).error().find("metadata.uid"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(
      PathsOf(env->dir("state"), env->dir("cdi"), ClaimSlot(wrong.uid())).limits));

  // An agent restart keeps the prepared slot; kubelet's second prepare leaves it as it was.
  const auto inode = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  };
  const ino_t region_inode = inode(paths.region);
  ASSERT_NE(region_inode, 0u);
  env->agent.reset();
  ASSERT_OK(StartAgent());
  ASSERT_TRUE(
      Eventually([] { return std::filesystem::exists(env->dir("dra") + "/dra.sock"); }, 30s));
  EXPECT_EQ(inode(paths.region), region_inode);
  api::NodePrepareResourcesResponse again;
  ASSERT_TRUE(Eventually(
      [&] {
        grpc::ClientContext ctx;
        again.Clear();
        return Plugin()->NodePrepareResources(&ctx, prepare, &again).ok() &&
               again.claims().count(uid) == 1 && again.claims().at(uid).error().empty();
      },
      30s));
  EXPECT_EQ(inode(paths.region), region_inode);  // the running containers' region

  api::NodeUnprepareResourcesRequest unprepare;
  *unprepare.add_claims() = ClaimRef(c1);
  api::NodeUnprepareResourcesResponse unprepared;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(Plugin()->NodeUnprepareResources(&ctx, unprepare, &unprepared).ok());
  }
  EXPECT_EQ(unprepared.claims().at(uid).error(), "");
  EXPECT_FALSE(std::filesystem::exists(paths.dir));
  EXPECT_FALSE(std::filesystem::exists(paths.cdi_spec));
}

// Last: it leaves GPU 1 unhealthy.
TEST_F(DraE2E, AnUnhealthyGpuIsTaintedAndTheSliceThenStaysAsItIs) {
  // kubelet's health stream (NodeWatchResources): every device of the pool, healthy first.
  auto health = ::v1alpha1::DRAResourceHealth::NewStub(grpc::CreateChannel(
      "unix://" + env->dir("dra") + "/dra.sock", grpc::InsecureChannelCredentials()));
  grpc::ClientContext watch;
  watch.set_deadline(std::chrono::system_clock::now() + 90s);
  auto stream = health->NodeWatchResources(&watch, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse seen;
  ASSERT_TRUE(stream->Read(&seen));
  ASSERT_EQ(seen.devices_size(), 2);
  for (const auto& d : seen.devices()) {
    EXPECT_EQ(d.device().pool_name(), kNode);
    EXPECT_EQ(d.health(), ::v1alpha1::HEALTHY) << d.device().device_name();
  }

  const std::int64_t generation = Slice()["spec"]["pool"]["generation"];
  std::ofstream(env->dir("xid")) << "1:79\n";
  const auto tainted = [] {
    for (const json& d : Slice()["spec"].value("devices", json::array())) {
      if (d.value("name", "") != "gpu-1") continue;
      for (const json& t : d.value("taints", json::array())) {
        if (t.value("key", "") == names::kDraTaintUnhealthy &&
            t.value("effect", "") == "NoSchedule")
          return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(Eventually(tainted, 60s)) << Slice().dump() << "\n" << env->agent->LogTail(20);
  const json after = Slice();
  EXPECT_GT(after["spec"]["pool"]["generation"].get<std::int64_t>(), generation);
  // What the API server added (the taint's timeAdded) is no change to publish: four inventory
  // passes later the slice is the one written.
  std::this_thread::sleep_for(4s);
  EXPECT_EQ(Slice()["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"])
      << Slice().dump();

  // ... and kubelet is told that gpu-1 turned unhealthy, and why.
  bool told = false;
  while (!told && stream->Read(&seen)) {
    for (const auto& d : seen.devices()) {
      told |= d.device().device_name() == "gpu-1" && d.health() == ::v1alpha1::UNHEALTHY &&
              d.message().find("XID") != std::string::npos;
    }
  }
  EXPECT_TRUE(told);
  watch.TryCancel();
}

}  // namespace
}  // namespace tessera::agent::dra
