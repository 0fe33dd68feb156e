#include "contract/pod_ask.h"

#include <charconv>
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/limits.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/shm_layout.h"

#include "k8s/object.h"

namespace tessera::contract {

using k8s::AnnotationOf;
using k8s::Find;
using k8s::StringAt;
namespace {

using nlohmann::json;

// A quantity the API server serialised: a string ("4Gi") or, from hand-written objects, a number.
// A quantity as written: a string, or a bare number in a manifest (kubectl accepts `30`, and the
// API server turns it into "30"; signed or fractional ones are then refused by the reader).
std::optional<std::string> QuantityText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) return v.dump();
  return std::nullopt;
}

struct ContainerAsk {
  std::string name;
  std::uint64_t gpus = 0;
  std::uint64_t memory = 0;
  std::uint32_t cores = 0;
  bool any() const { return gpus != 0 || memory != 0 || cores != 0; }
};

// One container's tessera limits (requests, if given, must equal them).
StatusOr<ContainerAsk> ReadContainer(const json& container, const std::string& where) {
  ContainerAsk ask;
  ask.name = StringAt(container, "name");
  const json* resources = Find(container, "resources");
  const json* limits = resources != nullptr ? Find(*resources, "limits") : nullptr;
  const json* requests = resources != nullptr ? Find(*resources, "requests") : nullptr;
  for (std::string_view resource :
       {names::kResourceGpu, names::kResourceGpuMemory, names::kResourceGpuCores}) {
    const json* limit = limits != nullptr ? Find(*limits, resource) : nullptr;
    const json* request = requests != nullptr ? Find(*requests, resource) : nullptr;
    const std::string field = where + ": resources.limits[" + std::string(resource) + "]";
    if (limit == nullptr) {
      if (request != nullptr) {
        return InvalidArgumentError(where + ": resources.requests[" + std::string(resource) +
                                    "] without a limit: extended resources are asked in limits");
      }
      continue;
    }
    auto text = QuantityText(*limit);
    if (!text) {
      return InvalidArgumentError(field +
                                  ": expected a quantity (a string such as \"30\" or "
                                  "\"4Gi\", or a whole number)");
    }
    if (request != nullptr && QuantityText(*request) != text) {
      return InvalidArgumentError(field + ": requests must equal limits for extended resources");
    }
    if (resource == names::kResourceGpuMemory) {
      auto bytes = ParseQuantity(*text);
      if (!bytes.ok()) return bytes.status().WithContext(field);
      if (*bytes == 0) return InvalidArgumentError(field + ": must be more than 0 bytes");
      ask.memory = *bytes;
      continue;
    }
    std::uint64_t value = 0;
    const char* end = text->data() + text->size();
    auto [ptr, ec] = std::from_chars(text->data(), end, value);
    const bool whole = ec == std::errc() && ptr == end;
    if (resource == names::kResourceGpu) {
      // At most what one container's limits file and region hold (its slot names each GPU).
      if (!whole || value == 0 || value > shm::kMaxDevices) {
        return InvalidArgumentError(field + ": " + QuoteForMessage(*text) +
                                    ": expected a whole number of GPUs, 1-" +
                                    std::to_string(shm::kMaxDevices) + " per container");
      }
      ask.gpus = value;
    } else {
      if (!whole || value == 0 || value > 100) {
        return InvalidArgumentError(field + ": " + QuoteForMessage(*text) +
                                    ": expected a whole percent, 1-100");
      }
      ask.cores = static_cast<std::uint32_t>(value);
    }
  }
  if (ask.gpus != 0 && (ask.memory != 0 || ask.cores != 0)) {
    return InvalidArgumentError(where + ": " + std::string(names::kResourceGpu) +
                                " (whole GPUs) excludes gpu-memory and gpu-cores in one container");
  }
  return ask;
}

}  // namespace

