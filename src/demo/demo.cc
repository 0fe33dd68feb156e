#include "demo/demo.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/slot_binder.h"
#include "contract/decision.h"
#include "demo/manifest.h"
#include "demo/pki.h"
#include "demo/printer.h"
#include "demo/process.h"
#include "scheduler/daemon.h"
// The kube-scheduler and webhook configurations the e2e tests use (inline, header only).
#include "tessera/limits.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/listen.h"
#include "k8s/paths.h"
#include "policy/policy.h"
#include "scheduler/kube_config.h"

namespace tessera::demo {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPodLimit = 90s;     // a pod's outcome
constexpr auto kPlacedGrace = 30s;  // a pod expected to be placed, after a FailedScheduling
constexpr auto kSettleLimit = 60s;  // a scenario's pods gone from the API and the ledger

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The demo's own log lines (the Kubernetes client's retries, ...) go to a file, not the screen.
std::FILE* g_log_file = nullptr;
void FileSink(log::Level, log::Component, std::string_view line) {
  if (g_log_file == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), g_log_file);
  std::fputc('\n', g_log_file);
  std::fflush(g_log_file);
}
class LogToFile {
 public:
  explicit LogToFile(const std::string& path) {
    g_log_file = std::fopen(path.c_str(), "a");
    log::SetSink(FileSink);
  }
  ~LogToFile() {
    log::SetSink(nullptr);
    if (g_log_file != nullptr) std::fclose(g_log_file);
    g_log_file = nullptr;
  }
  LogToFile(const LogToFile&) = delete;
  LogToFile& operator=(const LogToFile&) = delete;
};

// What admission changed, in a person's words.
std::vector<std::string> AdmittedAs(const json& sent, const json& stored) {
  std::vector<std::string> out;
  const std::string before = Str(sent, "/spec/schedulerName"_json_pointer);
  const std::string after = Str(stored, "/spec/schedulerName"_json_pointer);
  if (!before.empty() && before != after) out.push_back("schedulerName " + before + " → " + after);
  const json::json_pointer lim("/spec/containers/0/resources/limits");
  const json empty = json::object();
  const json& a = sent.contains(lim) ? sent.at(lim) : empty;
  const json& b = stored.contains(lim) ? stored.at(lim) : empty;
  std::set<std::string> explained;
  const json::json_pointer ann("/metadata/annotations");
  const std::string memory(names::kResourceGpuMemory);
  for (const char* key : {"gpu-memory", "gpu-fraction"}) {
    const bool had = sent.contains(ann) && sent.at(ann).contains(key);
    const bool has = stored.contains(ann) && stored.at(ann).contains(key);
    if (!had || has) continue;
    const std::string value = sent.at(ann).at(key).get<std::string>();
    if (std::string(key) == "gpu-memory" && b.contains(memory) && !a.contains(memory)) {
      out.push_back("annotation gpu-memory: \"" + value + "\" → " + memory + ": " +
                    b[memory].get<std::string>());
      explained.insert(memory);
    } else {
      out.push_back(std::string("annotation ") + key + " removed");
    }
  }
  for (const auto& [key, value] : b.items()) {
    if (!a.contains(key) && !explained.contains(key))
      out.push_back("+ " + key + ": " + value.get<std::string>());
  }
  if (Str(sent, "/spec/priorityClassName"_json_pointer).empty()) {
    const std::string pc = Str(stored, "/spec/priorityClassName"_json_pointer);
    if (!pc.empty()) {
      out.push_back("+ priorityClassName " + pc + " (priority " +
                    std::to_string(stored["spec"].value("priority", 0)) + ")");
    }
  }
  return out;
}

std::string RunCommand(const PodResult& p, bool fail_closed) {
  std::string cmd = "tessera run --gpu-memory " + FormatQuantity(p.memory_bytes);
  if (p.cores > 0 && p.mode != "exclusive") cmd += " --gpu-cores " + std::to_string(p.cores);
  if (!p.spec.priority.empty()) cmd += " --priority " + p.spec.priority;
  if (fail_closed) cmd += " --fail-closed";
  return cmd + " -- " + (p.spec.command.empty() ? "python3 app.py" : p.spec.command);
}

// What would act for the pod, from the limits tessera-node would write: one short sentence a line
// (the printer says once what a cap does).
void Explain(const Limits& l, const policy::Policy& policy, const std::string& tier_name,
             PodResult& p) {
  const DeviceLimits& d = l.devices.front();
  if (l.mode == SharingMode::kExclusive) {
    p.enforcement.push_back("the whole GPU (" + GiB(d.memory_bytes) +
                            "); no other pod is placed on it");
  } else {
    p.enforcement.push_back(
        "cap " + GiB(d.memory_bytes) + "; compute: " +
        (d.cores_percent > 0
             ? "at most " + std::to_string(d.cores_percent) +
                   " % of the GPU's time (a hard share, measured per kernel; past it, its "
                   "launches wait)"
             : std::string("no share reserved, it takes turns by measured GPU time")));
  }
  if (l.priority == PriorityClass::kLatencyCritical) {
    p.enforcement.push_back(
        "latency-critical: while it has work, the GPU's arbiter holds lower "
        "classes' launches and keeps their work in flight under 500 µs");
  } else if (l.priority == PriorityClass::kBestEffort) {
    p.enforcement.push_back(
        "best-effort: held while a latency-critical pod has work and, with "
        "no share of its own, while normal work wants the GPU");
  }
  auto tier = ParseTrustTier(tier_name);
  if (!tier.ok()) return;
  const policy::TierRule& rule = policy.Rule(*tier);
  const char* failure = rule.enforcement == policy::Enforcement::kFailClosed
                            ? "GPU allocations are refused (fail-closed)"
                            : "GPU calls pass through, logged (fail-open)";
  const char* drift = rule.on_drift == policy::DriftAction::kEvict  ? "the pod is evicted"
                      : rule.on_drift == policy::DriftAction::kKill ? "its GPU processes are killed"
                                                                    : "an Event reports it";
  p.tier_rules.push_back(std::string("if tessera's own machinery fails, ") + failure +
                         "; if NVML shows more than the cap (memory the library cannot see), " +
                         drift + " (onDrift " + std::string(policy::Name(rule.on_drift)) + ")");
}

