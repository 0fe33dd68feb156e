// `tessera demo --real-node KUBECONFIG`: the scenarios' pods as real containers (demo.h).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/decision.h"
#include "demo/demo.h"
#include "demo/manifest.h"
#include "demo/process.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/paths.h"

namespace tessera::demo {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kScenarioLimit = 180s;  // every pod of a scenario finished or refused
constexpr auto kRefusedGrace = 20s;    // Pending this long after a FailedScheduling: refused
constexpr auto kDeleteLimit = 60s;     // the pods it made, gone
constexpr int kOutOfMemory = 2;        // CUDA_ERROR_OUT_OF_MEMORY

// The key=value pairs of one line ("allocated=1 last_result=2").
std::map<std::string, std::string> Pairs(const std::string& line) {
  std::map<std::string, std::string> out;
  for (const std::string& word : Words(line)) {
    const std::size_t eq = word.find('=');
    if (eq != std::string::npos && eq > 0) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

// A JSON pointer of `parts`, each a whole key (a "/" inside one, as in tessera.dev/decision, is
// escaped).
json::json_pointer Ptr(std::initializer_list<std::string_view> parts) {
  json::json_pointer p;
  for (const std::string_view part : parts) p.push_back(std::string(part));
  return p;
}

bool ToU64(const std::string& text, std::uint64_t* v) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  try {
    *v = std::stoull(text);
  } catch (...) {
    return false;
  }
  return true;
}

// The array at `key` of the template, as JSON text; an error names the field.
StatusOr<std::string> ArrayField(const json& t, const char* key, const char* of_what) {
  if (!t.contains(key)) return std::string("[]");
  const json& v = t.at(key);
  if (!v.is_array()) {
    return InvalidInputError(std::string("pod template: ") + key + ": expected a JSON array of " +
                             of_what + ", got " + std::string(v.type_name()));
  }
  for (const json& item : v) {
    if (!item.is_object() || !item.contains("name") || !item.at("name").is_string()) {
      return InvalidInputError(std::string("pod template: ") + key + ": every item must be " +
                               of_what + " with a \"name\" string");
    }
  }
  return v.dump();
}

class RealNodeDemo {
 public:
  RealNodeDemo(const RealNodeOptions& o, PodTemplate t, std::ostream* human, RealNodeResult* r)
      : o_(o), t_(std::move(t)), human_(human), r_(r) {}
  ~RealNodeDemo() { DeletePods(); }
  RealNodeDemo(const RealNodeDemo&) = delete;
  RealNodeDemo& operator=(const RealNodeDemo&) = delete;

  Status Run() {
    for (const std::string& id : o_.only.empty() ? std::vector<std::string>{"showdown"} : o_.only) {
      const Scenario* s = nullptr;
      for (const Scenario& candidate : Scenarios()) {
        if (candidate.id == id) s = &candidate;
      }
      if (s == nullptr) {
        return InvalidArgumentError("--only: unknown scenario \"" + id +
                                    "\"; accepted: " + ScenarioIds());
      }
      scenarios_.push_back(s);
    }
    TESSERA_ASSIGN_OR_RETURN(k8s::Config config, k8s::LoadKubeconfig(o_.kubeconfig));
    TESSERA_ASSIGN_OR_RETURN(api_, k8s::Client::New(std::move(config)));
    TESSERA_RETURN_IF_ERROR(FindNode());
    Say("##### tessera demo --real-node: the seeds' scenarios as real containers\n");
    Say("node " + r_->node + ": kubelet " + r_->kubelet + ", " + r_->runtime + ", " + r_->os +
        "; " + std::to_string(r_->slots) + " " + std::string(names::kResourceGpuSlot) + "\n");
    Say("each pod's process (" + t_.client + " dlopen alloc plain " +
        std::to_string(kRealNodeChunk) + ", image " + t_.image +
        ") allocates 64 MiB at a time until CUDA refuses\n");
    for (const Scenario* s : scenarios_) {
      r_->scenarios.emplace_back(s->id, std::vector<RealPodResult>{});
      TESSERA_RETURN_IF_ERROR(RunScenario(*s, r_->scenarios.back().second));
      DeletePods();
    }
    r_->completed = true;
    Say("\n" + std::to_string(Placed() - r_->unexpected()) + " of " + std::to_string(Placed()) +
        " placed pods were refused at their own cap inside their own container\n");
    return Status::Ok();
  }

 private:
  void Say(const std::string& text) {
    if (human_ != nullptr) *human_ << text << std::flush;
  }
  int Placed() const {
    int n = 0;
    for (const auto& [id, pods] : r_->scenarios) {
      for (const RealPodResult& p : pods) n += p.outcome == Outcome::kPlaced ? 1 : 0;
    }
    return n;
  }

  // The first Ready node whose kubelet advertises tessera's slots.
  Status FindNode() {
    TESSERA_ASSIGN_OR_RETURN(k8s::ListResult nodes, api_->List(k8s::NodesPath()));
    for (const json& n : nodes.items) {
      const std::string slots = Str(n, Ptr({"status", "allocatable", names::kResourceGpuSlot}));
      std::uint64_t count = 0;
      if (!ToU64(slots, &count) || count == 0) continue;
      const auto info = [&n](const char* key) {
        const std::string v = Str(n, Ptr({"status", "nodeInfo", key}));
        return v.empty() ? std::string("?") : v;
      };
      r_->node = Str(n, "/metadata/name"_json_pointer);
      r_->kubelet = info("kubeletVersion");
      r_->runtime = info("containerRuntimeVersion");
      r_->os = info("osImage");
      r_->slots = count;
      return Status::Ok();
    }
    return FailedPreconditionError(
        "no node advertises " + std::string(names::kResourceGpuSlot) +
        ": tessera-node's device plugin is not registered with any kubelet of this cluster (is "
        "the chart installed and its tessera-node pod Running?)");
  }

  json Manifest(const PodSpec& spec) const {
    json pod = PodManifest(spec, "");
    pod["metadata"]["namespace"] = o_.ns;
    json& podspec = pod["spec"];
    podspec["restartPolicy"] = "Never";
    podspec["automountServiceAccountToken"] = false;
    if (!t_.scheduler_name.empty() && !podspec.contains("schedulerName"))
      podspec["schedulerName"] = t_.scheduler_name;
    podspec["volumes"] = json::parse(t_.volumes_json);
    json& c = podspec["containers"][0];
    c["image"] = t_.image;
    c["imagePullPolicy"] = "IfNotPresent";
    c["command"] = {t_.client, "dlopen", "alloc", "plain", std::to_string(kRealNodeChunk)};
    c["env"] = json::parse(t_.env_json);
    c["volumeMounts"] = json::parse(t_.mounts_json);
    return pod;
  }

  Status RunScenario(const Scenario& s, std::vector<RealPodResult>& pods) {
    Say("\n== " + s.id + ": " + s.title + "\n");
    for (const PodSpec& spec : s.pods) {
      RealPodResult r;
      r.spec = spec;
      auto created = api_->Create(k8s::PodsPath(o_.ns), Manifest(spec));
      if (created.ok()) {
        created_.push_back(spec.name);
        r.outcome = Outcome::kPlaced;  // until refused
      } else if (created.status().message().find("denied the request") != std::string::npos) {
        r.reason = DenialReason(created.status().message());
      } else {
        return created.status().WithContext("creating " + o_.ns + "/" + spec.name);
      }
      pods.push_back(std::move(r));
    }
    const auto start = Clock::now();
    std::map<std::string, Clock::time_point> refused_since;
    for (;;) {
      if (Interrupted()) return AbortedError("interrupted");
      bool pending = false;
      for (RealPodResult& r : pods) {
        if (r.outcome != Outcome::kPlaced || !r.phase.empty()) continue;
        TESSERA_ASSIGN_OR_RETURN(json pod, api_->Get(k8s::PodPath(o_.ns, r.spec.name)));
        const std::string phase = Str(pod, "/status/phase"_json_pointer);
        r.node = Str(pod, "/spec/nodeName"_json_pointer);
        if (phase == "Succeeded" || phase == "Failed") {
          r.phase = phase;
          TESSERA_RETURN_IF_ERROR(Finished(pod, r));
          continue;
        }
        pending = true;
        if (!r.node.empty()) continue;
        k8s::ListOptions lo;
        lo.field_selector = "involvedObject.name=" + r.spec.name + ",reason=FailedScheduling";
        auto events = api_->List(k8s::EventsPath(o_.ns), lo);
        if (events.ok() && !events->items.empty()) {
          r.reason = events->items.back().value("message", "");
          auto [at, fresh] = refused_since.emplace(r.spec.name, Clock::now());
          if (Clock::now() - at->second >= kRefusedGrace) {
            r.outcome = Outcome::kUnschedulable;
            r.phase = "Pending";
          }
        }
      }
      if (!pending) break;
      if (Clock::now() - start >= kScenarioLimit) {
        std::string which;
        for (const RealPodResult& r : pods) {
          if (r.outcome == Outcome::kPlaced && r.phase.empty()) which += " " + r.spec.name;
        }
        return UnavailableError("scenario " + s.id + ": pods not finished within " +
                                std::to_string(kScenarioLimit.count()) + " s:" + which +
                                " (kubectl describe pod shows why)");
      }
      SleepUnlessInterrupted(500ms);
    }
    for (const RealPodResult& r : pods) Report(r);
    return Status::Ok();
  }

  // A placed pod that ended: what tessera granted it and what its process saw.
  Status Finished(const json& pod, RealPodResult& r) {
    const std::string text = Str(pod, Ptr({"metadata", "annotations", names::kAnnotationDecision}));
    if (auto d = contract::ParseDecision(text);
        d.ok() && !d->containers.empty() && !d->containers[0].devices.empty()) {
      r.uuid = d->containers[0].devices[0].uuid;
      r.cap_bytes = d->containers[0].devices[0].memory_bytes;
    }
    TESSERA_ASSIGN_OR_RETURN(
        k8s::HttpResponse log,
        api_->Do("GET", k8s::PodPath(o_.ns, r.spec.name) + "/log?container=" + kContainer));
    ReadClientOutput(log.status == 200 ? log.body : std::string(), &r);
    return Status::Ok();
  }

  void Report(const RealPodResult& r) {
    std::string line = "  " + r.spec.name;
    line.resize(std::max<std::size_t>(line.size() + 1, 18), ' ');
    line +=
        "asks " + (r.spec.memory.empty() ? std::to_string(r.spec.gpus) + " GPU" : r.spec.memory);
    line.resize(std::max<std::size_t>(line.size() + 1, 32), ' ');
    if (r.outcome == Outcome::kDenied) {
      Say(line + "denied at admission: " + r.reason + "\n");
      return;
    }
    if (r.outcome == Outcome::kUnschedulable) {
      Say(line + "not placed: " + r.reason + "\n");
      return;
    }
    line += "on " + r.node + " " + (r.uuid.empty() ? "(no decision)" : r.uuid) + ": ";
    if (!r.ran) {
      line += "its process made no CUDA context (phase " + r.phase + ")";
    } else {
      line += "allocated " + FormatBytesHuman(r.allocated) + ", then CUDA error " +
              std::to_string(r.last_result) + "; cuMemGetInfo total " + FormatBytesHuman(r.total) +
              " (cap " + FormatBytesHuman(r.cap_bytes) + ")";
    }
    Say(line + (r.as_expected ? "" : "  (!)") + "\n");
    for (const std::string& out : r.output) Say("      | " + out + "\n");
  }

  void DeletePods() {
    if (api_ == nullptr) return;
    k8s::DeleteOptions opts;
    opts.grace_period_seconds = 0;
    for (const std::string& name : created_) {
      (void)api_->Delete(k8s::PodPath(o_.ns, name), opts);  // (gone already: nothing to do)
    }
    // Until they are gone, so that the next scenario (or whatever runs next) finds their GPU
    // memory free again; at most a minute (a node that stopped answering keeps them).
    const auto start = Clock::now();
    while (Clock::now() - start < kDeleteLimit) {
      bool any = false;
      for (const std::string& name : created_) {
        any = any || api_->Get(k8s::PodPath(o_.ns, name)).ok();
      }
      if (!any) break;
      std::this_thread::sleep_for(250ms);
    }
    created_.clear();
  }

  const RealNodeOptions& o_;
  PodTemplate t_;
  std::ostream* human_;
  RealNodeResult* r_;
  std::unique_ptr<k8s::Client> api_;
  std::vector<std::string> created_;  // pods to delete
  std::vector<const Scenario*> scenarios_;
};

}  // namespace

StatusOr<PodTemplate> ParsePodTemplate(std::string_view text) {
  const json t = json::parse(text, nullptr, false);
  if (t.is_discarded() || !t.is_object()) {
    return InvalidInputError(
        "pod template: expected a JSON object with \"image\" (and optionally \"client\", "
        "\"schedulerName\", \"env\", \"volumes\", \"volumeMounts\")");
  }
  static const std::vector<std::string> kKnown = {"image", "client",  "schedulerName",
                                                  "env",   "volumes", "volumeMounts"};
  for (const auto& [key, value] : t.items()) {
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
      return InvalidInputError("pod template: unknown field \"" + key +
                               "\"; accepted: image, client, schedulerName, env, volumes, "
                               "volumeMounts");
    }
  }
  PodTemplate out;
  for (const auto& [key, field] : {std::pair<const char*, std::string*>{"image", &out.image},
                                   {"client", &out.client},
                                   {"schedulerName", &out.scheduler_name}}) {
    if (!t.contains(key)) continue;
    if (!t.at(key).is_string() || t.at(key).get<std::string>().empty()) {
      return InvalidInputError(std::string("pod template: ") + key +
                               ": expected a non-empty string");
    }
    *field = t.at(key).get<std::string>();
  }
  if (out.image.empty()) {
    return InvalidInputError(
        "pod template: image: required (an image holding the CUDA client, e.g. "
        "\"tessera.dev/test/cuda-client:1\")");
  }
  TESSERA_ASSIGN_OR_RETURN(out.env_json, ArrayField(t, "env", "EnvVar objects"));
  TESSERA_ASSIGN_OR_RETURN(out.volumes_json, ArrayField(t, "volumes", "Volume objects"));
  TESSERA_ASSIGN_OR_RETURN(out.mounts_json, ArrayField(t, "volumeMounts", "VolumeMount objects"));
  return out;
}

