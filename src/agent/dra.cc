#include "agent/dra.h"

#include <algorithm>
#include <utility>

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "agent/slots.h"
#include "k8s/errors.h"
#include "k8s/object.h"
#include "k8s/paths.h"

namespace tessera::agent::dra {
namespace {

using k8s::Find;
using k8s::Json;
using k8s::StringAt;

// A claim slot's limits file names its claim as the container "claim/NAME" (ClaimLimits), which
// ReleaseOrphans reads back.
constexpr std::string_view kClaimContainerPrefix = "claim/";

// A label value (a taint's value): [A-Za-z0-9._-], at most 63, alphanumeric at both ends.
std::string LabelValue(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '-';
    if (out.size() == 63) break;
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  return out.empty() ? "unknown" : out;  // an empty value would be dropped by the API server
}

Json Capacity(std::string value, std::string default_value, Json range) {
  return {
      {"value", std::move(value)},
      {"requestPolicy", {{"default", std::move(default_value)}, {"validRange", std::move(range)}}}};
}

// spec.devices.requests[] of `name` ("req" or "req/sub"): its deviceClassName.
std::string ClassOfRequest(const Json& claim, std::string_view request) {
  const std::string_view base = request.substr(0, request.find('/'));
  const std::string_view sub =
      request.find('/') == std::string_view::npos ? "" : request.substr(request.find('/') + 1);
  const Json* spec = Find(claim, "spec");
  const Json* devices = spec != nullptr ? Find(*spec, "devices") : nullptr;
  const Json* requests = devices != nullptr ? Find(*devices, "requests") : nullptr;
  if (requests == nullptr || !requests->is_array()) return "";
  for (const Json& r : *requests) {
    if (StringAt(r, "name") != base) continue;
    if (const Json* exactly = Find(r, "exactly")) return StringAt(*exactly, "deviceClassName");
    if (const Json* first = Find(r, "firstAvailable"); first != nullptr && first->is_array()) {
      for (const Json& s : *first) {
        if (StringAt(s, "name") == sub) return StringAt(s, "deviceClassName");
      }
    }
  }
  return "";
}

// A consumed capacity as a whole number; absent: nullopt.
StatusOr<std::optional<std::uint64_t>> ConsumedOf(const Json& result, std::string_view capacity,
                                                  const std::string& where) {
  const Json* consumed = Find(result, "consumedCapacity");
  const Json* v = consumed != nullptr ? Find(*consumed, capacity) : nullptr;
  if (v == nullptr) return std::optional<std::uint64_t>();
  const std::string field = where + ".consumedCapacity." + std::string(capacity);
  if (!v->is_string()) return InvalidArgumentError(field + ": not a quantity string");
  auto q = ParseQuantity(v->get<std::string>());
  if (!q.ok()) return q.status().WithContext(field);
  return std::optional<std::uint64_t>(*q);
}

// Whether `have` holds everything `want` says (objects: want's keys; arrays: element by element):
// the API server adds defaults (a taint's timeAdded) that must not count as a change, and drops an
// empty list.
bool Covers(const Json& have, const Json& want) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& [key, value] : want.items()) {
      const auto it = have.find(key);
      if (it == have.end() ? !(value.is_array() && value.empty()) : !Covers(*it, value))
        return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!have.is_array() || have.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!Covers(have[i], want[i])) return false;
    }
    return true;
  }
  return have == want;
}

}  // namespace

std::string DeviceName(int index) { return "gpu-" + std::to_string(index); }

std::string SliceName(std::string_view node) {
  return std::string(node) + "-" + std::string(names::kDraDriver);
}

