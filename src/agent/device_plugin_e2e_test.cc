// tessera-node's device plugin end to end, driven by real kubelet code: the real control plane
// (etcd + kube-apiserver + kube-scheduler calling tessera-scheduler), the upstream kubelet device
// manager and PodResources server (`tessera-testcluster kubelet`, linked from
// k8s.io/kubernetes/pkg/kubelet), and tessera-node over gRPC against the fake NVML and driver
// (the only stand-ins: no GPU and no container runtime here). A container "starts" when kubelet's
// Allocate + PreStartContainer succeed; the harness records what kubelet would hand the runtime.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tessera/limits.h"
#include "tessera/prometheus.h"
#include "tessera/region.h"

#include "agent/device_plugin.h"
#include "contract/decision.h"
#include "e2e/scheduler_harness.h"
#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/paths.h"
#include "observe/observe.h"
#include "testutil/old_region.h"
#include "testutil/status_matchers.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
constexpr char kNode[] = "dp-node-1";
constexpr char kNs[] = "dp";
constexpr std::uint64_t kMiB = 1ULL << 20;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Env {
  std::unique_ptr<e2e::TempFolder> folder;
  std::unique_ptr<e2e::TestCluster> cluster;
  std::unique_ptr<e2e::ChildProcess> scheduler;
  std::unique_ptr<e2e::ChildProcess> kubelet;
  std::unique_ptr<e2e::ChildProcess> agent;
  std::unique_ptr<k8s::Client> api;
  int port = 0;
  int metrics_port = 0;  // tessera-node's /metrics
  int kubelet_starts = 0, agent_starts = 0;
  std::string dir(const std::string& sub) const { return folder->path() + "/" + sub; }
};
Env* env = nullptr;

Status StartKubelet() {
  auto child = e2e::StartHarnessKubelet(
      *env->cluster, kNode, env->folder->path(),
      env->dir("kubelet." + std::to_string(env->kubelet_starts++) + ".log"));
  if (!child.ok()) return child.status();
  env->kubelet = std::move(*child);
  return Status::Ok();
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
            "--device-plugin-dir",
            env->dir("plugins"),
            "--pod-resources-socket",
            env->dir("pod-resources.sock"),
            "--state-dir",
            env->dir("state"),
            "--cdi-dir",
            env->dir("cdi"),
            "--decision-keys",
            env->dir("keys"),
            "--hook-library",
            TESSERA_HOOK_LIBRARY,
            "--driver-lib-dir",
            TESSERA_FAKE_DIR,
            "--log-level",
            "info",
            "--metrics-listen",
            "127.0.0.1:" + std::to_string(env->metrics_port)};
  o.env = {{"LD_LIBRARY_PATH", TESSERA_FAKE_DIR},
           {"TESSERA_FAKE_GPUS", "2"},
           {"TESSERA_FAKE_GPU_MEMORY", std::to_string(16ULL << 30)},
           {"TESSERA_FAKE_STATE", env->dir("fake-state")},
           {"TESSERA_FAKE_CONTEXT_BYTES", std::to_string(256 * kMiB)},
           {"TESSERA_FAKE_STREAM_BYTES", std::to_string(kMiB)},
           {"TESSERA_FAKE_XID_FILE", env->dir("xid")}};
  o.log_path = env->dir("tessera-node." + std::to_string(env->agent_starts++) + ".log");
  auto child = e2e::ChildProcess::Spawn(std::move(o));
  if (!child.ok()) return child.status();
  env->agent = std::move(*child);
  return Status::Ok();
}

