// The Helm chart deployments/helm/tessera, linted and rendered by the real Helm (hack/helm.sh
// builds it from its Go module the first time), and what it renders checked against what
// tessera's binaries expect: the kube-scheduler extender configuration and the webhook
// configurations the e2e tests run with (src/scheduler/kube_config.h), every name from
// include/tessera/names.h, RBAC verbs exactly as intended, the node agent's host mounts, the
// generated key material loaded by tessera's own code (Signer/Verifier, CertReloader, the
// policy parser), the rendered flags parsed by the real tessera-scheduler and tessera-node, and
// every bad-values fixture (test/helm/bad) refused with a message naming the value.
// Skipped only when there is no Go toolchain to build Helm with (and no HELM=...).
#include <functional>
#include <memory>
#include <tuple>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "tessera/names.h"

#include "contract/decision.h"
#include "helm/helm_testing.h"
#include "k8s/listen.h"
#include "k8s/openssl.h"
#include "policy/policy.h"
#include "scheduler/kube_config.h"
#include "webhook/server.h"

namespace tessera::helmtest {
namespace {

class HelmChartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Helm().path) GTEST_SKIP() << "no Helm (needs Go to build it): " << Helm().why;
  }

  // helm template with the given values files and extra flags.
  Ran Template(const std::vector<std::string>& values, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {*Helm().path,  "template", kRelease,         kChart,
                                     "--namespace", kNamespace, "--kube-version", kKubeVersion};
    for (const std::string& v : values) argv.insert(argv.end(), {"--values", v});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProgram(argv, HelmEnvironment(tmp_.path() + "/helm"));
  }
  Manifests Render(const std::vector<std::string>& values = {},
                   const std::vector<std::string>& extra = {}) {
    const Ran r = Template(values, extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseManifests(r.out);
  }
  static std::string Values(const std::string& name) {
    return kSource + "/test/helm/values/" + name;
  }

  testutil::TempDir tmp_;
};

TEST_F(HelmChartTest, LintsCleanWithEveryValuesFile) {
  std::vector<std::vector<std::string>> cases = {{}};
  for (const auto& e : fs::directory_iterator(kSource + "/test/helm/values")) {
    std::vector<std::string> args = {"--values", e.path().string()};
    // helm lint has no --api-versions: cert-manager objects are rendered by force there.
    if (e.path().filename() == "cert-manager.yaml")
      args.push_back("--set=webhooks.tls.certManager.force=true");
    cases.push_back(args);
  }
  for (const auto& extra : cases) {
    std::vector<std::string> argv = {*Helm().path,  "lint",     "--strict",       kChart,
                                     "--namespace", kNamespace, "--kube-version", kKubeVersion};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const Ran r = RunProgram(argv, HelmEnvironment(tmp_.path() + "/helm"));
    EXPECT_EQ(r.exit_code, 0) << (extra.empty() ? "defaults" : extra[1]) << ":\n" << r.out << r.err;
    EXPECT_NE(r.out.find("0 chart(s) failed"), std::string::npos) << r.out;
  }
}

TEST_F(HelmChartTest, DefaultsRenderTheExpectedObjects) {
  const Manifests m = Render();
  const std::map<std::string, int> want = {{"PriorityClass", 3},
                                           {"ServiceAccount", 2},
                                           {"Secret", 2},     // signing key, webhook TLS
                                           {"ConfigMap", 2},  // kube-scheduler, decision keys
                                           {"ClusterRole", 2},
                                           {"ClusterRoleBinding", 4},
                                           {"Role", 1},
                                           {"RoleBinding", 2},
                                           {"Service", 1},
                                           {"Deployment", 1},
                                           {"DaemonSet", 1},
                                           {"MutatingWebhookConfiguration", 1},
                                           {"ValidatingWebhookConfiguration", 1},
                                           {"ValidatingAdmissionPolicy", 1},
                                           {"ValidatingAdmissionPolicyBinding", 1}};
  EXPECT_EQ(m.KindCounts(), want);
  for (const auto& o : m.objects) {
    const std::string kind = o["kind"].as<std::string>();
    // Every namespaced object lives in the release namespace (kube-system: kube-scheduler's
    // authentication reader binding).
    if (o["metadata"]["namespace"]) {
      const std::string ns = o["metadata"]["namespace"].as<std::string>();
      EXPECT_TRUE(ns == kNamespace || (kind == "RoleBinding" && ns == "kube-system"))
          << kind << " in " << ns;
    }
    EXPECT_EQ(o["metadata"]["labels"]["app.kubernetes.io/instance"].as<std::string>(""), kRelease)
        << kind;
  }
  const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
  EXPECT_EQ(deploy["spec"]["replicas"].as<int>(), 1);
  EXPECT_EQ(Container(deploy, "tessera-scheduler")["image"].as<std::string>(),
            "ghcr.io/tessera-dev/tessera-scheduler:0.1.0");
  // kube-scheduler follows the cluster's version unless told otherwise.
  EXPECT_EQ(Container(deploy, "kube-scheduler")["image"].as<std::string>(),
            "registry.k8s.io/kube-scheduler:v1.36.3");
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  EXPECT_EQ(Container(ds, "tessera-node")["image"].as<std::string>(),
            "ghcr.io/tessera-dev/tessera-node:0.1.0");
}