void ReadClientOutput(const std::string& log, RealPodResult* r) {
  std::istringstream in(log);
  bool allocated = false, info = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (r->output.size() < 8) r->output.push_back(line);
    const auto pairs = Pairs(line);
    if (auto it = pairs.find("context_result"); it != pairs.end()) r->ran = it->second == "0";
    if (auto a = pairs.find("allocated"), l = pairs.find("last_result");
        a != pairs.end() && l != pairs.end()) {
      std::uint64_t last = 0;
      allocated = ToU64(a->second, &r->allocated) && ToU64(l->second, &last);
      r->last_result = allocated ? static_cast<int>(last) : -1;
    }
    if (auto it = pairs.find("total"); it != pairs.end()) info = ToU64(it->second, &r->total);
  }
  // Refused for memory, at its cap: no more than the cap, and less than a step short of it.
  r->as_expected = r->ran && allocated && info && r->cap_bytes > 0 &&
                   r->last_result == kOutOfMemory && r->allocated <= r->cap_bytes &&
                   r->allocated + kRealNodeChunk > r->cap_bytes && r->total == r->cap_bytes;
}

int RealNodeResult::unexpected() const {
  int n = 0;
  for (const auto& [id, pods] : scenarios) {
    for (const RealPodResult& p : pods) n += p.outcome == Outcome::kPlaced && !p.as_expected;
  }
  return n;
}