class DevicePluginE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    auto folder = e2e::TempFolder::Create("tessera-device-plugin-e2e");
    ASSERT_OK(folder);
    env->folder = std::move(*folder);
    for (const char* sub : {"plugins", "results", "state", "cdi", "keys"}) {
      std::filesystem::create_directories(env->dir(sub));
    }
    std::ofstream(env->dir("xid")) << "";
    auto pem = contract::GenerateSigningKeyPem();
    ASSERT_OK(pem);
    std::ofstream(env->dir("signing.pem")) << *pem;
    std::ofstream(env->dir("keys/e2e.pem")) << contract::Signer::FromPem(*pem)->PublicKeyPem();
    env->port = k8s::FreeLoopbackPort();
    env->metrics_port = k8s::FreeLoopbackPort();
    auto cp = e2e::StartControlPlane(env->folder->path(), env->port);
    ASSERT_OK(cp);
    env->cluster = std::move(cp->cluster);
    env->api = std::move(cp->api);
    e2e::SchedulerProcessOptions s;
    s.binary = TESSERA_SCHEDULER_BINARY;
    s.kubeconfig = env->cluster->kubeconfig();
    s.port = env->port;
    s.signing_key = env->dir("signing.pem");
    s.dir = env->folder->path();
    s.tag = "0";
    auto scheduler = e2e::StartTesseraScheduler(s);
    ASSERT_OK(scheduler);
    env->scheduler = std::move(*scheduler);
    ASSERT_OK(e2e::CreateNamespace(*env->api, kNs));
    ASSERT_OK(StartKubelet());
    ASSERT_OK(StartAgent());
    // Ready: kubelet reports tessera-node's 64 slots (2 GPUs x 32) and the inventory is on the
    // Node.
    ASSERT_TRUE(WaitFor([] { return Allocatable("tessera.dev/gpu-slot") == "64"; }, 90s))
        << "kubelet never reported the slots\n"
        << env->agent->LogTail(40) << "\n"
        << env->kubelet->LogTail(40);
  }
  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed()) {
      if (env->agent)
        std::fprintf(stderr, "tessera-node log tail:\n%s\n", env->agent->LogTail(60).c_str());
      if (env->kubelet)
        std::fprintf(stderr, "kubelet log tail:\n%s\n", env->kubelet->LogTail(60).c_str());
    }
    env->agent.reset();
    env->kubelet.reset();
    env->scheduler.reset();
    env->api.reset();
    env->cluster.reset();
    delete env;
    env = nullptr;
  }

  void TearDown() override {
    for (const json& p : Pods()) {
      k8s::DeleteOptions o;
      o.grace_period_seconds = 0;
      (void)api().Delete(k8s::PodPath(kNs, p["metadata"]["name"].get<std::string>()), o);
    }
    WaitFor([this] { return Pods().empty(); }, 60s);
  }

  static k8s::Client& api() { return *env->api; }

  template <typename F>
  static bool WaitFor(F done, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (done()) return true;
      std::this_thread::sleep_for(200ms);
    }
    return done();
  }

  static std::string Allocatable(const std::string& resource) {
    auto node = api().Get(k8s::NodePath(kNode));
    if (!node.ok()) return "";
    const json& a = (*node)["status"].value("allocatable", json::object());
    return a.contains(resource) ? a[resource].get<std::string>() : "";
  }

  std::vector<json> Pods() {
    auto list = api().List(k8s::PodsPath(kNs));
    return list.ok() ? list->items : std::vector<json>{};
  }
  static std::string Phase(const json& pod) { return pod["status"].value("phase", ""); }

  Status CreatePod(const std::string& name, const std::string& memory,
                   const std::string& cores = "") {
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", kNs}}},
        {"spec",
         {{"terminationGracePeriodSeconds", 0},
          {"containers",
           {{{"name", "main"},
             {"image", "registry.invalid/gpu-workload:1"},
             {"resources",
              {{"limits",
                {{"tessera.dev/gpu-memory", memory}, {"tessera.dev/gpu-slot", "1"}}}}}}}}}}};
    if (!cores.empty())
      pod["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-cores"] = cores;
    return api().Create(k8s::PodsPath(kNs), pod).status();
  }

  // What kubelet handed the runtime for a container (the harness's record).
  static json Result(const std::string& pod) {
    const std::string path = env->dir("results") + "/" + kNs + "_" + pod + "_main.json";
    std::ifstream in(path);
    if (!in) return json();
    try {
      return json::parse(in);
    } catch (...) {
      return json();
    }
  }

  // The limits file kubelet mounted at /etc/tessera for the pod's container.
  static StatusOr<Limits> MountedLimits(const json& result) {
    if (!result.is_object()) return NotFoundError("no result yet");
    for (const json& m : result.value("mounts", json::array())) {
      if (m.value("containerPath", "") == "/etc/tessera") {
        return ParseLimitsFile(Slurp(m.value("hostPath", "") + "/limits"));
      }
    }
    return NotFoundError("no /etc/tessera mount in " + result.dump());
  }

  // The pod's verified decision for its container.
  static StatusOr<contract::DecisionContainer> DecisionOf(const json& pod) {
    const json& ann = pod["metadata"].value("annotations", json::object());
    auto d = contract::ParseDecision(ann.value("tessera.dev/decision", std::string()));
    if (!d.ok()) return d.status();
    return d->containers.at(0);
  }

  // tessera-node's /metrics, parsed (empty when it does not answer).
  static std::vector<prom::Sample> Scrape() {
    httplib::Client c("127.0.0.1", env->metrics_port);
    auto res = c.Get("/metrics");
    if (!res || res->status != 200) return {};
    auto parsed = prom::ParseExposition(res->body);
    return parsed.ok() ? std::move(*parsed) : std::vector<prom::Sample>{};
  }
  static double PodMetric(const std::vector<prom::Sample>& samples, const std::string& name,
                          const std::string& pod) {
    for (const prom::Sample& x : samples) {
      if (x.name == name && x.labels.count("pod") && x.labels.at("pod") == pod) return x.value;
    }
    return -1;
  }
  // The host folder of a pod's container (<state>/slots/<slot>) from kubelet's record.
  static std::string SlotDir(const std::string& pod) {
    for (const json& m : Result(pod).value("mounts", json::array())) {
      if (m.value("containerPath", "") == "/etc/tessera")
        return std::filesystem::path(m.value("hostPath", "")).parent_path();
    }
    return "";
  }

  std::vector<std::string> EventReasons(const std::string& pod) {
    std::vector<std::string> reasons;
    auto list = api().List(k8s::EventsPath(kNs));
    if (!list.ok()) return reasons;
    for (const json& e : list->items) {
      if (e["involvedObject"].value("name", "") == pod)
        reasons.push_back(e.value("reason", "") + ": " + e.value("message", ""));
    }
    return reasons;
  }
};