TEST_F(HelmChartTest, KubeSchedulerCallsTheExtenderForEveryTesseraResource) {
  const Manifests m = Render();
  const YAML::Node cm = m.Get("ConfigMap", kPrefix + "-kube-scheduler");
  const YAML::Node config = YAML::Load(cm["data"]["config.yaml"].as<std::string>());
  EXPECT_EQ(config["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1");
  EXPECT_EQ(config["kind"].as<std::string>(), "KubeSchedulerConfiguration");
  ASSERT_EQ(config["profiles"].size(), 1u);
  EXPECT_EQ(config["profiles"][0]["schedulerName"].as<std::string>(), "tessera");

  // The extender entry is the one the e2e tests run kube-scheduler with, on the chart's port.
  ASSERT_EQ(config["extenders"].size(), 1u);
  const json ours = ToJson(config["extenders"][0]);
  const json tested = ToJson(YAML::Load(scheduler::SchedulerConfig(8888))["extenders"][0]);
  for (const auto& [key, value] : tested.items())
    EXPECT_EQ(ours.value(key, json()), value) << "extenders[0]." << key;
  EXPECT_EQ(ours["urlPrefix"], "http://127.0.0.1:8888");
  EXPECT_EQ(ours["ignorable"], "false");  // an unreachable extender stops scheduling; never skipped
  std::set<std::string> managed;
  for (const auto& r : ours["managedResources"]) {
    managed.insert(r["name"].get<std::string>());
    EXPECT_EQ(r["ignoredByScheduler"], "false") << r;
  }
  const std::set<std::string> tessera_resources = {
      std::string(names::kResourceGpu), std::string(names::kResourceGpuMemory),
      std::string(names::kResourceGpuCores), std::string(names::kResourceGpuSlot)};
  EXPECT_EQ(managed, tessera_resources);

  // Leader election on the release's own Lease, never kube-scheduler's default one.
  EXPECT_EQ(config["leaderElection"]["leaderElect"].as<bool>(), true);
  EXPECT_EQ(config["leaderElection"]["resourceNamespace"].as<std::string>(), kNamespace);
  EXPECT_EQ(config["leaderElection"]["resourceName"].as<std::string>(),
            kPrefix + "-kube-scheduler");

  // The two containers agree: the verbs on the port kube-scheduler calls, the profile's name.
  const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
  const auto args = Args(Container(deploy, "tessera-scheduler"));
  EXPECT_EQ(Flag(args, "--listen"), "127.0.0.1:8888");
  EXPECT_EQ(Flag(args, "--scheduler-name"), "tessera");
  EXPECT_EQ(Flag(args, "--scheduler-user"),
            "system:serviceaccount:" + kNamespace + ":" + kPrefix + "-scheduler");
  EXPECT_EQ(deploy["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>(),
            kPrefix + "-scheduler");
  // kube-scheduler's election decides; tessera-scheduler's own would disagree with it (Design).
  EXPECT_EQ(std::count(args.begin(), args.end(), "--leader-elect"), 0);
  const auto ks = Args(Container(deploy, "kube-scheduler"));
  EXPECT_EQ(Flag(ks, "--config"), "/etc/tessera/kube-scheduler/config.yaml");
  bool mounted = false;
  for (const auto& v : Container(deploy, "kube-scheduler")["volumeMounts"]) {
    mounted |= v["mountPath"].as<std::string>() == "/etc/tessera/kube-scheduler";
  }
  EXPECT_TRUE(mounted);
}

TEST_F(HelmChartTest, WebhooksMatchTheTestedConfigurationAndTheirCertificate) {
  // The DRA path's values: the e2e configuration registers the claims' webhook too (a chart on
  // the device-plugin path leaves it out: DraPathServesTheDriverWithItsClassesAndRbac).
  const Manifests m = Render({Values("dra.yaml")});
  const YAML::Node secret = m.Get("Secret", kPrefix + "-webhook-tls");
  ASSERT_TRUE(secret.IsMap());
  EXPECT_EQ(secret["type"].as<std::string>(), "kubernetes.io/tls");
  const std::string ca = Base64Decode(secret["data"]["ca.crt"].as<std::string>());
  const std::string crt = Base64Decode(secret["data"]["tls.crt"].as<std::string>());
  const std::string key = Base64Decode(secret["data"]["tls.key"].as<std::string>());

  const auto [mutating, validating] = scheduler::WebhookConfigurations(8443, "");
  for (const auto& [rendered, tested] :
       {std::pair{m.Get("MutatingWebhookConfiguration", kPrefix), mutating},
        std::pair{m.Get("ValidatingWebhookConfiguration", kPrefix), validating}}) {
    ASSERT_EQ(rendered["webhooks"].size(), tested["webhooks"].size());
    for (std::size_t i = 0; i < tested["webhooks"].size(); ++i) {
      const json want = Stringly(tested["webhooks"][i]);
      const json got = ToJson(rendered["webhooks"][i]);
      const std::string name = want["name"];
      EXPECT_EQ(got["name"], want["name"]);
      for (const char* field : {"admissionReviewVersions", "sideEffects", "failurePolicy",
                                "timeoutSeconds", "reinvocationPolicy"}) {
        EXPECT_EQ(got.value(field, json()), want.value(field, json())) << name << " " << field;
      }
      ASSERT_EQ(got["rules"].size(), want["rules"].size()) << name;
      for (std::size_t r = 0; r < want["rules"].size(); ++r) {
        for (const auto& [k, v] : want["rules"][r].items())
          EXPECT_EQ(got["rules"][r][k], v) << name << " rules " << k;
      }
      // The e2e configuration calls a URL; the chart calls the Service, on the same path.
      const std::string url = want["clientConfig"]["url"];
      EXPECT_EQ(got["clientConfig"]["service"]["path"], url.substr(url.rfind('/')));
      EXPECT_EQ(got["clientConfig"]["service"]["name"], kPrefix + "-webhook");
      EXPECT_EQ(got["clientConfig"]["service"]["namespace"], kNamespace);
      EXPECT_EQ(got["clientConfig"]["service"]["port"], "443");
      EXPECT_EQ(Base64Decode(got["clientConfig"]["caBundle"]), ca)
          << name << ": caBundle is not the Secret's CA";
      // The scheduler's own pods (and kube-system) never wait for the scheduler.
      const json& expr = got["namespaceSelector"]["matchExpressions"][0];
      EXPECT_EQ(expr["key"], "kubernetes.io/metadata.name");
      EXPECT_EQ(expr["operator"], "NotIn");
      EXPECT_EQ(expr["values"], json({kNamespace, "kube-system"}));
    }
  }

  // The Service reaches the container port the webhooks listen on.
  const YAML::Node svc = m.Get("Service", kPrefix + "-webhook");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"].as<int>(), 443);
  EXPECT_EQ(svc["spec"]["ports"][0]["targetPort"].as<std::string>(), "webhook");
  const YAML::Node container =
      Container(m.Get("Deployment", kPrefix + "-scheduler"), "tessera-scheduler");
  EXPECT_EQ(container["ports"][0]["name"].as<std::string>(), "webhook");
  EXPECT_EQ(container["ports"][0]["containerPort"].as<int>(), 8443);
  EXPECT_EQ(Flag(Args(container), "--webhook-listen"), "0.0.0.0:8443");

  // tessera's own certificate loader takes the pair; the CA signed it, for the Service's name.
  WriteFile(tmp_.path() + "/tls.crt", crt);
  WriteFile(tmp_.path() + "/tls.key", key);
  auto reloader = webhook::CertReloader::Create(tmp_.path() + "/tls.crt", tmp_.path() + "/tls.key");
  EXPECT_TRUE(reloader.ok()) << reloader.status().ToString();
  auto cas = k8s::ReadCertificates(ca);
  auto leaves = k8s::ReadCertificates(crt);
  ASSERT_TRUE(!cas.empty() && !leaves.empty());
  k8s::X509StorePtr store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), cas.front().get());
  k8s::X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaves.front().get(), nullptr);
  EXPECT_EQ(X509_verify_cert(ctx.get()), 1)
      << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  const std::string host = kPrefix + "-webhook." + kNamespace + ".svc";
  EXPECT_EQ(X509_check_host(leaves.front().get(), host.c_str(), host.size(), 0, nullptr), 1)
      << host;
}

