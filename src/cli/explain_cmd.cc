#include "cli/explain_cmd.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include "tessera/file.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/decision.h"
#include "contract/pod_ask.h"
#include "k8s/client.h"
#include "k8s/object.h"
#include "k8s/paths.h"
#include "policy/policy.h"
#include "webhook/admission.h"
#include "webhook/webhook.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct ExplainArgs {
  std::string pod;   // NS/NAME
  std::string file;  // or a manifest
  std::string kubeconfig;
  std::string scheduler;  // http://host:port of tessera-scheduler
  std::string policy_file;
  bool json = false;  // the report as one JSON object (docs/protocol.md "explain --json")
};

// YAML (or JSON, which is YAML) to JSON: scalars that look like integers or booleans become
// those, everything else a string (Kubernetes quantities are strings either way).
json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = ToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(ToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() != "!") {  // unquoted
        if (text == "true" || text == "false") return text == "true";
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (!text.empty() && end != nullptr && *end == '\0') return v;
      }
      return text;
    }
    default:
      return nullptr;
  }
}

// A pod manifest is a few kilobytes; anything past this is not one.
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 20;

// The manifest of `explain pod -f PATH`, as JSON: a bounded read of a regular file, YAML or JSON
// that parses to a mapping. Every failure is an error naming the path (never an exception).
StatusOr<json> LoadManifest(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, kMaxManifestBytes));
  json pod;
  try {
    pod = ToJson(YAML::Load(text));
    (void)pod.dump();  // throws on text that is not UTF-8, which the API server refuses too
  } catch (const YAML::Exception& e) {
    return InvalidInputError(path + ": not valid YAML (line " + std::to_string(e.mark.line + 1) +
                             ", column " + std::to_string(e.mark.column + 1) + "): " + e.msg);
  } catch (const json::type_error& e) {
    return InvalidInputError(path + ": not valid UTF-8 text (" + e.what() + ")");
  } catch (const std::exception& e) {
    return InvalidInputError(path + ": cannot be read as YAML: " + e.what());
  }
  if (!pod.is_object()) {
    const char* got = pod.is_null()      ? "an empty document"
                      : pod.is_array()   ? "a list"
                      : pod.is_string()  ? "a string"
                      : pod.is_boolean() ? "a boolean"
                                         : "a number";
    return InvalidInputError(path +
                             ": expected a pod manifest (a mapping with apiVersion, kind: Pod, "
                             "metadata, spec), got " +
                             got);
  }
  // What the API server would refuse before any webhook sees it.
  if (const json* kind = k8s::Find(pod, "kind"); kind != nullptr && *kind != "Pod") {
    return InvalidInputError(path + ": kind: " + kind->dump() +
                             ": expected Pod (for a workload, give its pod template as a Pod)");
  }
  if (const json* meta = k8s::Find(pod, "metadata")) {
    if (!meta->is_object()) return InvalidInputError(path + ": metadata: expected a mapping");
    for (const char* field : {"annotations", "labels"}) {
      const json* map = k8s::Find(*meta, field);
      if (map == nullptr) continue;
      if (!map->is_object()) {
        return InvalidInputError(path + ": metadata." + field + ": expected a mapping");
      }
      for (const auto& [key, value] : map->items()) {
        if (!value.is_string()) {
          return InvalidInputError(path + ": metadata." + field + "[" + key + "]: " + value.dump() +
                                   " is not a string; values are strings (quote it)");
        }
      }
    }
  }
  return pod;
}