PodAsk PodIdentity(const json& pod) {
  PodAsk ask;
  if (const json* meta = Find(pod, "metadata")) {
    ask.uid = StringAt(*meta, "uid");
    ask.namespace_name = StringAt(*meta, "namespace");
    ask.name = StringAt(*meta, "name");
  }
  if (const json* spec = Find(pod, "spec")) {
    ask.node_name = StringAt(*spec, "nodeName");
    if (const json* p = Find(*spec, "priority"); p != nullptr && p->is_number_integer()) {
      ask.k8s_priority = p->get<std::int32_t>();
    }
  }
  if (const json* status = Find(pod, "status")) {
    const std::string phase = StringAt(*status, "phase");
    ask.terminal = phase == "Succeeded" || phase == "Failed";
  }
  return ask;
}

namespace {

// The steps of ParsePodAsk, in the order it runs them (the first error wins).

// Which containers ask for GPUs: init containers may not, at most one container may.
Status ReadContainerAsks(const json& spec, const std::string& where,
                         std::vector<ContainerAsk>* asking, std::string* first_container) {
  if (const json* init = Find(spec, "initContainers"); init != nullptr && init->is_array()) {
    for (const json& c : *init) {
      auto a = ReadContainer(c, where + ": init container " + StringAt(c, "name"));
      if (!a.ok()) return a.status();
      if (a->any()) {
        return InvalidArgumentError(where + ": init container " + a->name +
                                    ": init containers may not ask for tessera GPUs");
      }
    }
  }
  if (const json* containers = Find(spec, "containers");
      containers != nullptr && containers->is_array()) {
    for (const json& c : *containers) {
      auto a = ReadContainer(c, where + ": container " + StringAt(c, "name"));
      if (!a.ok()) return a.status();
      if (first_container->empty()) *first_container = a->name;
      if (a->any()) asking->push_back(*std::move(a));
    }
  }
  if (asking->size() > 1) {
    return InvalidArgumentError(where + ": containers " + (*asking)[0].name + " and " +
                                (*asking)[1].name +
                                " both ask for GPUs; one container per pod may (for now)");
  }
  return Status::Ok();
}

// KAI-Scheduler's gpu-memory / gpu-fraction annotations, as the first container's ask.
Status ReadKaiAsk(const json& pod, const std::string& where, const std::string& first_container,
                  std::vector<ContainerAsk>* asking, placement::Request* q) {
  const auto kai_memory = AnnotationOf(pod, names::kAnnotationKaiGpuMemory);
  const auto kai_fraction = AnnotationOf(pod, names::kAnnotationKaiGpuFraction);
  if (!kai_memory && !kai_fraction) return Status::Ok();
  const std::string kai = kai_memory ? "annotation gpu-memory" : "annotation gpu-fraction";
  if (kai_memory && kai_fraction) {
    return InvalidArgumentError(where +
                                ": annotations gpu-memory and gpu-fraction say the same "
                                "thing twice; give one");
  }
  if (!asking->empty()) {
    return InvalidArgumentError(where + ": " + kai + " and resources.limits of container " +
                                (*asking)[0].name + " both ask for GPU memory; give one");
  }
  if (first_container.empty()) return InvalidArgumentError(where + ": " + kai + ": no container");
  ContainerAsk a;
  a.name = first_container;
  if (kai_memory) {
    auto bytes = ParseKaiGpuMemory(*kai_memory);
    if (!bytes.ok()) return bytes.status().WithContext(where + ": " + kai);
    if (*bytes == 0) return InvalidArgumentError(where + ": " + kai + ": must be more than 0");
    a.memory = *bytes;
  } else {
    auto ppm = ParseKaiGpuFraction(*kai_fraction);
    if (!ppm.ok()) return ppm.status().WithContext(where + ": " + kai);
    q->memory_ppm = *ppm;
  }
  asking->push_back(a);
  return Status::Ok();
}

// The placement request's size from the asking container.
void FillRequestSize(const ContainerAsk& a, PodAsk* ask) {
  placement::Request& q = ask->request;
  ask->container = a.name;
  q.name = ask->key();
  q.namespace_name = ask->namespace_name;
  if (a.gpus != 0) {
    q.gpu_count = static_cast<std::uint32_t>(a.gpus);
    q.gpu_milli = placement::kMilliPerGpu;
  } else {
    q.gpu_count = 1;
    q.gpu_milli = static_cast<std::int32_t>(a.cores) * 10;
    q.gpu_memory_bytes = a.memory;
    if (a.memory == 0 && q.memory_ppm == 0) q.memory_ppm = a.cores * 10'000;  // cores only
  }
}

// tessera.dev/priority, tessera.dev/compute and tessera.dev/compute-window-ms.
Status ReadComputeAnnotations(const json& pod, const std::string& where, const ContainerAsk& a,
                              PodAsk* ask) {
  if (auto p = AnnotationOf(pod, names::kAnnotationPriority)) {
    auto parsed = ParsePriorityClass(*p);
    if (!parsed.ok()) {
      return parsed.status().WithContext(where + ": annotation " +
                                         std::string(names::kAnnotationPriority));
    }
    ask->priority = *parsed;
  }
  ask->request.priority = ask->priority;
  if (auto c = AnnotationOf(pod, names::kAnnotationCompute)) {
    auto parsed = ParseComputeMode(*c);
    if (!parsed.ok()) {
      return parsed.status().WithContext(where + ": annotation " +
                                         std::string(names::kAnnotationCompute));
    }
    ask->compute = *parsed;
  }
  if (auto w = AnnotationOf(pod, names::kAnnotationComputeWindow)) {
    const auto ms = ParseComputeWindowMs(*w);
    if (!ms || ask->compute != ComputeMode::kHard || a.cores == 0) {
      return InvalidArgumentError(where + ": annotation " +
                                  std::string(names::kAnnotationComputeWindow) + ": \"" +
                                  QuoteForMessage(*w) + "\": expected whole ms, " +
                                  ComputeWindowRange() + ", on a hard tessera.dev/gpu-cores share");
    }
    ask->compute_window_ms = *ms;
  }
  return Status::Ok();
}

// The sharing mode: the pod's tessera.dev/mode if its tier allows it, else the first of the
// tier's modes that fits the ask (shared before mps for fractions).
Status ChooseMode(const json& pod, const std::string& where, const policy::TierRule& rule,
                  bool whole, placement::Request* q) {
  const std::string mode_field = where + ": annotation " + std::string(names::kAnnotationMode);
  if (auto m = AnnotationOf(pod, names::kAnnotationMode)) {
    auto parsed = ParseSharingMode(*m);
    if (!parsed.ok()) return parsed.status().WithContext(mode_field);
    q->mode = *parsed;
    if (!rule.Allows(q->mode)) {
      return InvalidArgumentError(mode_field + ": mode " + std::string(Name(q->mode)) +
                                  " is not allowed for tier " + std::string(Name(q->tier)) +
                                  " by the policy");
    }
  } else {
    bool found = false;
    for (SharingMode candidate : rule.modes) {
      if (candidate == SharingMode::kMig) continue;  // MIG asks are not placed here yet
      if ((candidate == SharingMode::kExclusive) == whole) {
        q->mode = candidate;
        found = true;
        break;
      }
    }
    if (!found) {
      return InvalidArgumentError(where + ": tier " + std::string(Name(q->tier)) + " allows no " +
                                  (whole ? "whole-GPU" : "shared-GPU") +
                                  " mode for this ask; its modes come from the policy file");
    }
  }
  if (q->mode == SharingMode::kMig) {
    return InvalidArgumentError(mode_field + ": mig: not placed by tessera-scheduler yet");
  }
  if (q->mode == SharingMode::kNative) {
    return InvalidArgumentError(mode_field + ": native is a measurement baseline, never scheduled");
  }
  if (whole != (q->mode == SharingMode::kExclusive)) {
    return InvalidArgumentError(mode_field + ": mode " + std::string(Name(q->mode)) +
                                (whole
                                     ? " cannot hold whole GPUs (tessera.dev/gpu); use exclusive"
                                     : " is for whole GPUs; a fractional ask needs shared or mps"));
  }
  return Status::Ok();
}

// Mode mps: the numeric user the GPU processes run as, hostPID, and runAsUser equal to it.
Status CheckMps(const json& pod, const json& spec, const std::string& where, PodAsk* ask) {
  auto user = AnnotationOf(pod, names::kAnnotationMpsUser);
  std::uint32_t uid = 0;
  const char* end = user ? user->data() + user->size() : nullptr;
  if (!user || std::from_chars(user->data(), end, uid).ptr != end || user->empty()) {
    return InvalidArgumentError(where + ": annotation " + std::string(names::kAnnotationMpsUser) +
                                ": mode mps needs the numeric user ID the GPU processes run as");
  }
  // Measured on the H200 (test/gpu/mps_namespaces.sh): an MPS client in its own PID namespace
  // cannot reach the node's MPS daemon (CUDA error 304); its own IPC namespace is fine.
  const json* host_pid = Find(spec, "hostPID");
  if (host_pid == nullptr || !host_pid->is_boolean() || !host_pid->get<bool>()) {
    return InvalidArgumentError(where +
                                ": mode mps needs spec.hostPID: true (MPS clients share the "
                                "node's MPS daemon's PID namespace); use mode shared otherwise");
  }
  // The user the GPU container really runs as must be the one co-tenants are placed by: a
  // client of another UID would wait at the daemon for the others to finish.
  const auto run_as_user = [](const json* holder) -> std::optional<std::int64_t> {
    const json* sc = holder != nullptr ? Find(*holder, "securityContext") : nullptr;
    const json* u = sc != nullptr ? Find(*sc, "runAsUser") : nullptr;
    if (u == nullptr || !u->is_number_integer()) return std::nullopt;
    return u->get<std::int64_t>();
  };
  std::optional<std::int64_t> run_as = run_as_user(&spec);
  if (const json* containers = Find(spec, "containers");
      containers != nullptr && containers->is_array()) {
    for (const json& c : *containers) {
      if (StringAt(c, "name") == ask->container) {
        if (auto u = run_as_user(&c)) run_as = u;
      }
    }
  }
  if (!run_as || *run_as != static_cast<std::int64_t>(uid)) {
    return InvalidArgumentError(
        where + ": mode mps needs securityContext.runAsUser (pod or container " + ask->container +
        ") equal to " + std::string(names::kAnnotationMpsUser) + " " + *user +
        (run_as ? " (it is " + std::to_string(*run_as) + ")" : " (none is set)"));
  }
  ask->request.uid = uid;
  // Under MPS the share is also the client's SM limit: below the floor it would starve the
  // client's own kernels of SMs.
  const std::int32_t milli = ask->request.gpu_milli;
  if (milli > 0 && milli < placement::kMilliPerGpu &&
      milli < static_cast<std::int32_t>(kMpsMinSmPercent) * 10) {
    return InvalidArgumentError(
        where + ": resources.limits[tessera.dev/gpu-cores]: " + std::to_string(milli / 10) +
        " under mode mps is an SM limit below the floor of " + std::to_string(kMpsMinSmPercent) +
        " %; accepted: " + std::to_string(kMpsMinSmPercent) + "-100, or mode shared");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<PodAsk> ParsePodAsk(const json& pod, const policy::Policy& policy) {
  if (!pod.is_object()) return InvalidArgumentError("pod: expected a JSON object");
  PodAsk ask = PodIdentity(pod);
  const std::string where = "pod " + ask.key();
  const json* spec = Find(pod, "spec");
  if (spec == nullptr) return InvalidArgumentError(where + ": spec: missing");

  std::vector<ContainerAsk> asking;
  std::string first_container;
  TESSERA_RETURN_IF_ERROR(ReadContainerAsks(*spec, where, &asking, &first_container));
  TESSERA_RETURN_IF_ERROR(ReadKaiAsk(pod, where, first_container, &asking, &ask.request));
  if (asking.empty()) return ask;  // asks tessera for nothing

  const ContainerAsk& a = asking.front();
  FillRequestSize(a, &ask);
  TESSERA_RETURN_IF_ERROR(ReadComputeAnnotations(pod, where, a, &ask));

  placement::Request& q = ask.request;
  auto tier = policy.TierOf(ask.namespace_name, std::nullopt);
  if (!tier.ok()) return tier.status().WithContext(where);
  q.tier = *tier;
  placement::ApplyTrustPolicy(policy, q);
  TESSERA_RETURN_IF_ERROR(ChooseMode(pod, where, policy.Rule(q.tier), a.gpus != 0, &q));
  if (q.mode == SharingMode::kMps) TESSERA_RETURN_IF_ERROR(CheckMps(pod, *spec, where, &ask));
  return ask;
}

}  // namespace tessera::contract