TEST_F(HelmChartTest, RbacGrantsExactlyWhatTheCodeCalls) {
  const Manifests m = Render();
  // tessera-scheduler: src/extender/daemon.cc (reflectors, Binding, bound-pod check,
  // PriorityClasses of the policy, admission-denial Events).
  EXPECT_EQ(
      Rules(m.Get("ClusterRole", kPrefix + "-scheduler")),
      (std::set<std::string>{
          "/pods: get,list,watch", "/pods/binding: create", "/nodes: list,watch", "/events: create",
          "scheduling.k8s.io/priorityclasses[tessera-latency-critical,tessera-normal,"
          "tessera-best-effort]: get"}));
  // tessera-node: src/agent/publisher.cc and daemon.cc.
  EXPECT_EQ(Rules(m.Get("ClusterRole", kPrefix + "-node")),
            (std::set<std::string>{"/nodes: get,patch", "/nodes/status: patch", "/pods: get",
                                   "/pods/eviction: create", "/events: create"}));
  // kube-scheduler's Lease: create (unnameable) and its own name only.
  EXPECT_EQ(Rules(m.Get("Role", kPrefix + "-scheduler-lease")),
            (std::set<std::string>{
                "coordination.k8s.io/leases: create",
                "coordination.k8s.io/leases[" + kPrefix + "-kube-scheduler]: get,update"}));
  // kube-scheduler itself: the built-in roles, bound to the scheduler's service account only.
  std::set<std::string> cluster_roles;
  for (const auto& b : m.OfKind("ClusterRoleBinding")) {
    cluster_roles.insert(b["roleRef"]["name"].as<std::string>());
    ASSERT_EQ(b["subjects"].size(), 1u);
    const std::string sa = b["subjects"][0]["name"].as<std::string>();
    EXPECT_EQ(sa, b["roleRef"]["name"].as<std::string>() == kPrefix + "-node"
                      ? kPrefix + "-node"
                      : kPrefix + "-scheduler");
    EXPECT_EQ(b["subjects"][0]["namespace"].as<std::string>(), kNamespace);
  }
  EXPECT_EQ(cluster_roles,
            (std::set<std::string>{kPrefix + "-scheduler", kPrefix + "-node",
                                   "system:kube-scheduler", "system:volume-scheduler"}));
  const YAML::Node authn = m.Get("RoleBinding", kPrefix + "-scheduler-authentication-reader");
  EXPECT_EQ(authn["metadata"]["namespace"].as<std::string>(), "kube-system");
  EXPECT_EQ(authn["roleRef"]["name"].as<std::string>(),
            "extension-apiserver-authentication-reader");
  // Nothing the chart defines grants wildcards or Secrets.
  for (const char* kind : {"ClusterRole", "Role"}) {
    for (const auto& role : m.OfKind(kind)) {
      for (const std::string& rule : Rules(role)) {
        EXPECT_EQ(rule.find('*'), std::string::npos) << rule;
        EXPECT_EQ(rule.find("secrets"), std::string::npos) << rule;
      }
    }
  }
  // What RBAC cannot say: the node agent changes only its own Node, never a Node's spec.
  const YAML::Node vap = m.Get("ValidatingAdmissionPolicy", kPrefix + "-node-own-node");
  EXPECT_EQ(vap["spec"]["matchConditions"][0]["expression"].as<std::string>(),
            "request.userInfo.username == \"system:serviceaccount:" + kNamespace + ":" + kPrefix +
                "-node\"");
  EXPECT_NE(vap["spec"]["validations"][0]["expression"].as<std::string>().find(
                "authentication.kubernetes.io/node-name"),
            std::string::npos);
  EXPECT_EQ(
      m.Get("ValidatingAdmissionPolicyBinding", kPrefix + "-node-own-node")["spec"]["policyName"]
          .as<std::string>(),
      kPrefix + "-node-own-node");
}