std::string Describe(const contract::PodAsk& ask, const policy::Policy& policy) {
  const placement::Request& q = ask.request;
  std::ostringstream s;
  if (q.exclusive()) {
    s << q.gpu_count << " whole GPU(s)";
  } else {
    if (q.gpu_memory_bytes != 0) {
      s << FormatBytesHuman(q.gpu_memory_bytes);
    } else if (q.memory_ppm != 0) {
      s << (q.memory_ppm / 10'000.0) << " % of the chosen GPU's memory";
    }
    s << (q.gpu_milli > 0 ? " + " + std::to_string(q.gpu_milli / 10) + " % compute"
                          : " (compute: best effort)")
      << " on one shared GPU";
  }
  s << ", mode " << Name(q.mode) << ", priority " << Name(ask.priority) << " (PriorityClass "
    << policy.KubernetesPriorityClass(ask.priority) << "), tier " << Name(q.tier) << " (co-tenancy "
    << policy::Name(q.co_tenancy) << ")";
  return s.str();
}

// --scheduler: http(s)://HOST[:PORT], checked before anything is read or asked.
bool SchedulerUrlIsValid(const std::string& url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const std::string proto = url.substr(0, scheme);
  const std::string rest = url.substr(scheme + 3);
  return (proto == "http" || proto == "https") && !rest.empty() && rest[0] != ':' &&
         rest[0] != '/' && rest.find_first_of(" \t") == std::string::npos;
}

int ExplainInto(const ExplainArgs& args, std::ostream& out, std::ostream& err, json& report);

// The text report, or with --json the same findings as one object (the text is not printed).
int Explain(const ExplainArgs& args, std::ostream& out, std::ostream& err) {
  json report = json::object();
  if (!args.json) return ExplainInto(args, out, err, report);
  std::ostringstream text;
  const int code = ExplainInto(args, text, err, report);
  if (report.contains("pod")) out << report.dump(2) << "\n";
  return code;
}

int ExplainInto(const ExplainArgs& args, std::ostream& out, std::ostream& err, json& report) {
  if (!args.scheduler.empty() && !SchedulerUrlIsValid(args.scheduler)) {
    err << "tessera explain: --scheduler: \"" << args.scheduler
        << "\" is not a URL; expected http://HOST:PORT (tessera-scheduler's --listen)\n";
    return 2;
  }
  policy::Policy policy = policy::DefaultPolicy();
  std::string policy_file = args.policy_file;
  if (policy_file.empty()) {
    if (const char* env = std::getenv(std::string(names::kEnvPolicyFile).c_str()))
      policy_file = env;
  }
  if (!policy_file.empty()) {
    auto p = policy::LoadPolicyFile(policy_file);
    if (!p.ok()) {
      err << "tessera explain: --policy: " << p.status().message() << "\n";
      return ToExitCode(p.status());
    }
    policy = *std::move(p);
  }

  json pod;
  std::unique_ptr<k8s::Client> client;
  if (!args.file.empty()) {
    auto manifest = LoadManifest(args.file);
    if (!manifest.ok()) {
      err << "tessera explain: -f: " << manifest.status().message() << "\n";
      return ToExitCode(manifest.status());  // 3 not there, 2 not a pod manifest
    }
    pod = *std::move(manifest);
  } else {
    const std::size_t slash = args.pod.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == args.pod.size()) {
      err << "tessera explain pod: expected NAMESPACE/NAME, got \"" << args.pod << "\"\n";
      return 2;
    }
    auto config = k8s::ResolveConfig(args.kubeconfig);
    if (!config.ok()) {
      err << "tessera explain: --kubeconfig: " << config.status().message() << "\n";
      return ToExitCode(config.status());
    }
    auto made = k8s::Client::New(*config);
    if (!made.ok()) {
      err << "tessera explain: " << made.status().message() << "\n";
      return ToExitCode(made.status());
    }
    client = std::move(*made);
    auto got = client->Get(k8s::PodPath(args.pod.substr(0, slash), args.pod.substr(slash + 1)));
    if (!got.ok()) {
      err << "tessera explain: " << got.status().message() << "\n";
      return ToExitCode(got.status());  // 3 no such pod, 5 the API server unreachable
    }
    pod = *std::move(got);
  }

  if (!pod.is_object()) {
    err << "tessera explain: the API server answered with something that is not a pod\n";
    return 1;
  }
  bool denied = false;
  const contract::PodAsk id = contract::PodIdentity(pod);
  const std::string phase =
      pod.value("/status/phase"_json_pointer, std::string(client ? "" : "(manifest)"));
  out << "pod " << id.key() << ": " << phase;
  if (!id.node_name.empty()) out << " on " << id.node_name;
  out << "\n";
  report["pod"] = id.key();
  report["source"] = client ? "api" : "manifest";
  if (client) report["phase"] = phase;
  if (!id.node_name.empty()) report["node"] = id.node_name;
  auto ask = contract::ParsePodAsk(pod, policy);
  if (!ask.ok()) {
    out << "  denied by the admission webhook: " << ask.status().message() << "\n";
    report["answer"] = "denied";
    report["denied"] = ask.status().message();
    return 1;  // the answer is "no"
  }
  if (!ask->wants_gpu()) {
    out << "  asks tessera for no GPU\n";
    report["answer"] = "no-gpu";
    return 0;
  }
  out << "  ask: " << Describe(*ask, policy) << "\n";
  report["ask"] = Describe(*ask, policy);
  if (const policy::Quota* quota = policy.QuotaOf(id.namespace_name)) {
    out << "  quota (policy quotas." << id.namespace_name << "):";
    json& q = report["quota"] = {{"namespace", id.namespace_name}};
    if (quota->gpu_memory_bytes) {
      out << " gpuMemory " << FormatQuantity(*quota->gpu_memory_bytes);
      q["gpuMemoryBytes"] = *quota->gpu_memory_bytes;
    }
    if (quota->gpu_cores_percent) {
      out << " gpuCores " << *quota->gpu_cores_percent << "%";
      q["gpuCoresPercent"] = *quota->gpu_cores_percent;
    }
    if (quota->gpus) {
      out << " gpus " << *quota->gpus;
      q["gpus"] = *quota->gpus;
    }
    out << "\n";
  }
  if (!client) {
    // A manifest: what the validating webhook would say with no cluster facts.
    // No cluster to ask: tessera's own PriorityClasses (the chart installs them) are taken to
    // exist, other ones not; no GPU size is known.
    webhook::ClusterView view;
    view.priority_class_value = [&policy](const std::string& name) -> std::optional<std::int32_t> {
      for (const std::string& mine : policy.priority_classes) {
        if (mine == name) return 0;
      }
      return std::nullopt;
    };
    webhook::Admission admission(&policy, webhook::WebhookOptions{}, view, nullptr);
    // The mutating webhook runs first in a cluster: validate what it would leave.
    json admitted = pod;
    const json patch = admission.MutationsFor(pod);
    if (patch.is_array() && !patch.empty()) {
      try {
        admitted = pod.patch(patch);
        out << "  the mutating webhook would change:";
        const char* sep = " ";
        json& changes = report["mutations"] = json::array();
        for (const json& op : patch) {
          out << sep << op.value("op", std::string()) << " " << op.value("path", std::string());
          changes.push_back(
              {{"op", op.value("op", std::string())}, {"path", op.value("path", std::string())}});
          sep = ", ";
        }
        out << "\n";
      } catch (const json::exception& e) {
        out << "  the mutating webhook's patch does not apply to this manifest: " << e.what()
            << "\n";
        report["mutationsError"] = e.what();
      }
    }
    json review = {{"apiVersion", "admission.k8s.io/v1"},
                   {"request",
                    {{"uid", "explain"},
                     {"operation", "CREATE"},
                     {"resource", {{"resource", "pods"}}},
                     {"namespace", id.namespace_name},
                     {"name", id.name},
                     {"object", admitted}}}};
    const json res = admission.Validate(review)["response"];
    denied = !res.value("allowed", false);
    const std::string why = res.value("/status/message"_json_pointer, std::string());
    out << "  admission: " << (denied ? "denied: " + why : std::string("allowed by the policy"))
        << "\n";
    report["admission"] = {{"allowed", !denied}};
    if (denied) report["admission"]["message"] = why;
  }
  const std::string decision = pod.value(
      json::json_pointer("/metadata/annotations/" +
                         webhook::JsonPointerEscape(std::string(names::kAnnotationDecision))),
      std::string());
  if (!decision.empty()) {
    auto d = contract::ParseDecision(decision);
    if (!d.ok()) {
      out << "  decision: unreadable (" << d.status().message() << ")\n";
      report["decision"] = {{"error", d.status().message()}};
    } else {
      out << "  decision (key " << d->key_id << ", issued " << d->issued_at << "):";
      json& placed = report["decision"] = {{"keyId", d->key_id}, {"issuedAt", d->issued_at}};
      placed["devices"] = json::array();
      for (const auto& c : d->containers) {
        for (const auto& dev : c.devices) {
          out << " container " << c.name << " -> " << dev.uuid << " "
              << FormatBytesHuman(dev.memory_bytes) << ", " << dev.cores_percent << " %, "
              << Name(c.mode) << ";";
          placed["devices"].push_back({{"container", c.name},
                                       {"uuid", dev.uuid},
                                       {"memoryBytes", dev.memory_bytes},
                                       {"coresPercent", dev.cores_percent},
                                       {"mode", Name(c.mode)}});
        }
      }
      out << "\n";
    }
  }
  if (client) {
    k8s::ListOptions o;
    o.field_selector = "involvedObject.name=" + id.name;
    if (auto events = client->List(k8s::EventsPath(id.namespace_name), o); events.ok()) {
      json& listed = report["events"] = json::array();
      for (const json& e : events->items) {
        if (!e.is_object()) continue;
        out << "  event " << e.value("reason", std::string()) << ": "
            << e.value("message", std::string()) << "\n";
        listed.push_back({{"reason", e.value("reason", std::string())},
                          {"message", e.value("message", std::string())}});
      }
    }
  }
  if (!args.scheduler.empty()) {
    httplib::Client scheduler(args.scheduler);
    auto res = scheduler.Post("/explain", pod.dump(), "application/json");
    if (!res) {
      err << "tessera explain: --scheduler " << args.scheduler
          << ": no answer: " << httplib::to_string(res.error()) << "\n";
      return 5;  // a service unreachable
    }
    if (res->status != 200) {
      err << "tessera explain: --scheduler " << args.scheduler << ": POST /explain answered "
          << res->status << "\n";
      return 5;
    }
    const json verdicts = json::parse(res->body, nullptr, false);
    if (!verdicts.is_object()) {
      err << "tessera explain: --scheduler " << args.scheduler
          << ": answered with something that is not a JSON object\n";
      return 1;
    }
    std::map<std::string, int> refusals;
    int fitting = 0;
    out << "  candidate GPUs (tessera-scheduler, now):\n";
    const json gpus = verdicts.value("gpus", json::array());
    json& candidates = report["candidates"] = json::array();
    for (const json& g : gpus.is_array() ? gpus : json::array()) {
      if (!g.is_object()) continue;
      candidates.push_back({{"node", g.value("node", std::string())},
                            {"uuid", g.value("uuid", std::string())},
                            {"fits", g.value("fits", false)},
                            {"memoryFreeBytes", g.value("memoryFree", std::uint64_t{0})},
                            {"coresFreePercent", g.value("coresFree", 0)},
                            {"why", g.value("why", std::string())}});
      const bool fits = g.value("fits", false);
      fitting += fits ? 1 : 0;
      ++refusals[g.value("why", std::string())];
      out << "    " << g.value("node", std::string()) << " " << g.value("uuid", std::string())
          << ": " << FormatBytesHuman(g.value("memoryFree", std::uint64_t{0})) << " free, "
          << g.value("coresFree", 0) << " % compute free: " << g.value("why", std::string())
          << "\n";
    }
    out << "  " << fitting << " GPU(s) could take it now\n";
    report["fitting"] = fitting;
  }
  report["answer"] = denied ? "denied" : "admitted";
  return denied ? 1 : 0;  // a denial is the answer "no"
}

}  // namespace

void AddExplainCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code) {
  auto* explain = app.add_subcommand("explain", "Why a pod is where it is, Pending, or denied");
  auto* pod =
      explain->add_subcommand("pod", "Explain one pod (from the API, or a manifest with -f)");
  auto args = std::make_shared<ExplainArgs>();
  pod->add_option("name", args->pod, "NAMESPACE/NAME");
  pod->add_option("-f,--file", args->file, "a pod manifest (YAML or JSON) instead of the API");
  pod->add_option("--kubeconfig", args->kubeconfig,
                  "kubeconfig (default: $KUBECONFIG, in-cluster)");
  pod->add_option("--scheduler", args->scheduler,
                  "tessera-scheduler's URL (http://host:8888): adds every candidate GPU's verdict");
  pod->add_option("--policy", args->policy_file, "the policy file (default: $TESSERA_POLICY_FILE)");
  pod->add_flag("--json", args->json, "the report as one JSON object (docs/protocol.md)");
  explain->require_subcommand(1);
  pod->callback([args, &out, &err, exit_code] {
    if (args->pod.empty() == args->file.empty()) {
      err << "tessera explain pod: give NAMESPACE/NAME or -f FILE (one of them)\n";
      *exit_code = 2;
      return;
    }
    *exit_code = Explain(*args, out, err);
  });
}

}  // namespace tessera::cli