std::string JoinNames(const std::vector<SharingMode>& modes) {
  std::string out;
  for (SharingMode m : modes) out += (out.empty() ? "" : ",") + std::string(Name(m));
  return out;
}

class Demo {
 public:
  Demo(const DemoOptions& o, std::ostream* human, DemoResult* result)
      : o_(o), human_(human), result_(result) {}
  ~Demo() { Shutdown(); }
  Demo(const Demo&) = delete;
  Demo& operator=(const Demo&) = delete;

  Status Run();
  const std::string& dir() const { return dir_; }

 private:
  void Say(const std::string& text) {
    if (human_ != nullptr) *human_ << text << std::flush;
  }
  Status Prepare();
  Status StartControlPlane();
  Status StartNodes();
  Status StartScheduler();
  Status Configure();
  Status WaitUntilReady();
  Status RunScenario(const Scenario& s, ScenarioResult& r);
  Status Replay(const Scenario& s, const PodSpec& spec, PodResult& r);
  Status Placed(const json& pod, PodResult& r);
  StatusOr<json> Ledger();
  std::vector<GpuRow> LedgerRows(const json& ledger, const std::string& only_node);
  Status CleanUp(const Scenario& s);
  void Shutdown();
  std::string TierOf(const std::string& ns) const;
  const NodeResult* NodeNamed(const std::string& name) const;

  const DemoOptions& o_;
  std::ostream* human_;
  DemoResult* result_;

  // Torn down in the reverse order (Shutdown).
  std::unique_ptr<WorkFolder> folder_;
  std::unique_ptr<LogToFile> log_;
  std::unique_ptr<Process> testcluster_;
  std::vector<std::unique_ptr<Process>> simnodes_;
  std::vector<std::unique_ptr<Process>> agents_;
  std::unique_ptr<Process> scheduler_;
  std::unique_ptr<k8s::Client> api_;

  std::string dir_;
  std::string kubeconfig_;
  policy::Policy policy_;
  std::string public_key_pem_;
  std::string ca_pem_;
  int port_ = 0;
  int webhook_port_ = 0;
  std::map<std::string, std::pair<int, std::string>> pod_names_;  // UID -> (order, name)
  std::set<std::string> namespaces_;
};

Status Demo::Prepare() {
  TESSERA_ASSIGN_OR_RETURN(folder_, WorkFolder::Create("tessera-demo"));
  dir_ = folder_->path();
  if (o_.keep) folder_->Keep();
  log_ = std::make_unique<LogToFile>(dir_ + "/demo.log");
  std::ofstream(dir_ + "/policy.yaml") << DemoPolicyYaml();
  TESSERA_ASSIGN_OR_RETURN(policy_, policy::ParsePolicy(DemoPolicyYaml()));
  TESSERA_ASSIGN_OR_RETURN(std::string key, contract::GenerateSigningKeyPem());
  {
    std::ofstream out(dir_ + "/signing.pem");
    out << key;
  }
  fs::permissions(dir_ + "/signing.pem", fs::perms::owner_read | fs::perms::owner_write);
  TESSERA_ASSIGN_OR_RETURN(contract::Signer signer, contract::Signer::FromPem(key));
  public_key_pem_ = signer.PublicKeyPem();
  TESSERA_ASSIGN_OR_RETURN(ServingPki pki, MakeServingPki("tessera-demo-webhook-ca"));
  std::ofstream(dir_ + "/webhook.crt") << pki.cert_pem;
  std::ofstream(dir_ + "/webhook.key") << pki.key_pem;
  ca_pem_ = pki.ca_pem;
  port_ = k8s::FreeLoopbackPort();
  webhook_port_ = k8s::FreeLoopbackPort();
  if (port_ <= 0 || webhook_port_ <= 0) return UnavailableError("no free loopback port");

  // What the summary prints about the policy.
  result_->placement = scheduler::SchedulerOptions{}.placement;  // the demo passes no --placement
  for (const auto& row : kTrustTiers) {
    const policy::TierRule& rule = policy_.Rule(row.value);
    PolicyRow p{std::string(row.name),
                JoinNames(rule.modes),
                std::string(policy::Name(rule.co_tenancy)),
                std::string(policy::Name(rule.enforcement)),
                std::string(policy::Name(rule.on_drift)),
                {}};
    if (policy_.default_tier == row.value) p.namespaces.push_back("*");
    for (const auto& [ns, tier] : policy_.namespaces) {
      if (tier == row.value) p.namespaces.push_back(ns);
    }
    result_->policy.push_back(std::move(p));
  }
  for (const auto& [ns, q] : policy_.quotas) {
    std::string text = ns + ":";
    if (q.gpu_memory_bytes) text += " GPU memory " + FormatQuantity(*q.gpu_memory_bytes);
    if (q.gpu_cores_percent) text += " compute " + std::to_string(*q.gpu_cores_percent) + "%";
    if (q.gpus) text += " whole GPUs " + std::to_string(*q.gpus);
    result_->quotas.push_back(text);
  }
  for (const auto& row : kPriorityClasses) {
    const std::string& k8s_name = policy_.KubernetesPriorityClass(row.value);
    int value = 0;
    for (const auto& [name, v] : DemoPriorityClasses()) {
      if (name == k8s_name) value = v;
    }
    result_->priorities.push_back(std::string(row.name) + " → PriorityClass " + k8s_name + " (" +
                                  std::to_string(value) + ")");
  }
  result_->gpu_present = fs::exists("/dev/nvidiactl");
  return Status::Ok();
}

