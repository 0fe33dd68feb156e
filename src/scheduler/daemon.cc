#include "scheduler/daemon.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/prometheus.h"

#include "extender/extender.h"
#include "extender/ledger.h"
#include "k8s/client.h"
#include "k8s/events.h"
#include "k8s/leader.h"
#include "k8s/paths.h"
#include "k8s/reflector.h"
#include "policy/policy.h"
#include "scheduler/server.h"
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
    json binding = {
        {"apiVersion", "v1"},
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
  void OnSync(std::vector<json> items, const std::string&) override {
    ledger_->ReplaceNodes(items);
  }
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

// ResourceClaims into the quotas (--count-claims).
class ClaimHandler final : public k8s::ReflectorHandler {
 public:
  explicit ClaimHandler(webhook::QuotaBook* quotas) : quotas_(quotas) {}
  void OnSync(std::vector<json> items, const std::string&) override {
    quotas_->ReplaceClaims(items);
  }
  void OnEvent(k8s::WatchEventType type, const json& claim) override {
    if (type == k8s::WatchEventType::kDeleted) {
      quotas_->ForgetClaim(claim);
    } else {
      quotas_->ObserveClaim(claim);
    }
  }

 private:
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
  std::map<std::string,
           std::pair<std::optional<std::int32_t>, std::chrono::steady_clock::time_point>>
      cache_;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "tessera-scheduler: %s\n", status.message().c_str());
  return ToExitCode(status);  // docs/protocol.md "Exit codes", as every binary
}

}  // namespace

// Everything the process holds, declared in the order the steps create it: members are destroyed
// in reverse, so every thread is joined before what it uses goes away.
struct SchedulerProcess::State {
  // ValidateConfiguration
  std::pair<std::string, int> listen;
  placement::PolicyKind kind = placement::PolicyKind::kBestFit;
  policy::Policy policy = policy::DefaultPolicy();
  std::optional<Signer> signer;
  std::unique_ptr<webhook::CertReloader> certs;
  std::optional<std::pair<std::string, int>> webhook_listen;
  // ConnectApi
  std::optional<k8s::Config> config;
  std::unique_ptr<k8s::Client> client;
  // BlockSignals
  sigset_t signals{};
  // BuildBooks
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<KubePodWriter> writer;
  std::unique_ptr<Extender> extender;
  std::unique_ptr<Server> server;
  int port = 0;
  std::unique_ptr<webhook::QuotaBook> quotas;
  std::unique_ptr<PriorityClasses> priority_classes;
  std::unique_ptr<k8s::EventRecorder> events;
  std::mutex denied_mu;
  std::map<std::string, std::chrono::steady_clock::time_point> denied_recently;
  std::unique_ptr<webhook::Admission> admission;
  std::unique_ptr<webhook::WebhookServer> webhooks;
  int webhook_port = 0;
  // StartWatches
  std::unique_ptr<NodeHandler> node_handler;
  std::unique_ptr<PodHandler> pod_handler;
  std::unique_ptr<k8s::Reflector> nodes;
  std::unique_ptr<k8s::Reflector> pods;
  std::jthread node_thread;
  std::jthread pod_thread;
  std::unique_ptr<ClaimHandler> claim_handler;  // --count-claims
  std::unique_ptr<k8s::Reflector> claims;
  std::jthread claim_thread;
  std::jthread sweeper;
  // StartElection
  std::unique_ptr<k8s::LeaderElector> elector;
  std::atomic<bool> resync{false};
  std::atomic<bool> caught_up{false};  // the ledger was rebuilt since this term began
  std::jthread election;
  std::jthread resyncer;
  // Serve
  std::jthread http;
  std::jthread webhook_http;
};

SchedulerProcess::SchedulerProcess(SchedulerOptions options)
    : options_(std::move(options)), s_(std::make_unique<State>()) {}
SchedulerProcess::~SchedulerProcess() = default;