TEST_F(DevicePluginE2E, FiftyPodsBoundAtOnceEachGetsItsOwnDecision) {
  constexpr int kPods = 50;
  for (int i = 0; i < kPods; ++i) ASSERT_OK(CreatePod("p" + std::to_string(i), "512Mi"));
  ASSERT_TRUE(WaitFor(
      [&] {
        int running = 0;
        for (const json& p : Pods()) running += Phase(p) == "Running";
        return running == kPods;
      },
      180s))
      << env->agent->LogTail(30);
  std::set<std::string> slots, hosts;
  for (const json& pod : Pods()) {
    const std::string name = pod["metadata"]["name"];
    const json result = Result(name);
    ASSERT_FALSE(result.is_null()) << name;
    ASSERT_FALSE(result.contains("error")) << result.dump();
    const auto ids = result["devices"].value("tessera.dev/gpu-slot", json::array());
    ASSERT_EQ(ids.size(), 1u) << result.dump();
    slots.insert(ids[0].get<std::string>());
    EXPECT_EQ(result["cdiDevices"], json::array({"tessera.dev/gpu=" + ids[0].get<std::string>()}));
    auto limits = MountedLimits(result);
    ASSERT_OK(limits);
    auto decision = DecisionOf(pod);
    ASSERT_OK(decision);
    // This container's own decision, nobody else's.
    EXPECT_EQ(limits->pod, std::string(kNs) + "/" + name);
    EXPECT_EQ(limits->pod_uid, pod["metadata"]["uid"].get<std::string>());
    ASSERT_EQ(limits->devices.size(), 1u);
    EXPECT_EQ(limits->devices[0].uuid, decision->devices.at(0).uuid);
    EXPECT_EQ(limits->devices[0].memory_bytes, 512 * kMiB);
    EXPECT_EQ(limits->devices[0].context_bytes, 256 * kMiB);  // measured by the agent's probe
    EXPECT_EQ(limits->devices[0].stream_bytes, kMiB);
    hosts.insert(limits->pod);
  }
  EXPECT_EQ(slots.size(), static_cast<std::size_t>(kPods)) << "two containers share a slot";
  EXPECT_EQ(hosts.size(), static_cast<std::size_t>(kPods));
}

