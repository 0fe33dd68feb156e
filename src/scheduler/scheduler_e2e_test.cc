// tessera-scheduler end to end, on the real control plane: etcd + kube-apiserver +
// kube-scheduler built from the upstream modules (test/e2e/harness), kube-scheduler configured
// to call tessera-scheduler as its extender, simulated GPU nodes (the only stand-in: no kubelet
// can run here). Scenarios from the seeds: showdown, equal shares, concurrency, restart,
// preemption. Every check is read back from the API server (pods, their decision annotations,
// events) or from the scheduler's own /ledger.
#include <csignal>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>

#include "tessera/prometheus.h"

#include "cli/cli.h"
#include "contract/decision.h"
#include "e2e/scheduler_harness.h"
#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/k8s_testing.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"
#include "webhook/webhook.h"

namespace tessera::scheduler {

using contract::Base64Encode;
using contract::DecisionDevice;
using contract::GenerateSigningKeyPem;
using contract::ParseDecision;
using contract::Signer;
using contract::Verifier;
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
constexpr std::uint64_t kGiB = 1ULL << 30;

json PodObject(const std::string& ns, const std::string& name,
               std::map<std::string, std::string> limits, const std::string& priority_class = "") {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec",
               {{"terminationGracePeriodSeconds", 0},
                {"containers",
                 {{{"name", "main"},
                   {"image", "registry.invalid/gpu-workload:1"},
                   {"resources", {{"limits", limits}}}}}}}}};
  if (!priority_class.empty()) pod["spec"]["priorityClassName"] = priority_class;
  return pod;
}

// One control plane, one tessera-scheduler for the whole suite.
struct Env {
  std::unique_ptr<e2e::TempFolder> folder;
  std::unique_ptr<e2e::TestCluster> cluster;
  std::unique_ptr<e2e::ChildProcess> scheduler;
  std::unique_ptr<k8s::Client> api;
  std::string public_key;
  std::string ca_pem;  // of the API server (for clients with other identities)
  int port = 0;
  int webhook_port = 0;
  int restarts = 0;
};
Env* env = nullptr;

e2e::SchedulerProcessOptions SchedulerOptions() {
  e2e::SchedulerProcessOptions o;
  o.binary = TESSERA_SCHEDULER_BINARY;
  o.kubeconfig = env->cluster->kubeconfig();
  o.port = env->port;
  o.signing_key = env->folder->path() + "/signing.pem";
  o.dir = env->folder->path();
  o.tag = std::to_string(env->restarts);
  o.tls_cert_file = env->folder->path() + "/webhook.crt";
  o.tls_key_file = env->folder->path() + "/webhook.key";
  o.webhook_port = env->webhook_port;
  o.policy_file = env->folder->path() + "/policy.yaml";
  o.extra_args = {"--count-claims"};  // the DRA path's quotas (the harness serves resource.k8s.io)
  return o;
}

Status StartScheduler() {
  auto child = e2e::StartTesseraScheduler(SchedulerOptions());
  if (!child.ok()) return child.status();
  env->scheduler = std::move(*child);
  ++env->restarts;
  return Status::Ok();
}

// The administrator's policy for the suite: two customer namespaces, a regulated one, a quota.
constexpr const char* kPolicy = R"(version: v1
tierAssignment:
  defaultTier: team
  namespaces:
    bank-a: customer
    bank-b: customer
    vault: regulated
quotas:
  quota:
    gpuMemory: 8Gi
  claimquota:
    gpuMemory: 8Gi
)";

