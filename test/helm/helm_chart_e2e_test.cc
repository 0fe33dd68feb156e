// The Helm chart on the real control plane (test/e2e harness: etcd, kube-apiserver and
// kube-scheduler from the upstream modules; simulated GPU nodes): `helm install` has every
// object accepted by the API server; `helm upgrade` keeps the generated signing key; the
// harness's kube-scheduler runs the chart's own KubeSchedulerConfiguration (validated by
// kube-scheduler's code), calling a tessera-scheduler started with the chart's rendered
// arguments, as the chart's service account (its token: the chart's RBAC, nothing more) and
// with the chart's key; the chart's webhooks admit and mutate a GPU pod, which gets bound with
// a decision the node agents' public key verifies, and refuse a forged decision; and a
// node-agent token bound to a pod on one node can do what tessera-node does to that node and
// nothing to another node (RBAC + the ValidatingAdmissionPolicy).
// Label e2e: needs TESSERA_TESTCLUSTER (test/e2e/harness/build.sh) and Helm (hack/helm.sh).
#include <chrono>
#include <thread>

#include "contract/decision.h"
#include "e2e/scheduler_harness.h"
#include "e2e/testcluster.h"
#include "helm/helm_testing.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/events.h"
#include "k8s/k8s_testing.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"

namespace tessera::helmtest {
namespace {

using namespace std::chrono_literals;

const std::string kTenants = "gpu-team";  // where the test's GPU pods live

struct Env {
  std::unique_ptr<e2e::TempFolder> folder;
  std::unique_ptr<e2e::TestCluster> cluster;
  std::unique_ptr<k8s::Client> api;  // cluster admin
  k8s::Config admin;
  std::unique_ptr<e2e::SimNodes> nodes;
  std::unique_ptr<e2e::ChildProcess> scheduler;
  std::string values;  // the values file of the release
  int webhook_port = 0;
};
Env* env = nullptr;

Ran HelmCli(std::vector<std::string> args) {
  args.insert(args.begin(), *Helm().path);
  args.insert(args.end(), {"--kubeconfig", env->cluster->kubeconfig()});
  return RunProgram(args, HelmEnvironment(env->folder->path() + "/helm"));
}

template <typename F>
bool WaitFor(F done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return done();
}

// A client that authenticates with `token` only.
std::unique_ptr<k8s::Client> ClientWithToken(const std::string& token) {
  k8s::Config c = env->admin;
  c.client_cert_pem.clear();
  c.client_key_pem.clear();
  c.bearer_token = token;
  auto client = k8s::Client::New(c);
  EXPECT_OK(client);
  return client.ok() ? std::move(*client) : nullptr;
}

// A token of a service account of the release (TokenRequest), bound to `pod` when given.
std::string Token(const std::string& service_account, const json& pod = nullptr) {
  json request = {{"apiVersion", "authentication.k8s.io/v1"},
                  {"kind", "TokenRequest"},
                  {"spec", {{"expirationSeconds", 3600}}}};
  if (!pod.is_null()) {
    request["spec"]["boundObjectRef"] = {{"apiVersion", "v1"},
                                         {"kind", "Pod"},
                                         {"name", pod["metadata"]["name"]},
                                         {"uid", pod["metadata"]["uid"]}};
  }
  auto r = env->api->Create(
      "/api/v1/namespaces/" + kNamespace + "/serviceaccounts/" + service_account + "/token",
      request);
  EXPECT_OK(r);
  return r.ok() ? r->value("/status/token"_json_pointer, std::string()) : "";
}

json PodObject(const std::string& ns, const std::string& name, const std::string& node = "",
               const std::string& service_account = "") {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"spec",
       {{"terminationGracePeriodSeconds", 0},
        {"containers", {{{"name", "main"}, {"image", "registry.invalid/gpu-workload:1"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  if (!service_account.empty()) pod["spec"]["serviceAccountName"] = service_account;
  return pod;
}

Status CreateNamespace(const std::string& ns) {
  auto created = env->api->Create(
      "/api/v1/namespaces",
      json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  if (!created.ok()) return created.status();
  // No controller-manager runs in the harness: the "default" ServiceAccount, as it would make.
  return env->api
      ->Create("/api/v1/namespaces/" + ns + "/serviceaccounts",
               json{{"apiVersion", "v1"},
                    {"kind", "ServiceAccount"},
                    {"metadata", {{"name", "default"}, {"namespace", ns}}}})
      .status();
}

class HelmChartE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(Helm().path) << Helm().why;
    env = new Env;
    auto folder = e2e::TempFolder::Create("tessera-helm-e2e");
    ASSERT_OK(folder);
    env->folder = std::move(*folder);
    const std::string dir = env->folder->path();
    const int extender_port = k8s::FreeLoopbackPort();
    env->webhook_port = k8s::FreeLoopbackPort();
    ASSERT_GT(extender_port, 0);
    ASSERT_GT(env->webhook_port, 0);

    // The webhooks' certificate: mode secret, valid for the Service and for 127.0.0.1, where the
    // API server (same machine, no pod network) reaches the test's tessera-scheduler.
    auto pki = k8s::testing::MakePki(
        "tessera-helm-e2e-ca", "IP:127.0.0.1,DNS:" + kPrefix + "-webhook." + kNamespace + ".svc");
    ASSERT_OK(pki);
    WriteFile(dir + "/mounts/etc/tessera/tls/tls.crt", pki->server_cert_pem);
    WriteFile(dir + "/mounts/etc/tessera/tls/tls.key", pki->server_key_pem);
    YAML::Node values;
    values["scheduler"]["extenderPort"] = extender_port;
    values["webhooks"]["tls"]["mode"] = "secret";
    values["webhooks"]["tls"]["existingSecret"] = "webhook-serving";
    values["webhooks"]["tls"]["caBundle"] = pki->ca_pem;
    YAML::Emitter emitted;
    emitted << values;
    env->values = dir + "/values.yaml";
    WriteFile(env->values, emitted.c_str());

    // kube-scheduler runs the chart's configuration (the harness adds only its kubeconfig).
    const Ran rendered =
        RunProgram({*Helm().path, "template", kRelease, kChart, "--namespace", kNamespace,
                    "--kube-version", kKubeVersion, "--values", env->values, "--show-only",
                    "templates/kube-scheduler-config.yaml"},
                   HelmEnvironment(dir + "/helm"));
    ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
    const Manifests config = ParseManifests(rendered.out);
    ASSERT_EQ(config.objects.size(), 1u);
    WriteFile(dir + "/kube-scheduler.yaml",
              config.objects[0]["data"]["config.yaml"].as<std::string>());
    e2e::TestClusterOptions o;
    o.scheduler_config = dir + "/kube-scheduler.yaml";
    auto cluster = e2e::TestCluster::Start(o);
    ASSERT_OK(cluster);
    env->cluster = std::move(*cluster);
    auto admin = k8s::LoadKubeconfig(env->cluster->kubeconfig());
    ASSERT_OK(admin);
    admin->qps = 200;
    admin->burst = 400;
    env->admin = *admin;
    auto api = k8s::Client::New(*admin);
    ASSERT_OK(api);
    env->api = std::move(*api);

    ASSERT_OK(CreateNamespace(kNamespace));
    ASSERT_OK(CreateNamespace(kTenants));
    ASSERT_OK(env->api->Create(
        "/api/v1/namespaces/" + kNamespace + "/secrets",
        json{{"apiVersion", "v1"},
             {"kind", "Secret"},
             {"type", "kubernetes.io/tls"},
             {"metadata", {{"name", "webhook-serving"}, {"namespace", kNamespace}}},
             {"stringData",
              {{"tls.crt", pki->server_cert_pem}, {"tls.key", pki->server_key_pem}}}}));
  }

  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed() && env->scheduler) {
      std::fprintf(stderr, "tessera-scheduler log tail:\n%s\n",
                   env->scheduler->LogTail(60).c_str());
    }
    if (env->api) {
      for (const std::string& ns : {kTenants, kNamespace}) {
        auto pods = env->api->List(k8s::PodsPath(ns));
        if (!pods.ok()) continue;
        for (const json& p : pods->items) {
          k8s::DeleteOptions d;
          d.grace_period_seconds = 0;
          (void)env->api->Delete(k8s::PodPath(ns, p["metadata"]["name"].get<std::string>()), d);
        }
      }
    }
    env->scheduler.reset();
    env->nodes.reset();
    env->api.reset();
    env->cluster.reset();
    delete env;
    env = nullptr;
  }

  static k8s::Client& api() { return *env->api; }
  static std::string Text(const Status& s) { return s.ToString(); }
};

// Runs first (the others use the installed release).
TEST_F(HelmChartE2E, InstallIsAcceptedAndUpgradeKeepsTheKey) {
  const Ran installed =
      HelmCli({"install", kRelease, kChart, "--namespace", kNamespace, "--values", env->values});
  ASSERT_EQ(installed.exit_code, 0) << installed.err;
  const Ran manifest = HelmCli({"get", "manifest", kRelease, "--namespace", kNamespace});
  ASSERT_EQ(manifest.exit_code, 0) << manifest.err;
  const Manifests m = ParseManifests(manifest.out);
  EXPECT_GE(m.objects.size(), 20u);
  EXPECT_TRUE(m.Find("ValidatingAdmissionPolicy", kPrefix + "-node-own-node"));

  auto key = api().Get("/api/v1/namespaces/" + kNamespace + "/secrets/" + kPrefix + "-signing-key");
  ASSERT_OK(key);
  const Ran upgraded = HelmCli({"upgrade", kRelease, kChart, "--namespace", kNamespace, "--values",
                                env->values, "--set", "scheduler.logLevel=debug"});
  ASSERT_EQ(upgraded.exit_code, 0) << upgraded.err;
  auto again =
      api().Get("/api/v1/namespaces/" + kNamespace + "/secrets/" + kPrefix + "-signing-key");
  ASSERT_OK(again);
  EXPECT_EQ((*again)["data"], (*key)["data"]) << "helm upgrade replaced the signing key";
  auto keys =
      api().Get("/api/v1/namespaces/" + kNamespace + "/configmaps/" + kPrefix + "-decision-keys");
  ASSERT_OK(keys);
  auto signer =
      contract::Signer::FromPem(Base64Decode((*key)["data"]["signing-key.pem"].get<std::string>()));
  ASSERT_OK(signer);
  EXPECT_EQ(signer->PublicKeyPem(), (*keys)["data"]["default.pem"].get<std::string>());
}

TEST_F(HelmChartE2E, ChartConfiguredSchedulerPlacesAGpuPodAndRefusesAForgedOne) {
  ASSERT_TRUE(
      api()
          .Get("/apis/apps/v1/namespaces/" + kNamespace + "/deployments/" + kPrefix + "-scheduler")
          .ok())
      << "needs the release installed by the first test";
  const std::string dir = env->folder->path();
  // The webhooks: the installed configurations, pointed at this machine instead of the Service.
  for (const auto& [kind, path] : {std::pair{"mutatingwebhookconfigurations", "/mutate"},
                                   std::pair{"validatingwebhookconfigurations", "/validate"}}) {
    const std::string at =
        std::string("/apis/admissionregistration.k8s.io/v1/") + kind + "/" + kPrefix;
    auto config = api().Get(at);
    ASSERT_OK(config);
    json& client = (*config)["webhooks"][0]["clientConfig"];
    client.erase("service");
    client["url"] = "https://127.0.0.1:" + std::to_string(env->webhook_port) + path;
    ASSERT_OK(api().Update(at, *config));
  }

  // tessera-scheduler with the release's arguments and files. Its identity: a service account
  // bound to the chart's tessera-scheduler ClusterRole only (the release's own account also
  // holds kube-scheduler's built-in roles, which would hide a rule missing from the chart's).
  const std::string probe = "tessera-rbac-probe";
  ASSERT_OK(api().Create("/api/v1/namespaces/" + kNamespace + "/serviceaccounts",
                         json{{"apiVersion", "v1"},
                              {"kind", "ServiceAccount"},
                              {"metadata", {{"name", probe}, {"namespace", kNamespace}}}}));
  ASSERT_OK(api().Create(
      "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
      json{{"apiVersion", "rbac.authorization.k8s.io/v1"},
           {"kind", "ClusterRoleBinding"},
           {"metadata", {{"name", probe}}},
           {"roleRef",
            {{"apiGroup", "rbac.authorization.k8s.io"},
             {"kind", "ClusterRole"},
             {"name", kPrefix + "-scheduler"}}},
           {"subjects",
            {{{"kind", "ServiceAccount"}, {"name", probe}, {"namespace", kNamespace}}}}}));
  const Ran manifest = HelmCli({"get", "manifest", kRelease, "--namespace", kNamespace});
  ASSERT_EQ(manifest.exit_code, 0) << manifest.err;
  const Manifests m = ParseManifests(manifest.out);
  auto key = api().Get("/api/v1/namespaces/" + kNamespace + "/secrets/" + kPrefix + "-signing-key");
  ASSERT_OK(key);
  WriteFile(dir + "/mounts/etc/tessera/signing-key/signing-key.pem",
            Base64Decode((*key)["data"]["signing-key.pem"].get<std::string>()));
  WriteFile(dir + "/api-ca.pem", env->admin.ca_pem);
  WriteFile(dir + "/scheduler.kubeconfig",
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " +
                env->admin.server + "\n    certificate-authority: " + dir +
                "/api-ca.pem\nusers:\n- name: u\n  user:\n    token: " + Token(probe) +
                "\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n");
  e2e::ChildOptions child;
  child.argv = {TESSERA_SCHEDULER_BINARY};
  for (std::string a :
       Args(Container(m.Get("Deployment", kPrefix + "-scheduler"), "tessera-scheduler"))) {
    if (a.rfind("--webhook-listen=", 0) == 0)
      a = "--webhook-listen=127.0.0.1:" + std::to_string(env->webhook_port);
    if (a.rfind("--scheduler-user=", 0) == 0) {
      EXPECT_EQ(
          a, "--scheduler-user=system:serviceaccount:" + kNamespace + ":" + kPrefix + "-scheduler");
      a = "--scheduler-user=system:serviceaccount:" + kNamespace + ":" + probe;
    }
    if (const std::size_t at = a.find("=/etc/tessera/"); at != std::string::npos)
      a.insert(at + 1, dir + "/mounts");
    child.argv.push_back(a);
  }
  child.argv.insert(child.argv.end(), {"--kubeconfig=" + dir + "/scheduler.kubeconfig",
                                       "--ready-file=" + dir + "/ready"});
  child.log_path = dir + "/tessera-scheduler.log";
  auto scheduler = e2e::SpawnAndWaitForFile(child, dir + "/ready", 60s);
  ASSERT_OK(scheduler);
  env->scheduler = std::move(*scheduler);

  e2e::SimNodesOptions nodes;
  nodes.kubeconfig = env->cluster->kubeconfig();
  nodes.nodes = 2;
  nodes.gpus_per_node = 2;
  nodes.extra_args = {"--delete-on-exit"};
  auto sim = e2e::SimNodes::Start(nodes);
  ASSERT_OK(sim);
  env->nodes = std::move(*sim);

  // A GPU pod for the chart's scheduler profile: mutated (slot, PriorityClass the chart made),
  // placed through the extender, bound with a decision the node agents' key verifies.
  json pod = PodObject(kTenants, "train");
  pod["spec"]["schedulerName"] = "tessera";
  pod["spec"]["containers"][0]["resources"]["limits"] = {{"tessera.dev/gpu-memory", "2Gi"}};
  // (Admission refuses GPU asks until the scheduler has seen a GPU node: retried until then.)
  StatusOr<json> created = InternalError("not created");
  WaitFor([&] { return (created = api().Create(k8s::PodsPath(kTenants), pod)).ok(); }, 30s);
  ASSERT_OK(created);
  EXPECT_EQ(created->value("/spec/priorityClassName"_json_pointer, std::string()),
            "tessera-normal");
  EXPECT_EQ(created->value("/spec/containers/0/resources/limits/tessera.dev~1gpu-slot"_json_pointer,
                           std::string()),
            "1");
  json bound;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = api().Get(k8s::PodPath(kTenants, "train"));
        if (p.ok() && !p->value("/spec/nodeName"_json_pointer, std::string()).empty()) bound = *p;
        return !bound.is_null();
      },
      60s))
      << "not bound; tessera-scheduler log:\n"
      << env->scheduler->LogTail(30);
  const json& annotations = bound["metadata"]["annotations"];
  const std::string decision = annotations.value("tessera.dev/decision", "");
  auto parsed = contract::ParseDecision(decision);
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->key_id, "default");
  EXPECT_EQ(parsed->node, bound["spec"]["nodeName"]);
  auto keys =
      api().Get("/api/v1/namespaces/" + kNamespace + "/configmaps/" + kPrefix + "-decision-keys");
  ASSERT_OK(keys);
  auto verifier = contract::Verifier::FromPem((*keys)["data"]["default.pem"].get<std::string>());
  ASSERT_OK(verifier);
  EXPECT_OK(verifier->Verify(decision, annotations.value("tessera.dev/decision-signature", "")));