// The agent hosts the GPUs' compute arbiters: a container bound with a hard compute share is
// governed (its region's gate leaves kFree and the arbiter's heartbeat advances), and its
// region's counters are what the arbiter reads.
TEST_F(DevicePluginE2E, TheAgentsArbiterGovernsAContainerWithAComputeShare) {
  ASSERT_OK(CreatePod("shared", "1Gi", "30"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("shared")).ok(); }, 90s))
      << env->agent->LogTail(30);
  const json result = Result("shared");
  std::string etc;
  for (const json& m : result["mounts"]) {
    if (m["containerPath"] == "/etc/tessera") etc = m["hostPath"];
  }
  auto limits = MountedLimits(result);
  ASSERT_OK(limits);
  ASSERT_EQ(limits->devices.size(), 1u);
  EXPECT_EQ(limits->devices[0].cores_percent, 30u);
  auto region = shm::Mapping::Attach(etc + "/../run/region");
  ASSERT_OK(region);
  const shm::Compute& c = region->region()->compute[0];
  ASSERT_TRUE(
      WaitFor([&] { return c.gate.load() != static_cast<std::uint32_t>(shm::Gate::kFree); }, 30s))
      << env->agent->LogTail(30);
  const std::uint64_t beat = c.arbiter_beat_ns.load();
  EXPECT_TRUE(WaitFor([&] { return c.arbiter_beat_ns.load() > beat; }, 10s));
  EXPECT_EQ(c.gate.load(),
            static_cast<std::uint32_t>(shm::Gate::kOpen));  // nothing spent its share
}

// /metrics carries what each container's region says (used, peak, denials, compute counters)
// against its node-written cap and share, with dcgm-exporter's labels; allocations refused at the
// cap become an Event on the pod.
TEST_F(DevicePluginE2E, MetricsShowEachContainersUsageAndDenialsBecomeEvents) {
  ASSERT_OK(CreatePod("metered", "2Gi", "40"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("metered")).ok(); }, 90s))
      << env->agent->LogTail(30);
  const json result = Result("metered");
  std::string etc;
  for (const json& m : result["mounts"]) {
    if (m["containerPath"] == "/etc/tessera") etc = m["hostPath"];
  }
  auto limits = MountedLimits(result);
  ASSERT_OK(limits);
  const std::string uuid = limits->devices.at(0).uuid;
  auto region = shm::Mapping::Attach(etc + "/../run/region");
  ASSERT_OK(region);
  // What the preload library would write for a process holding 1.5 GiB, refused twice.
  shm::Region& r = *region->region();
  auto slot = shm::ClaimSlot(r, 4242, 1);
  ASSERT_OK(slot);
  ASSERT_OK(shm::Reserve(r, *slot, 0, 1536 * kMiB, 2048 * kMiB));
  EXPECT_FALSE(shm::Reserve(r, *slot, 0, 1024 * kMiB, 2048 * kMiB).ok());
  EXPECT_FALSE(shm::Reserve(r, *slot, 0, 600 * kMiB, 2048 * kMiB).ok());
  r.compute[0].busy_ns += 2'000'000'000;
  r.compute[0].priority_holds += 3;

  std::vector<prom::Sample> samples;
  auto value = [&](const std::string& name) { return PodMetric(samples, name, "metered"); };
  ASSERT_TRUE(WaitFor(
      [&] {
        samples = Scrape();
        return value("tessera_container_gpu_oom_denials_total") == 2;
      },
      30s))
      << env->agent->LogTail(30);
  EXPECT_EQ(value("tessera_container_gpu_memory_limit_bytes"), 2048.0 * kMiB);
  EXPECT_EQ(value("tessera_container_gpu_memory_used_bytes"), 1536.0 * kMiB);
  EXPECT_EQ(value("tessera_container_gpu_memory_peak_bytes"), 1536.0 * kMiB);
  EXPECT_EQ(value("tessera_container_gpu_compute_share_target_ratio"), 0.4);
  EXPECT_GE(value("tessera_container_gpu_busy_seconds_total"), 2.0);
  EXPECT_EQ(value("tessera_container_gpu_priority_holds_total"), 3);
  for (const prom::Sample& x : samples) {
    if (x.name != "tessera_container_gpu_memory_used_bytes" || x.labels.at("pod") != "metered")
      continue;
    EXPECT_EQ(x.labels.at("namespace"), kNs);
    EXPECT_EQ(x.labels.at("container"), "main");
    EXPECT_EQ(x.labels.at("UUID"), uuid);
    EXPECT_EQ(x.labels.at("Hostname"), kNode);
    EXPECT_EQ(x.labels.at("device").rfind("nvidia", 0), 0u);
    EXPECT_FALSE(x.labels.at("modelName").empty());
  }
  // The snapshot `tessera top --from` reads is the same.
  httplib::Client c("127.0.0.1", env->metrics_port);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  auto snapshot = observe::SnapshotFromExposition(res->body);
  ASSERT_OK(snapshot);
  EXPECT_EQ(snapshot->node, kNode);
  EXPECT_EQ(snapshot->gpus.size(), 2u);
  EXPECT_NE(observe::RenderTop(*snapshot).find(std::string(kNs) + "/metered"), std::string::npos);
  // The denials are told on the pod, once.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& e : EventReasons("metered")) {
          if (e.rfind("TesseraGpuMemoryDenied: container main: 2 allocation(s) refused at its cap "
                      "of 2.00 GiB",
                      0) == 0)
            return true;
        }
        return false;
      },
      30s))
      << ::testing::PrintToString(EventReasons("metered"));
  // A further denial is counted at once; its Event waits for the minute since the last one
  // (a job retrying allocations does not post an Event every pass).
  EXPECT_FALSE(shm::Reserve(r, *slot, 0, 1024 * kMiB, 2048 * kMiB).ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        samples = Scrape();
        return value("tessera_container_gpu_oom_denials_total") == 3;
      },
      30s));
  shm::ReleaseSlot(r, *slot);
}