Status SchedulerProcess::ValidateConfiguration() {
  const SchedulerOptions& options = options_;
  auto listen = ParseListenAddress(options.listen);
  if (!listen.ok()) return listen.status().WithContext("--listen");
  s_->listen = *listen;
  auto kind = placement::ParsePolicyKind(options.placement);
  if (!kind.ok()) return kind.status().WithContext("--placement");
  if (*kind == placement::PolicyKind::kRandom || *kind == placement::PolicyKind::kFgd) {
    return InvalidArgumentError("--placement " + options.placement +
                                ": needs a workload profile or a random source the scheduler "
                                "does not have; use best-fit, tessera, gpu-packing, "
                                "gpu-clustering or dot-product");
  }
  s_->kind = *kind;
  if (!options.policy_file.empty()) {
    auto p = policy::LoadPolicyFile(options.policy_file);
    if (!p.ok()) return p.status().WithContext("--policy");
    s_->policy = *std::move(p);
  }
  if (s_->policy.honor_namespace_label) {
    // The scheduler does not watch Namespaces yet: honouring the label would silently fall back
    // to the default tier. Refuse rather than fail open.
    return InvalidArgumentError(
        "--policy: tierAssignment.honorNamespaceLabel: true is not supported by "
        "tessera-scheduler yet; map namespaces to tiers explicitly (tierAssignment.namespaces)");
  }
  if (options.signing_key_file.empty()) {
    return InvalidArgumentError("--signing-key: required (an Ed25519 private key, PEM)");
  }
  auto pem = ReadFile(options.signing_key_file, 64u << 10);  // a PEM key is a few hundred bytes
  if (!pem.ok()) return pem.status().WithContext("--signing-key");
  auto signer = Signer::FromPem(*pem);
  if (!signer.ok()) {
    return AsInputError(signer.status().WithContext("--signing-key " + options.signing_key_file));
  }
  s_->signer = std::move(*signer);
  return Status::Ok();
}

Status SchedulerProcess::ConnectApi() {
  auto config = k8s::ResolveConfig(options_.kubeconfig);
  if (!config.ok()) return config.status().WithContext("--kubeconfig");
  config->qps = options_.qps;
  config->burst = options_.burst;
  config->user_agent = "tessera-scheduler";
  auto client = k8s::Client::New(*config);
  if (!client.ok()) return client.status();
  s_->config = std::move(*config);
  s_->client = std::move(*client);
  return Status::Ok();
}

Status SchedulerProcess::LoadWebhookCertificates() {
  const SchedulerOptions& options = options_;
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) return Status::Ok();
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return InvalidArgumentError("--tls-cert-file and --tls-key-file: give both or neither");
  }
  auto reloader = webhook::CertReloader::Create(options.tls_cert_file, options.tls_key_file);
  if (!reloader.ok()) return reloader.status();
  s_->certs = std::move(*reloader);
  auto wl = ParseListenAddress(options.webhook_listen);
  if (!wl.ok()) return wl.status().WithContext("--webhook-listen");
  s_->webhook_listen = *wl;
  return Status::Ok();
}

void SchedulerProcess::BlockSignals() {
  // Signals are taken by sigwait in WaitForSignal, in this thread only (threads started later
  // inherit the mask).
  sigemptyset(&s_->signals);
  sigaddset(&s_->signals, SIGINT);
  sigaddset(&s_->signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &s_->signals, nullptr);
}

Status SchedulerProcess::BuildExtender() {
  State& s = *s_;
  LedgerOptions ledger_options;
  ledger_options.placement = s.kind;
  ledger_options.reservation_ttl = options_.reservation_ttl;
  // Bound pods count only with a decision this scheduler signed (a forged one books nothing).
  auto own_key = Verifier::FromPem(s.signer->PublicKeyPem());
  if (!own_key.ok()) return own_key.status();
  auto verifier = std::make_shared<Verifier>(std::move(*own_key));
  ledger_options.verify = [verifier](const std::string& decision, const std::string& signature) {
    return verifier->Verify(decision, signature).ok();
  };
  s.ledger = std::make_unique<Ledger>(s.policy, ledger_options, Clock::Real());
  s.writer = std::make_unique<KubePodWriter>(s.client.get());
  s.extender =
      std::make_unique<Extender>(s.ledger.get(), s.writer.get(), &*s.signer, options_.key_id, [] {
        return std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
      });
  s.server = std::make_unique<Server>(s.extender.get(), s.ledger.get(), options_.threads);
  auto port = s.server->Bind(s.listen.first, s.listen.second);
  if (!port.ok()) return port.status();
  s.port = *port;
  return Status::Ok();
}

