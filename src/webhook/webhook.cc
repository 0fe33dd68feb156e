#include "webhook/webhook.h"

#include <algorithm>

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/claim_ask.h"
#include "contract/pod_ask.h"
#include "k8s/object.h"

namespace tessera::webhook {

using nlohmann::json;

namespace {

using k8s::Find;

constexpr int kForbidden = 403;
constexpr int kBadRequest = 400;

using k8s::HasAnnotation;

bool HasDecision(const json& object) {
  return HasAnnotation(object, names::kAnnotationDecision) ||
         HasAnnotation(object, names::kAnnotationDecisionSignature);
}

std::string PodName(const AdmissionRequest& r) {
  std::string name = r.name;
  if (name.empty()) {
    if (const json* meta = Find(r.object, "metadata")) {
      if (const json* g = Find(*meta, "generateName"); g != nullptr && g->is_string()) {
        name = g->get<std::string>() + "*";
      }
    }
  }
  return r.namespace_name + "/" + name;
}

// The container's resources.limits (null: none).
const json* LimitsOf(const json& container) {
  const json* resources = Find(container, "resources");
  return resources != nullptr ? Find(*resources, "limits") : nullptr;
}

// Whether a container asks for a fractional GPU / for whole GPUs (both get a slot handle).
bool AsksFraction(const json& container) {
  const json* limits = LimitsOf(container);
  return limits != nullptr && (Find(*limits, names::kResourceGpuMemory) != nullptr ||
                               Find(*limits, names::kResourceGpuCores) != nullptr);
}

bool AsksWhole(const json& container) {
  const json* limits = LimitsOf(container);
  return limits != nullptr && Find(*limits, names::kResourceGpu) != nullptr;
}

void SetResource(json& container, std::string_view resource, const std::string& value) {
  json& resources = container["resources"];
  if (!resources.is_object()) resources = json::object();
  for (const char* kind : {"limits", "requests"}) {
    json& list = resources[kind];
    if (!list.is_object()) list = json::object();
    list[std::string(resource)] = value;
  }
}

}  // namespace

Admission::Admission(const policy::Policy* policy, WebhookOptions options, ClusterView view,
                     QuotaBook* quotas)
    : policy_(policy), options_(std::move(options)), view_(std::move(view)), quotas_(quotas) {}

bool Admission::IsScheduler(const AdmissionRequest& r) const {
  return std::find(options_.scheduler_users.begin(), options_.scheduler_users.end(), r.username) !=
         options_.scheduler_users.end();
}

json Admission::MutationsFor(const json& pod) const {
  json out = pod;
  json* spec = out.contains("spec") && out["spec"].is_object() ? &out["spec"] : nullptr;
  if (spec == nullptr) return json::array();
  // 1. Pods addressed to another GPU scheduler are ours.
  if (const json* name = Find(*spec, "schedulerName");
      name != nullptr && name->is_string() &&
      std::find(options_.adopt_scheduler_names.begin(), options_.adopt_scheduler_names.end(),
                name->get<std::string>()) != options_.adopt_scheduler_names.end()) {
    (*spec)["schedulerName"] = options_.scheduler_name;
  }
  json* containers = spec->contains("containers") && (*spec)["containers"].is_array()
                         ? &(*spec)["containers"]
                         : nullptr;
  if (containers == nullptr || containers->empty() || !(*containers)[0].is_object()) {
    return json::diff(pod, out);
  }
  // 2. KAI's gpu-memory (MiB) becomes a tessera.dev/gpu-memory limit on the first container,
  //    unless the pod asks some other way too (then validation explains the conflict).
  const std::string kai_memory =
      k8s::AnnotationOf(pod, names::kAnnotationKaiGpuMemory).value_or("");
  const bool kai_fraction = HasAnnotation(pod, names::kAnnotationKaiGpuFraction);
  bool any_limit = false;
  for (const json& c : *containers) any_limit = any_limit || AsksFraction(c);
  if (!kai_memory.empty() && !kai_fraction && !any_limit) {
    if (auto bytes = ParseKaiGpuMemory(kai_memory); bytes.ok() && *bytes > 0) {
      SetResource((*containers)[0], names::kResourceGpuMemory, FormatQuantity(*bytes));
      out["metadata"]["annotations"].erase(std::string(names::kAnnotationKaiGpuMemory));
    }
  }
  // 3. The device-plugin slot handle on the container of a GPU ask, fractional or whole: the
  //    slot is how the container gets its limits, region and GPU device nodes (CDI).
  bool fractional = false;
  for (std::size_t i = 0; i < containers->size(); ++i) {
    json& c = (*containers)[i];
    const bool asks_fraction = AsksFraction(c) || (i == 0 && kai_fraction && !any_limit);
    if (!asks_fraction && !AsksWhole(c)) continue;
    fractional = fractional || asks_fraction;
    const json* limits = LimitsOf(c);
    if (limits == nullptr || Find(*limits, names::kResourceGpuSlot) == nullptr) {
      SetResource(c, names::kResourceGpuSlot, "1");
    }
  }
  // 4. The PriorityClass the policy maps the tessera priority to, for GPU pods that name none.
  bool whole = false;
  for (const json& c : *containers) whole = whole || AsksWhole(c);
  const json* pc = Find(*spec, "priorityClassName");
  if ((fractional || whole) && (pc == nullptr || pc->get<std::string>().empty()) &&
      view_.priority_class_value) {
    PriorityClass priority = PriorityClass::kNormal;
    if (auto parsed =
            ParsePriorityClass(k8s::AnnotationOf(pod, names::kAnnotationPriority).value_or(""));
        parsed.ok()) {
      priority = *parsed;
    }
    const std::string& k8s_class = policy_->KubernetesPriorityClass(priority);
    if (auto value = view_.priority_class_value(k8s_class)) {
      (*spec)["priorityClassName"] = k8s_class;
      (*spec)["priority"] = *value;
    }
  }
  return json::diff(pod, out);
}

json Admission::Deny(DenialRule rule, const AdmissionRequest& r, int code,
                     const std::string& message) {
  ++denials_[static_cast<std::size_t>(rule)];
  if (options_.on_denial) {
    Denial d{rule, r.namespace_name, r.name, message, r.dry_run};
    if (r.resource == "resourceclaims" || r.resource == "resourceclaimtemplates") {
      d.api_version = "resource.k8s.io/v1";
      d.kind = r.resource == "resourceclaims" ? "ResourceClaim" : "ResourceClaimTemplate";
    }
    options_.on_denial(d);
  }
  return DenyResponse(r.uid, code, message);
}

json Admission::Mutate(const json& review) {
  ++mutate_reviews_;
  auto r = ParseAdmissionReview(review);
  if (!r.ok()) return Deny(DenialRule::kReview, {}, kBadRequest, r.status().message());
  if (r->resource != "pods" || !r->sub_resource.empty() || r->operation != "CREATE") {
    return AllowResponse(r->uid);
  }
  return AllowResponse(r->uid, MutationsFor(r->object));
}

json Admission::Validate(const json& review) {
  ++validate_reviews_;
  auto r = ParseAdmissionReview(review);
  if (!r.ok()) return Deny(DenialRule::kReview, {}, kBadRequest, r.status().message());
  if (r->resource == "pods" && r->sub_resource.empty()) {
    if (r->operation == "CREATE") return ValidatePodCreate(*r);
    if (r->operation == "UPDATE") return ValidatePodUpdate(*r);
  }
  if (r->resource == "pods" && r->sub_resource == "binding" && r->operation == "CREATE") {
    return ValidateBinding(*r);
  }
  // A claim's spec (and a template's) cannot change after creation: CREATE is where it is asked.
  if ((r->resource == "resourceclaims" || r->resource == "resourceclaimtemplates") &&
      r->sub_resource.empty() && r->operation == "CREATE") {
    return ValidateClaim(*r);
  }
  return AllowResponse(r->uid);
}

json Admission::ValidateClaim(const AdmissionRequest& r) {
  const bool is_template = r.resource == "resourceclaimtemplates";
  const std::string where = std::string(is_template ? "ResourceClaimTemplate " : "ResourceClaim ") +
                            PodName(r) + (is_template ? ": spec.spec" : ": spec");
  const json* spec = Find(r.object, "spec");
  if (spec != nullptr && is_template) spec = Find(*spec, "spec");
  if (spec == nullptr) return AllowResponse(r.uid);  // the API server requires it
  auto tier = policy_->TierOf(r.namespace_name, std::nullopt);
  if (!tier.ok()) {
    return Deny(DenialRule::kAsk, r, kBadRequest, where + ": " + tier.status().message());
  }
  const std::uint64_t largest = view_.largest_gpu_memory ? view_.largest_gpu_memory() : 0;
  const Status st = contract::CheckClaimSpec(*spec, where, *policy_, *tier, largest);
  if (st.ok()) {
    // A claim takes its GPUs from its creation (a template takes nothing until a pod's claim is
    // made from it, which comes here as a claim).
    if (quotas_ != nullptr && options_.count_claims && !is_template) {
      const Status quota =
          quotas_->AdmitClaim(r.namespace_name, r.name, UsageOfClaim(*spec), largest, !r.dry_run);
      if (!quota.ok()) {
        return Deny(DenialRule::kQuota, r, kForbidden,
                    "ResourceClaim " + PodName(r) + ": " + quota.message());
      }
    }
    return AllowResponse(r.uid);
  }
  if (st.code() == StatusCode::kOutOfRange)
    return Deny(DenialRule::kTooLarge, r, kBadRequest, st.message());
  return Deny(DenialRule::kAsk, r,
              st.code() == StatusCode::kPermissionDenied ? kForbidden : kBadRequest, st.message());
}

json Admission::ValidatePodCreate(const AdmissionRequest& r) {
  const std::string pod = "pod " + PodName(r);
  if (HasDecision(r.object) && !IsScheduler(r)) {
    return Deny(DenialRule::kForgedDecision, r, kForbidden,
                pod + ": metadata.annotations[" + std::string(names::kAnnotationDecision) +
                    "]: only the tessera scheduler writes decisions (user " + r.username +
                    " is not it); create the pod without it");
  }
  auto ask = contract::ParsePodAsk(r.object, *policy_);
  if (!ask.ok()) return Deny(DenialRule::kAsk, r, kBadRequest, ask.status().message());
  if (!ask->wants_gpu()) return AllowResponse(r.uid);
  const json* spec = Find(r.object, "spec");
  if (const json* node = spec != nullptr ? Find(*spec, "nodeName") : nullptr;
      node != nullptr && node->is_string() && !node->get<std::string>().empty() &&
      !IsScheduler(r)) {
    return Deny(DenialRule::kNodeName, r, kForbidden,
                pod +
                    ": spec.nodeName: a pod asking for tessera GPUs is placed by the "
                    "tessera scheduler; remove spec.nodeName");
  }
  const std::uint64_t largest = view_.largest_gpu_memory ? view_.largest_gpu_memory() : 0;
  const placement::Request& q = ask->request;
  if (largest != 0 && q.gpu_memory_bytes > largest) {
    return Deny(
        DenialRule::kTooLarge, r, kBadRequest,
        pod + ": container " + ask->container + ": resources.limits[" +
            std::string(names::kResourceGpuMemory) + "]: " + FormatBytesHuman(q.gpu_memory_bytes) +
            " is more than any GPU in the cluster has (largest: " + FormatBytesHuman(largest) +
            ")");
  }
  const std::string explicit_priority =
      k8s::AnnotationOf(r.object, names::kAnnotationPriority).value_or("");
  if (!explicit_priority.empty()) {
    const std::string& want = policy_->KubernetesPriorityClass(ask->priority);
    const json* pc = spec != nullptr ? Find(*spec, "priorityClassName") : nullptr;
    const std::string have = pc != nullptr && pc->is_string() ? pc->get<std::string>() : "";
    if (have != want) {
      const bool exists = view_.priority_class_value && view_.priority_class_value(want);
      return Deny(DenialRule::kPriorityClass, r, kForbidden,
                  pod + ": spec.priorityClassName: " + std::string(names::kAnnotationPriority) +
                      " " + explicit_priority + " maps to PriorityClass " + want +
                      " (policy priorityClasses." + explicit_priority + ")" +
                      (exists ? ", not " + (have.empty() ? std::string("none") : have)
                              : ", which does not exist in the cluster: create it"));
    }
  }
  if (quotas_ != nullptr) {
    const Status st = quotas_->Admit(r.namespace_name, r.name, *ask, largest, !r.dry_run);
    if (!st.ok()) return Deny(DenialRule::kQuota, r, kForbidden, pod + ": " + st.message());
  }
  return AllowResponse(r.uid);
}

json Admission::ValidatePodUpdate(const AdmissionRequest& r) {
  // The ask lives partly in annotations, which (unlike resources) Kubernetes lets anyone with
  // update rights change: they are frozen at creation, for everyone, or a pending pod could be
  // admitted small and placed big, or raise its own priority.
  for (std::string_view key :
       {names::kAnnotationPriority, names::kAnnotationMode, names::kAnnotationMpsUser,
        names::kAnnotationKaiGpuMemory, names::kAnnotationKaiGpuFraction}) {
    if (HasAnnotation(r.object, key) != HasAnnotation(r.old_object, key) ||
        k8s::AnnotationOf(r.object, key).value_or("") !=
            k8s::AnnotationOf(r.old_object, key).value_or("")) {
      return Deny(DenialRule::kFrozenAsk, r, kForbidden,
                  "pod " + PodName(r) + ": metadata.annotations[" + std::string(key) +
                      "]: part of the pod's GPU ask, fixed when the pod is created; "
                      "delete and recreate the pod to change it");
    }
  }
  if (IsScheduler(r)) return AllowResponse(r.uid);
  for (std::string_view key : {names::kAnnotationDecision, names::kAnnotationDecisionSignature}) {
    if (HasAnnotation(r.object, key) != HasAnnotation(r.old_object, key) ||
        k8s::AnnotationOf(r.object, key).value_or("") !=
            k8s::AnnotationOf(r.old_object, key).value_or("")) {
      return Deny(DenialRule::kForgedDecision, r, kForbidden,
                  "pod " + PodName(r) + ": metadata.annotations[" + std::string(key) +
                      "]: only the tessera scheduler may set, change or remove it (user " +
                      r.username + " is not it)");
    }
  }
  return AllowResponse(r.uid);
}

json Admission::ValidateBinding(const AdmissionRequest& r) {
  if (IsScheduler(r) || !HasDecision(r.object)) return AllowResponse(r.uid);
  return Deny(DenialRule::kBinding, r, kForbidden,
              "pod " + PodName(r) + ": binding metadata.annotations[" +
                  std::string(names::kAnnotationDecision) +
                  "]: only the tessera scheduler binds with a decision (user " + r.username +
                  " is not it)");
}

}  // namespace tessera::webhook