TEST_F(DevicePluginE2E, ReleasedSlotsAreCleanedAndAgentRestartDisturbsNoRunningContainer) {
  ASSERT_OK(CreatePod("keep", "1Gi"));
  ASSERT_OK(CreatePod("go", "1Gi"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Pods().size() == 2 && Phase(Pods()[0]) == "Running" && Phase(Pods()[1]) == "Running";
      },
      90s));
  const json keep = Result("keep"), gone = Result("go");
  auto keep_limits = MountedLimits(keep);
  ASSERT_OK(keep_limits);
  std::string keep_dir, gone_dir;
  for (const json& m : keep["mounts"]) {
    if (m["containerPath"] == "/etc/tessera") keep_dir = m["hostPath"];
  }
  for (const json& m : gone["mounts"]) {
    if (m["containerPath"] == "/etc/tessera") gone_dir = m["hostPath"];
  }
  struct stat before {};
  ASSERT_EQ(stat((keep_dir + "/../run/region").c_str(), &before), 0);
  // The agent restarts: the running container's files stay as they were (the region is not
  // re-created, the limits file not rewritten).
  env->agent->Stop(10s);
  ASSERT_OK(StartAgent());
  std::this_thread::sleep_for(3s);  // a few clean-up rounds of the new agent
  struct stat after {};
  ASSERT_EQ(stat((keep_dir + "/../run/region").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino,
            before.st_ino);  // the same region (the GPU's arbiter writes its verdicts into it)
  EXPECT_EQ(Slurp(keep_dir + "/limits"), FormatLimitsFile(*keep_limits));
  // A released slot loses its files (and its CDI spec).
  k8s::DeleteOptions o;
  o.grace_period_seconds = 0;
  ASSERT_OK(api().Delete(k8s::PodPath(kNs, "go"), o));
  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(gone_dir); }, 30s)) << gone_dir;
  EXPECT_TRUE(std::filesystem::exists(keep_dir + "/limits"));
  // And the restarted agent serves new containers.
  ASSERT_OK(CreatePod("after-restart", "1Gi"));
  EXPECT_TRUE(WaitFor([&] { return MountedLimits(Result("after-restart")).ok(); }, 60s))
      << env->agent->LogTail(30);
}