class SchedulerE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    auto folder = e2e::TempFolder::Create("tessera-scheduler-e2e");
    ASSERT_OK(folder);
    env->folder = std::move(*folder);
    auto pem = GenerateSigningKeyPem();
    ASSERT_OK(pem);
    std::ofstream(env->folder->path() + "/signing.pem") << *pem;
    env->public_key = Signer::FromPem(*pem)->PublicKeyPem();
    env->port = k8s::FreeLoopbackPort();
    env->webhook_port = k8s::FreeLoopbackPort();
    ASSERT_GT(env->port, 0);
    ASSERT_GT(env->webhook_port, 0);
    std::ofstream(env->folder->path() + "/policy.yaml") << kPolicy;
    auto pki = k8s::testing::MakePki("tessera-webhook-ca");
    ASSERT_OK(pki);
    std::ofstream(env->folder->path() + "/webhook.crt") << pki->server_cert_pem;
    std::ofstream(env->folder->path() + "/webhook.key") << pki->server_key_pem;
    auto cp = e2e::StartControlPlane(env->folder->path(), env->port);
    ASSERT_OK(cp);
    env->cluster = std::move(cp->cluster);
    env->api = std::move(cp->api);
    env->ca_pem = cp->ca_pem;
    ASSERT_OK(StartScheduler());
    // The PriorityClasses the default policy maps tessera's priorities to.
    for (const auto& [name, value] :
         std::vector<std::pair<std::string, int>>{{"tessera-best-effort", 0},
                                                  {"tessera-normal", 1000},
                                                  {"tessera-latency-critical", 1000000}}) {
      ASSERT_OK(env->api->Create("/apis/scheduling.k8s.io/v1/priorityclasses",
                                 json{{"apiVersion", "scheduling.k8s.io/v1"},
                                      {"kind", "PriorityClass"},
                                      {"metadata", {{"name", name}}},
                                      {"value", value}}));
    }
    const std::string ca_b64 = Base64Encode(pki->ca_pem);
    auto [mutating, validating] = scheduler::WebhookConfigurations(env->webhook_port, ca_b64);
    ASSERT_OK(env->api->Create(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mutating));
    ASSERT_OK(env->api->Create(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", validating));
  }
  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed() && env->scheduler) {
      std::fprintf(stderr, "tessera-scheduler log tail:\n%s\n",
                   env->scheduler->LogTail(60).c_str());
    }
    env->scheduler.reset();
    env->api.reset();
    env->cluster.reset();
    delete env;
    env = nullptr;
  }

  k8s::Client& api() { return *env->api; }

  // Simulated GPU nodes for this test; removed (with their pods) when the test ends.
  std::unique_ptr<e2e::SimNodes> Nodes(const std::string& prefix, int nodes, int gpus,
                                       const std::string& memory = "16Gi") {
    e2e::SimNodesOptions o;
    o.kubeconfig = env->cluster->kubeconfig();
    o.nodes = nodes;
    o.gpus_per_node = gpus;
    o.gpu_memory = memory;
    o.prefix = prefix;
    o.extra_args = {"--delete-on-exit"};
    auto sim = e2e::SimNodes::Start(o);
    EXPECT_OK(sim);
    return sim.ok() ? std::move(*sim) : nullptr;
  }

  // Each test's pods go when it ends (no namespace controller runs to do it), so that a pod
  // left Pending cannot land on the next test's nodes.
  void TearDown() override {
    for (const std::string& ns : namespaces_) {
      for (const json& p : Pods(ns)) {
        k8s::DeleteOptions o;
        o.grace_period_seconds = 0;
        (void)api().Delete(k8s::PodPath(ns, p["metadata"]["name"].get<std::string>()), o);
      }
    }
  }
  std::vector<std::string> namespaces_;

  void Namespace(const std::string& ns) {
    namespaces_.push_back(ns);
    auto created = api().Create(
        "/api/v1/namespaces",
        json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
    ASSERT_OK(created);
    // No controller-manager runs in the harness: create the "default" ServiceAccount the
    // ServiceAccount admission plugin wants, as the token controller would.
    ASSERT_OK(api().Create("/api/v1/namespaces/" + ns + "/serviceaccounts",
                           json{{"apiVersion", "v1"},
                                {"kind", "ServiceAccount"},
                                {"metadata", {{"name", "default"}, {"namespace", ns}}}}));
  }

  static json Pod(const std::string& ns, const std::string& name,
                  std::map<std::string, std::string> limits,
                  const std::string& priority_class = "") {
    return PodObject(ns, name, std::move(limits), priority_class);
  }

  StatusOr<json> Create(const json& pod) {
    return api().Create(k8s::PodsPath(pod["metadata"]["namespace"].get<std::string>()), pod);
  }

  std::vector<json> Pods(const std::string& ns) {
    auto list = api().List(k8s::PodsPath(ns));
    EXPECT_OK(list);
    return list.ok() ? list->items : std::vector<json>{};
  }

  static std::string Phase(const json& pod) {
    return pod.value("/status/phase"_json_pointer, std::string());
  }

  // Polls until `done` holds or `limit` passes (a limit on waiting, not an assertion on time).
  template <typename F>
  bool WaitFor(F done, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(200ms);
    }
    return done();
  }

  std::size_t CountRunning(const std::string& ns) {
    std::size_t n = 0;
    for (const json& p : Pods(ns)) n += Phase(p) == "Running" ? 1U : 0U;
    return n;
  }

  json Ledger() {
    httplib::Client c("127.0.0.1", env->port);
    auto res = c.Get("/ledger");
    if (!res) return json{{"error", httplib::to_string(res.error())}};
    if (res->status != 200) return json{{"error", res->status}, {"body", res->body}};
    return json::parse(res->body, nullptr, false);
  }

  // Every pod of `ns` holding GPUs: its decision, checked against the pod (UID, node) and the
  // signature. Returns uuid -> (memory, cores) summed over the pods.
  std::map<std::string, std::pair<std::uint64_t, std::uint32_t>> Decided(const std::string& ns,
                                                                         std::size_t* pods) {
    auto verifier = Verifier::FromPem(env->public_key);
    EXPECT_OK(verifier);
    std::map<std::string, std::pair<std::uint64_t, std::uint32_t>> per_gpu;
    *pods = 0;
    for (const json& p : Pods(ns)) {
      const std::string node = p.value("/spec/nodeName"_json_pointer, std::string());
      if (node.empty()) continue;
      const json& ann = p["metadata"]["annotations"];
      const std::string text = ann.value("tessera.dev/decision", std::string());
      auto d = ParseDecision(text);
      EXPECT_OK(d) << p["metadata"]["name"];
      if (!d.ok()) continue;
      EXPECT_OK(verifier->Verify(text, ann.value("tessera.dev/decision-signature", std::string())));
      EXPECT_EQ(d->pod_uid, p["metadata"]["uid"]);
      EXPECT_EQ(d->node, node);
      for (const DecisionDevice& dev : d->containers.at(0).devices) {
        per_gpu[dev.uuid].first += dev.memory_bytes;
        per_gpu[dev.uuid].second += dev.cores_percent;
      }
      ++*pods;
    }
    return per_gpu;
  }

  void ExpectNoOvercommit(const std::string& ns, std::uint64_t gpu_memory, std::size_t* pods) {
    for (const auto& [uuid, use] : Decided(ns, pods)) {
      EXPECT_LE(use.first, gpu_memory) << uuid;
      EXPECT_LE(use.second, 100U) << uuid;
    }
  }

  std::vector<std::string> Events(const std::string& ns, const std::string& pod) {
    std::vector<std::string> out;
    k8s::ListOptions o;
    o.field_selector = "involvedObject.name=" + pod;
    auto list = api().List(k8s::EventsPath(ns), o);
    if (!list.ok()) return out;
    for (const json& e : list->items) {
      out.push_back(e.value("reason", std::string()) + ": " + e.value("message", std::string()));
    }
    return out;
  }
};

