// `tessera demo --real-node KUBECONFIG`: the showdown's pods as real containers (demo.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/file.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/decision.h"
#include "demo/demo.h"
#include "demo/manifest.h"
#include "demo/process.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/errors.h"
#include "k8s/object.h"
#include "k8s/paths.h"

namespace tessera::demo {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kRealNodeScenario = "showdown";
constexpr auto kScenarioLimit = 180s;  // every pod of the story judged or refused
constexpr auto kRefusedGrace = 20s;    // Pending this long after a FailedScheduling: refused
constexpr auto kDeleteLimit = 60s;     // the pods it made, gone
constexpr int kStopGraceSeconds = 10;  // a pod's, from SIGTERM to SIGKILL
constexpr int kOutOfMemory = 2;        // CUDA_ERROR_OUT_OF_MEMORY
constexpr std::size_t kMaxTemplateBytes = 1 << 20;
// Every pod keeps what it got until the story is judged (hook_client's CLIENT_HOLD_SECONDS), so
// that a later pod meets the GPU as the earlier ones hold it; deleted afterwards.
constexpr const char* kHoldSeconds = "600";
// A container that cannot start: the pod is judged at once (no use waiting for the limit).
constexpr std::string_view kCannotStart[] = {
    "ErrImagePull",         "ImagePullBackOff",           "InvalidImageName",
    "CreateContainerError", "CreateContainerConfigError", "RunContainerError"};

// The key=value pairs of one line ("allocated=1 last_result=2").
std::map<std::string, std::string> Pairs(const std::string& line) {
  std::map<std::string, std::string> out;
  for (const std::string& word : Words(line)) {
    const std::size_t eq = word.find('=');
    if (eq != std::string::npos && eq > 0) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

bool ToU64(const std::string& text, std::uint64_t* v) {
  auto parsed = ParseUnsigned(text, UINT64_MAX);
  if (parsed.ok()) *v = *parsed;
  return parsed.ok();
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

// The waiting reason of the pod's container, if it is one it cannot get past; "" otherwise.
std::string CannotStart(const json& pod) {
  const json* status = k8s::Find(pod, "status");
  const json* containers = status != nullptr ? k8s::Find(*status, "containerStatuses") : nullptr;
  if (containers == nullptr || !containers->is_array()) return "";
  for (const json& c : *containers) {
    const json* state = k8s::Find(c, "state");
    const json* waiting = state != nullptr ? k8s::Find(*state, "waiting") : nullptr;
    if (waiting == nullptr) continue;
    const std::string reason = k8s::StringAt(*waiting, "reason");
    if (std::find(std::begin(kCannotStart), std::end(kCannotStart), reason) !=
        std::end(kCannotStart)) {
      return reason + ": " + k8s::StringAt(*waiting, "message");
    }
  }
  return "";
}

class RealNodeDemo {
 public:
  RealNodeDemo(const RealNodeOptions& o, PodTemplate t, std::ostream* human, RealNodeResult* r)
      : o_(o), t_(std::move(t)), human_(human), r_(r) {}
  ~RealNodeDemo() { (void)CleanUp(); }
  RealNodeDemo(const RealNodeDemo&) = delete;
  RealNodeDemo& operator=(const RealNodeDemo&) = delete;

  Status Run() {
    const Scenario* s = nullptr;
    for (const Scenario& candidate : Scenarios()) {
      if (candidate.id == kRealNodeScenario) s = &candidate;
    }
    if (s == nullptr) return InternalError("the showdown scenario is missing");
    auto config = k8s::LoadKubeconfig(o_.kubeconfig);  // (a bad file is a bad input: exit 4)
    if (!config.ok()) return AsInputError(config.status()).WithContext("--real-node");
    TESSERA_ASSIGN_OR_RETURN(api_, k8s::Client::New(std::move(*config)));
    TESSERA_RETURN_IF_ERROR(FindNode());
    Say("##### tessera demo --real-node: the seeds' showdown as real containers\n");
    Say("node " + r_->node + ": kubelet " + r_->kubelet + ", " + r_->runtime + ", " + r_->os +
        "; " + std::to_string(r_->slots) + " " + std::string(names::kResourceGpuSlot) + "\n");
    Say("each pod's process (" + t_.client + " dlopen alloc plain " +
        std::to_string(kRealNodeChunk) + ", image " + t_.image +
        ") allocates 64 MiB at a time until CUDA refuses, then keeps what it got until every pod "
        "is judged\n");
    r_->scenarios.emplace_back(s->id, std::vector<RealPodResult>{});
    std::vector<RealPodResult>& pods = r_->scenarios.back().second;
    const Status st = RunScenario(*s, pods);
    for (const RealPodResult& r : pods) Report(r);  // what is known, also after a failure
    TESSERA_RETURN_IF_ERROR(st);
    TESSERA_RETURN_IF_ERROR(CleanUp());
    r_->completed = true;
    const int placed = Placed();
    Say("\n" + std::to_string(placed - r_->unexpected()) + " of " + std::to_string(placed) +
        " placed pods were refused at their own cap inside their own container\n");
    if (placed == 0) return FailedPreconditionError("no pod of the showdown was placed");
    return Status::Ok();
  }

  // Deletes the pods (and the namespace) it made and waits until they are gone.
  Status CleanUp() {
    if (api_ == nullptr || (created_.empty() && !made_namespace_)) return Status::Ok();
    for (const std::string& name : created_) (void)api_->Delete(k8s::PodPath(ns_, name));
    const auto start = Clock::now();
    std::vector<std::string> left = created_;
    while (!left.empty() && Clock::now() - start < kDeleteLimit) {
      std::erase_if(left, [this](const std::string& name) {
        auto got = api_->Get(k8s::PodPath(ns_, name));
        return !got.ok() && got.status().code() == StatusCode::kNotFound;
      });
      if (!left.empty()) SleepUnlessInterrupted(250ms);
    }
    created_.clear();
    if (made_namespace_) {
      made_namespace_ = false;
      (void)api_->Delete(k8s::NamespacePath(ns_));
    }
    if (left.empty()) return Status::Ok();
    std::string names;
    for (const std::string& n : left) names += " " + ns_ + "/" + n;
    return UnavailableError("pods still present after " + std::to_string(kDeleteLimit.count()) +
                            " s:" + names);
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
      const json* status = k8s::Find(n, "status");
      if (status == nullptr) continue;
      const json* allocatable = k8s::Find(*status, "allocatable");
      std::uint64_t slots = 0;
      if (allocatable == nullptr ||
          !ToU64(k8s::StringAt(*allocatable, names::kResourceGpuSlot), &slots) || slots == 0) {
        continue;
      }
      bool ready = false;
      if (const json* conditions = k8s::Find(*status, "conditions"); conditions != nullptr) {
        for (const json& c : *conditions) {
          ready = ready ||
                  (k8s::StringAt(c, "type") == "Ready" && k8s::StringAt(c, "status") == "True");
        }
      }
      if (!ready) continue;
      const json* info = k8s::Find(*status, "nodeInfo");
      const auto field = [info](std::string_view key) {
        const std::string v = info != nullptr ? k8s::StringAt(*info, key) : std::string();
        return v.empty() ? std::string("?") : v;
      };
      r_->node = Str(n, "/metadata/name"_json_pointer);
      r_->kubelet = field("kubeletVersion");
      r_->runtime = field("containerRuntimeVersion");
      r_->os = field("osImage");
      r_->slots = slots;
      return Status::Ok();
    }
    return FailedPreconditionError(
        "no Ready node advertises " + std::string(names::kResourceGpuSlot) +
        ": tessera-node's device plugin is not registered with any kubelet of this cluster (is "
        "the chart installed and its tessera-node pod Running?)");
  }

  json Manifest(const PodSpec& spec) const {
    json pod = PodManifest(spec, "");
    json& podspec = pod["spec"];
    podspec["restartPolicy"] = "Never";
    // Stopped with SIGTERM, which the client handles by exiting as a program does (a driver
    // that counts usage per process, as the harness's fake one, gives it back then).
    podspec["terminationGracePeriodSeconds"] = kStopGraceSeconds;
    podspec["automountServiceAccountToken"] = false;
    if (!podspec.contains("schedulerName")) podspec["schedulerName"] = t_.scheduler_name;
    podspec["volumes"] = json::parse(t_.volumes_json);
    json& c = podspec["containers"][0];
    c["image"] = t_.image;
    c["imagePullPolicy"] = "IfNotPresent";
    c["command"] = {t_.client, "dlopen", "alloc", "plain", std::to_string(kRealNodeChunk)};
    c["env"] = json::parse(t_.env_json);
    c["env"].push_back({{"name", "CLIENT_HOLD_SECONDS"}, {"value", kHoldSeconds}});
    c["volumeMounts"] = json::parse(t_.mounts_json);
    return pod;
  }

  Status EnsureNamespace() {
    auto got = api_->Get(k8s::NamespacePath(ns_));
    if (got.ok()) return Status::Ok();
    if (got.status().code() != StatusCode::kNotFound) return got.status();
    const json manifest = {
        {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}};
    TESSERA_RETURN_IF_ERROR(api_->Create("/api/v1/namespaces", manifest).status());
    made_namespace_ = true;
    return Status::Ok();
  }

  Status RunScenario(const Scenario& s, std::vector<RealPodResult>& pods) {
    Say("\n== " + s.id + ": " + s.title + "\n");
    ns_ = s.pods.empty() ? "default" : s.pods.front().ns;
    TESSERA_RETURN_IF_ERROR(EnsureNamespace());
    std::map<std::string, std::string> uids;
    for (const PodSpec& spec : s.pods) {
      if (Interrupted()) return AbortedError("interrupted");
      RealPodResult r;
      r.spec = spec;
      auto created = api_->Create(k8s::PodsPath(ns_), Manifest(spec));
      if (created.ok()) {
        created_.push_back(spec.name);
        uids[spec.name] = Str(*created, "/metadata/uid"_json_pointer);
        r.outcome = Outcome::kPlaced;  // until refused
      } else if (created.status().message().find("denied the request") != std::string::npos) {
        r.reason = DenialReason(created.status().message());
        r.phase = "denied";
      } else {
        created_.push_back(spec.name);  // (it may exist all the same: deleting it is harmless)
        return created.status().WithContext("creating " + ns_ + "/" + spec.name);
      }
      pods.push_back(std::move(r));
      // One at a time, as the story tells it: each placed before the next is created.
      TESSERA_RETURN_IF_ERROR(Await(pods.back(), uids[spec.name], /*until_judged=*/false));
    }
    for (RealPodResult& r : pods) {
      TESSERA_RETURN_IF_ERROR(Await(r, uids[r.spec.name], /*until_judged=*/true));
    }
    return Status::Ok();
  }

  // Waits until `r` is bound (or refused), and with `until_judged` until its process has printed
  // what it got (or the pod ended, or cannot start).
  Status Await(RealPodResult& r, const std::string& uid, bool until_judged) {
    const auto start = Clock::now();
    std::optional<Clock::time_point> refused_at;
    while (r.outcome == Outcome::kPlaced && r.phase.empty()) {
      if (Interrupted()) return AbortedError("interrupted");
      TESSERA_ASSIGN_OR_RETURN(json pod, api_->Get(k8s::PodPath(ns_, r.spec.name)));
      const json* spec = k8s::Find(pod, "spec");
      const json* status = k8s::Find(pod, "status");
      r.node = spec != nullptr ? k8s::StringAt(*spec, "nodeName") : "";
      const std::string phase = status != nullptr ? k8s::StringAt(*status, "phase") : "";
      if (!r.node.empty()) {
        if (!k8s::HasAnnotation(pod, names::kAnnotationDecision)) {
          return FailedPreconditionError(
              ns_ + "/" + r.spec.name + " was bound to " + r.node +
              " without tessera's decision: the pod template's schedulerName (\"" +
              t_.scheduler_name +
              "\") must name the kube-scheduler profile that calls "
              "tessera-scheduler (the chart's: \"tessera\")");
        }
        if (!until_judged) return Status::Ok();
        const std::string stuck = CannotStart(pod);
        TESSERA_ASSIGN_OR_RETURN(
            k8s::HttpResponse log,
            api_->Do("GET", k8s::PodPath(ns_, r.spec.name) + "/log?container=" + kContainer));
        const bool printed = log.status == 200 && log.body.find("holding=") != std::string::npos;
        if (printed || phase == "Succeeded" || phase == "Failed" || !stuck.empty()) {
          r.phase = printed ? "Running" : phase;
          if (!stuck.empty()) r.reason = stuck;
          Judge(pod, log.status == 200 ? log.body : std::string(), r);
          return Status::Ok();
        }
      } else {
        k8s::ListOptions lo;
        lo.field_selector = "involvedObject.name=" + r.spec.name + ",involvedObject.uid=" + uid +
                            ",reason=FailedScheduling";
        auto events = api_->List(k8s::EventsPath(ns_), lo);
        if (events.ok() && !events->items.empty()) {
          r.reason = k8s::StringAt(events->items.back(), "message");
          if (!refused_at) refused_at = Clock::now();
          if (Clock::now() - *refused_at >= kRefusedGrace) {
            r.outcome = Outcome::kUnschedulable;
            r.phase = "Pending";
            return Status::Ok();
          }
        }
      }
      if (Clock::now() - start >= kScenarioLimit) {
        return UnavailableError(
            ns_ + "/" + r.spec.name + ": not " + (r.node.empty() ? "placed nor refused" : "done") +
            " within " + std::to_string(kScenarioLimit.count()) + " s (phase \"" + phase + "\")");
      }
      SleepUnlessInterrupted(500ms);
    }
    return Status::Ok();
  }

  // A placed pod whose process printed what it got: what tessera granted it and what it saw.
  void Judge(const json& pod, const std::string& log, RealPodResult& r) {
    if (auto text = k8s::AnnotationOf(pod, names::kAnnotationDecision)) {
      if (auto d = contract::ParseDecision(*text);
          d.ok() && !d->containers.empty() && !d->containers[0].devices.empty()) {
        r.uuid = d->containers[0].devices[0].uuid;
        r.cap_bytes = d->containers[0].devices[0].memory_bytes;
      }
    }
    ReadClientOutput(log, &r);
  }

  void Report(const RealPodResult& r) {
    std::string line = "  " + r.spec.name;
    line.resize(std::max<std::size_t>(line.size() + 1, 18), ' ');
    line +=
        "asks " + (r.spec.memory.empty() ? std::to_string(r.spec.gpus) + " GPU" : r.spec.memory);
    line.resize(std::max<std::size_t>(line.size() + 1, 32), ' ');
    // What the seeds' story says of it on their one 16 GiB GPU, where this node differs.
    const std::string story =
        r.outcome == r.spec.expect
            ? ""
            : " (on the seeds' one GPU: " + std::string(Name(r.spec.expect)) + ")";
    if (r.outcome == Outcome::kDenied) {
      Say(line + "denied at admission: " + r.reason + story + "\n");
      return;
    }
    if (r.outcome == Outcome::kUnschedulable) {
      Say(line + "not placed: " + r.reason + story + "\n");
      return;
    }
    if (r.phase.empty()) {
      Say(line + (r.node.empty() ? "not placed yet" : "on " + r.node + ", not judged") + "\n");
      return;
    }
    line += "on " + r.node + " " + (r.uuid.empty() ? "(no decision)" : r.uuid) + ": ";
    if (!r.ran) {
      line += "its process made no CUDA context (phase " + r.phase +
              (r.reason.empty() ? "" : "; " + r.reason) + ")";
    } else {
      line += "allocated " + FormatBytesHuman(r.allocated) + ", then CUDA error " +
              std::to_string(r.last_result) + "; cuMemGetInfo total " + FormatBytesHuman(r.total) +
              ", free " + FormatBytesHuman(r.free) + " (cap " + FormatBytesHuman(r.cap_bytes) + ")";
    }
    Say(line + story + (r.as_expected ? "" : "  (!)") + "\n");
    for (const std::string& out : r.output) Say("      | " + out + "\n");
  }

  const RealNodeOptions& o_;
  PodTemplate t_;
  std::ostream* human_;
  RealNodeResult* r_;
  std::unique_ptr<k8s::Client> api_;
  std::string ns_ = "default";
  bool made_namespace_ = false;
  std::vector<std::string> created_;  // pods to delete
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
    if (auto t = pairs.find("total"), f = pairs.find("free"); t != pairs.end() && f != pairs.end())
      info = ToU64(t->second, &r->total) && ToU64(f->second, &r->free);
  }
  // Refused for memory at its cap: cuMemGetInfo shows the cap as the total and less than a step
  // free (its CUDA context counts against the cap on a real GPU, so the allocations alone may
  // stop short of it), and it got no more than the cap.
  r->as_expected = r->ran && allocated && info && r->cap_bytes > 0 &&
                   r->last_result == kOutOfMemory && r->total == r->cap_bytes &&
                   r->free < kRealNodeChunk && r->allocated <= r->cap_bytes;
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
  for (const std::string& id : options.only) {
    if (id != kRealNodeScenario) {
      return InvalidArgumentError("--only: with --real-node only \"showdown\" runs (\"" +
                                  QuoteForMessage(id) +
                                  "\" needs the demo's own policy, namespaces and nodes)");
    }
  }
  auto text = ReadFile(options.pod_template, kMaxTemplateBytes);
  if (!text.ok()) return text.status().WithContext("--pod-template");
  auto t = ParsePodTemplate(*text);
  if (!t.ok()) return t.status().WithContext("--pod-template " + options.pod_template);
  InterruptScope interrupts;
  Status st;
  {
    RealNodeDemo demo(options, std::move(*t), human, result);
    st = demo.Run();
    if (const Status cleaned = demo.CleanUp(); !cleaned.ok()) {
      err << "tessera demo --real-node: " << cleaned.message() << "\n";
      if (st.ok()) st = cleaned;
    }
  }
  if (Interrupted()) {
    err << "tessera demo: interrupted; the pods it made are deleted\n";
    return AbortedError("interrupted");
  }
  if (!st.ok() && st.code() != StatusCode::kInvalidArgument &&
      st.code() != StatusCode::kInvalidInput) {
    err << "tessera demo --real-node: " << st.message() << "\n";
  }
  return st;
}

}  // namespace tessera::demo
