// What kube-scheduler and the API server need to be told to call tessera-scheduler: the
// KubeSchedulerConfiguration naming it as an extender and the admission webhook configurations
// (docs/design/0012, 0013). The Helm chart writes the same objects for a cluster; `tessera demo`
// and the end-to-end tests use these.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace tessera::scheduler {

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
         "- urlPrefix: http://127.0.0.1:" +
         std::to_string(port) +
         "\n"
         "  filterVerb: filter\n"
         "  prioritizeVerb: prioritize\n"
         "  bindVerb: bind\n"
         "  preemptVerb: preempt\n"
         "  weight: 1\n"
         "  nodeCacheCapable: true\n"
         "  enableHTTPS: false\n"
         "  httpTimeout: 30s\n"
         "  managedResources:\n" +
         managed;
}

// Only claims and claim templates naming one of tessera's DeviceClasses are sent to the claims'
// webhook (the webhook looks at nothing else: contract::IsTesseraDeviceClass), so claims of other
// drivers never wait for tessera-scheduler. The chart carries the same expression.
inline constexpr std::string_view kClaimMatchCondition =
    "[request.resource.resource == 'resourceclaimtemplates' ? object.spec.spec : "
    "object.spec].exists(c, has(c.devices) && has(c.devices.requests) && "
    "c.devices.requests.exists(r, (has(r.exactly) && r.exactly.deviceClassName in "
    "['shared.gpu.tessera.dev', 'mps.gpu.tessera.dev']) || (has(r.firstAvailable) && "
    "r.firstAvailable.exists(s, s.deviceClassName in ['shared.gpu.tessera.dev', "
    "'mps.gpu.tessera.dev']))))";

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
  nlohmann::json pods_create = {{{"operations", {"CREATE"}},
                                 {"apiGroups", {""}},
                                 {"apiVersions", {"v1"}},
                                 {"resources", {"pods"}}}};
  nlohmann::json mutating = {
      {"apiVersion", "admissionregistration.k8s.io/v1"},
      {"kind", "MutatingWebhookConfiguration"},
      {"metadata", {{"name", "tessera"}}},
      {"webhooks", {hook("pods.mutate.tessera.dev", "/mutate", pods_create)}}};
  nlohmann::json validate_rules = {{{"operations", {"CREATE", "UPDATE"}},
                                    {"apiGroups", {""}},
                                    {"apiVersions", {"v1"}},
                                    {"resources", {"pods"}}},
                                   {{"operations", {"CREATE"}},
                                    {"apiGroups", {""}},
                                    {"apiVersions", {"v1"}},
                                    {"resources", {"pods/binding"}}}};
  // The DRA path's claims and claim templates, as the chart registers them there.
  nlohmann::json claim_rules = {{{"operations", {"CREATE"}},
                                 {"apiGroups", {"resource.k8s.io"}},
                                 {"apiVersions", {"v1"}},
                                 {"resources", {"resourceclaims", "resourceclaimtemplates"}}}};
  nlohmann::json validating = {{"apiVersion", "admissionregistration.k8s.io/v1"},
                               {"kind", "ValidatingWebhookConfiguration"},
                               {"metadata", {{"name", "tessera"}}},
                               {"webhooks",
                                {hook("pods.validate.tessera.dev", "/validate", validate_rules),
                                 hook("claims.validate.tessera.dev", "/validate", claim_rules)}}};
  validating["webhooks"][1]["matchConditions"] = {
      {{"name", "names-a-tessera-class"}, {"expression", std::string(kClaimMatchCondition)}}};
  mutating["webhooks"][0]["reinvocationPolicy"] = "IfNeeded";
  return {mutating, validating};
}

}  // namespace tessera::scheduler