Json ResourceSliceFor(const InventoryContent& content, std::int64_t generation) {
  Json devices = Json::array();
  for (const InventoryGpu& g : content.gpus) {
    // Below the memory policy's default (1Gi) no valid request policy exists, and one invalid
    // device would make the API server refuse the whole slice.
    if (!g.managed || g.facts.memory_bytes < kMemoryDefaultBytes) continue;
    Json device = {
        {"name", DeviceName(g.facts.index)},
        {"attributes",
         {{std::string(names::kDraAttributeUuid), {{"string", g.facts.uuid}}},
          {std::string(names::kDraAttributeProduct), {{"string", g.facts.model.substr(0, 64)}}},
          {std::string(names::kDraAttributeIndex), {{"int", g.facts.index}}},
          {std::string(names::kDraAttributeNuma), {{"int", g.facts.numa_node}}}}},
        {"capacity",
         {{std::string(names::kDraCapacityMemory),
           Capacity(FormatQuantity(g.facts.memory_bytes), FormatQuantity(kMemoryDefaultBytes),
                    {{"min", FormatQuantity(kMemoryStepBytes)},
                     {"max", FormatQuantity(contract::ClaimMemoryMax(g.facts.memory_bytes))},
                     {"step", FormatQuantity(kMemoryStepBytes)}})},
          {std::string(names::kDraCapacityCores),
           Capacity("100", "0", {{"min", "0"}, {"max", "100"}, {"step", "1"}})}}},
        {"allowMultipleAllocations", true}};
    // Always present, empty when healthy: a taint that went away is then a change to publish.
    device["taints"] = Json::array();
    if (!g.healthy) {
      device["taints"].push_back({{"key", std::string(names::kDraTaintUnhealthy)},
                                  {"value", LabelValue(g.health_reason)},
                                  {"effect", "NoSchedule"}});
    }
    devices.push_back(std::move(device));
  }
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", SliceName(content.node)}}},
      {"spec",
       {{"driver", std::string(names::kDraDriver)},
        {"nodeName", content.node},
        {"pool", {{"name", content.node}, {"generation", generation}, {"resourceSliceCount", 1}}},
        {"devices", std::move(devices)}}}};
}

StatusOr<bool> SlicePublisher::Publish(const InventoryContent& content) {
  const std::string path = k8s::ResourceSlicePath(SliceName(content.node));
  auto existing = client_.Get(path);
  if (!existing.ok() && !k8s::IsNotFound(existing.status()))
    return existing.status().WithContext("reading ResourceSlice " + SliceName(content.node));
  if (!existing.ok()) {
    auto created = client_.Create(k8s::ResourceSlicesPath(), ResourceSliceFor(content, 1));
    if (!created.ok() && !k8s::IsAlreadyExists(created.status()))
      return created.status().WithContext("creating ResourceSlice " + SliceName(content.node));
    return created.ok();
  }
  const Json* spec = Find(*existing, "spec");
  const Json* pool = spec != nullptr ? Find(*spec, "pool") : nullptr;
  const std::int64_t generation = pool != nullptr ? k8s::IntAt(*pool, "generation") : 0;
  Json wanted = ResourceSliceFor(content, generation);
  if (spec != nullptr && Covers(*spec, wanted["spec"])) return false;
  wanted["spec"]["pool"]["generation"] = generation + 1;
  wanted["metadata"]["resourceVersion"] = (*existing)["metadata"].value("resourceVersion", "");
  auto updated = client_.Update(path, wanted);
  if (!updated.ok())
    return updated.status().WithContext("replacing ResourceSlice " + SliceName(content.node));
  return true;
}

