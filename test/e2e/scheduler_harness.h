// The end-to-end tests' and throughput benchmark's control plane: the real control plane with
// kube-scheduler configured to call tessera-scheduler, and tessera-scheduler started as a child.
// Test code: never linked into a product target.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/listen.h"
#include "scheduler/kube_config.h"

namespace tessera::e2e {

using k8s::FreeLoopbackPort;
using scheduler::SchedulerConfig;
using scheduler::WebhookConfigurations;

// The real control plane with kube-scheduler calling tessera-scheduler on loopback `port` (its
// configuration is written into `dir`), and an admin client with a generous rate limit.
struct ControlPlane {
  std::unique_ptr<TestCluster> cluster;
  std::unique_ptr<k8s::Client> api;
  std::string ca_pem;  // of the API server
};
inline StatusOr<ControlPlane> StartControlPlane(const std::string& dir, int port) {
  ControlPlane cp;
  const std::string config = dir + "/kube-scheduler.yaml";
  std::ofstream(config) << SchedulerConfig(port);
  TestClusterOptions options;
  options.scheduler_config = config;
  auto cluster = TestCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  cp.cluster = std::move(*cluster);
  auto kc = k8s::LoadKubeconfig(cp.cluster->kubeconfig());
  if (!kc.ok()) return kc.status();
  kc->qps = 500;
  kc->burst = 1000;
  auto api = k8s::Client::New(*kc);
  if (!api.ok()) return api.status();
  cp.api = std::move(*api);
  cp.ca_pem = kc->ca_pem;
  return cp;
}

// A namespace and its default ServiceAccount (no controller manager runs to make it).
inline Status CreateNamespace(k8s::Client& api, const std::string& ns) {
  TESSERA_RETURN_IF_ERROR(
      api.Create("/api/v1/namespaces",
                 nlohmann::json{
                     {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}})
          .status());
  return api
      .Create("/api/v1/namespaces/" + ns + "/serviceaccounts",
              nlohmann::json{{"apiVersion", "v1"},
                             {"kind", "ServiceAccount"},
                             {"metadata", {{"name", "default"}}}})
      .status();
}

// `tessera-testcluster kubelet` for `node` (kubelet's device manager and PodResources server, the
// node Ready): its folders under `dir` (plugins/, pod-resources.sock, results/), ready once its
// ready file exists; its log at `log_path`.
inline StatusOr<std::unique_ptr<ChildProcess>> StartHarnessKubelet(const TestCluster& cluster,
                                                                   const std::string& node,
                                                                   const std::string& dir,
                                                                   const std::string& log_path) {
  ChildOptions o;
  const std::string ready = dir + "/kubelet.ready";
  o.argv = {cluster.binary(),
            "kubelet",
            "--kubeconfig",
            cluster.kubeconfig(),
            "--node",
            node,
            "--plugin-dir",
            dir + "/plugins",
            "--pod-resources-socket",
            dir + "/pod-resources.sock",
            "--results-dir",
            dir + "/results",
            "--ready-file",
            ready};
  o.log_path = log_path;
  std::error_code ec;
  std::filesystem::remove(ready, ec);
  return SpawnAndWaitForFile(std::move(o), ready, std::chrono::seconds(60));
}

struct SchedulerProcessOptions {
  std::string binary;
  std::string kubeconfig;
  int port = 0;
  std::string signing_key;
  std::string dir;  // log and ready file
  std::string tag;  // tells ready files of restarts apart
  // Webhooks: served when both are set.
  std::string tls_cert_file;
  std::string tls_key_file;
  int webhook_port = 0;
  std::string policy_file;
  std::string scheduler_user = "tessera-e2e-admin";  // the harness's admin certificate's user
  std::vector<std::string> extra_args;               // e.g. --leader-elect ...
};

// Starts tessera-scheduler and waits until it has listed nodes and pods.
inline StatusOr<std::unique_ptr<ChildProcess>> StartTesseraScheduler(
    const SchedulerProcessOptions& s) {
  const std::string ready = s.dir + "/scheduler.ready." + s.tag;
  ChildOptions o;
  o.argv = {s.binary,
            "--kubeconfig",
            s.kubeconfig,
            "--listen",
            "127.0.0.1:" + std::to_string(s.port),
            "--signing-key",
            s.signing_key,
            "--key-id",
            "e2e",
            "--reservation-ttl-ms",
            "20000",
            "--ready-file",
            ready,
            "--log-level",
            "info",
            "--scheduler-user",
            s.scheduler_user};
  if (!s.tls_cert_file.empty()) {
    o.argv.insert(o.argv.end(),
                  {"--tls-cert-file", s.tls_cert_file, "--tls-key-file", s.tls_key_file,
                   "--webhook-listen", "127.0.0.1:" + std::to_string(s.webhook_port)});
  }
  if (!s.policy_file.empty()) o.argv.insert(o.argv.end(), {"--policy", s.policy_file});
  o.argv.insert(o.argv.end(), s.extra_args.begin(), s.extra_args.end());
  o.log_path = s.dir + "/tessera-scheduler." + s.tag + ".log";
  return SpawnAndWaitForFile(std::move(o), ready, std::chrono::seconds(60));
}

}  // namespace tessera::e2e