  // Only the scheduler's service account writes decisions: the admin's forged one is refused,
  // and the refusal is an Event (the scheduler's RBAC lets it post one).
  json forged = PodObject(kTenants, "forged");
  forged["metadata"]["annotations"] = {{"tessera.dev/decision", decision}};
  auto refused = api().Create(k8s::PodsPath(kTenants), forged);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(Text(refused.status()).find("pods.validate.tessera.dev"), std::string::npos)
      << Text(refused.status());
  EXPECT_TRUE(WaitFor(
      [&] {
        auto events = api().List("/api/v1/namespaces/" + kTenants + "/events");
        if (!events.ok()) return false;
        for (const json& e : events->items) {
          if (e.value("reason", "") == "TesseraAdmissionDenied" &&
              e.value("/involvedObject/name"_json_pointer, std::string()) == "forged") {
            return true;
          }
        }
        return false;
      },
      20s))
      << "no TesseraAdmissionDenied Event; tessera-scheduler log:\n"
      << env->scheduler->LogTail(30);
}

TEST_F(HelmChartE2E, NodeAgentTokenReachesOnlyItsOwnNode) {
  ASSERT_TRUE(env->nodes) << "needs the simulated nodes of the previous test";
  ASSERT_EQ(env->nodes->node_names().size(), 2u);
  const std::string own = env->nodes->node_names()[0], other = env->nodes->node_names()[1];
  // A pod of the agent's service account on `own` (tessera-system: outside the webhooks), and a
  // token bound to it, as the kubelet would mount.
  auto agent_pod = api().Create(k8s::PodsPath(kNamespace),
                                PodObject(kNamespace, "agent-probe", own, kPrefix + "-node"));
  ASSERT_OK(agent_pod);
  auto agent = ClientWithToken(Token(kPrefix + "-node", *agent_pod));
  ASSERT_TRUE(agent);

  // What tessera-node does (src/agent/publisher.cc, daemon.cc), on its own node: allowed.
  auto node = agent->Get(k8s::NodePath(own));
  ASSERT_OK(node);
  EXPECT_OK(agent->Patch(k8s::NodePath(own),
                         json{{"metadata", {{"annotations", {{"tessera.dev/helm-e2e", "own"}}}}}},
                         k8s::PatchType::kMerge));
  const json capacity = node->value("/status/capacity"_json_pointer, json::object());
  EXPECT_OK(agent->Patch(
      k8s::NodeStatusPath(own),
      json{{"status",
            {{"capacity", {{"tessera.dev/gpu", capacity.value("tessera.dev/gpu", "2")}}}}}},
      k8s::PatchType::kMerge));
  EXPECT_OK(agent->Get(k8s::PodPath(kTenants, "train")));
  EXPECT_OK(agent->Create(
      k8s::EventsPath(kTenants),
      k8s::WarningEvent(
          {{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", kTenants}, {"name", "train"}},
          "TesseraHelmE2E", "the node agent's RBAC lets it post Events", "tessera-node", own,
          std::chrono::system_clock::now())));
  EXPECT_OK(agent->Create(k8s::PodPath(kTenants, "train") + "/eviction?dryRun=All",
                          json{{"apiVersion", "policy/v1"},
                               {"kind", "Eviction"},
                               {"metadata", {{"name", "train"}, {"namespace", kTenants}}}}));

  // Another node, a Node's spec, anything else: refused.
  auto elsewhere =
      agent->Patch(k8s::NodePath(other),
                   json{{"metadata", {{"annotations", {{"tessera.dev/helm-e2e", "other"}}}}}},
                   k8s::PatchType::kMerge);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_NE(Text(elsewhere.status()).find("may change only the Node its pod runs on"),
            std::string::npos)
      << Text(elsewhere.status());
  auto spec = agent->Patch(k8s::NodePath(own), json{{"spec", {{"unschedulable", true}}}},
                           k8s::PatchType::kMerge);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(Text(spec.status()).find("may not change a Node's spec"), std::string::npos)
      << Text(spec.status());
  EXPECT_EQ(agent->Get("/api/v1/namespaces/" + kNamespace + "/secrets").status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(agent->List(k8s::PodsPath(kTenants)).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(agent->Delete(k8s::PodPath(kTenants, "train")).code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tessera::helmtest