StatusOr<PreparedClaim> ClaimLimits(const Json& claim, std::string_view uid,
                                    const ClaimContext& context) {
  const Json* meta = Find(claim, "metadata");
  const std::string ns = meta != nullptr ? StringAt(*meta, "namespace") : "";
  const std::string name = meta != nullptr ? StringAt(*meta, "name") : "";
  const std::string claim_uid = meta != nullptr ? StringAt(*meta, "uid") : "";
  const std::string self = "ResourceClaim " + ns + "/" + name;
  if (claim_uid != uid) {
    return FailedPreconditionError(self + ": metadata.uid is \"" + QuoteForMessage(claim_uid) +
                                   "\", kubelet asked to prepare " + std::string(uid) +
                                   " (the claim was replaced)");
  }
  const Json* status = Find(claim, "status");
  const Json* allocation = status != nullptr ? Find(*status, "allocation") : nullptr;
  const Json* alloc_devices = allocation != nullptr ? Find(*allocation, "devices") : nullptr;
  const Json* results = alloc_devices != nullptr ? Find(*alloc_devices, "results") : nullptr;
  if (results == nullptr || !results->is_array())
    return FailedPreconditionError(self + ": status.allocation.devices.results: not allocated");

  PreparedClaim out;
  std::optional<SharingMode> mode;
  std::map<std::string, std::size_t, std::less<>> by_uuid;  // -> out.limits.devices index
  std::vector<std::string> full_requests;  // "req" or "req/sub", as the results name them
  for (std::size_t i = 0; i < results->size(); ++i) {
    const Json& r = (*results)[i];
    if (StringAt(r, "driver") != names::kDraDriver) continue;
    const std::string where = "status.allocation.devices.results[" + std::to_string(i) + "]";
    if (StringAt(r, "pool") != context.node) {
      return FailedPreconditionError(self + ": " + where + ".pool is \"" +
                                     QuoteForMessage(StringAt(r, "pool")) + "\", not this node (" +
                                     context.node + ")");
    }
    ClaimDevice d;
    d.request = StringAt(r, "request");
    full_requests.push_back(d.request);
    const std::string class_name = ClassOfRequest(claim, d.request);
    d.request = d.request.substr(0, d.request.find('/'));
    d.device = StringAt(r, "device");
    d.share_id = StringAt(r, "shareID");
    const auto pool_device = context.devices.find(d.device);
    if (pool_device == context.devices.end()) {
      return NotFoundError(self + ": " + where + ".device \"" + QuoteForMessage(d.device) +
                           "\" is not a GPU tessera manages on this node");
    }
    const PoolDevice& gpu = pool_device->second;
    if (!gpu.gpu.managed)
      return FailedPreconditionError(self + ": " + where + ": " + d.device + " is not managed");
    if (!gpu.gpu.healthy) {
      return FailedPreconditionError(self + ": " + where + ": " + d.device + " is unhealthy (" +
                                     gpu.gpu.health_reason + ")");
    }
    d.uuid = gpu.uuid;
    auto memory = ConsumedOf(r, names::kDraCapacityMemory, where);
    if (!memory.ok()) return memory.status().WithContext(self);
    auto cores = ConsumedOf(r, names::kDraCapacityCores, where);
    if (!cores.ok()) return cores.status().WithContext(self);
    // No consumed capacity (a cluster without consumable capacity allocates devices whole): the
    // whole GPU.
    d.memory_bytes = memory->value_or(gpu.memory_bytes);
    const std::uint64_t cores_value = cores->value_or(memory->has_value() ? 0 : 100);
    if (d.memory_bytes == 0 || d.memory_bytes > gpu.memory_bytes) {
      return InvalidArgumentError(
          self + ": " + where + ".consumedCapacity.memory: " + FormatQuantity(d.memory_bytes) +
          " is not within 1 and the GPU's " + FormatQuantity(gpu.memory_bytes));
    }
    if (cores_value > 100) {
      return InvalidArgumentError(self + ": " + where + ".consumedCapacity.cores: " +
                                  std::to_string(cores_value) + " is not a percentage (0-100)");
    }
    d.cores_percent = static_cast<std::uint32_t>(cores_value);
    const SharingMode m = contract::SharingModeOfClass(class_name);
    if (mode.has_value() && *mode != m) {
      return InvalidArgumentError(self + ": its requests name both modes " +
                                  std::string(Name(*mode)) + " and " + std::string(Name(m)) +
                                  " (one mode a claim)");
    }
    mode = m;
    // Two requests on one GPU: one cap and one share, their sums.
    if (auto it = by_uuid.find(d.uuid); it != by_uuid.end()) {
      DeviceLimits& l = out.limits.devices[it->second];
      l.memory_bytes = std::min(l.memory_bytes + d.memory_bytes, gpu.memory_bytes);
      l.cores_percent = std::min<std::uint32_t>(l.cores_percent + d.cores_percent, 100);
    } else {
      by_uuid[d.uuid] = out.limits.devices.size();
      out.limits.devices.push_back(
          {d.uuid, d.memory_bytes, d.cores_percent, gpu.gpu.context_bytes, gpu.gpu.stream_bytes});
    }
    out.devices.push_back(std::move(d));
  }
  if (out.devices.empty()) {
    return FailedPreconditionError(self + ": status.allocation.devices.results: no device of " +
                                   std::string(names::kDraDriver));
  }
  const policy::TierRule& rule = context.policy->Rule(context.tier);
  if (!rule.Allows(*mode)) {
    return PermissionDeniedError(self + ": tier " + std::string(Name(context.tier)) +
                                 " does not allow mode " + std::string(Name(*mode)));
  }
  for (const Neighbour& n : context.neighbours) {
    if (by_uuid.count(n.uuid) == 0) continue;
    if (!n.tier_error.empty()) {
      return UnavailableError(self + ": GPU " + n.uuid + " runs " + n.claim +
                              ", whose namespace's tier is unknown: " + n.tier_error);
    }
    if (n.mode != *mode) {
      return FailedPreconditionError(
          self + ": GPU " + n.uuid + " runs " + n.claim + " in mode " + std::string(Name(n.mode)) +
          "; a GPU runs one mode, this claim asks " + std::string(Name(*mode)));
    }
    if (!context.policy->MayShareGpu({ns, context.tier}, {n.namespace_name, n.tier})) {
      return PermissionDeniedError(self + ": tier " + std::string(Name(context.tier)) +
                                   " may not share GPU " + n.uuid + " with " + n.claim +
                                   " (namespace " + n.namespace_name + ", tier " +
                                   std::string(Name(n.tier)) + ")");
    }
  }

  // The driver's opaque config for these requests, in the allocation's order (the class's
  // first, then the claim's: the later wins field by field).
  GpuConfig config;
  const Json* configs = Find(*alloc_devices, "config");
  for (std::size_t i = 0; configs != nullptr && configs->is_array() && i < configs->size(); ++i) {
    const Json& c = (*configs)[i];
    const Json* opaque = Find(c, "opaque");
    if (opaque == nullptr || StringAt(*opaque, "driver") != names::kDraDriver) continue;
    if (std::none_of(full_requests.begin(), full_requests.end(),
                     [&](const std::string& r) { return contract::ConfigAppliesTo(c, r); })) {
      continue;
    }
    const Json* parameters = Find(*opaque, "parameters");
    const std::string source = StringAt(c, "source");
    TESSERA_RETURN_IF_ERROR(
        ApplyGpuConfig(parameters != nullptr ? *parameters : Json(),
                       "status.allocation.devices.config[" + std::to_string(i) + "] (" +
                           (source.empty() ? std::string("FromClaim") : source) +
                           ").opaque.parameters",
                       source == "FromClass", config)
            .WithContext(self));
  }
  if (*mode == SharingMode::kMps && config.mps_user.empty()) {
    return InvalidArgumentError(self +
                                ": mode mps: the claim's GpuConfig must set mpsUser (the "
                                "numeric user ID its GPU processes run as)");
  }

  // The pod it was reserved for names the slot's processes (Events, drift).
  const Json* reserved = Find(*status, "reservedFor");
  for (std::size_t i = 0; reserved != nullptr && reserved->is_array() && i < reserved->size();
       ++i) {
    const Json& consumer = (*reserved)[i];
    if (StringAt(consumer, "resource") != "pods" || !StringAt(consumer, "apiGroup").empty())
      continue;
    out.limits.pod_uid = StringAt(consumer, "uid");
    out.limits.pod = ns + "/" + StringAt(consumer, "name");
    break;
  }
  if (out.limits.pod_uid.empty())
    return FailedPreconditionError(self + ": status.reservedFor: no pod");
  out.limits.container = std::string(kClaimContainerPrefix) + name;
  out.limits.fail_closed = rule.enforcement == policy::Enforcement::kFailClosed;
  out.limits.priority = config.priority;
  out.limits.mode = *mode;
  out.limits.compute = config.compute;
  out.limits.compute_window_ms = config.window_ms;
  out.mps_user = config.mps_user;
  return out;
}