Status RunRealNodeDemo(const RealNodeOptions& options, std::ostream* human, std::ostream& err,
                       RealNodeResult* result) {
  RealNodeResult local;
  if (result == nullptr) result = &local;
  *result = RealNodeResult{};
  if (options.kubeconfig.empty()) {
    return InvalidArgumentError("--real-node: expected the path of a kubeconfig file");
  }
  if (options.pod_template.empty()) {
    return InvalidArgumentError(
        "--pod-template: required with --real-node (a JSON file: {\"image\": ...})");
  }
  std::ifstream in(options.pod_template);
  if (!in) {
    return InvalidArgumentError("--pod-template: cannot read \"" + options.pod_template + "\"");
  }
  std::stringstream text;
  text << in.rdbuf();
  auto t = ParsePodTemplate(text.str());
  if (!t.ok()) return t.status().WithContext("--pod-template " + options.pod_template);
  InterruptScope interrupts;
  Status st;
  {
    RealNodeDemo demo(options, std::move(*t), human, result);
    st = demo.Run();
  }  // its pods deleted
  if (Interrupted()) {
    err << "tessera demo: interrupted; the pods it made are deleted\n";
    return AbortedError("interrupted");
  }
  if (!st.ok() && st.code() != StatusCode::kInvalidArgument &&
      st.code() != StatusCode::kInvalidInput)
    err << "tessera demo --real-node: " << st.message() << "\n";
  return st;
}

}  // namespace tessera::demo