Status SchedulerProcess::BuildAdmission() {
  State& s = *s_;
  s.quotas = std::make_unique<webhook::QuotaBook>(&s.policy, Clock::Real());
  s.priority_classes = std::make_unique<PriorityClasses>(s.client.get());
  webhook::WebhookOptions webhook_options;
  webhook_options.scheduler_users = options_.scheduler_users;
  webhook_options.scheduler_name = options_.scheduler_name;
  webhook_options.count_claims = options_.count_claims;
  webhook::ClusterView view;
  view.largest_gpu_memory = [ledger = s.ledger.get()] { return ledger->LargestGpuMemory(); };
  view.priority_class_value = [classes = s.priority_classes.get()](const std::string& name) {
    return classes->Value(name);
  };
  // Each refused pod gets a Warning Event (kubectl describe / get events show why), at most one
  // per pod and rule a minute: a controller retrying a refused pod does not flood the API.
  s.events = std::make_unique<k8s::EventRecorder>(*s.client, "tessera-scheduler", "");
  webhook_options.on_denial = [&s](const webhook::Denial& d) {
    if (d.dry_run || d.namespace_name.empty() || d.name.empty()) return;  // generateName
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(s.denied_mu);
      std::erase_if(s.denied_recently,
                    [&](const auto& e) { return now - e.second > std::chrono::minutes(1); });
      const std::string key = d.kind + "/" + d.namespace_name + "/" + d.name + "/" +
                              std::to_string(static_cast<int>(d.rule));
      if (!s.denied_recently.emplace(key, now).second) return;
    }
    s.events->Warn({{"apiVersion", d.api_version},
                    {"kind", d.kind},
                    {"namespace", d.namespace_name},
                    {"name", d.name}},
                   names::kEventAdmissionDenied,
                   "rule " +
                       std::string(webhook::kDenialRuleNames[static_cast<std::size_t>(d.rule)]) +
                       ": " + d.message);
  };
  s.admission =
      std::make_unique<webhook::Admission>(&s.policy, webhook_options, view, s.quotas.get());
  s.server->AddMetrics([admission = s.admission.get(),
                        events = s.events.get()](prom::Exposition& out) {
    out.Add(names::kMetricAdmissionReviews, {{"webhook", "mutate"}},
            static_cast<double>(admission->mutate_reviews()));
    out.Add(names::kMetricAdmissionReviews, {{"webhook", "validate"}},
            static_cast<double>(admission->validate_reviews()));
    for (std::size_t i = 0; i < webhook::kDenialRules; ++i) {
      out.Add(names::kMetricAdmissionDenials, {{"rule", std::string(webhook::kDenialRuleNames[i])}},
              static_cast<double>(admission->denials(static_cast<webhook::DenialRule>(i))));
    }
    out.Add(names::kMetricAdmissionEventsDropped, {}, static_cast<double>(events->dropped()));
  });
  if (s.certs) {
    s.webhooks = std::make_unique<webhook::WebhookServer>(s.admission.get(), s.certs.get(),
                                                          options_.threads);
    auto bound = s.webhooks->Bind(s.webhook_listen->first, s.webhook_listen->second);
    if (!bound.ok()) return bound.status();
    s.webhook_port = *bound;
  }
  return Status::Ok();
}