ClaimPreparer::ClaimPreparer(std::string node, policy::Policy policy, ClaimApi* api,
                             SlotBinder* binder)
    : node_(std::move(node)), policy_(std::move(policy)), api_(api), binder_(binder) {}

void ClaimPreparer::SetInventory(const InventoryContent& content,
                                 const std::map<std::string, BinderGpu, std::less<>>& gpus) {
  PoolDevices devices;
  for (const InventoryGpu& g : content.gpus) {
    const auto gpu = gpus.find(g.facts.uuid);
    if (!g.managed || gpu == gpus.end()) continue;
    devices[DeviceName(g.facts.index)] = {g.facts.uuid, g.facts.memory_bytes, gpu->second};
  }
  const std::lock_guard<std::mutex> lock(mu_);
  devices_ = std::move(devices);
  inventory_seen_ = true;
}

StatusOr<ClaimPreparer::Prepared> ClaimPreparer::Prepare(std::string_view ns, std::string_view name,
                                                         std::string_view uid) {
  const std::string slot = ClaimSlot(uid);
  TESSERA_RETURN_IF_ERROR(ParseClaimSlot(slot).status());
  auto claim = api_->GetClaim(ns, name);
  if (!claim.ok())
    return claim.status().WithContext("reading ResourceClaim " + std::string(ns) + "/" +
                                      std::string(name));
  std::optional<std::string> label;
  if (policy_.honor_namespace_label) {
    auto got = api_->TrustLabel(ns);
    if (!got.ok()) return got.status().WithContext("reading namespace " + std::string(ns));
    label = std::move(*got);
  }
  auto tier = policy_.TierOf(ns, label);
  if (!tier.ok()) return tier.status().WithContext("namespace " + std::string(ns));
  ClaimContext context;
  context.node = node_;
  context.policy = &policy_;
  context.tier = *tier;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!inventory_seen_)
      return UnavailableError("this node's GPUs are not read yet (kubelet asks again)");
    context.devices = devices_;
  }
  const std::lock_guard<std::mutex> judging(judge_mu_);
  // The containers already on this node's GPUs, each with its namespace's tier (read once a
  // namespace; one that cannot be read refuses only claims on that container's GPUs).
  std::map<std::string, std::pair<TrustTier, std::string>, std::less<>> tiers = {
      {std::string(ns), {*tier, ""}}};
  for (const Limits& other : binder_->OtherSlotLimits(slot)) {
    const std::string other_ns = other.pod.substr(0, other.pod.find('/'));
    auto known = tiers.find(other_ns);
    if (known == tiers.end()) {
      std::optional<std::string> other_label;
      std::string error;
      if (policy_.honor_namespace_label) {
        auto got = api_->TrustLabel(other_ns);
        if (got.ok()) other_label = std::move(*got);
        if (!got.ok()) error = got.status().ToString();
      }
      auto other_tier = policy_.TierOf(other_ns, other_label);
      if (error.empty() && !other_tier.ok()) error = other_tier.status().ToString();
      known =
          tiers.emplace(other_ns, std::pair{other_tier.value_or(TrustTier::kTeam), error}).first;
    }
    for (const DeviceLimits& d : other.devices) {
      context.neighbours.push_back({d.uuid, "container " + other.container + " of pod " + other.pod,
                                    other_ns, known->second.first, known->second.second,
                                    other.mode});
    }
  }
  auto prepared = ClaimLimits(*claim, uid, context);
  if (!prepared.ok()) return prepared.status();
  TESSERA_RETURN_IF_ERROR(binder_->PrepareClaim(slot, prepared->limits, prepared->mps_user));
  return Prepared{std::move(prepared->devices), node_, std::string(kCdiKind) + "=" + slot};
}