TEST_F(DevicePluginE2E, KubeletRestartMakesTheAgentRegisterAgain) {
  env->kubelet->Stop(10s);
  ASSERT_OK(StartKubelet());
  // The restarted device manager knows no plugin (the Node's allocatable still shows the old
  // figure) until tessera-node registers again: ask kubelet itself what it can allocate.
  PodResourcesClient kubelet(env->dir("pod-resources.sock"));
  ASSERT_TRUE(WaitFor(
      [&] {
        auto ids = kubelet.AllocatableDevices("tessera.dev/gpu-slot");
        return ids.ok() && ids->size() == 64;
      },
      60s))
      << env->agent->LogTail(30);
  ASSERT_OK(CreatePod("after-kubelet-restart", "1Gi"));
  EXPECT_TRUE(WaitFor([&] { return MountedLimits(Result("after-kubelet-restart")).ok(); }, 60s))
      << env->agent->LogTail(30) << env->kubelet->LogTail(30);
  EXPECT_NE(Slurp(env->agent->log_path()).find("registered with kubelet"), std::string::npos);
}

TEST_F(DevicePluginE2E, MissingMalformedOrBorrowedDecisionsGetAnEventAndNoGpu) {
  // Bound straight to the node (this suite runs no admission webhooks), so the scheduler never
  // wrote their decisions.
  ASSERT_OK(CreatePod("donor", "1Gi"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("donor")).ok(); }, 60s));
  json donor = *api().Get(k8s::PodPath(kNs, "donor"));
  const json& donor_ann = donor["metadata"]["annotations"];
  const std::map<std::string, json> cases = {
      {"no-decision", json::object()},
      {"malformed",
       {{"tessera.dev/decision", "{\"apiVersion\":"}, {"tessera.dev/decision-signature", "AAAA"}}},
      // A valid, signed decision of another pod: its uid does not match.
      {"borrowed",
       {{"tessera.dev/decision", donor_ann["tessera.dev/decision"]},
        {"tessera.dev/decision-signature", donor_ann["tessera.dev/decision-signature"]}}}};
  for (const auto& [name, annotations] : cases) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", kNs}, {"annotations", annotations}}},
                {"spec",
                 {{"nodeName", kNode},
                  {"terminationGracePeriodSeconds", 0},
                  {"containers",
                   {{{"name", "main"},
                     {"image", "registry.invalid/gpu-workload:1"},
                     {"resources", {{"limits", {{"tessera.dev/gpu-slot", "1"}}}}}}}}}}};
    ASSERT_OK(api().Create(k8s::PodsPath(kNs), pod).status());
  }
  const std::map<std::string, std::string> why = {
      {"no-decision", "has no tessera.dev/decision annotation"},
      {"malformed", "the decision is malformed"},
      {"borrowed", "not this pod"}};
  for (const auto& [pod_name, pod_reason] : why) {
    const std::string name = pod_name, reason = pod_reason;  // lambdas capture these (clang 14)
    EXPECT_TRUE(
        WaitFor([&] { return Result(name).is_object() && Result(name).contains("error"); }, 60s))
        << name;
    EXPECT_NE(Result(name).value("error", "").find(reason), std::string::npos)
        << Result(name).dump();
    EXPECT_FALSE(MountedLimits(Result(name)).ok()) << name << " got limits";
    EXPECT_TRUE(WaitFor(
        [&] {
          for (const std::string& e : EventReasons(name)) {
            if (e.rfind("TesseraDecisionRejected: ", 0) == 0 && e.find(reason) != std::string::npos)
              return true;
          }
          return false;
        },
        30s))
        << name;
    // kubelet does not start the container (it retries PreStartContainer, as it does for any
    // container-config error): the pod never runs.
    auto pod = api().Get(k8s::PodPath(kNs, name));
    ASSERT_OK(pod);
    EXPECT_NE(Phase(*pod), "Running") << pod->dump();
  }
  // The donor kept its own GPU and limits.
  EXPECT_OK(MountedLimits(Result("donor")).status());
}

