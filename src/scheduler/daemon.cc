#include "scheduler/daemon.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "extender/extender.h"
#include "extender/ledger.h"
#include "scheduler/server.h"
#include "k8s/client.h"
#include "k8s/events.h"
#include "k8s/leader.h"
#include "k8s/paths.h"
#include "k8s/reflector.h"
#include "policy/policy.h"
#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/prometheus.h"
#include "webhook/server.h"
#include "webhook/webhook.h"

namespace tessera::scheduler {

using extender::Extender;
using extender::Ledger;
using extender::LedgerOptions;
using extender::PodWriter;

using contract::Signer;
using contract::Verifier;
namespace {

using nlohmann::json;

// The bind through the API server: one Binding carrying the decision annotations.
class KubePodWriter final : public PodWriter {
 public:
  explicit KubePodWriter(k8s::Client* client) : client_(client) {}

  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override {
    json binding = {{"apiVersion", "v1"},
                    {"kind", "Binding"},
                    {"metadata",
                     {{"name", name}, {"namespace", ns}, {"uid", uid}, {"annotations", annotations}}},
                    {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
    return client_->Create(k8s::PodBindingPath(ns, name), binding).status();
  }
  StatusOr<std::string> NodeNameOf(const std::string& ns, const std::string& name,
                                   const std::string& uid) override {
    auto pod = client_->Get(k8s::PodPath(ns, name));
    if (!pod.ok()) return pod.status();
    if (pod->value("/metadata/uid"_json_pointer, std::string()) != uid) return std::string();
    return pod->value("/spec/nodeName"_json_pointer, std::string());
  }

 private:
  k8s::Client* client_;
};

class NodeHandler final : public k8s::ReflectorHandler {
 public:
  explicit NodeHandler(Ledger* ledger) : ledger_(ledger) {}
  void OnSync(std::vector<json> items, const std::string&) override { ledger_->ReplaceNodes(items); }
  void OnEvent(k8s::WatchEventType type, const json& node) override {
    if (type == k8s::WatchEventType::kDeleted) {
      ledger_->DeleteNode(node.value("/metadata/name"_json_pointer, std::string()));
    } else {
      ledger_->UpsertNode(node);
    }
  }

 private:
  Ledger* ledger_;
};

class PodHandler final : public k8s::ReflectorHandler {
 public:
  PodHandler(Ledger* ledger, webhook::QuotaBook* quotas) : ledger_(ledger), quotas_(quotas) {}
  void OnSync(std::vector<json> items, const std::string&) override {
    quotas_->ReplacePods(items);
    ledger_->ReplacePods(items);
  }
  void OnEvent(k8s::WatchEventType type, const json& pod) override {
    if (type == k8s::WatchEventType::kDeleted) {
      quotas_->ForgetPod(pod);
      ledger_->ForgetPod(pod);
    } else {
      quotas_->ObservePod(pod);
      ledger_->ObservePod(pod);
    }
  }

 private:
  Ledger* ledger_;
  webhook::QuotaBook* quotas_;
};

// PriorityClass values for the mutating webhook: read from the API, cached for a minute.
class PriorityClasses {
 public:
  explicit PriorityClasses(k8s::Client* client) : client_(client) {}
  std::optional<std::int32_t> Value(const std::string& name) {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(mu_);
      auto it = cache_.find(name);
      if (it != cache_.end() && now - it->second.second < std::chrono::minutes(1)) {
        return it->second.first;
      }
    }
    std::optional<std::int32_t> value;
    auto pc = client_->Get("/apis/scheduling.k8s.io/v1/priorityclasses/" + name);
    if (pc.ok() && pc->contains("value") && (*pc)["value"].is_number_integer()) {
      value = (*pc)["value"].get<std::int32_t>();
    } else if (!pc.ok() && pc.status().code() != StatusCode::kNotFound) {
      return std::nullopt;  // not cached: an API hiccup is not an answer
    }
    std::lock_guard lock(mu_);
    cache_[name] = {value, now};
    return value;
  }

 private:
  k8s::Client* client_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::optional<std::int32_t>, std::chrono::steady_clock::time_point>>
      cache_;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "tessera-scheduler: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int RunScheduler(const SchedulerOptions& options) {
  // Configuration first: nothing starts unless all of it is right.
  auto listen = ParseListenAddress(options.listen);
  if (!listen.ok()) return Fail(listen.status().WithContext("--listen"));
  auto kind = placement::ParsePolicyKind(options.placement);
  if (!kind.ok()) return Fail(kind.status().WithContext("--placement"));
  if (*kind == placement::PolicyKind::kRandom || *kind == placement::PolicyKind::kFgd) {
    return Fail(InvalidArgumentError("--placement " + options.placement +
                                     ": needs a workload profile or a random source the scheduler "
                                     "does not have; use best-fit, tessera, gpu-packing, "
                                     "gpu-clustering or dot-product"));
  }
  policy::Policy policy = policy::DefaultPolicy();
  if (!options.policy_file.empty()) {
    auto p = policy::LoadPolicyFile(options.policy_file);
    if (!p.ok()) return Fail(p.status().WithContext("--policy"));
    policy = *std::move(p);
  }
  if (policy.honor_namespace_label) {
    // The scheduler does not watch Namespaces yet: honouring the label would silently fall back
    // to the default tier. Refuse rather than fail open.
    return Fail(InvalidArgumentError(
        "--policy: tierAssignment.honorNamespaceLabel: true is not supported by "
        "tessera-scheduler yet; map namespaces to tiers explicitly (tierAssignment.namespaces)"));
  }
  if (options.signing_key_file.empty()) {
    return Fail(InvalidArgumentError("--signing-key: required (an Ed25519 private key, PEM)"));
  }
  auto pem = ReadFile(options.signing_key_file);
  if (!pem.ok()) return Fail(InvalidArgumentError("--signing-key " + pem.status().message()));
  auto signer = Signer::FromPem(*pem);
  if (!signer.ok()) return Fail(signer.status().WithContext("--signing-key"));
  auto config = k8s::ResolveConfig(options.kubeconfig);
  if (!config.ok()) return Fail(config.status().WithContext("--kubeconfig"));
  config->qps = options.qps;
  config->burst = options.burst;
  config->user_agent = "tessera-scheduler";
  auto client = k8s::Client::New(*config);
  if (!client.ok()) return Fail(client.status());
  std::unique_ptr<webhook::CertReloader> certs;
  std::optional<std::pair<std::string, int>> webhook_listen;
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return Fail(InvalidArgumentError("--tls-cert-file and --tls-key-file: give both or neither"));
    }
    auto reloader = webhook::CertReloader::Create(options.tls_cert_file, options.tls_key_file);
    if (!reloader.ok()) return Fail(reloader.status());
    certs = std::move(*reloader);
    auto wl = ParseListenAddress(options.webhook_listen);
    if (!wl.ok()) return Fail(wl.status().WithContext("--webhook-listen"));
    webhook_listen = *wl;
  }