Status ClaimPreparer::Unprepare(std::string_view uid) {
  const std::lock_guard<std::mutex> judging(judge_mu_);
  return binder_->ReleaseClaim(ClaimSlot(uid));
}

namespace {

// Whether the claim (read as `uid`) still needs a slot on `node`: the same object, allocated a
// device of this driver on the node's pool, and reserved for a pod.
bool ClaimStillHere(const Json& claim, std::string_view uid, std::string_view node) {
  const Json* meta = Find(claim, "metadata");
  if (meta == nullptr || StringAt(*meta, "uid") != uid) return false;
  const Json* status = Find(claim, "status");
  const Json* allocation = status != nullptr ? Find(*status, "allocation") : nullptr;
  const Json* devices = allocation != nullptr ? Find(*allocation, "devices") : nullptr;
  const Json* results = devices != nullptr ? Find(*devices, "results") : nullptr;
  const bool allocated_here =
      results != nullptr && results->is_array() &&
      std::any_of(results->begin(), results->end(), [&](const Json& r) {
        return StringAt(r, "driver") == names::kDraDriver && StringAt(r, "pool") == node;
      });
  const Json* reserved = status != nullptr ? Find(*status, "reservedFor") : nullptr;
  const bool reserved_for_pod =
      reserved != nullptr && reserved->is_array() &&
      std::any_of(reserved->begin(), reserved->end(), [](const Json& c) {
        return StringAt(c, "resource") == "pods" && StringAt(c, "apiGroup").empty();
      });
  return allocated_here && reserved_for_pod;
}

}  // namespace

StatusOr<int> ClaimPreparer::ReleaseOrphans() {
  std::set<std::string> orphans;
  for (const auto& [slot, limits] : binder_->ClaimSlots()) {
    const auto uid = ParseClaimSlot(slot);
    // The claim's namespace and name as ClaimLimits wrote them: pod "NS/POD", container
    // "claim/NAME".
    if (!uid.ok() || !limits.has_value() || !limits->container.starts_with(kClaimContainerPrefix) ||
        limits->pod.find('/') == std::string::npos) {
      continue;
    }
    const std::string ns = limits->pod.substr(0, limits->pod.find('/'));
    const std::string name = limits->container.substr(kClaimContainerPrefix.size());
    auto claim = api_->GetClaim(ns, name);
    if (!claim.ok() && !k8s::IsNotFound(claim.status())) continue;  // unknown: kept
    if (claim.ok() && ClaimStillHere(*claim, *uid, node_)) continue;
    orphans.insert(slot);
  }
  int released = 0;
  std::set<std::string> still;  // found this pass and not released: the next pass decides
  for (const std::string& slot : orphans) {
    if (orphans_before_.count(slot) != 0) {
      const std::lock_guard<std::mutex> judging(judge_mu_);
      if (binder_->ReleaseClaim(slot).ok()) {
        ++released;
        continue;
      }
    }
    still.insert(slot);
  }
  orphans_before_ = std::move(still);
  return released;
}

}  // namespace tessera::agent::dra