TEST_F(SchedulerE2E, ShowdownFourPodsOnOneGpuAndTheFifthIsToldWhy) {
  auto nodes = Nodes("showdown-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("showdown");
  for (const auto& [name, memory] :
       std::vector<std::pair<std::string, std::string>>{{"inference-1", "2Gi"},
                                                        {"inference-2", "2Gi"},
                                                        {"training", "8Gi"},
                                                        {"preprocessing", "3Gi"}}) {
    ASSERT_OK(Create(Pod("showdown", name, {{"tessera.dev/gpu-memory", memory}})));
  }
  ASSERT_TRUE(WaitFor([&] { return CountRunning("showdown") == 4; }, 120s));
  std::size_t pods = 0;
  auto per_gpu = Decided("showdown", &pods);
  EXPECT_EQ(pods, 4U);
  ASSERT_EQ(per_gpu.size(), 1U);  // all four on the one GPU
  EXPECT_EQ(per_gpu.begin()->second.first, 15 * kGiB);
  const json ledger = Ledger();
  std::uint64_t ledger_memory = 0;
  for (const json& g : ledger.value("gpus", json::array())) {
    if (g["node"] == "showdown-000") ledger_memory = g["memoryUsed"].get<std::uint64_t>();
  }
  EXPECT_EQ(ledger_memory, 15 * kGiB) << ledger.dump();

  ASSERT_OK(Create(Pod("showdown", "fifth", {{"tessera.dev/gpu-memory", "2Gi"}})));
  std::string why;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& e : Events("showdown", "fifth")) {
          if (e.rfind("FailedScheduling", 0) == 0) why = e;
        }
        return !why.empty();
      },
      60s));
  // kube-scheduler counts node-level GPU memory itself; the per-GPU reasons are tessera's.
  EXPECT_TRUE(why.find("tessera.dev/gpu-memory") != std::string::npos ||
              why.find("tessera:") != std::string::npos)
      << why;
  EXPECT_EQ(Phase(*api().Get(k8s::PodPath("showdown", "fifth"))), "Pending");
}

TEST_F(SchedulerE2E, EqualSharesFourQuartersOfOneGpu) {
  auto nodes = Nodes("shares-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("shares");
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(
        Create(Pod("shares", "quarter-" + std::to_string(i), {{"tessera.dev/gpu-cores", "25"}})));
  }
  ASSERT_TRUE(WaitFor([&] { return CountRunning("shares") == 4; }, 120s));
  std::size_t pods = 0;
  auto per_gpu = Decided("shares", &pods);
  ASSERT_EQ(per_gpu.size(), 1U);
  EXPECT_EQ(per_gpu.begin()->second.second, 100U);      // four 25 % shares
  EXPECT_EQ(per_gpu.begin()->second.first, 16 * kGiB);  // each 25 % of the memory
  ASSERT_OK(Create(Pod("shares", "fifth", {{"tessera.dev/gpu-cores", "25"}})));
  std::this_thread::sleep_for(3s);  // give the scheduler a chance to (wrongly) place it
  EXPECT_EQ(Phase(*api().Get(k8s::PodPath("shares", "fifth"))), "Pending");
}

// Random fractional asks; seeded, so a failure is reproducible.
json RandomPod(const std::string& ns, int i, std::mt19937& rng, int max_gib = 6) {
  std::map<std::string, std::string> limits;
  limits["tessera.dev/gpu-memory"] =
      std::to_string(1 + rng() % static_cast<unsigned>(max_gib)) + "Gi";
  if (rng() % 2 == 0) limits["tessera.dev/gpu-cores"] = std::to_string(5 + rng() % 26);
  return PodObject(ns, "p-" + std::to_string(i), limits);
}