TEST_F(HelmChartTest, NodeAgentMountsEveryHostPathItIsGiven) {
  const Manifests m = Render();
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  const YAML::Node pod = ds["spec"]["template"]["spec"];
  EXPECT_TRUE(pod["hostPID"].as<bool>());  // drift by host PID, MPS daemons
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(), kPrefix + "-node");
  EXPECT_EQ(pod["runtimeClassName"].as<std::string>(), "nvidia");
  std::map<std::string, YAML::Node> volumes;
  for (const auto& v : pod["volumes"])
    volumes.insert_or_assign(v["name"].as<std::string>(), static_cast<const YAML::Node&>(v));
  const YAML::Node agent = Container(ds, "tessera-node");
  std::map<std::string, std::string> mounts;  // mount path -> volume
  for (const auto& v : agent["volumeMounts"])
    mounts[v["mountPath"].as<std::string>()] = v["name"].as<std::string>();
  const auto args = Args(agent);

  // Every folder the agent names to kubelet or the runtime is the host's, at the same path.
  auto host_mounted = [&](const std::string& path) {
    ASSERT_TRUE(mounts.count(path)) << path << " is not mounted";
    const YAML::Node v = volumes[mounts[path]];
    ASSERT_TRUE(v["hostPath"]) << path;
    EXPECT_EQ(v["hostPath"]["path"].as<std::string>(), path);
  };
  for (const char* flag : {"--state-dir", "--device-plugin-dir", "--cdi-dir"}) {
    auto value = Flag(args, flag);
    ASSERT_TRUE(value) << flag;
    host_mounted(*value);
  }
  EXPECT_EQ(Flag(args, "--state-dir"), std::string(names::kPathHostState));
  EXPECT_EQ(Flag(args, "--device-plugin-dir"), std::string(names::kPathDevicePluginDir));
  EXPECT_EQ(Flag(args, "--cdi-dir"), std::string(names::kPathCdiSpecDir));
  EXPECT_EQ(Flag(args, "--pod-resources-socket"), std::string(names::kPathPodResourcesSocket));
  host_mounted(fs::path(names::kPathPodResourcesSocket).parent_path().string());
  // The node's name from the downward API.
  EXPECT_EQ(Flag(args, "--node-name"), "$(NODE_NAME)");
  EXPECT_EQ(agent["env"][0]["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "spec.nodeName");

  // The preload library: copied beside, then renamed to where --hook-library points (a rename:
  // containers that have the old file mounted keep it).
  auto command = [&](const char* name) {
    std::vector<std::string> out;
    for (const auto& c : Container(ds, name, "initContainers")["command"])
      out.push_back(c.as<std::string>());
    return out;
  };
  const auto hook = Flag(args, "--hook-library");
  ASSERT_TRUE(hook);
  EXPECT_EQ(command("copy-hook-library"),
            (std::vector<std::string>{"cp", "/usr/local/lib/tessera/libtessera-cuda.so",
                                      *hook + ".new"}));
  EXPECT_EQ(command("install-hook-library"),
            (std::vector<std::string>{"mv", "-f", *hook + ".new", *hook}));
  const std::string lib_dir = fs::path(*hook).parent_path().string();
  for (const char* name : {"copy-hook-library", "install-hook-library"}) {
    const YAML::Node init = Container(ds, name, "initContainers");
    EXPECT_EQ(init["volumeMounts"][0]["mountPath"].as<std::string>(), lib_dir);
    EXPECT_EQ(volumes[init["volumeMounts"][0]["name"].as<std::string>()]["hostPath"]["path"]
                  .as<std::string>(),
              lib_dir);
  }

  // The decision keys: the ConfigMap with <keyId>.pem, mounted where --decision-keys points.
  const auto keys_dir = Flag(args, "--decision-keys");
  ASSERT_TRUE(keys_dir && mounts.count(*keys_dir));
  EXPECT_EQ(volumes[mounts[*keys_dir]]["configMap"]["name"].as<std::string>(),
            kPrefix + "-decision-keys");
  EXPECT_TRUE(m.Get("ConfigMap", kPrefix + "-decision-keys")["data"]["default.pem"]);
  // No policy given: the built-in one, nothing mounted.
  EXPECT_FALSE(Flag(args, "--policy"));
  EXPECT_EQ(Flags(args, "--foreign-gpu-resource"), std::vector<std::string>{"nvidia.com/gpu"});
  // Metrics on the pod's address, the readiness probe on the same port.
  EXPECT_EQ(Flag(args, "--metrics-listen"), "0.0.0.0:9479");
  EXPECT_EQ(agent["ports"][0]["containerPort"].as<int>(), 9479);
  EXPECT_EQ(agent["readinessProbe"]["httpGet"]["port"].as<std::string>(),
            agent["ports"][0]["name"].as<std::string>());
  EXPECT_FALSE(agent["livenessProbe"]) << "a restart ends the MPS daemons the agent hosts";
}

// node.allocationPath dra: the agent serves the DRA driver from kubelet's plugin folders (host
// paths at the same paths), the DeviceClasses select its devices, and its role adds exactly what
// src/agent/dra.cc and daemon.cc call. The default path renders none of it.
TEST_F(HelmChartTest, DraPathServesTheDriverWithItsClassesAndRbac) {
  const Manifests m = Render({Values("dra.yaml")});
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  const auto args = Args(Container(ds, "tessera-node"));
  EXPECT_EQ(Flag(args, "--allocation-path"), "dra");
  EXPECT_EQ(Flag(args, "--dra-plugin-dir"), std::string(names::kPathDraPluginDir));
  EXPECT_EQ(Flag(args, "--plugins-registry-dir"), std::string(names::kPathPluginsRegistry));
  std::map<std::string, std::string> host_paths;  // volume -> host path
  for (const auto& v : ds["spec"]["template"]["spec"]["volumes"]) {
    if (v["hostPath"])
      host_paths[v["name"].as<std::string>()] = v["hostPath"]["path"].as<std::string>();
  }
  for (const auto& mount : Container(ds, "tessera-node")["volumeMounts"]) {
    const std::string path = mount["mountPath"].as<std::string>();
    if (path == names::kPathDraPluginDir || path == names::kPathPluginsRegistry) {
      EXPECT_EQ(host_paths[mount["name"].as<std::string>()], path);
    }
  }
  for (const std::string_view name : {names::kDraClassShared, names::kDraClassMps}) {
    const YAML::Node c = m.Get("DeviceClass", std::string(name));
    EXPECT_EQ(c["spec"]["selectors"][0]["cel"]["expression"].as<std::string>(),
              "device.driver == '" + std::string(names::kDraDriver) + "'");
  }
  EXPECT_EQ(Rules(m.Get("ClusterRole", kPrefix + "-node")),
            (std::set<std::string>{"/nodes: get,patch", "/nodes/status: patch", "/pods: get",
                                   "/pods/eviction: create", "/events: create",
                                   "resource.k8s.io/resourceslices: create,get,update",
                                   "resource.k8s.io/resourceclaims: get", "/namespaces: get"}));
  // Namespace quotas count claims: tessera-scheduler watches them (webhook/quota.h).
  const auto scheduler_args =
      Args(Container(m.Get("Deployment", kPrefix + "-scheduler"), "tessera-scheduler"));
  EXPECT_NE(std::find(scheduler_args.begin(), scheduler_args.end(), "--count-claims"),
            scheduler_args.end());
  EXPECT_TRUE(Rules(m.Get("ClusterRole", kPrefix + "-scheduler"))
                  .contains("resource.k8s.io/resourceclaims: list,watch"));
  // Claims and claim templates are checked at admission (contract/claim_ask.h).
  std::set<std::string> claim_resources;
  for (const auto& w : m.Get("ValidatingWebhookConfiguration", kPrefix)["webhooks"]) {
    if (w["name"].as<std::string>() != "claims.validate.tessera.dev") continue;
    EXPECT_EQ(w["clientConfig"]["service"]["path"].as<std::string>(), "/validate");
    for (const auto& r : w["rules"][0]["resources"]) claim_resources.insert(r.as<std::string>());
    EXPECT_EQ(w["rules"][0]["apiGroups"][0].as<std::string>(), "resource.k8s.io");
    EXPECT_EQ(w["matchConditions"][0]["expression"].as<std::string>(),
              std::string(scheduler::kClaimMatchCondition));
  }
  EXPECT_EQ(claim_resources, (std::set<std::string>{"resourceclaims", "resourceclaimtemplates"}));
  const Manifests plain = Render();
  EXPECT_TRUE(plain.OfKind("DeviceClass").empty());
  const auto plain_args =
      Args(Container(plain.Get("Deployment", kPrefix + "-scheduler"), "tessera-scheduler"));
  EXPECT_EQ(std::find(plain_args.begin(), plain_args.end(), "--count-claims"), plain_args.end());
  EXPECT_EQ(plain.Get("ValidatingWebhookConfiguration", kPrefix)["webhooks"].size(), 1u);
  EXPECT_EQ(Flag(Args(Container(plain.Get("DaemonSet", kPrefix + "-node"), "tessera-node")),
                 "--allocation-path"),
            "device-plugin");
}

TEST_F(HelmChartTest, GeneratedSigningKeyVerifiesWithTheNodesPublicKey) {
  const Manifests m = Render();
  const std::string private_pem = Base64Decode(
      m.Get("Secret", kPrefix + "-signing-key")["data"]["signing-key.pem"].as<std::string>());
  const std::string public_pem =
      m.Get("ConfigMap", kPrefix + "-decision-keys")["data"]["default.pem"].as<std::string>();
  auto signer = contract::Signer::FromPem(private_pem);
  ASSERT_TRUE(signer.ok()) << signer.status().ToString();
  auto verifier = contract::Verifier::FromPem(public_pem);
  ASSERT_TRUE(verifier.ok()) << verifier.status().ToString();
  auto signature = signer->Sign("{\"schema\":\"tessera.dev/decision/v1\"}");
  ASSERT_TRUE(signature.ok());
  EXPECT_TRUE(verifier->Verify("{\"schema\":\"tessera.dev/decision/v1\"}", *signature).ok());
  EXPECT_EQ(signer->PublicKeyPem(), public_pem);  // the chart's derivation, byte for byte
  // The key stays on uninstall (running pods' decisions must keep verifying).
  EXPECT_EQ(m.Get("Secret",
                  kPrefix + "-signing-key")["metadata"]["annotations"]["helm.sh/resource-policy"]
                .as<std::string>(),
            "keep");
  const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
  const auto args = Args(Container(deploy, "tessera-scheduler"));
  EXPECT_EQ(Flag(args, "--signing-key"), "/etc/tessera/signing-key/signing-key.pem");
  EXPECT_EQ(Flag(args, "--key-id"), "default");
}

TEST_F(HelmChartTest, ExistingSigningKeySecretIsUsedAndNothingGenerated) {
  const Manifests m = Render({Values("existing-key.yaml")});
  EXPECT_FALSE(m.Find("Secret", kPrefix + "-signing-key"));
  const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
  const auto args = Args(Container(deploy, "tessera-scheduler"));
  EXPECT_EQ(Flag(args, "--key-id"), "prod-2026");
  for (const auto& v : deploy["spec"]["template"]["spec"]["volumes"]) {
    if (v["name"].as<std::string>() != "signing-key") continue;
    EXPECT_EQ(v["secret"]["secretName"].as<std::string>(), "tessera-decision-key");
    EXPECT_EQ(v["secret"]["items"][0]["key"].as<std::string>(), "key.pem");
    EXPECT_EQ(v["secret"]["items"][0]["path"].as<std::string>(), "signing-key.pem");
  }
  const YAML::Node keys = m.Get("ConfigMap", kPrefix + "-decision-keys");
  ASSERT_TRUE(keys["data"]["prod-2026.pem"]);
  EXPECT_TRUE(contract::Verifier::FromPem(keys["data"]["prod-2026.pem"].as<std::string>()).ok());
  EXPECT_FALSE(keys["data"]["default.pem"]);
}

TEST_F(HelmChartTest, CertManagerReplacesTheGeneratedCertificate) {
  // auto: cert-manager because the cluster serves it.
  for (const auto& [values, issuer_kind, issuer_name] :
       {std::tuple{std::vector<std::string>{}, "Issuer", kPrefix + "-webhook-selfsigned"},
        std::tuple{std::vector<std::string>{Values("cert-manager.yaml")}, "ClusterIssuer",
                   std::string("corp-ca")}}) {
    const Manifests m = Render(values, {"--api-versions", "cert-manager.io/v1"});
    EXPECT_FALSE(m.Find("Secret", kPrefix + "-webhook-tls")) << "cert-manager writes the Secret";
    const YAML::Node cert = m.Get("Certificate", kPrefix + "-webhook");
    ASSERT_TRUE(cert.IsMap());
    EXPECT_EQ(cert["spec"]["secretName"].as<std::string>(), kPrefix + "-webhook-tls");
    EXPECT_EQ(cert["spec"]["issuerRef"]["kind"].as<std::string>(), issuer_kind);
    EXPECT_EQ(cert["spec"]["issuerRef"]["name"].as<std::string>(), issuer_name);
    EXPECT_EQ(m.OfKind("Issuer").size(), values.empty() ? 1u : 0u);
    std::set<std::string> dns;
    for (const auto& d : cert["spec"]["dnsNames"]) dns.insert(d.as<std::string>());
    EXPECT_TRUE(dns.count(kPrefix + "-webhook." + kNamespace + ".svc"));
    for (const char* kind : {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}) {
      const YAML::Node w = m.Get(kind, kPrefix);
      EXPECT_EQ(w["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as<std::string>(),
                kNamespace + "/" + kPrefix + "-webhook");
      EXPECT_FALSE(w["webhooks"][0]["clientConfig"]["caBundle"]) << "cainjector fills it";
    }
    // The scheduler mounts the Secret cert-manager writes.
    for (const auto& v :
         m.Get("Deployment", kPrefix + "-scheduler")["spec"]["template"]["spec"]["volumes"]) {
      if (v["name"].as<std::string>() == "webhook-tls") {
        EXPECT_EQ(v["secret"]["secretName"].as<std::string>(), kPrefix + "-webhook-tls");
      }
    }
  }
  // self-signed on request even where cert-manager runs.
  const Manifests m = Render(
      {}, {"--api-versions", "cert-manager.io/v1", "--set", "webhooks.tls.mode=self-signed"});
  EXPECT_TRUE(m.Find("Secret", kPrefix + "-webhook-tls"));
  EXPECT_TRUE(m.OfKind("Certificate").empty());
}

TEST_F(HelmChartTest, AdministratorsTlsSecretAndCaBundle) {
  const Manifests m = Render({Values("tls-secret.yaml")});
  EXPECT_FALSE(m.Find("Secret", kPrefix + "-webhook-tls"));
  EXPECT_TRUE(m.OfKind("Certificate").empty());
  const std::string ca =
      YAML::LoadFile(Values("tls-secret.yaml"))["webhooks"]["tls"]["caBundle"].as<std::string>();
  EXPECT_EQ(Base64Decode(m.Get("ValidatingWebhookConfiguration",
                               kPrefix)["webhooks"][0]["clientConfig"]["caBundle"]
                             .as<std::string>()),
            ca);
  for (const auto& v :
       m.Get("Deployment", kPrefix + "-scheduler")["spec"]["template"]["spec"]["volumes"]) {
    if (v["name"].as<std::string>() == "webhook-tls") {
      EXPECT_EQ(v["secret"]["secretName"].as<std::string>(), "tessera-webhook-serving");
    }
  }
}

TEST_F(HelmChartTest, LeaderElectionAndReplicas) {
  {
    const Manifests m = Render({Values("ha.yaml")});
    const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
    EXPECT_EQ(deploy["spec"]["replicas"].as<int>(), 2);
    EXPECT_EQ(deploy["spec"]["strategy"]["type"].as<std::string>(), "RollingUpdate");
    EXPECT_EQ(deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as<int>(), 0);
    EXPECT_TRUE(deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]);
    EXPECT_EQ(
        m.Get("PodDisruptionBudget", kPrefix + "-scheduler")["spec"]["maxUnavailable"].as<int>(),
        1);
    const YAML::Node config = YAML::Load(
        m.Get("ConfigMap", kPrefix + "-kube-scheduler")["data"]["config.yaml"].as<std::string>());
    EXPECT_TRUE(config["leaderElection"]["leaderElect"].as<bool>());
    EXPECT_EQ(config["leaderElection"]["leaseDuration"].as<std::string>(), "20s");
    EXPECT_EQ(config["leaderElection"]["renewDeadline"].as<std::string>(), "15s");
    EXPECT_EQ(config["leaderElection"]["retryPeriod"].as<std::string>(), "3s");
    EXPECT_TRUE(m.Find("Role", kPrefix + "-scheduler-lease"));
  }
  {
    // One replica without election: never two schedulers at once, even during a rollout.
    const Manifests m = Render({Values("single-no-election.yaml")});
    const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
    EXPECT_EQ(deploy["spec"]["strategy"]["type"].as<std::string>(), "Recreate");
    EXPECT_FALSE(m.Find("PodDisruptionBudget", kPrefix + "-scheduler"));
    EXPECT_FALSE(m.Find("Role", kPrefix + "-scheduler-lease"));
    const YAML::Node config = YAML::Load(
        m.Get("ConfigMap", kPrefix + "-kube-scheduler")["data"]["config.yaml"].as<std::string>());
    EXPECT_FALSE(config["leaderElection"]["leaderElect"].as<bool>());
  }
}

TEST_F(HelmChartTest, TheExamplePolicyReachesBothBinariesAndTheRbac) {
  // api/config/v1/policy.example.yaml as the policy value; honorNamespaceLabel off (the scheduler
  // refuses it today), and other PriorityClass names to follow through.
  YAML::Node policy = YAML::LoadFile(kSource + "/api/config/v1/policy.example.yaml");
  policy["tierAssignment"]["honorNamespaceLabel"] = false;
  policy["priorityClasses"]["latency-critical"] = "gpu-latency-critical";
  YAML::Node values;
  values["policy"] = policy;
  values["placement"] = "tessera";
  YAML::Emitter out;
  out << values;
  const std::string file = tmp_.path() + "/policy-values.yaml";
  WriteFile(file, out.c_str());
  const Manifests m = Render({file});

  const std::string text =
      m.Get("ConfigMap", kPrefix + "-policy")["data"]["policy.yaml"].as<std::string>();
  auto parsed = policy::ParsePolicy(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
  EXPECT_EQ(parsed->KubernetesPriorityClass(PriorityClass::kLatencyCritical),
            "gpu-latency-critical");
  EXPECT_EQ(parsed->quotas.size(), 2u);

  const YAML::Node deploy = m.Get("Deployment", kPrefix + "-scheduler");
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  for (const YAML::Node& c :
       {Container(deploy, "tessera-scheduler"), Container(ds, "tessera-node")}) {
    EXPECT_EQ(Flag(Args(c), "--policy"), "/etc/tessera/policy/policy.yaml");
  }
  EXPECT_EQ(Flag(Args(Container(deploy, "tessera-scheduler")), "--placement"), "tessera");
  EXPECT_TRUE(m.Find("PriorityClass", "gpu-latency-critical"));
  EXPECT_TRUE(m.Find("PriorityClass", "tessera-normal"));
  EXPECT_FALSE(m.Find("PriorityClass", "tessera-latency-critical"));
  EXPECT_EQ(
      Rules(m.Get("ClusterRole", kPrefix + "-scheduler"))
          .count("scheduling.k8s.io/"
                 "priorityclasses[gpu-latency-critical,tessera-normal,tessera-best-effort]: get"),
      1u);
  // A policy change restarts both (they read the file at start).
  const std::string before =
      deploy["spec"]["template"]["metadata"]["annotations"]["checksum/policy"].as<std::string>();
  const std::string default_sum =
      Render()
          .Get("Deployment",
               kPrefix +
                   "-scheduler")["spec"]["template"]["metadata"]["annotations"]["checksum/policy"]
          .as<std::string>();
  EXPECT_NE(before, default_sum);
  EXPECT_EQ(ds["spec"]["template"]["metadata"]["annotations"]["checksum/policy"].as<std::string>(),
            before);
}

TEST_F(HelmChartTest, GpuOperatorDriverFolderIsMountedAndUsedForNvml) {
  const Manifests m = Render({Values("gpu-operator.yaml")});
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  const auto args = Args(Container(ds, "tessera-node"));
  const std::string dir = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu";
  EXPECT_EQ(Flag(args, "--driver-lib-dir"), dir);
  EXPECT_EQ(Flag(args, "--nvml-library"), dir + "/libnvidia-ml.so.1");
  bool mounted = false;
  for (const auto& v : Container(ds, "tessera-node")["volumeMounts"]) {
    if (v["mountPath"].as<std::string>() == dir) mounted = v["readOnly"].as<bool>();
  }
  EXPECT_TRUE(mounted);
  // The administrator's extras: an environment variable, a volume and its mount.
  bool proxy = false, ca_mounted = false, ca_volume = false;
  for (const auto& e : Container(ds, "tessera-node")["env"]) {
    proxy |= e["name"].as<std::string>() == "HTTPS_PROXY" &&
             e["value"].as<std::string>() == "http://proxy.example:3128";
  }
  for (const auto& v : Container(ds, "tessera-node")["volumeMounts"]) {
    ca_mounted |= v["name"].as<std::string>() == "corp-ca" &&
                  v["mountPath"].as<std::string>() == "/etc/corp-ca";
  }
  for (const auto& v : ds["spec"]["template"]["spec"]["volumes"]) {
    ca_volume |= v["name"].as<std::string>() == "corp-ca" && v["configMap"]["name"].IsDefined();
  }
  EXPECT_TRUE(proxy);
  EXPECT_TRUE(ca_mounted);
  EXPECT_TRUE(ca_volume);
  EXPECT_EQ(ds["spec"]["updateStrategy"]["type"].as<std::string>(), "OnDelete");
  EXPECT_EQ(ds["spec"]["template"]["spec"]["nodeSelector"]["pool"].as<std::string>(), "gpu");
  EXPECT_TRUE(m.OfKind("ValidatingAdmissionPolicy").empty());
}

// Uninstall mode: the node pods run `tessera-node --uninstall --hold` over the same host paths
// (and the installed library's folder), install nothing and serve nothing.
TEST_F(HelmChartTest, UninstallModeRunsTheNodesUninstallOverTheSameHostPaths) {
  const Manifests normal = Render();
  const Manifests m = Render({Values("uninstall.yaml")});
  const YAML::Node ds = m.Get("DaemonSet", kPrefix + "-node");
  const YAML::Node pod = ds["spec"]["template"]["spec"];
  EXPECT_FALSE(pod["initContainers"].IsDefined() && pod["initContainers"].size() > 0);
  const auto args = Args(Container(ds, "tessera-node"));
  const auto has = [&](const std::string& a) {
    return std::find(args.begin(), args.end(), a) != args.end();
  };
  EXPECT_TRUE(has("--uninstall"));
  EXPECT_TRUE(has("--hold"));
  EXPECT_FALSE(has("--force"));
  EXPECT_EQ(Flag(args, "--hook-library"), "/usr/local/lib/tessera/libtessera-cuda.so");
  const auto normal_args =
      Args(Container(normal.Get("DaemonSet", kPrefix + "-node"), "tessera-node"));
  for (const char* flag : {"--state-dir", "--cdi-dir", "--device-plugin-dir", "--node-name"}) {
    EXPECT_EQ(Flag(args, flag), Flag(normal_args, flag)) << flag;
  }
  bool library_folder = false;
  for (const auto& v : Container(ds, "tessera-node")["volumeMounts"]) {
    library_folder |= v["mountPath"].as<std::string>() == "/usr/local/lib/tessera";
  }
  EXPECT_TRUE(library_folder);
  EXPECT_FALSE(Container(ds, "tessera-node")["readinessProbe"].IsDefined());
  // The binary knows the flags.
  const Ran help = RunProgram({TESSERA_NODE_BINARY, "--help"}, {});
  for (const char* flag : {"--uninstall", "--hold"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

// The flags the chart renders are ones the binaries know, and the key material and policy it
// renders load: each binary runs with the rendered arguments (files the chart mounts written to
// a temporary folder) until it needs the cluster, which it cannot reach here.
TEST_F(HelmChartTest, TheBinariesAcceptTheRenderedFlagsAndFiles) {
  YAML::Node values;
  values["policy"] = YAML::LoadFile(kSource + "/api/config/v1/policy.example.yaml");
  values["policy"]["tierAssignment"]["honorNamespaceLabel"] = false;
  YAML::Emitter emitted;
  emitted << values;
  const std::string values_file = tmp_.path() + "/values.yaml";
  WriteFile(values_file, emitted.c_str());
  const Manifests m = Render({values_file});

  const std::string root = tmp_.path() + "/mounts";
  WriteFile(
      root + "/etc/tessera/signing-key/signing-key.pem",
      Base64Decode(
          m.Get("Secret", kPrefix + "-signing-key")["data"]["signing-key.pem"].as<std::string>()));
  const YAML::Node tls = m.Get("Secret", kPrefix + "-webhook-tls");
  WriteFile(root + "/etc/tessera/tls/tls.crt",
            Base64Decode(tls["data"]["tls.crt"].as<std::string>()));
  WriteFile(root + "/etc/tessera/tls/tls.key",
            Base64Decode(tls["data"]["tls.key"].as<std::string>()));
  WriteFile(root + "/etc/tessera/policy/policy.yaml",
            m.Get("ConfigMap", kPrefix + "-policy")["data"]["policy.yaml"].as<std::string>());
  auto rooted = [&](std::vector<std::string> args) {
    for (std::string& a : args) {
      const std::size_t at = a.find("=/etc/tessera/");
      if (at != std::string::npos) a.insert(at + 1, root);
    }
    return args;
  };
  // No cluster: a kubeconfig that is not there, and not the in-cluster one.
  const std::vector<std::string> env = {"KUBECONFIG=" + tmp_.path() + "/no-kubeconfig"};
  const std::vector<std::string> drop = {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"};

  const auto scheduler_args =
      Args(Container(m.Get("Deployment", kPrefix + "-scheduler"), "tessera-scheduler"));
  std::vector<std::string> argv = {TESSERA_SCHEDULER_BINARY};
  for (const std::string& a : rooted(scheduler_args)) argv.push_back(a);
  Ran r = RunProgram(argv, env, drop);
  // Flags, placement, policy and signing key passed; it stopped at the kubeconfig.
  EXPECT_NE(r.err.find("--kubeconfig"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not expected"), std::string::npos) << r.err;

  const auto node_args = Args(Container(m.Get("DaemonSet", kPrefix + "-node"), "tessera-node"));
  // The decision keys' ConfigMap, where the DaemonSet mounts it (tessera-node reads them before
  // it opens NVML or asks the API server).
  for (const std::string& a : node_args) {
    if (!a.starts_with("--decision-keys=")) continue;
    const std::string dir = root + a.substr(a.find('=') + 1);
    for (const auto& key : m.Get("ConfigMap", kPrefix + "-decision-keys")["data"]) {
      WriteFile(dir + "/" + key.first.as<std::string>(), key.second.as<std::string>());
    }
  }
  argv = {TESSERA_NODE_BINARY};
  for (const std::string& a : rooted(node_args)) argv.push_back(a);
  r = RunProgram(argv, env, drop);
  // Flags passed; it stopped at NVML (no GPU here) or, on a GPU host, at the kubeconfig.
  EXPECT_TRUE(r.err.find("NVML not available") != std::string::npos ||
              r.err.find("--kubeconfig") != std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("not expected"), std::string::npos) << r.err;
}

// Every file in test/helm/bad is refused by helm template, and the message has each
// "# expect: ..." line of the file (the value's name and the accepted form).
TEST_F(HelmChartTest, BadValuesAreRefusedWithTheirName) {
  int files = 0;
  for (const auto& e : fs::directory_iterator(kSource + "/test/helm/bad")) {
    ++files;
    const std::string path = e.path().string();
    std::vector<std::string> expects;
    std::istringstream lines(ReadFile(path));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("# expect: ", 0) == 0) expects.push_back(line.substr(10));
    }
    ASSERT_FALSE(expects.empty()) << path << " has no \"# expect: \" line";
    const Ran r = Template({path});
    EXPECT_NE(r.exit_code, 0) << e.path().filename() << " was accepted";
    for (const std::string& want : expects) {
      EXPECT_NE(r.err.find(want), std::string::npos)
          << e.path().filename() << ": \"" << want << "\" not in:\n"
          << r.err;
    }
  }
  EXPECT_GE(files, 20);
}

// Every value has a row in the chart's README, and the schema and values.yaml name the same
// values. A value is a leaf unless the schema closes its object (additionalProperties: false).
TEST_F(HelmChartTest, EveryValueIsDocumentedAndInTheSchema) {
  const json schema = json::parse(ReadFile(kChart + "/values.schema.json"));
  auto resolve = [&](const json& s) -> const json& {
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"];  // #/definitions/name
      return schema["definitions"][ref.substr(ref.rfind('/') + 1)];
    }
    return s;
  };
  std::vector<std::string> leaves;
  std::function<void(const YAML::Node&, const json&, const std::string&)> walk =
      [&](const YAML::Node& node, const json& s, const std::string& path) {
        const json& sch = resolve(s);
        const bool closed =
            sch.value("additionalProperties", json(true)) == json(false) &&
            sch.contains("properties") &&
            path != "policy";  // the policy file: its own format, documented as one value
        // An empty map of optional keys (issuerRef: {}) is one value too.
        if (!closed || !node.IsMap() || node.size() == 0) {
          leaves.push_back(path);
          return;
        }
        for (const auto& kv : node) {
          const std::string key = kv.first.as<std::string>();
          const std::string child = path.empty() ? key : path + "." + key;
          ASSERT_TRUE(sch["properties"].contains(key))
              << child << " is in values.yaml but not in the schema";
          walk(kv.second, sch["properties"][key], child);
        }
        for (const auto& [key, sub] : sch["properties"].items()) {
          EXPECT_TRUE(node[key]) << (path.empty() ? key : path + "." + key)
                                 << " is in the schema but not in values.yaml";
        }
      };
  walk(YAML::LoadFile(kChart + "/values.yaml"), schema, "");
  ASSERT_GT(leaves.size(), 60u);
  std::set<std::string> rows;
  std::istringstream readme(ReadFile(kChart + "/README.md"));
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("| `", 0) == 0) rows.insert(line.substr(3, line.find('`', 3) - 3));
  }
  for (const std::string& leaf : leaves)
    EXPECT_TRUE(rows.count(leaf)) << leaf << " has no row in README.md";
  for (const std::string& row : rows) {
    EXPECT_TRUE(std::find(leaves.begin(), leaves.end(), row) != leaves.end())
        << "README.md documents " << row << ", which values.yaml does not have";
  }
}

}  // namespace
}  // namespace tessera::helmtest