void SchedulerProcess::StartWatches() {
  State& s = *s_;
  s.node_handler = std::make_unique<NodeHandler>(s.ledger.get());
  s.pod_handler = std::make_unique<PodHandler>(s.ledger.get(), s.quotas.get());
  s.nodes = std::make_unique<k8s::Reflector>(*s.client, k8s::NodesPath(), *s.node_handler);
  k8s::ReflectorOptions pod_options;
  // Finished pods hold no GPU; when a pod finishes, the watch sends it as DELETED.
  pod_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  s.pods =
      std::make_unique<k8s::Reflector>(*s.client, k8s::PodsPath(""), *s.pod_handler, pod_options);
  s.node_thread = std::jthread([&s](std::stop_token stop) { s.nodes->Run(stop); });
  s.pod_thread = std::jthread([&s](std::stop_token stop) { s.pods->Run(stop); });
  if (options_.count_claims) {
    s.claim_handler = std::make_unique<ClaimHandler>(s.quotas.get());
    s.claims =
        std::make_unique<k8s::Reflector>(*s.client, k8s::ResourceClaimsPath(""), *s.claim_handler);
    s.claim_thread = std::jthread([&s](std::stop_token stop) { s.claims->Run(stop); });
  }
  s.sweeper = std::jthread([&s, ready_file = options_.ready_file](std::stop_token stop) {
    bool announced = false;
    while (!stop.stop_requested()) {
      if (!announced && s.nodes->HasSynced() && s.pods->HasSynced() &&
          (!s.claims || s.claims->HasSynced())) {
        s.extender->SetSynced(true);
        announced = true;
        TESSERA_LOG(kInfo, kScheduler, "synced: %zu GPU nodes, %zu pods holding GPUs",
                    s.ledger->nodes(), s.ledger->bound());
        if (!ready_file.empty()) {
          const std::string tmp = ready_file + ".tmp";
          std::ofstream(tmp) << s.port << "\n";
          std::rename(tmp.c_str(), ready_file.c_str());
        }
      }
      s.ledger->ExpireReservations();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

Status SchedulerProcess::StartElection() {
  State& s = *s_;
  // Leader election: followers keep watching (their ledger stays current) but answer 503.
  if (options_.leader_elect) {
    s.extender->SetLeaderCheck(
        [&s] { return s.caught_up.load() && s.elector && s.elector->IsLeader(); });
    k8s::LeaderElectorOptions le;
    le.ns = options_.lease_namespace;
    le.lease_name = options_.lease_name;
    le.identity = options_.identity;
    le.lease_duration = options_.lease_duration;
    le.renew_deadline = options_.renew_deadline;
    le.retry_period = options_.retry_period;
    // A new leader first reads every pod afresh (a consistent list), so that binds the old
    // leader finished just before are on its books before it decides anything.
    le.on_started_leading = [&s] {
      s.caught_up = false;
      s.resync = true;
    };
    le.on_stopped_leading = [&s] {
      s.caught_up = false;
      const std::size_t dropped = s.ledger->DropReservations();
      TESSERA_LOG(kWarn, kScheduler, "stopped leading; %zu reservations dropped", dropped);
    };
    auto made = k8s::LeaderElector::New(*s.config, le);
    if (!made.ok()) return made.status().WithContext("leader election");
    s.elector = std::move(*made);
  }
  s.election = std::jthread([&s](std::stop_token stop) {
    if (s.elector) s.elector->Run(stop);
  });
  s.resyncer = std::jthread([&s](std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (s.resync.exchange(false)) {
        k8s::ListOptions lo;
        lo.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
        auto list = s.client->List(k8s::PodsPath(""), lo);
        if (!list.ok()) {
          TESSERA_LOG(kWarn, kScheduler, "leader resync: %s (retrying)",
                      list.status().message().c_str());
          s.resync = true;
        } else if (s.elector && s.elector->IsLeader()) {
          s.quotas->ReplacePods(list->items);
          s.ledger->ReplacePods(list->items);
          s.caught_up = true;  // serving() still asks IsLeader() on every call
          TESSERA_LOG(kInfo, kScheduler, "leading: %zu pods hold GPUs", s.ledger->bound());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  return Status::Ok();
}

void SchedulerProcess::Serve() {
  State& s = *s_;
  s.http = std::jthread([&s] { s.server->Run(); });
  // The webhooks answer only once the watches have synced: before that, quotas would see no
  // usage and "larger than any GPU" no GPUs. (With failurePolicy Fail, creates wait meanwhile.)
  s.webhook_http = std::jthread([&s](std::stop_token stop) {
    while (s.webhooks && !s.extender->synced() && !stop.stop_requested()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (s.webhooks && !stop.stop_requested()) s.webhooks->Run();
  });
  if (s.webhooks) {
    std::fprintf(stderr, "tessera-scheduler: admission webhooks on https://%s:%d\n",
                 s.webhook_listen->first.c_str(), s.webhook_port);
  }
  std::fprintf(stderr, "tessera-scheduler: serving on %s:%d (placement %s)\n",
               s.listen.first.c_str(), s.port, options_.placement.c_str());
}

void SchedulerProcess::WaitForSignalAndStop() {
  State& s = *s_;
  int signal = 0;
  sigwait(&s.signals, &signal);
  std::fprintf(stderr, "tessera-scheduler: %s, stopping\n",
               signal == SIGTERM ? "SIGTERM" : "SIGINT");
  s.caught_up = false;  // no new verbs; in-flight ones finish before the Lease is released
  s.extender->SetSynced(false);
  s.server->Stop();
  if (s.webhooks) s.webhooks->Stop();
  s.election.request_stop();
  s.election.join();  // releases the Lease
  s.resyncer.request_stop();
  s.sweeper.request_stop();
  s.node_thread.request_stop();
  s.pod_thread.request_stop();
  s.claim_thread.request_stop();
}

int RunScheduler(const SchedulerOptions& options) {
  SchedulerProcess process(options);
  // Configuration first: nothing starts unless all of it is right.
  if (Status st = process.ValidateConfiguration(); !st.ok()) return Fail(st);
  if (Status st = process.LoadWebhookCertificates(); !st.ok()) return Fail(st);
  if (Status st = process.ConnectApi(); !st.ok()) return Fail(st);
  process.BlockSignals();
  if (Status st = process.BuildExtender(); !st.ok()) return Fail(st);
  if (Status st = process.BuildAdmission(); !st.ok()) return Fail(st);
  process.StartWatches();
  if (Status st = process.StartElection(); !st.ok()) return Fail(st);
  process.Serve();
  process.WaitForSignalAndStop();
  return 0;
}

}  // namespace tessera::scheduler