TEST_F(SchedulerE2E, ConcurrencyFiveHundredPodsTwentyNodesNeverOvercommit) {
  auto nodes = Nodes("conc-", 20, 8, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("conc");
  std::mt19937 rng(20261130);
  std::vector<json> pods;
  for (int i = 0; i < 500; ++i) pods.push_back(RandomPod("conc", i, rng));
  // Created at once, from 8 threads.
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < pods.size(); i += 8) {
        if (!Create(pods[i]).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failed.load(), 0);
  ASSERT_TRUE(WaitFor([&] { return CountRunning("conc") == 500; }, 240s))
      << CountRunning("conc") << " of 500 running";
  std::size_t decided = 0;
  ExpectNoOvercommit("conc", 16 * kGiB, &decided);
  EXPECT_EQ(decided, 500U);  // none lost, every one with a verified decision
  EXPECT_EQ(Ledger()["reservations"], 0);
}

TEST_F(SchedulerE2E, RestartMidRunLosesNothingAndBooksNothingTwice) {
  auto nodes = Nodes("restart-", 4, 8, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("restart");
  std::mt19937 rng(7);
  std::vector<json> pods;
  // 150 pods of 1-4 GiB: about 375 GiB of the 512 GiB, so every one fits.
  for (int i = 0; i < 150; ++i) pods.push_back(RandomPod("restart", i, rng, 4));
  // The webhooks are down with the scheduler (failurePolicy Fail): the creator retries, as a
  // controller would.
  std::thread creator([&] {
    for (const json& p : pods) {
      Status st;
      for (int attempt = 0; attempt < 300; ++attempt) {
        st = Create(p).status();
        if (st.ok()) break;
        std::this_thread::sleep_for(200ms);
      }
      EXPECT_OK(st);
    }
  });
  ASSERT_TRUE(WaitFor([&] { return CountRunning("restart") >= 30; }, 120s));
  ASSERT_OK(env->scheduler->Signal(SIGKILL));  // mid-run, no goodbye
  env->scheduler->Wait(10s);
  ASSERT_OK(StartScheduler());
  creator.join();
  ASSERT_TRUE(WaitFor([&] { return CountRunning("restart") == pods.size(); }, 240s))
      << CountRunning("restart") << " of " << pods.size() << " running";
  std::size_t decided = 0;
  ExpectNoOvercommit("restart", 16 * kGiB, &decided);
  EXPECT_EQ(decided, pods.size());
  // The restarted ledger agrees with the decisions in the API.
  std::uint64_t ledger_memory = 0;
  const json ledger = Ledger();
  for (const json& g : ledger.value("gpus", json::array())) {
    if (g["node"].get<std::string>().rfind("restart-", 0) == 0)
      ledger_memory += g["memoryUsed"].get<std::uint64_t>();
  }
  std::uint64_t decided_memory = 0;
  for (const auto& [uuid, use] : Decided("restart", &decided)) decided_memory += use.first;
  EXPECT_EQ(ledger_memory, decided_memory) << ledger.dump().substr(0, 2000);
}

TEST_F(SchedulerE2E, PreemptionLatencyCriticalDisplacesBestEffort) {
  auto nodes = Nodes("preempt-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("preempt");
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(Create(Pod("preempt", "batch-" + std::to_string(i),
                         {{"tessera.dev/gpu-memory", "4Gi"}}, "tessera-best-effort")));
  }
  ASSERT_TRUE(WaitFor([&] { return CountRunning("preempt") == 4; }, 120s));
  ASSERT_OK(Create(Pod("preempt", "inference", {{"tessera.dev/gpu-memory", "8Gi"}},
                       "tessera-latency-critical")));
  ASSERT_TRUE(WaitFor(
      [&] { return Phase(*api().Get(k8s::PodPath("preempt", "inference"))) == "Running"; }, 120s));
  std::size_t batch_left = 0;
  for (const json& p : Pods("preempt")) {
    batch_left += p["metadata"]["name"].get<std::string>().rfind("batch-", 0) == 0;
  }
  EXPECT_EQ(batch_left, 2U);  // exactly the two needed for 8 GiB
  std::size_t decided = 0;
  ExpectNoOvercommit("preempt", 16 * kGiB, &decided);
  EXPECT_EQ(decided, 3U);
}

// --- admission (docs/design/0013) ---------------------------------------------------------

// The seeds' KAI manifests, as written there: gpu-memory in MiB, schedulerName kai-scheduler,
// no resources. Admitted, translated and placed: all four on the one 16 GiB GPU.
TEST_F(SchedulerE2E, SeedKaiManifestsAreTranslatedAndPlaced) {
  auto nodes = Nodes("seed-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("seed");
  for (const auto& [name, mib] :
       std::vector<std::pair<std::string, std::string>>{{"inference-1", "2000"},
                                                        {"inference-2", "2000"},
                                                        {"training", "8000"},
                                                        {"preprocessing", "3000"}}) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", name}, {"namespace", "seed"}, {"annotations", {{"gpu-memory", mib}}}}},
                {"spec",
                 {{"schedulerName", "kai-scheduler"},
                  {"terminationGracePeriodSeconds", 0},
                  {"containers", {{{"name", "inference"}, {"image", "inference:latest"}}}}}}};
    ASSERT_OK(Create(pod));
  }
  // And KAI's other form, a share of the GPU's memory (1/16 of 16 GiB = 1 GiB).
  ASSERT_OK(Create(json{{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata",
                         {{"name", "fraction"},
                          {"namespace", "seed"},
                          {"annotations", {{"gpu-fraction", "0.0625"}}}}},
                        {"spec",
                         {{"schedulerName", "kai-scheduler"},
                          {"terminationGracePeriodSeconds", 0},
                          {"containers", {{{"name", "c"}, {"image", "x"}}}}}}}));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("seed") == 5; }, 120s));
  for (const json& p : Pods("seed")) {
    EXPECT_EQ(p["spec"]["schedulerName"], "default-scheduler");
    EXPECT_TRUE(p["spec"]["containers"][0]["resources"]["limits"].contains("tessera.dev/gpu-slot"));
  }
  std::size_t pods = 0;
  auto per_gpu = Decided("seed", &pods);
  EXPECT_EQ(pods, 5U);  // every one with a decision: none bound by kube-scheduler alone
  ASSERT_EQ(per_gpu.size(), 1U);
  EXPECT_EQ(per_gpu.begin()->second.first, (15000ULL << 20) + (1ULL << 30));
}

// A client with another identity: a service account with rights on pods in `ns`.
std::unique_ptr<k8s::Client> Tenant(k8s::Client& admin, const std::string& ns) {
  auto must = [](const StatusOr<json>& r) { EXPECT_OK(r); };
  must(admin.Create(
      "/api/v1/namespaces/" + ns + "/serviceaccounts",
      json{{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "tenant"}}}}));
  must(admin.Create("/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/roles",
                    json{{"apiVersion", "rbac.authorization.k8s.io/v1"},
                         {"kind", "Role"},
                         {"metadata", {{"name", "tenant"}}},
                         {"rules",
                          {{{"apiGroups", {""}},
                            {"resources", {"pods", "pods/binding"}},
                            {"verbs", {"get", "list", "create", "update", "patch"}}}}}}));
  must(admin.Create(
      "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/rolebindings",
      json{{"apiVersion", "rbac.authorization.k8s.io/v1"},
           {"kind", "RoleBinding"},
           {"metadata", {{"name", "tenant"}}},
           {"roleRef",
            {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "tenant"}}},
           {"subjects", {{{"kind", "ServiceAccount"}, {"name", "tenant"}, {"namespace", ns}}}}}));
  auto token = admin.Create("/api/v1/namespaces/" + ns + "/serviceaccounts/tenant/token",
                            json{{"apiVersion", "authentication.k8s.io/v1"},
                                 {"kind", "TokenRequest"},
                                 {"spec", {{"expirationSeconds", 3600}}}});
  EXPECT_OK(token);
  if (!token.ok()) return nullptr;
  k8s::Config c = admin.config();
  c.client_cert_pem.clear();
  c.client_key_pem.clear();
  c.bearer_token = (*token)["status"]["token"];
  auto client = k8s::Client::New(c);
  EXPECT_OK(client);
  return client.ok() ? std::move(*client) : nullptr;
}