TEST_F(DevicePluginE2E, AnUnhealthyGpuLosesItsSlotsAndItsPodsAreTold) {
  ASSERT_OK(CreatePod("on-gpu", "8Gi"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("on-gpu")).ok(); }, 60s));
  const std::string uuid = MountedLimits(Result("on-gpu"))->devices.at(0).uuid;
  const std::string physical = uuid.substr(uuid.size() - 2);  // GPU-face...00NN
  std::ofstream(env->dir("xid")) << std::stoi(physical, nullptr, 16) << ":79\n";
  EXPECT_TRUE(WaitFor([] { return Allocatable("tessera.dev/gpu-slot") == "32"; }, 60s))
      << "allocatable " << Allocatable("tessera.dev/gpu-slot") << "\n"
      << env->agent->LogTail(20);
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const std::string& e : EventReasons("on-gpu")) {
          if (e.rfind("TesseraGpuUnhealthy: ", 0) == 0 && e.find("XID 79") != std::string::npos)
            return true;
        }
        return false;
      },
      30s));
  // New pods go to the healthy GPU only.
  ASSERT_OK(CreatePod("after-xid", "1Gi"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("after-xid")).ok(); }, 60s));
  EXPECT_NE(MountedLimits(Result("after-xid"))->devices.at(0).uuid, uuid);
}

// An upgrade: the new agent finds a container still running the previous library (its region
// in layout 1, without compute counters). It leaves the container's files as they are, still
// accounts it (metrics, drift) and serves new containers.
TEST_F(DevicePluginE2E, AnUpgradedAgentServesContainersOfThePreviousLibrary) {
  ASSERT_OK(CreatePod("old-library", "2Gi"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("old-library")).ok(); }, 60s))
      << env->agent->LogTail(20);
  const std::string dir = SlotDir("old-library");
  const std::string region_path = dir + "/run/region", limits_text = Slurp(dir + "/etc/limits");
  // The container's process (its slot's robust mutex stays locked by this thread, so the
  // mapping lives until the slot is released at the end).
  auto region = shm::Mapping::Attach(region_path);
  ASSERT_OK(region);
  auto slot = shm::ClaimSlot(*region->region(), 31337, 1);
  ASSERT_OK(slot);
  ASSERT_OK(shm::Reserve(*region->region(), *slot, 0, 1536 * kMiB, 2048 * kMiB));
  env->agent->Stop(10s);
  ASSERT_TRUE(testutil::DowngradeRegionToLayout1(region_path));  // what the previous library made
  struct stat before {};
  ASSERT_EQ(stat(region_path.c_str(), &before), 0);
  ASSERT_OK(StartAgent());
  std::vector<prom::Sample> samples;
  EXPECT_TRUE(WaitFor(
      [&] {
        samples = Scrape();
        return PodMetric(samples, "tessera_container_gpu_memory_used_bytes", "old-library") ==
               1536.0 * kMiB;
      },
      60s))
      << env->agent->LogTail(30);
  EXPECT_EQ(PodMetric(samples, "tessera_container_gpu_memory_limit_bytes", "old-library"),
            2048.0 * kMiB);
  EXPECT_EQ(PodMetric(samples, "tessera_container_gpu_busy_seconds_total", "old-library"),
            -1);  // layout 1 has none
  struct stat after {};
  ASSERT_EQ(stat(region_path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_size,
            before.st_size);  // not re-created in the new layout under the old library
  EXPECT_EQ(Slurp(dir + "/etc/limits"), limits_text);
  ASSERT_OK(CreatePod("new-library", "1Gi"));
  EXPECT_TRUE(WaitFor([&] { return MountedLimits(Result("new-library")).ok(); }, 60s))
      << env->agent->LogTail(30);
  EXPECT_EQ(shm::Mapping::Attach(SlotDir("new-library") + "/run/region")->layout_version(),
            shm::kLayoutVersion);
  shm::ReleaseSlot(*region->region(),
                   *slot);  // the container's process exits (slots are in layout 1 too)
}