Status Demo::StartControlPlane() {
  const std::string config = dir_ + "/kube-scheduler.yaml";
  std::ofstream(config) << scheduler::SchedulerConfig(port_);
  kubeconfig_ = dir_ + "/kubeconfig";
  SpawnOptions s;
  s.name = "tessera-testcluster up";
  s.argv = {o_.testcluster,       "up",  "--kubeconfig", kubeconfig_, "--dir", dir_ + "/cluster",
            "--scheduler-config", config};
  s.log_path = dir_ + "/testcluster.log";
  TESSERA_ASSIGN_OR_RETURN(testcluster_, Process::Spawn(std::move(s)));
  TESSERA_RETURN_IF_ERROR(WaitForFile(*testcluster_, kubeconfig_, 180s));
  TESSERA_ASSIGN_OR_RETURN(k8s::Config kc, k8s::LoadKubeconfig(kubeconfig_));
  kc.qps = 200;
  kc.burst = 400;
  kc.timeout = 20s;
  kc.user_agent = "tessera-demo";
  TESSERA_ASSIGN_OR_RETURN(api_, k8s::Client::New(kc));
  return Status::Ok();
}

Status Demo::StartNodes() {
  // Every simulated node reads the same fake NVML; each manages its own devices of it, so that
  // every GPU in the cluster has its own UUID, as real GPUs do.
  int total = 0;
  for (const SimNode& n : SimulatedNodes()) total += n.gpus;
  for (const SimNode& n : SimulatedNodes()) {
    SpawnOptions s;
    s.name = "simnodes " + n.name;
    const std::string ready = dir_ + "/simnodes-" + n.name + ".ready";
    s.argv = {o_.testcluster,    "simnodes", "--kubeconfig", kubeconfig_,
              "--nodes",         "1",        "--prefix",     n.name.substr(0, n.name.size() - 3),
              "--gpus-per-node", "0",        "--ready-file", ready};
    s.log_path = dir_ + "/simnodes-" + n.name + ".log";
    TESSERA_ASSIGN_OR_RETURN(auto p, Process::Spawn(std::move(s)));
    simnodes_.push_back(std::move(p));
    TESSERA_RETURN_IF_ERROR(WaitForFile(*simnodes_.back(), ready, 120s));
  }
  int first = 0;
  for (const SimNode& n : SimulatedNodes()) {
    std::string gpus;
    for (int i = 0; i < n.gpus; ++i) gpus += (i == 0 ? "" : ",") + std::to_string(first + i);
    first += n.gpus;
    const std::string home = dir_ + "/" + n.name;
    fs::create_directories(home);
    SpawnOptions s;
    s.name = "tessera-node " + n.name;
    s.argv = {o_.node,
              "--node-name",
              n.name,
              "--kubeconfig",
              kubeconfig_,
              "--gpus",
              gpus,
              "--interval-s",
              "5",
              "--device-plugin-dir",
              home + "/no-kubelet",
              "--pod-resources-socket",
              home + "/no-kubelet/kubelet.sock",
              "--state-dir",
              home + "/state",
              "--cdi-dir",
              home + "/cdi",
              "--policy",
              dir_ + "/policy.yaml",
              "--log-level",
              "info"};
    s.log_path = dir_ + "/tessera-node-" + n.name + ".log";
    s.env = {{"LD_LIBRARY_PATH", o_.fake_nvml_dir},
             {"TESSERA_FAKE_GPUS", std::to_string(total)},
             {"TESSERA_FAKE_GPU_MEMORY", std::to_string(n.gpu_memory)},
             {"TESSERA_FAKE_SM_COUNT", std::to_string(n.sm_count)},
             {"TESSERA_FAKE_NUMA_NODE", "0"}};
    TESSERA_ASSIGN_OR_RETURN(auto p, Process::Spawn(std::move(s)));
    agents_.push_back(std::move(p));
  }
  return Status::Ok();
}

