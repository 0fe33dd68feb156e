// Shared by the scheduler's end-to-end test and throughput benchmark: the kube-scheduler
// configuration that calls tessera-scheduler, and starting tessera-scheduler as a child.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fstream>

#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/config.h"

namespace tessera::extender::e2etest {

// A loopback port free right now (tessera-scheduler must be named in kube-scheduler's
// configuration before either starts).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

// KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) with tessera-scheduler as the
// extender, as docs/design/0012 describes.
inline std::string SchedulerConfig(int port) {
  std::string managed;
  // gpu-slot too: a gpu-fraction pod carries only the slot the mutating webhook added.
  for (const char* name : {"tessera.dev/gpu", "tessera.dev/gpu-memory", "tessera.dev/gpu-cores",
                           "tessera.dev/gpu-slot"}) {
    managed += std::string("  - name: ") + name + "\n    ignoredByScheduler: false\n";
  }
  return "apiVersion: kubescheduler.config.k8s.io/v1\n"
         "kind: KubeSchedulerConfiguration\n"
         "extenders:\n"
         "- urlPrefix: http://127.0.0.1:" + std::to_string(port) + "\n"
         "  filterVerb: filter\n"
         "  prioritizeVerb: prioritize\n"
         "  bindVerb: bind\n"
         "  preemptVerb: preempt\n"
         "  weight: 1\n"
         "  nodeCacheCapable: true\n"
         "  enableHTTPS: false\n"
         "  httpTimeout: 30s\n"
         "  managedResources:\n" + managed;
}

// The real control plane with kube-scheduler calling tessera-scheduler on loopback `port` (its
// configuration is written into `dir`), and an admin client with a generous rate limit.
struct ControlPlane {
  std::unique_ptr<e2e::TestCluster> cluster;
  std::unique_ptr<k8s::Client> api;
  std::string ca_pem;  // of the API server
};
inline StatusOr<ControlPlane> StartControlPlane(const std::string& dir, int port) {
  ControlPlane cp;
  const std::string config = dir + "/kube-scheduler.yaml";
  std::ofstream(config) << SchedulerConfig(port);
  e2e::TestClusterOptions options;
  options.scheduler_config = config;
  auto cluster = e2e::TestCluster::Start(options);
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
  std::vector<std::string> extra_args;                // e.g. --leader-elect ...
};

// Starts tessera-scheduler and waits until it has listed nodes and pods.
inline StatusOr<std::unique_ptr<e2e::ChildProcess>> StartTesseraScheduler(
    const SchedulerProcessOptions& s) {
  const std::string ready = s.dir + "/scheduler.ready." + s.tag;
  e2e::ChildOptions o;
  o.argv = {s.binary, "--kubeconfig", s.kubeconfig, "--listen",
            "127.0.0.1:" + std::to_string(s.port), "--signing-key", s.signing_key, "--key-id", "e2e",
            "--reservation-ttl-ms", "20000", "--ready-file", ready, "--log-level", "info",
            "--scheduler-user", s.scheduler_user};
  if (!s.tls_cert_file.empty()) {
    o.argv.insert(o.argv.end(), {"--tls-cert-file", s.tls_cert_file, "--tls-key-file",
                                 s.tls_key_file, "--webhook-listen",
                                 "127.0.0.1:" + std::to_string(s.webhook_port)});
  }
  if (!s.policy_file.empty()) o.argv.insert(o.argv.end(), {"--policy", s.policy_file});
  o.argv.insert(o.argv.end(), s.extra_args.begin(), s.extra_args.end());
  o.log_path = s.dir + "/tessera-scheduler." + s.tag + ".log";
  return e2e::SpawnAndWaitForFile(std::move(o), ready, std::chrono::seconds(60));
}

// The webhook configurations that point the API server at tessera's webhooks.
inline std::pair<nlohmann::json, nlohmann::json> WebhookConfigurations(int port,
                                                                       const std::string& ca_b64) {
  const std::string url = "https://127.0.0.1:" + std::to_string(port);
  auto hook = [&](const char* name, const char* path, nlohmann::json rules) {
    return nlohmann::json{{"name", name},
                          {"clientConfig", {{"url", url + path}, {"caBundle", ca_b64}}},
                          {"rules", std::move(rules)},
                          {"admissionReviewVersions", {"v1"}},
                          {"sideEffects", "None"},
                          {"failurePolicy", "Fail"},
                          {"timeoutSeconds", 10}};
  };
  nlohmann::json pods_create = {{{"operations", {"CREATE"}}, {"apiGroups", {""}},
                                 {"apiVersions", {"v1"}}, {"resources", {"pods"}}}};
  nlohmann::json mutating = {{"apiVersion", "admissionregistration.k8s.io/v1"},
                             {"kind", "MutatingWebhookConfiguration"},
                             {"metadata", {{"name", "tessera"}}},
                             {"webhooks", {hook("pods.mutate.tessera.dev", "/mutate", pods_create)}}};
  nlohmann::json validate_rules = {{{"operations", {"CREATE", "UPDATE"}}, {"apiGroups", {""}},
                                    {"apiVersions", {"v1"}}, {"resources", {"pods"}}},
                                   {{"operations", {"CREATE"}}, {"apiGroups", {""}},
                                    {"apiVersions", {"v1"}}, {"resources", {"pods/binding"}}}};
  nlohmann::json validating = {{"apiVersion", "admissionregistration.k8s.io/v1"},
                               {"kind", "ValidatingWebhookConfiguration"},
                               {"metadata", {{"name", "tessera"}}},
                               {"webhooks", {hook("pods.validate.tessera.dev", "/validate", validate_rules)}}};
  mutating["webhooks"][0]["reinvocationPolicy"] = "IfNeeded";
  return {mutating, validating};
}

}  // namespace tessera::extender::e2etest