  // Signals are taken by sigwait below, in this thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  LedgerOptions ledger_options;
  ledger_options.placement = *kind;
  ledger_options.reservation_ttl = options.reservation_ttl;
  // Bound pods count only with a decision this scheduler signed (a forged one books nothing).
  auto own_key = Verifier::FromPem(signer->PublicKeyPem());
  if (!own_key.ok()) return Fail(own_key.status());
  auto verifier = std::make_shared<Verifier>(std::move(*own_key));
  ledger_options.verify = [verifier](const std::string& decision, const std::string& signature) {
    return verifier->Verify(decision, signature).ok();
  };
  Ledger ledger(policy, ledger_options, [] { return std::chrono::steady_clock::now(); });
  KubePodWriter writer(client->get());
  Extender extender(&ledger, &writer, &*signer, options.key_id, [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  });
  Server server(&extender, &ledger, options.threads);
  auto port = server.Bind(listen->first, listen->second);
  if (!port.ok()) return Fail(port.status());

  webhook::QuotaBook quotas(&policy, [] { return std::chrono::steady_clock::now(); });
  PriorityClasses priority_classes(client->get());
  webhook::WebhookOptions webhook_options;
  webhook_options.scheduler_users = options.scheduler_users;
  webhook_options.scheduler_name = options.scheduler_name;
  webhook::ClusterView view;
  view.largest_gpu_memory = [&ledger] { return ledger.LargestGpuMemory(); };
  view.priority_class_value = [&priority_classes](const std::string& name) {
    return priority_classes.Value(name);
  };
  // Each refused pod gets a Warning Event (kubectl describe / get events show why), at most one
  // per pod and rule a minute: a controller retrying a refused pod does not flood the API.
  k8s::EventRecorder events(**client, "tessera-scheduler", "");
  std::mutex denied_mu;
  std::map<std::string, std::chrono::steady_clock::time_point> denied_recently;
  webhook_options.on_denial = [&](const webhook::Denial& d) {
    if (d.dry_run || d.namespace_name.empty() || d.name.empty()) return;  // generateName: no object to name
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(denied_mu);
      std::erase_if(denied_recently, [&](const auto& e) { return now - e.second > std::chrono::minutes(1); });
      const std::string key = d.namespace_name + "/" + d.name + "/" + std::to_string(static_cast<int>(d.rule));
      if (!denied_recently.emplace(key, now).second) return;
    }
    events.Warn({{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", d.namespace_name}, {"name", d.name}},
                names::kEventAdmissionDenied,
                "rule " + std::string(webhook::kDenialRuleNames[static_cast<std::size_t>(d.rule)]) + ": " + d.message);
  };
  webhook::Admission admission(&policy, webhook_options, view, &quotas);
  server.AddMetrics([&admission, &events](prom::Exposition& out) {
    out.Add(names::kMetricAdmissionReviews, {{"webhook", "mutate"}}, static_cast<double>(admission.mutate_reviews()));
    out.Add(names::kMetricAdmissionReviews, {{"webhook", "validate"}},
            static_cast<double>(admission.validate_reviews()));
    for (std::size_t i = 0; i < webhook::kDenialRules; ++i) {
      out.Add(names::kMetricAdmissionDenials, {{"rule", std::string(webhook::kDenialRuleNames[i])}},
              static_cast<double>(admission.denials(static_cast<webhook::DenialRule>(i))));
    }
    out.Add(names::kMetricAdmissionEventsDropped, {}, static_cast<double>(events.dropped()));
  });
  std::unique_ptr<webhook::WebhookServer> webhooks;
  int webhook_port = 0;
  if (certs) {
    webhooks = std::make_unique<webhook::WebhookServer>(&admission, certs.get(), options.threads);
    auto bound = webhooks->Bind(webhook_listen->first, webhook_listen->second);
    if (!bound.ok()) return Fail(bound.status());
    webhook_port = *bound;
  }

  NodeHandler node_handler(&ledger);
  PodHandler pod_handler(&ledger, &quotas);
  k8s::Reflector nodes(**client, k8s::NodesPath(), node_handler);
  k8s::ReflectorOptions pod_options;
  // Finished pods hold no GPU; when a pod finishes, the watch sends it as DELETED.
  pod_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  k8s::Reflector pods(**client, k8s::PodsPath(""), pod_handler, pod_options);

  std::jthread node_thread([&nodes](std::stop_token stop) { nodes.Run(stop); });
  std::jthread pod_thread([&pods](std::stop_token stop) { pods.Run(stop); });
  std::jthread sweeper([&](std::stop_token stop) {
    bool announced = false;
    while (!stop.stop_requested()) {
      if (!announced && nodes.HasSynced() && pods.HasSynced()) {
        extender.SetSynced(true);
        announced = true;
        TESSERA_LOG(kInfo, kScheduler, "synced: %zu GPU nodes, %zu pods holding GPUs",
                    ledger.nodes(), ledger.bound());
        if (!options.ready_file.empty()) {
          const std::string tmp = options.ready_file + ".tmp";
          std::ofstream(tmp) << *port << "\n";
          std::rename(tmp.c_str(), options.ready_file.c_str());
        }
      }
      ledger.ExpireReservations();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // Leader election: followers keep watching (their ledger stays current) but answer 503.
  std::unique_ptr<k8s::LeaderElector> elector;
  std::atomic<bool> resync{false};
  std::atomic<bool> caught_up{false};  // the ledger was rebuilt since this term began
  if (options.leader_elect) {
    extender.SetLeaderCheck([&elector, &caught_up] {
      return caught_up.load() && elector && elector->IsLeader();
    });
    k8s::LeaderElectorOptions le;
    le.ns = options.lease_namespace;
    le.lease_name = options.lease_name;
    le.identity = options.identity;
    le.lease_duration = options.lease_duration;
    le.renew_deadline = options.renew_deadline;
    le.retry_period = options.retry_period;
    // A new leader first reads every pod afresh (a consistent list), so that binds the old
    // leader finished just before are on its books before it decides anything.
    le.on_started_leading = [&resync, &caught_up] {
      caught_up = false;
      resync = true;
    };
    le.on_stopped_leading = [&ledger, &caught_up] {
      caught_up = false;
      const std::size_t dropped = ledger.DropReservations();
      TESSERA_LOG(kWarn, kScheduler, "stopped leading; %zu reservations dropped", dropped);
    };
    auto made = k8s::LeaderElector::New(*config, le);
    if (!made.ok()) return Fail(made.status().WithContext("leader election"));
    elector = std::move(*made);
  }
  std::jthread election([&elector](std::stop_token stop) {
    if (elector) elector->Run(stop);
  });
  std::jthread resyncer([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (resync.exchange(false)) {
        k8s::ListOptions lo;
        lo.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
        auto list = (*client)->List(k8s::PodsPath(""), lo);
        if (!list.ok()) {
          TESSERA_LOG(kWarn, kScheduler, "leader resync: %s (retrying)", list.status().message().c_str());
          resync = true;
        } else if (elector && elector->IsLeader()) {
          quotas.ReplacePods(list->items);
          ledger.ReplacePods(list->items);
          caught_up = true;  // serving() still asks IsLeader() on every call
          TESSERA_LOG(kInfo, kScheduler, "leading: %zu pods hold GPUs", ledger.bound());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::jthread http([&server] { server.Run(); });
  // The webhooks answer only once the watches have synced: before that, quotas would see no
  // usage and "larger than any GPU" no GPUs. (With failurePolicy Fail, creates wait meanwhile.)
  std::jthread webhook_http([&webhooks, &extender](std::stop_token stop) {
    while (webhooks && !extender.synced() && !stop.stop_requested()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (webhooks && !stop.stop_requested()) webhooks->Run();
  });
  if (webhooks) {
    std::fprintf(stderr, "tessera-scheduler: admission webhooks on https://%s:%d\n",
                 webhook_listen->first.c_str(), webhook_port);
  }
  std::fprintf(stderr, "tessera-scheduler: serving on %s:%d (placement %s)\n",
               listen->first.c_str(), *port, options.placement.c_str());

  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "tessera-scheduler: %s, stopping\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
  caught_up = false;  // no new verbs; in-flight ones finish before the Lease is released
  extender.SetSynced(false);
  server.Stop();
  if (webhooks) webhooks->Stop();
  election.request_stop();
  election.join();  // releases the Lease
  resyncer.request_stop();
  sweeper.request_stop();
  node_thread.request_stop();
  pod_thread.request_stop();
  return 0;
}

}  // namespace tessera::scheduler