Status Demo::StartScheduler() {
  const std::string ready = dir_ + "/scheduler.ready";
  SpawnOptions s;
  s.name = "tessera-scheduler";
  s.argv = {o_.scheduler, "--kubeconfig", kubeconfig_, "--listen",
            "127.0.0.1:" + std::to_string(port_), "--signing-key", dir_ + "/signing.pem",
            "--key-id", "demo", "--ready-file", ready, "--log-level", "info",
            // The harness's admin identity, which the scheduler uses here, writes decisions.
            "--scheduler-user", "tessera-e2e-admin", "--tls-cert-file", dir_ + "/webhook.crt",
            "--tls-key-file", dir_ + "/webhook.key", "--webhook-listen",
            "127.0.0.1:" + std::to_string(webhook_port_), "--policy", dir_ + "/policy.yaml"};
  s.log_path = dir_ + "/tessera-scheduler.log";
  TESSERA_ASSIGN_OR_RETURN(scheduler_, Process::Spawn(std::move(s)));
  return WaitForFile(*scheduler_, ready, 60s);
}

Status Demo::Configure() {
  for (const auto& [name, value] : DemoPriorityClasses()) {
    auto created = api_->Create("/apis/scheduling.k8s.io/v1/priorityclasses",
                                json{{"apiVersion", "scheduling.k8s.io/v1"},
                                     {"kind", "PriorityClass"},
                                     {"metadata", {{"name", name}}},
                                     {"value", value}});
    if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists)
      return created.status();
  }
  auto [mutating, validating] =
      scheduler::WebhookConfigurations(webhook_port_, contract::Base64Encode(ca_pem_));
  TESSERA_RETURN_IF_ERROR(
      api_->Create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mutating)
          .status());
  TESSERA_RETURN_IF_ERROR(
      api_->Create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                   validating)
          .status());
  for (const Scenario& s : Scenarios()) {
    if (!o_.only.empty() && std::find(o_.only.begin(), o_.only.end(), s.id) == o_.only.end())
      continue;
    for (const PodSpec& p : s.pods) namespaces_.insert(p.ns);
  }
  for (const std::string& ns : namespaces_) {
    auto created = api_->Create(
        "/api/v1/namespaces",
        json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
    if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists)
      return created.status();
    // No controller-manager runs here: the "default" ServiceAccount its token controller would
    // create, which the ServiceAccount admission plugin wants.
    created = api_->Create("/api/v1/namespaces/" + ns + "/serviceaccounts",
                           json{{"apiVersion", "v1"},
                                {"kind", "ServiceAccount"},
                                {"metadata", {{"name", "default"}, {"namespace", ns}}}});
    if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists)
      return created.status();
  }
  return Status::Ok();
}

// Until tessera-scheduler books every simulated GPU, kube-scheduler sees the nodes' sums, and the
// API server calls the webhooks.
Status Demo::WaitUntilReady() {
  std::size_t want = 0;
  for (const SimNode& n : SimulatedNodes()) want += static_cast<std::size_t>(n.gpus);
  const auto deadline = Clock::now() + 90s;
  std::string missing;
  for (;;) {
    if (Interrupted()) return AbortedError("interrupted");
    for (auto& agent : agents_) {
      if (!agent->Running()) {
        return UnavailableError(agent->name() + " exited (" + agent->Describe() +
                                "); the last lines of its log:\n" + agent->LogTail());
      }
    }
    missing.clear();
    auto ledger = Ledger();
    std::size_t gpus = 0;
    if (ledger.ok()) gpus = (*ledger).value("gpus", json::array()).size();
    if (gpus != want)
      missing = "tessera-scheduler books " + std::to_string(gpus) + " of " + std::to_string(want) +
                " GPUs";
    for (const SimNode& n : SimulatedNodes()) {
      auto node = api_->Get(k8s::NodePath(n.name));
      const std::string count =
          node.ok() ? Str(*node, json::json_pointer("/status/allocatable/tessera.dev~1gpu")) : "";
      if (count != std::to_string(n.gpus))
        missing = "node " + n.name + " does not show its GPUs yet";
    }
    if (missing.empty()) {
      // A pod the validating webhook refuses, as a dry run: the webhooks answer once it is refused.
      PodSpec probe_spec;
      probe_spec.ns = *namespaces_.begin();  // has its ServiceAccount
      probe_spec.name = "tessera-demo-probe";
      probe_spec.cores = 101;  // the webhook accepts 1-100
      json probe = PodManifest(probe_spec, "");
      auto r = api_->Create(k8s::PodsPath(probe_spec.ns) + "?dryRun=All", probe);
      if (!r.ok() && r.status().message().find("denied the request") != std::string::npos) break;
      missing = "the API server does not call the webhooks yet (" +
                (r.ok() ? std::string("a dry run was admitted") : r.status().message()) + ")";
    }
    if (Clock::now() >= deadline) {
      return UnavailableError("not ready within 90 s: " + missing + "; tessera-scheduler log:\n" +
                              scheduler_->LogTail());
    }
    SleepUnlessInterrupted(250ms);
  }
  // The nodes as tessera-node published them.
  for (const SimNode& n : SimulatedNodes()) {
    NodeResult nr;
    nr.spec = n;
    TESSERA_ASSIGN_OR_RETURN(json node, api_->Get(k8s::NodePath(n.name)));
    const std::string text =
        Str(node, json::json_pointer("/metadata/annotations/tessera.dev~1gpu-inventory"));
    const json inventory = json::parse(text, nullptr, false);
    for (const json& g : inventory.value("gpus", json::array())) {
      if (!g.value("managed", false)) continue;
      nr.uuids.push_back(g.value("uuid", ""));
      nr.model = g.value("model", "");
    }
    result_->nodes.push_back(std::move(nr));
  }
  return Status::Ok();
}