// Uninstall: refused while a container runs on a tessera GPU; then nothing of tessera is left on
// the node: no state files, CDI specs, plugin sockets or installed library, and no tessera.dev/
// annotation, label or resource on the Node. (Last: it takes the node's tessera away; the agent
// is started again at the end.)
TEST_F(DevicePluginE2E, UninstallLeavesNothingBehind) {
  ASSERT_OK(CreatePod("still-running", "1Gi"));
  ASSERT_TRUE(WaitFor([&] { return MountedLimits(Result("still-running")).ok(); }, 60s));
  auto region = shm::Mapping::Attach(SlotDir("still-running") + "/run/region");
  ASSERT_OK(region);
  auto slot = shm::ClaimSlot(*region->region(), 4343, 1);
  ASSERT_OK(slot);
  env->agent->Stop(10s);
  const std::string installed = env->dir("host-lib/tessera/libtessera-cuda.so");
  std::filesystem::create_directories(env->dir("host-lib/tessera"));
  std::filesystem::copy_file(TESSERA_HOOK_LIBRARY, installed);
  auto uninstall = [&](bool force) {
    e2e::ChildOptions o;
    o.argv = {TESSERA_NODE_BINARY,
              "--uninstall",
              "--node-name",
              kNode,
              "--kubeconfig",
              env->cluster->kubeconfig(),
              "--state-dir",
              env->dir("state"),
              "--cdi-dir",
              env->dir("cdi"),
              "--device-plugin-dir",
              env->dir("plugins"),
              "--pod-resources-socket",
              env->dir("pod-resources.sock"),
              "--hook-library",
              installed};
    if (force) o.argv.push_back("--force");
    o.log_path = env->dir(std::string("uninstall") + (force ? "-force" : "") + ".log");
    auto child = e2e::ChildProcess::Spawn(std::move(o));
    if (!child.ok()) return -1;
    const std::optional<int> status = (*child)->Wait(60s);  // a wait status
    return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -2;
  };
  EXPECT_EQ(uninstall(false), 1);
  const std::string refused = Slurp(env->dir("uninstall.log"));
  EXPECT_NE(refused.find("containers still run on tessera GPUs"), std::string::npos) << refused;
  EXPECT_NE(refused.find("kubelet still holds its slot"), std::string::npos) << refused;
  EXPECT_TRUE(std::filesystem::exists(env->dir("state/slots")));  // nothing half-done
  // The process exits, but the pod is still there: kubelet holds its slot, a new process may come.
  shm::ReleaseSlot(*region->region(), *slot);
  region = shm::Mapping();
  EXPECT_EQ(uninstall(false), 1) << Slurp(env->dir("uninstall.log"));
  k8s::DeleteOptions gone;
  gone.grace_period_seconds = 0;
  for (const json& p : Pods())
    (void)api().Delete(k8s::PodPath(kNs, p["metadata"]["name"].get<std::string>()), gone);
  ASSERT_TRUE(WaitFor([&] { return Pods().empty(); }, 60s));
  int rc = 1;
  ASSERT_TRUE(WaitFor([&] { return (rc = uninstall(false)) == 0; }, 60s))
      << Slurp(env->dir("uninstall.log"));
  EXPECT_FALSE(std::filesystem::exists(env->dir("state")));
  EXPECT_FALSE(std::filesystem::exists(env->dir("host-lib/tessera")));
  for (const char* folder : {"cdi", "plugins"}) {
    for (const auto& entry : std::filesystem::directory_iterator(env->dir(folder))) {
      EXPECT_EQ(entry.path().filename().string().find("tessera"), std::string::npos)
          << entry.path();
    }
  }
  auto node = api().Get(k8s::NodePath(kNode));
  ASSERT_OK(node);
  for (const char* field : {"annotations", "labels"}) {
    const json map = (*node)["metadata"].value(field, json::object());
    for (const auto& [key, value] : map.items()) {
      EXPECT_NE(key.rfind("tessera.dev/", 0), 0u) << field << " " << key;
    }
  }
  for (const char* field : {"capacity", "allocatable"}) {
    const json resources = (*node)["status"].value(field, json::object());
    for (const auto& [key, value] : resources.items()) {
      // kubelet itself keeps reporting a resource its device plugin once registered until it
      // restarts (docs/design/0019): only that one may remain.
      if (key != "tessera.dev/gpu-slot") {
        EXPECT_NE(key.rfind("tessera.dev/", 0), 0u) << field << " " << key;
      }
    }
  }
  std::filesystem::create_directories(env->dir("state"));
  ASSERT_OK(StartAgent());
}

}  // namespace
}  // namespace tessera::agent