TEST_F(SchedulerE2E, ForgeryDecisionsCannotBeWrittenByTenants) {
  auto nodes = Nodes("forge-", 1, 2, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("forge");
  auto tenant = Tenant(api(), "forge");
  ASSERT_NE(tenant, nullptr);
  // The tenant's own GPU pod is admitted and placed, with the scheduler's decision.
  ASSERT_OK(tenant->Create(k8s::PodsPath("forge"),
                           Pod("forge", "honest", {{"tessera.dev/gpu-memory", "2Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("forge") == 1; }, 60s));
  // Raising its own share by editing the decision: denied, and kubectl would print why.
  auto patched = tenant->Patch(
      k8s::PodPath("forge", "honest"),
      json{{"metadata", {{"annotations", {{"tessera.dev/decision", "{\"memoryBytes\":1}"}}}}}},
      k8s::PatchType::kMerge);
  ASSERT_FALSE(patched.ok());
  EXPECT_NE(
      patched.status().message().find("only the tessera scheduler may set, change or remove it"),
      std::string::npos)
      << patched.status().message();
  // Creating a pod already placed, with a forged decision: denied.
  json forged = Pod("forge", "forged", {{"tessera.dev/gpu-memory", "12Gi"}});
  forged["spec"]["nodeName"] = "forge-000";
  forged["metadata"]["annotations"] = {{"tessera.dev/decision", "{}"},
                                       {"tessera.dev/decision-signature", "AAAA"}};
  auto created = tenant->Create(k8s::PodsPath("forge"), forged);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("only the tessera scheduler writes decisions"),
            std::string::npos)
      << created.status().message();
  // Without the annotation but with nodeName: still denied (the scheduler places GPU pods).
  forged["metadata"].erase("annotations");
  auto direct = tenant->Create(k8s::PodsPath("forge"), forged);
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.status().message().find("spec.nodeName"), std::string::npos);
  // Binding a pod itself with a decision: denied.
  ASSERT_OK(tenant->Create(k8s::PodsPath("forge"), Pod("forge", "waiting", {{"cpu", "1"}})));
  auto bound = tenant->Create(
      k8s::PodBindingPath("forge", "waiting"),
      json{{"apiVersion", "v1"},
           {"kind", "Binding"},
           {"metadata", {{"name", "waiting"}, {"annotations", {{"tessera.dev/decision", "{}"}}}}},
           {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "forge-000"}}}});
  EXPECT_FALSE(bound.ok());
}

TEST_F(SchedulerE2E, TrustCustomersNeverShareAcrossNamespacesRegulatedGetsWholeGpus) {
  auto nodes = Nodes("trust-", 1, 3, "16Gi");
  ASSERT_NE(nodes, nullptr);
  for (const char* ns : {"bank-a", "bank-b", "vault", "team"}) Namespace(ns);
  // Regulated: a whole GPU, which nobody else gets.
  ASSERT_OK(Create(Pod("vault", "whole", {{"tessera.dev/gpu", "1"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("vault") == 1; }, 60s));
  ASSERT_OK(Create(Pod("bank-a", "a", {{"tessera.dev/gpu-memory", "2Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("bank-a") == 1; }, 60s));
  ASSERT_OK(Create(Pod("bank-b", "b", {{"tessera.dev/gpu-memory", "2Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("bank-b") == 1; }, 60s));
  std::size_t n = 0;
  auto a = Decided("bank-a", &n);
  auto b = Decided("bank-b", &n);
  ASSERT_EQ(a.size(), 1U);
  ASSERT_EQ(b.size(), 1U);
  auto v = Decided("vault", &n);
  ASSERT_EQ(v.size(), 1U);
  EXPECT_EQ(v.begin()->second.first, 16 * kGiB);  // all of it
  EXPECT_EQ(v.begin()->second.second, 100U);
  // Three tenants, three GPUs: never one shared.
  EXPECT_EQ((std::set<std::string>{a.begin()->first, b.begin()->first, v.begin()->first}.size()),
            3U);
  // A third tenant finds no GPU it may share with either bank: it waits, and is told why.
  ASSERT_OK(Create(Pod("team", "t", {{"tessera.dev/gpu-memory", "1Gi"}})));
  std::string why;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& e : Events("team", "t")) {
          if (e.rfind("FailedScheduling", 0) == 0) why = e;
        }
        return !why.empty();
      },
      60s));
  EXPECT_NE(why.find("co-tenancy"), std::string::npos) << why;
  // Regulated: a fraction is refused at admission with the rule; whole GPUs are fine.
  auto frac = Create(Pod("vault", "frac", {{"tessera.dev/gpu-memory", "1Gi"}}));
  ASSERT_FALSE(frac.ok());
  EXPECT_NE(frac.status().message().find("tier regulated allows no shared-GPU mode"),
            std::string::npos)
      << frac.status().message();
}

TEST_F(SchedulerE2E, QuotaDeniesWithTheNumbers) {
  auto nodes = Nodes("quota-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("quota");
  ASSERT_OK(Create(Pod("quota", "first", {{"tessera.dev/gpu-memory", "6Gi"}})));
  auto second = Create(Pod("quota", "second", {{"tessera.dev/gpu-memory", "4Gi"}}));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(
                "quotas.quota.gpuMemory 8Gi exceeded: in use 6.00 GiB + asked 4.00 GiB"),
            std::string::npos)
      << second.status().message();
  ASSERT_OK(Create(Pod("quota", "third", {{"tessera.dev/gpu-memory", "2Gi"}})));
  // The refused pod gets an Event naming the rule, and /metrics counts the denial by rule.
  std::string told;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& e : Events("quota", "second")) {
          if (e.rfind("TesseraAdmissionDenied", 0) == 0) told = e;
        }
        return !told.empty();
      },
      30s));
  EXPECT_NE(told.find("rule quota: "), std::string::npos) << told;
  EXPECT_NE(told.find("quotas.quota.gpuMemory 8Gi exceeded"), std::string::npos) << told;
  httplib::Client c("127.0.0.1", env->port);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  auto samples = prom::ParseExposition(res->body);
  ASSERT_OK(samples);
  std::map<std::string, double> denials;
  double decisions = -1, filter_count = -1;
  for (const prom::Sample& x : *samples) {
    if (x.name == "tessera_admission_denials_total") denials[x.labels.at("rule")] = x.value;
    if (x.name == "tessera_scheduler_decisions_total") decisions = x.value;
    if (x.name == "tessera_scheduler_request_seconds_count" && x.labels.at("verb") == "filter")
      filter_count = x.value;
  }
  EXPECT_GE(denials["quota"], 1);
  EXPECT_EQ(denials.size(), webhook::kDenialRules);  // every rule is exported, zero or not
  EXPECT_GE(decisions, 1);
  EXPECT_GE(filter_count, 2);
}

TEST_F(SchedulerE2E, BadInputIsRejectedWithItsMessage) {
  auto nodes = Nodes("bad-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("bad");
  struct Case {
    std::map<std::string, std::string> limits;
    std::map<std::string, std::string> annotations;
    const char* message;
  };
  const Case cases[] = {
      {{}, {{"gpu-memory", "abc"}}, "annotation gpu-memory"},
      {{{"tessera.dev/gpu-memory", "0"}}, {}, "must be more than 0 bytes"},
      {{{"tessera.dev/gpu-memory", "200Gi"}}, {}, "more than any GPU in the cluster has"},
      {{{"tessera.dev/gpu-cores", "0"}}, {}, "expected a whole percent, 1-100"},
      {{{"tessera.dev/gpu-cores", "101"}}, {}, "expected a whole percent, 1-100"},
      {{}, {{"gpu-fraction", "0.5"}, {"gpu-memory", "2000"}}, "say the same thing twice"},
      {{{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/mode", "exclusive"}}, "shared or mps"},
  };
  int i = 0;
  for (const Case& c : cases) {
    json pod = Pod("bad", "bad-" + std::to_string(i++), c.limits);
    if (!c.annotations.empty()) pod["metadata"]["annotations"] = c.annotations;
    auto created = Create(pod);
    ASSERT_FALSE(created.ok()) << c.message;
    EXPECT_NE(created.status().message().find(c.message), std::string::npos)
        << created.status().message();
  }
  // The API server itself refuses what is not a quantity at all, before any webhook sees it.
  for (const char* text : {"abc", "-1Gi"}) {
    auto created = Create(Pod("bad", "not-a-quantity", {{"tessera.dev/gpu-memory", text}}));
    ASSERT_FALSE(created.ok()) << text;
  }
  EXPECT_TRUE(Pods("bad").empty());  // nothing half-created
}

// The DRA path: claims and claim templates asking tessera's DeviceClasses are checked when the
// real API server creates them (kube-scheduler's allocator would round or leave them Pending
// without a word), each refusal naming the field and the accepted form; a good claim is created.
TEST_F(SchedulerE2E, DraClaimsAreRefusedAtAdmissionWithTheField) {
  auto nodes = Nodes("claims-", 1, 1, "16Gi");  // the largest GPU tessera-scheduler knows of
  ASSERT_NE(nodes, nullptr);
  Namespace("claims");
  auto claim_spec = [](const json& capacity, const json& parameters) {
    json spec = {{"devices",
                  {{"requests",
                    {{{"name", "gpu"},
                      {"exactly",
                       {{"deviceClassName", "shared.gpu.tessera.dev"},
                        {"capacity", {{"requests", capacity}}}}}}}}}}};
    if (!parameters.is_null()) {
      spec["devices"]["config"] = {
          {{"opaque", {{"driver", "gpu.tessera.dev"}, {"parameters", parameters}}}}};
    }
    return spec;
  };
  auto create = [&](const std::string& kind, const std::string& name, const json& spec) {
    const bool is_template = kind == "ResourceClaimTemplate";
    return env->api->Create(std::string("/apis/resource.k8s.io/v1/namespaces/claims/") +
                                (is_template ? "resourceclaimtemplates" : "resourceclaims"),
                            json{{"apiVersion", "resource.k8s.io/v1"},
                                 {"kind", kind},
                                 {"metadata", {{"name", name}}},
                                 {"spec", is_template ? json{{"spec", spec}} : spec}});
  };
  const json lc = {{"apiVersion", "gpu.tessera.dev/v1alpha1"},
                   {"kind", "GpuConfig"},
                   {"priority", "latency-critical"}};
  struct Case {
    json capacity, parameters;
    const char* message;
  };
  const Case cases[] = {
      {{{"memory", "0"}}, nullptr, "capacity.requests.memory: 0 asks no memory; accepted"},
      {{{"memory", "20Gi"}}, nullptr, "more than any GPU in the cluster has (largest: 16.00 GiB"},
      {{{"cores", "101"}}, nullptr, "capacity.requests.cores: 101 is not a share"},
      {{{"gpu-memory", "4Gi"}}, nullptr, "unknown capacity; devices of gpu.tessera.dev offer"},
      {{{"memory", "4Gi"}}, lc, "latency-critical is set by a DeviceClass's config"},
  };
  int i = 0;
  for (const Case& c : cases) {
    for (const char* kind : {"ResourceClaim", "ResourceClaimTemplate"}) {
      auto created = create(kind, "bad-" + std::to_string(i), claim_spec(c.capacity, c.parameters));
      ASSERT_FALSE(created.ok()) << kind << " " << c.message;
      EXPECT_NE(created.status().message().find(std::string(kind) + " claims/bad-"),
                std::string::npos)
          << created.status().message();
      EXPECT_NE(created.status().message().find(c.message), std::string::npos)
          << created.status().message();
    }
    ++i;
  }
  ASSERT_OK(
      create("ResourceClaim", "good", claim_spec({{"memory", "4Gi"}, {"cores", "30"}}, nullptr)));
  ASSERT_OK(create("ResourceClaimTemplate", "good", claim_spec({{"memory", "4Gi"}}, nullptr)));
  // Claims of other classes are not sent to the webhook at all (its matchConditions), and the
  // condition evaluates on both kinds (an error there would refuse them under failurePolicy Fail).
  json other = claim_spec({{"memory", "0"}}, nullptr);
  other["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com";
  ASSERT_OK(create("ResourceClaim", "other", other));
  ASSERT_OK(create("ResourceClaimTemplate", "other", other));
}

// On the DRA path a namespace's quota counts its claims of tessera's classes (tessera-scheduler
// watches them, --count-claims): a claim over the quota is refused with the numbers, a deleted
// claim frees its part, and pods' fractional asks and claims add up.
TEST_F(SchedulerE2E, DraClaimsCountAgainstTheNamespacesQuota) {
  auto nodes = Nodes("claimquota-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("claimquota");
  auto claim = [](const std::string& name, const std::string& memory) {
    return json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"devices",
                   {{"requests",
                     {{{"name", "gpu"},
                       {"exactly",
                        {{"deviceClassName", "shared.gpu.tessera.dev"},
                         {"capacity", {{"requests", {{"memory", memory}}}}}}}}}}}}}}};
  };
  const std::string claims = "/apis/resource.k8s.io/v1/namespaces/claimquota/resourceclaims";
  ASSERT_OK(api().Create(claims, claim("first", "6Gi")));
  auto second = api().Create(claims, claim("second", "4Gi"));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(
                "ResourceClaim claimquota/second: namespace claimquota: quota "
                "quotas.claimquota.gpuMemory 8Gi exceeded: in use 6.00 GiB + asked 4.00 GiB"),
            std::string::npos)
      << second.status().message();
  // A template takes nothing until a pod's claim is made from it.
  json tmpl = claim("template", "4Gi");
  tmpl["kind"] = "ResourceClaimTemplate";
  tmpl["spec"] = json{{"spec", tmpl["spec"]}};
  ASSERT_OK(
      api().Create("/apis/resource.k8s.io/v1/namespaces/claimquota/resourceclaimtemplates", tmpl));
  // The deleted claim frees its memory once the watch has seen it go.
  ASSERT_OK(api().Delete(k8s::ResourceClaimPath("claimquota", "first"), {}));
  EXPECT_TRUE(WaitFor([&] { return api().Create(claims, claim("second", "4Gi")).ok(); }, 10s));
  // A pod's fractional ask and the claim add up: 4Gi claimed + 6Gi asked > 8Gi.
  auto pod = Create(Pod("claimquota", "pod", {{"tessera.dev/gpu-memory", "6Gi"}}));
  ASSERT_FALSE(pod.ok());
  EXPECT_NE(pod.status().message().find("in use 4.00 GiB + asked 6.00 GiB"), std::string::npos)
      << pod.status().message();
}

// A latency-critical pod goes beside a long batch pod on the shared GPU: the batch pod asked for
// memory only (best effort: it reserves no compute), so the compute share the latency-critical
// pod asks for is free, and it does not wait for the batch's lifetime.
TEST_F(SchedulerE2E, RealtimeLatencyCriticalRunsBesideALongBatchPod) {
  auto nodes = Nodes("rt-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("rt");
  ASSERT_OK(Create(Pod("rt", "batch", {{"tessera.dev/gpu-memory", "10Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("rt") == 1; }, 60s));
  json lc =
      Pod("rt", "inference", {{"tessera.dev/gpu-memory", "4Gi"}, {"tessera.dev/gpu-cores", "60"}});
  lc["metadata"]["annotations"] = {{"tessera.dev/priority", "latency-critical"}};
  lc["spec"]["priorityClassName"] = "tessera-latency-critical";
  ASSERT_OK(Create(lc));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("rt") == 2; }, 60s));
  std::size_t pods = 0;
  auto per_gpu = Decided("rt", &pods);
  ASSERT_EQ(per_gpu.size(), 1U);  // the same GPU
  EXPECT_EQ(per_gpu.begin()->second.first, 14 * kGiB);
  EXPECT_EQ(per_gpu.begin()->second.second, 60U);
}

// What a Service selecting the leader does in a cluster: kube-scheduler's extender URL reaches
// whichever replica says it leads (GET /leaderz), else 503.
class LeaderProxy {
 public:
  LeaderProxy(int port, std::vector<int> replicas) : replicas_(std::move(replicas)) {
    server_.Post(R"(/(\w+))", [this](const httplib::Request& req, httplib::Response& res) {
      for (int replica : replicas_) {
        httplib::Client c("127.0.0.1", replica);
        c.set_connection_timeout(1);
        auto leader = c.Get("/leaderz");
        if (!leader || leader->status != 200) continue;
        auto answer = c.Post(req.path, req.body, "application/json");
        if (!answer) continue;
        res.status = answer->status;
        res.set_content(answer->body, "application/json");
        return;
      }
      res.status = 503;
    });
    server_.set_tcp_nodelay(true);
    bound_ = server_.bind_to_port("127.0.0.1", port);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~LeaderProxy() {
    server_.stop();
    thread_.join();
  }
  bool bound() const { return bound_; }

 private:
  std::vector<int> replicas_;
  httplib::Server server_;
  bool bound_ = false;
  std::thread thread_;
};

TEST_F(SchedulerE2E, FailoverTheOtherReplicaTakesOverWithoutDoubleBooking) {
  auto nodes = Nodes("ha-", 4, 8, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("ha");
  // Two replicas with leader election replace the suite's single scheduler; a proxy stands in
  // for the Service in front of them.
  env->scheduler->Stop();
  env->scheduler.reset();
  const int pa = k8s::FreeLoopbackPort();
  const int pb = k8s::FreeLoopbackPort();
  std::vector<std::unique_ptr<e2e::ChildProcess>> replicas;
  for (int i = 0; i < 2; ++i) {
    e2e::SchedulerProcessOptions o = SchedulerOptions();
    o.port = i == 0 ? pa : pb;
    o.tag = "ha-" + std::to_string(i);
    if (i == 1) o.webhook_port = k8s::FreeLoopbackPort();  // the API server calls replica 0's
    o.extra_args = {"--leader-elect",
                    "--lease-namespace",
                    "default",
                    "--identity",
                    "replica-" + std::to_string(i),
                    "--lease-duration-s",
                    "2",
                    "--renew-deadline-ms",
                    "1500",
                    "--retry-period-ms",
                    "300"};
    auto child = e2e::StartTesseraScheduler(o);
    ASSERT_OK(child);
    replicas.push_back(std::move(*child));
  }
  LeaderProxy proxy(env->port, {pa, pb});
  ASSERT_TRUE(proxy.bound());
  auto leader = [&]() -> int {
    for (int i = 0; i < 2; ++i) {
      httplib::Client c("127.0.0.1", i == 0 ? pa : pb);
      auto r = c.Get("/leaderz");
      if (r && r->status == 200 && replicas[static_cast<std::size_t>(i)]->Running()) return i;
    }
    return -1;
  };
  int first = -1;
  ASSERT_TRUE(WaitFor([&] { return (first = leader()) >= 0; }, 30s));

  std::mt19937 rng(11);
  std::vector<json> pods;
  for (int i = 0; i < 120; ++i) pods.push_back(RandomPod("ha", i, rng, 4));
  for (const json& p : pods) ASSERT_OK(Create(p));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("ha") >= 20; }, 60s));
  // The follower refuses the verbs while it follows.
  {
    httplib::Client follower("127.0.0.1", first == 0 ? pb : pa);
    auto answer = follower.Post("/filter", json{{"Pod", pods[0]}, {"NodeNames", {"ha-000"}}}.dump(),
                                "application/json");
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 503);
  }
  ASSERT_OK(replicas[static_cast<std::size_t>(first)]->Signal(SIGKILL));  // no release
  replicas[static_cast<std::size_t>(first)]->Wait(10s);
  int second = -1;
  ASSERT_TRUE(WaitFor([&] { return (second = leader()) >= 0; }, 30s));
  EXPECT_NE(second, first);
  ASSERT_TRUE(WaitFor([&] { return CountRunning("ha") == pods.size(); }, 180s))
      << CountRunning("ha") << " of " << pods.size() << " running";
  std::size_t decided = 0;
  ExpectNoOvercommit("ha", 16 * kGiB, &decided);
  EXPECT_EQ(decided, pods.size());

  for (auto& r : replicas) r->Stop();
  ASSERT_OK(StartScheduler());  // the suite's single scheduler again
}

TEST_F(SchedulerE2E, ExplainSaysWhereAPodIsAndWhyAnotherWaits) {
  auto nodes = Nodes("explain-", 1, 1, "16Gi");
  ASSERT_NE(nodes, nullptr);
  Namespace("explain");
  ASSERT_OK(Create(Pod("explain", "placed", {{"tessera.dev/gpu-memory", "12Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return CountRunning("explain") == 1; }, 60s));
  ASSERT_OK(Create(Pod("explain", "waiting", {{"tessera.dev/gpu-memory", "8Gi"}})));
  ASSERT_TRUE(WaitFor([&] { return !Events("explain", "waiting").empty(); }, 60s));
  auto run = [](std::vector<std::string> args) {
    std::vector<const char*> argv = {"tessera"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = cli::Run(static_cast<int>(argv.size()), argv.data(), out, err);
    EXPECT_EQ(code, 0) << err.str();
    return out.str();
  };
  const std::string scheduler = "http://127.0.0.1:" + std::to_string(env->port);
  const std::string placed = run({"explain", "pod", "explain/placed", "--kubeconfig",
                                  env->cluster->kubeconfig(), "--scheduler", scheduler});
  EXPECT_NE(placed.find("Running on explain-000"), std::string::npos) << placed;
  EXPECT_NE(placed.find("decision (key e2e"), std::string::npos) << placed;
  EXPECT_NE(placed.find("12.00 GiB, 0 %, shared"), std::string::npos) << placed;
  const std::string waiting = run({"explain", "pod", "explain/waiting", "--kubeconfig",
                                   env->cluster->kubeconfig(), "--scheduler", scheduler});
  EXPECT_NE(waiting.find("explain/waiting: Pending"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find("event FailedScheduling"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find("memory: 4.00 GiB free, asks 8.00 GiB"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find("0 GPU(s) could take it now"), std::string::npos) << waiting;
}

}  // namespace
}  // namespace tessera::scheduler