StatusOr<json> Demo::Ledger() {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(2);
  c.set_read_timeout(10);
  auto res = c.Get("/ledger");
  if (!res) return UnavailableError("GET /ledger: " + httplib::to_string(res.error()));
  if (res->status != 200)
    return UnavailableError("GET /ledger: HTTP " + std::to_string(res->status));
  json ledger = json::parse(res->body, nullptr, false);
  if (ledger.is_discarded()) return InternalError("GET /ledger: not JSON");
  return ledger;
}

const NodeResult* Demo::NodeNamed(const std::string& name) const {
  for (const NodeResult& n : result_->nodes) {
    if (n.spec.name == name) return &n;
  }
  return nullptr;
}

std::vector<GpuRow> Demo::LedgerRows(const json& ledger, const std::string& only_node) {
  std::vector<GpuRow> rows;
  for (const NodeResult& n : result_->nodes) {
    if (!only_node.empty() && n.spec.name != only_node) continue;
    for (std::size_t i = 0; i < n.uuids.size(); ++i) {
      GpuRow row;
      row.node = n.spec.name;
      row.gpu = static_cast<int>(i);
      row.uuid = n.uuids[i];
      row.memory_bytes = n.spec.gpu_memory;
      for (const json& g : ledger.value("gpus", json::array())) {
        if (g.value("node", "") != n.spec.name || g.value("uuid", "") != row.uuid) continue;
        row.memory_bytes = g.value("memoryBytes", row.memory_bytes);
        row.memory_used = g.value("memoryUsed", std::uint64_t{0});
        row.cores_used = g.value("coresUsed", 0);
        std::vector<std::pair<int, std::string>> pods;  // in the order they were created
        for (const json& uid : g.value("pods", json::array())) {
          auto name = pod_names_.find(uid.get<std::string>());
          if (name == pod_names_.end()) {
            pods.emplace_back(1 << 30, "(another pod)");
          } else {
            pods.push_back(name->second);
          }
        }
        std::sort(pods.begin(), pods.end());
        for (auto& [order, name] : pods) row.pods.push_back(std::move(name));
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string Demo::TierOf(const std::string& ns) const {
  auto tier = policy_.TierOf(ns, std::nullopt);
  return tier.ok() ? std::string(Name(*tier)) : "?";
}

Status Demo::Placed(const json& pod, PodResult& r) {
  const json& ann = pod["metadata"]["annotations"];
  const std::string text = ann.value(std::string(names::kAnnotationDecision), "");
  const std::string signature = ann.value(std::string(names::kAnnotationDecisionSignature), "");
  TESSERA_ASSIGN_OR_RETURN(contract::Decision d, contract::ParseDecision(text));
  TESSERA_ASSIGN_OR_RETURN(contract::Verifier verifier,
                           contract::Verifier::FromPem(public_key_pem_));
  TESSERA_RETURN_IF_ERROR(verifier.Verify(text, signature).WithContext("decision signature"));
  if (d.containers.empty() || d.containers[0].devices.empty()) {
    return InternalError("the decision of " + r.spec.name + " names no GPU");
  }
  const contract::DecisionDevice& dev = d.containers[0].devices[0];
  r.outcome = Outcome::kPlaced;
  r.node = d.node;
  r.uuid = dev.uuid;
  r.memory_bytes = dev.memory_bytes;
  r.cores = dev.cores_percent;
  r.mode = std::string(Name(d.containers[0].mode));
  r.priority = std::string(Name(d.priority));
  r.priority_class = Str(pod, "/spec/priorityClassName"_json_pointer);
  const NodeResult* node = NodeNamed(d.node);
  std::map<std::string, agent::BinderGpu, std::less<>> gpus;
  if (node != nullptr) {
    for (std::size_t i = 0; i < node->uuids.size(); ++i) {
      if (node->uuids[i] == dev.uuid) r.gpu = static_cast<int>(i);
      agent::BinderGpu g;
      g.managed = true;
      gpus[node->uuids[i]] = g;
    }
  }
  // What tessera-node writes in PreStartContainer, by its own function (context= and stream=
  // are measured on a real GPU when the agent starts; none here).
  TESSERA_ASSIGN_OR_RETURN(Limits limits, agent::LimitsFor(d, kContainer, gpus, policy_));
  r.limits_file = FormatLimitsFile(limits);
  Explain(limits, policy_, r.tier, r);
  r.run_command = RunCommand(r, limits.fail_closed);
  return Status::Ok();
}

Status Demo::Replay(const Scenario& s, const PodSpec& spec, PodResult& r) {
  r.spec = spec;
  r.tier = TierOf(spec.ns);
  const json manifest = PodManifest(spec, s.node);
  auto created = api_->Create(k8s::PodsPath(spec.ns), manifest);
  if (!created.ok()) {
    if (created.status().message().find("denied the request") == std::string::npos) {
      return created.status().WithContext("creating " + spec.ns + "/" + spec.name);
    }
    r.outcome = Outcome::kDenied;
    r.reason = DenialReason(created.status().message());
    r.as_expected = spec.expect == Outcome::kDenied;
    return Status::Ok();
  }
  const std::string uid = Str(*created, "/metadata/uid"_json_pointer);
  pod_names_[uid] = {static_cast<int>(pod_names_.size()), spec.name};
  r.admitted_as = AdmittedAs(manifest, *created);
  const auto start = Clock::now();
  std::optional<Clock::time_point> refused_at;
  json pod = *created;
  for (;;) {
    if (Interrupted()) return AbortedError("interrupted");
    auto got = api_->Get(k8s::PodPath(spec.ns, spec.name));
    if (got.ok()) {
      pod = *got;
      const bool bound = !Str(pod, "/spec/nodeName"_json_pointer).empty();
      const bool decided =
          pod["metadata"].contains("annotations") &&
          pod["metadata"]["annotations"].contains(std::string(names::kAnnotationDecision));
      if (bound && decided) {
        TESSERA_RETURN_IF_ERROR(Placed(pod, r));
        r.as_expected = spec.expect == Outcome::kPlaced;
        return Status::Ok();
      }
      if (bound) return InternalError(spec.ns + "/" + spec.name + " was bound without a decision");
    }
    k8s::ListOptions lo;
    lo.field_selector = "involvedObject.name=" + spec.name + ",involvedObject.uid=" + uid +
                        ",reason=FailedScheduling";
    auto events = api_->List(k8s::EventsPath(spec.ns), lo);
    if (events.ok() && !events->items.empty()) {
      r.reason = events->items.back().value("message", "");
      if (!refused_at) refused_at = Clock::now();
      // A pod the story places may meet a passing refusal (kube-scheduler retries it).
      if (spec.expect != Outcome::kPlaced || Clock::now() - *refused_at >= kPlacedGrace) break;
    }
    if (Clock::now() - start >= kPodLimit) {
      return UnavailableError(spec.ns + "/" + spec.name + ": neither bound nor refused within " +
                              std::to_string(kPodLimit.count()) +
                              " s; the last lines of tessera-scheduler's log:\n" +
                              scheduler_->LogTail());
    }
    SleepUnlessInterrupted(200ms);
  }
  r.outcome = Outcome::kUnschedulable;
  r.as_expected = spec.expect == Outcome::kUnschedulable;
  // tessera's own account, GPU by GPU: a dry run of its filter (what `tessera explain` shows).
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(10);
  auto res = c.Post("/explain", pod.dump(), "application/json");
  if (res && res->status == 200) {
    const json answer = json::parse(res->body, nullptr, false);
    for (const json& g : answer.value("gpus", json::array())) {
      const std::string node = g.value("node", "");
      if (!s.node.empty() && node != s.node) continue;
      const NodeResult* n = NodeNamed(node);
      int index = -1;
      for (std::size_t i = 0; n != nullptr && i < n->uuids.size(); ++i) {
        if (n->uuids[i] == g.value("uuid", "")) index = static_cast<int>(i);
      }
      r.verdicts.push_back(node + " gpu" + std::to_string(index) + ": " + g.value("why", ""));
    }
  }
  return Status::Ok();
}

Status Demo::CleanUp(const Scenario& s) {
  std::set<std::string> namespaces;
  for (const PodSpec& p : s.pods) namespaces.insert(p.ns);
  k8s::DeleteOptions del;
  del.grace_period_seconds = 0;
  for (const std::string& ns : namespaces) {
    TESSERA_ASSIGN_OR_RETURN(k8s::ListResult pods, api_->List(k8s::PodsPath(ns)));
    for (const json& p : pods.items) {
      Status st = api_->Delete(k8s::PodPath(ns, Str(p, "/metadata/name"_json_pointer)), del);
      if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
    }
  }
  const auto deadline = Clock::now() + kSettleLimit;
  for (;;) {
    bool settled = true;
    for (const std::string& ns : namespaces) {
      auto pods = api_->List(k8s::PodsPath(ns));
      settled = settled && pods.ok() && pods->items.empty();
    }
    auto ledger = Ledger();
    settled = settled && ledger.ok();
    if (ledger.ok()) {
      for (const json& g : (*ledger).value("gpus", json::array())) {
        settled = settled && g.value("pods", json::array()).empty();
      }
    }
    if (settled) return Status::Ok();
    if (Interrupted()) return AbortedError("interrupted");
    if (Clock::now() >= deadline) {
      return UnavailableError("the pods of scenario " + s.id + " did not go within " +
                              std::to_string(kSettleLimit.count()) + " s");
    }
    SleepUnlessInterrupted(200ms);
  }
}

Status Demo::RunScenario(const Scenario& s, ScenarioResult& r) {
  const auto start = Clock::now();
  r.id = s.id;
  r.title = s.title;
  for (const PodSpec& spec : s.pods) {
    PodResult pod;
    TESSERA_RETURN_IF_ERROR(Replay(s, spec, pod));
    r.pods.push_back(std::move(pod));
  }
  TESSERA_ASSIGN_OR_RETURN(json ledger, Ledger());
  r.gpus = LedgerRows(ledger, s.node);
  r.seconds = SecondsSince(start);
  return Status::Ok();
}

void Demo::Shutdown() {
  api_.reset();
  if (scheduler_) scheduler_->Stop();
  for (auto it = agents_.rbegin(); it != agents_.rend(); ++it) (*it)->Stop();
  for (auto it = simnodes_.rbegin(); it != simnodes_.rend(); ++it) (*it)->Stop();
  if (testcluster_) testcluster_->Stop(std::chrono::seconds(30));
  scheduler_.reset();
  agents_.clear();
  simnodes_.clear();
  testcluster_.reset();
  log_.reset();
  folder_.reset();
}

Status Demo::Run() {
  const auto start = Clock::now();
  TESSERA_RETURN_IF_ERROR(Prepare());
  Say(RenderBanner());
  Say("Starting the control plane, " + std::to_string(SimulatedNodes().size()) +
      " simulated GPU nodes and tessera-scheduler ...\n");
  Status st = StartControlPlane();
  if (st.ok()) st = StartNodes();
  if (st.ok()) st = StartScheduler();
  if (st.ok()) st = Configure();
  if (st.ok()) st = WaitUntilReady();
  if (!st.ok()) return st;
  result_->startup_seconds = SecondsSince(start);
  Say(RenderCluster(*result_));
  Say(RenderPolicy(*result_));
  std::vector<const Scenario*> selected;
  for (const Scenario& s : Scenarios()) {
    if (o_.only.empty() || std::find(o_.only.begin(), o_.only.end(), s.id) != o_.only.end()) {
      selected.push_back(&s);
    }
  }
  int index = 0;
  for (const Scenario* s : selected) {
    ScenarioResult r;
    TESSERA_RETURN_IF_ERROR(RunScenario(*s, r).WithContext("scenario " + s->id));
    result_->scenarios.push_back(std::move(r));
    Say(RenderScenario(*s, result_->scenarios.back(), ++index, static_cast<int>(selected.size()),
                       result_->gpu_present));
    TESSERA_RETURN_IF_ERROR(CleanUp(*s).WithContext("after scenario " + s->id));
  }
  result_->completed = true;
  Say(RenderSummary(*result_));
  return Status::Ok();
}

// The process logs of a failed run, for the error message.
std::string LogHint(const std::string& dir, bool kept) {
  return kept ? "logs and state are kept in " + dir
              : "the logs went with the temporary folder; run again with --keep to keep them";
}

}  // namespace

void FillDefaults(DemoOptions& o, const std::string& exe_dir) {
  auto first = [](const std::vector<std::string>& candidates) {
    for (const std::string& c : candidates) {
      if (IsExecutableFile(c)) return fs::path(c).lexically_normal().string();
    }
    return candidates.empty() ? std::string()
                              : fs::path(candidates.back()).lexically_normal().string();
  };
  const std::string d = exe_dir.empty() ? "." : exe_dir;
  // Installed side by side, or a CMake build tree (build/<preset>/cmd/<binary>/<binary>).
  if (o.scheduler.empty()) {
    o.scheduler = first({d + "/tessera-scheduler", d + "/../tessera-scheduler/tessera-scheduler"});
  }
  if (o.node.empty()) o.node = first({d + "/tessera-node", d + "/../tessera-node/tessera-node"});
  if (o.testcluster.empty()) {
    const char* env = std::getenv("TESSERA_TESTCLUSTER");
    if (env != nullptr && *env != '\0') {
      o.testcluster = env;
    } else {
      // build/<preset>/cmd/tessera -> build/e2e (test/e2e/harness/build.sh build/e2e).
      o.testcluster = first({d + "/tessera-testcluster", d + "/../../../e2e/tessera-testcluster"});
    }
  }
  if (o.fake_nvml_dir.empty()) {
    for (const std::string& c : {d + "/../../test/fakes/lib", d + "/../lib/tessera/fakes"}) {
      if (fs::exists(c + "/libnvidia-ml.so.1")) {
        o.fake_nvml_dir = fs::path(c).lexically_normal().string();
        break;
      }
    }
    if (o.fake_nvml_dir.empty())
      o.fake_nvml_dir = fs::path(d + "/../../test/fakes/lib").lexically_normal().string();
  }
}

Status ValidateOptions(const DemoOptions& o) {
  struct Binary {
    const char* flag;
    const std::string& path;
    const char* how;
  };
  const Binary binaries[] = {
      {"--testcluster", o.testcluster,
       "the control-plane harness; build it with test/e2e/harness/build.sh build/e2e, or set "
       "TESSERA_TESTCLUSTER"},
      {"--scheduler-binary", o.scheduler,
       "build it with cmake --build BUILD --target tessera-scheduler"},
      {"--node-binary", o.node, "build it with cmake --build BUILD --target tessera-node"},
  };
  for (const Binary& b : binaries) {
    if (!IsExecutableFile(b.path)) {
      return InvalidArgumentError(
          std::string(b.flag) + ": " +
          (b.path.empty() ? std::string("not given")
                          : "\"" + QuoteForMessage(b.path) + "\" is not an executable file") +
          "; accepted: the path of an executable (" + b.how + ")");
    }
  }
  if (!fs::exists(o.fake_nvml_dir + "/libnvidia-ml.so.1")) {
    return InvalidArgumentError(
        "--fake-nvml-dir: " +
        (o.fake_nvml_dir.empty()
             ? std::string("not given")
             : "\"" + QuoteForMessage(o.fake_nvml_dir) + "\" holds no libnvidia-ml.so.1") +
        "; accepted: the folder of the fake NVML (cmake --build BUILD --target tessera_fake_nvml "
        "puts it in BUILD/test/fakes/lib)");
  }
  for (const std::string& id : o.only) {
    bool known = false;
    for (const Scenario& s : Scenarios()) known = known || s.id == id;
    if (!known) {
      return InvalidArgumentError("--only: \"" + QuoteForMessage(id) +
                                  "\" is not a scenario; accepted: " + ScenarioIds() +
                                  " (comma-separated)");
    }
  }
  return Status::Ok();
}

Status RunDemo(const DemoOptions& options, std::ostream* human, std::ostream& err,
               DemoResult* result) {
  DemoResult local;
  if (result == nullptr) result = &local;
  *result = DemoResult{};
  TESSERA_RETURN_IF_ERROR(ValidateOptions(options));
  InterruptScope interrupts;
  Status st;
  std::string dir;
  {
    Demo demo(options, human, result);
    st = demo.Run();
    dir = demo.dir();
    // Which of its processes failed, with its log's last lines, is in the message.
    if (!st.ok() && !Interrupted()) err << "tessera demo: " << st.message() << "\n";
  }  // every child stopped, the temporary folder removed (unless --keep)
  if (Interrupted()) {
    err << "tessera demo: interrupted; every process it started is stopped and its temporary "
           "folder removed\n";
    return AbortedError("interrupted");
  }
  if (!st.ok()) {
    err << "tessera demo: " << LogHint(dir, options.keep) << "\n";
  } else if (options.keep) {
    err << "tessera demo: " << LogHint(dir, true) << "\n";
  }
  return st;
}

std::string ResultToJson(const DemoResult& r) {
  json nodes = json::array();
  for (const NodeResult& n : r.nodes) {
    nodes.push_back({{"name", n.spec.name},
                     {"gpus", n.uuids},
                     {"gpuMemoryBytes", n.spec.gpu_memory},
                     {"standsFor", n.spec.stands_for}});
  }
  json tiers = json::array();
  for (const PolicyRow& p : r.policy) {
    tiers.push_back({{"tier", p.tier},
                     {"modes", p.modes},
                     {"coTenancy", p.co_tenancy},
                     {"enforcement", p.enforcement},
                     {"onDrift", p.on_drift},
                     {"namespaces", p.namespaces}});
  }
  json scenarios = json::array();
  int placed = 0, denied = 0, unschedulable = 0;
  std::uint64_t stranded = 0;
  for (const ScenarioResult& s : r.scenarios) {
    json pods = json::array();
    for (const PodResult& p : s.pods) {
      json pod = {{"namespace", p.spec.ns},
                  {"name", p.spec.name},
                  {"tier", p.tier},
                  {"asks", AskText(p.spec)},
                  {"expected", Name(p.spec.expect)},
                  {"outcome", Name(p.outcome)},
                  {"asExpected", p.as_expected}};
      if (p.outcome == Outcome::kPlaced) {
        pod.update({{"node", p.node},
                    {"gpu", p.gpu},
                    {"uuid", p.uuid},
                    {"memoryBytes", p.memory_bytes},
                    {"coresPercent", p.cores},
                    {"mode", p.mode},
                    {"priority", p.priority},
                    {"priorityClass", p.priority_class},
                    {"admittedAs", p.admitted_as},
                    {"limitsFile", p.limits_file},
                    {"enforcement", p.enforcement},
                    {"tierRules", p.tier_rules},
                    {"run", p.run_command}});
      } else {
        pod["reason"] = p.reason;
        if (!p.verdicts.empty()) pod["verdicts"] = p.verdicts;
      }
      placed += p.outcome == Outcome::kPlaced ? 1 : 0;
      denied += p.outcome == Outcome::kDenied ? 1 : 0;
      unschedulable += p.outcome == Outcome::kUnschedulable ? 1 : 0;
      pods.push_back(std::move(pod));
    }
    json gpus = json::array();
    for (const GpuRow& g : s.gpus) {
      gpus.push_back({{"node", g.node},
                      {"gpu", g.gpu},
                      {"uuid", g.uuid},
                      {"memoryBytes", g.memory_bytes},
                      {"memoryUsed", g.memory_used},
                      {"coresUsed", g.cores_used},
                      {"pods", g.pods}});
    }
    stranded += StrandedBytes(s);
    scenarios.push_back({{"id", s.id},
                         {"title", s.title},
                         {"pods", pods},
                         {"gpus", gpus},
                         {"gpusUsed", GpusUsed(s)},
                         {"strandedBytes", StrandedBytes(s)},
                         {"seconds", s.seconds}});
  }
  json out = {{"nodes", nodes},
              {"policy", {{"tiers", tiers}, {"quotas", r.quotas}, {"priorities", r.priorities}}},
              {"placement", r.placement},
              {"gpuPresent", r.gpu_present},
              {"startupSeconds", r.startup_seconds},
              {"scenarios", scenarios},
              {"summary",
               {{"placed", placed},
                {"denied", denied},
                {"unschedulable", unschedulable},
                {"unexpected", r.unexpected()},
                {"strandedBytes", stranded}}},
              {"completed", r.completed}};
  return out.dump(2);
}

}  // namespace tessera::demo
