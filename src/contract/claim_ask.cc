#include "contract/claim_ask.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/limits.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "k8s/object.h"

namespace tessera::contract {

using k8s::Find;
using k8s::StringAt;
using nlohmann::json;

Status ApplyGpuConfig(const json& parameters, std::string_view where, bool from_class,
                      GpuConfig& config) {
  const std::string at(where);
  if (!parameters.is_object()) return InvalidArgumentError(at + ": not an object");
  if (StringAt(parameters, "apiVersion") != names::kDraConfigApiVersion ||
      StringAt(parameters, "kind") != names::kDraConfigKind) {
    return InvalidArgumentError(at + ": apiVersion/kind must be " +
                                std::string(names::kDraConfigApiVersion) + " " +
                                std::string(names::kDraConfigKind) + ", not \"" +
                                QuoteForMessage(StringAt(parameters, "apiVersion")) + "\" \"" +
                                QuoteForMessage(StringAt(parameters, "kind")) + "\"");
  }
  GpuConfig next = config;
  for (const auto& [key, value] : parameters.items()) {
    const std::string field = at + "." + key;
    if (key == "apiVersion" || key == "kind") continue;
    if (key == "priority") {
      auto p = value.is_string() ? ParsePriorityClass(value.get<std::string>())
                                 : StatusOr<PriorityClass>(InvalidArgumentError(
                                       "must be one of " + AcceptedPriorityClasses()));
      if (!p.ok()) return p.status().WithContext(field);
      if (*p == PriorityClass::kLatencyCritical && !from_class) {
        return PermissionDeniedError(
            field +
            ": latency-critical is set by a DeviceClass's config (an administrator's), "
            "not by a claim's; a claim may ask normal or best-effort");
      }
      next.priority = *p;
    } else if (key == "compute") {
      auto c = value.is_string() ? ParseComputeMode(value.get<std::string>())
                                 : StatusOr<ComputeMode>(InvalidArgumentError(
                                       "must be one of " + AcceptedComputeModes()));
      if (!c.ok()) return c.status().WithContext(field);
      next.compute = *c;
    } else if (key == "windowMs") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
          !IsComputeWindowMs(value.get<std::uint64_t>())) {
        return InvalidArgumentError(field + ": must be whole milliseconds in " +
                                    ComputeWindowRange());
      }
      next.window_ms = static_cast<std::uint32_t>(value.get<std::uint64_t>());
    } else if (key == "mpsUser") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
          value.get<std::uint64_t>() > 0xfffffffeULL) {
        return InvalidArgumentError(field + ": must be a numeric user ID (0-4294967294)");
      }
      next.mps_user = std::to_string(value.get<std::uint64_t>());
    } else {
      return InvalidArgumentError(field +
                                  ": unknown field (GpuConfig has priority, compute, windowMs, "
                                  "mpsUser)");
    }
  }
  config = std::move(next);
  return Status::Ok();
}

std::uint64_t ClaimMemoryMax(std::uint64_t gpu_memory) {
  if (gpu_memory < kClaimMemoryStepBytes) return kClaimMemoryStepBytes;
  return kClaimMemoryStepBytes +
         (gpu_memory - kClaimMemoryStepBytes) / kClaimMemoryStepBytes * kClaimMemoryStepBytes;
}

bool IsTesseraDeviceClass(std::string_view device_class) {
  return device_class == names::kDraClassShared || device_class == names::kDraClassMps;
}

SharingMode SharingModeOfClass(std::string_view device_class) {
  return device_class == names::kDraClassMps ? SharingMode::kMps : SharingMode::kShared;
}

namespace {

// tessera's classes a tier may name, for messages: "shared.gpu.tessera.dev, mps.gpu.tessera.dev".
std::string ClassesFor(const policy::TierRule& rule) {
  std::string out;
  for (const std::string_view c : {names::kDraClassShared, names::kDraClassMps}) {
    if (!rule.Allows(SharingModeOfClass(c))) continue;
    out += (out.empty() ? "" : ", ") + std::string(c);
  }
  return out.empty() ? "none of tessera's DeviceClasses (the tier needs exclusive GPUs, which "
                       "the DRA path does not offer yet: use tessera.dev/gpu)"
                     : out;
}

// One quantity of capacity.requests.
StatusOr<std::uint64_t> CapacityValue(const json& value, const std::string& field,
                                      const std::string& accepted) {
  if (!value.is_string()) return InvalidArgumentError(field + ": not a quantity; " + accepted);
  const std::string text = value.get<std::string>();
  auto q = ParseQuantity(text);
  if (!q.ok()) {
    return InvalidArgumentError(field + ": \"" + QuoteForMessage(text) +
                                "\" is not a quantity this capacity takes; " + accepted);
  }
  return *q;
}

// A request (or a firstAvailable subrequest) of one of tessera's classes.
struct TesseraRequest {
  std::string name;   // "req" or "req/sub", as allocation results and configs name it
  std::string field;  // where it is, for messages
  SharingMode mode = SharingMode::kShared;
};

// Checks one (sub)request; `out` gets it when it names one of tessera's classes.
Status CheckDeviceRequest(const json& request, const std::string& name, const std::string& field,
                          const policy::Policy& policy, TrustTier tier, std::uint64_t largest,
                          std::optional<TesseraRequest>& out) {
  const std::string device_class = StringAt(request, "deviceClassName");
  if (!IsTesseraDeviceClass(device_class)) return Status::Ok();
  const SharingMode mode = SharingModeOfClass(device_class);
  const policy::TierRule& rule = policy.Rule(tier);
  if (!rule.Allows(mode)) {
    return PermissionDeniedError(field + ".deviceClassName: " + device_class + " runs mode " +
                                 std::string(Name(mode)) + ", which tier " +
                                 std::string(Name(tier)) +
                                 " does not allow; accepted: " + ClassesFor(rule));
  }
  if (const json* admin = Find(request, "adminAccess");
      admin != nullptr && admin->is_boolean() && admin->get<bool>()) {
    return InvalidArgumentError(field + ".adminAccess: " + device_class +
                                " hands out part of a GPU, and admin access ignores capacity; "
                                "use a DeviceClass of the cluster's own for monitoring");
  }
  const json* tolerations = Find(request, "tolerations");
  for (std::size_t i = 0;
       tolerations != nullptr && tolerations->is_array() && i < tolerations->size(); ++i) {
    const json& t = (*tolerations)[i];
    const std::string key = StringAt(t, "key");
    if (key == names::kDraTaintUnhealthy || (key.empty() && StringAt(t, "operator") == "Exists")) {
      return InvalidArgumentError(field + ".tolerations[" + std::to_string(i) + "]: tolerates " +
                                  std::string(names::kDraTaintUnhealthy) +
                                  ", but the node does not prepare a claim on an unhealthy GPU; "
                                  "remove the toleration");
    }
  }
  if (StringAt(request, "allocationMode") == "All") {
    return InvalidArgumentError(field +
                                ".allocationMode: All asks a share of every GPU the class "
                                "matches, which no quota or placement can bound; accepted: "
                                "ExactCount (the default) with a count of GPUs");
  }
  if (const json* count = Find(request, "count");
      count != nullptr && (!count->is_number_integer() || count->get<std::int64_t>() < 1 ||
                           count->get<std::int64_t>() > kMaxClaimCount)) {
    return InvalidArgumentError(field + ".count: " + count->dump() + " is not a count of GPUs; " +
                                "accepted: a whole number from 1 to " +
                                std::to_string(kMaxClaimCount));
  }
  out = TesseraRequest{name, field, mode};
  const json* capacity = Find(request, "capacity");
  const json* asks = capacity != nullptr ? Find(*capacity, "requests") : nullptr;
  if (asks == nullptr || !asks->is_object()) return Status::Ok();
  const std::uint64_t most = largest != 0 ? ClaimMemoryMax(largest) : 0;
  const std::string memory_form =
      "accepted: a quantity from " + FormatQuantity(kClaimMemoryStepBytes) + " (rounded up to " +
      FormatQuantity(kClaimMemoryStepBytes) + " steps)" +
      (most != 0 ? " to " + FormatQuantity(most) + " (what the largest GPU in the cluster gives)"
                 : std::string()) +
      ", or no memory for the default " + FormatQuantity(kClaimMemoryDefaultBytes);
  const std::uint32_t least_cores = mode == SharingMode::kMps ? kMpsMinSmPercent : 1;
  const std::string cores_form =
      "accepted: a whole percent of the GPU's time from " + std::to_string(least_cores) +
      " to 100" +
      (mode == SharingMode::kMps ? " (under mps also the client's SM limit, floor " +
                                       std::to_string(kMpsMinSmPercent) + " %)"
                                 : std::string()) +
      ", or no cores for no compute share";
  for (const auto& [capacity_name, value] : asks->items()) {
    const std::string at = field + ".capacity.requests." + capacity_name;
    if (capacity_name == names::kDraCapacityMemory) {
      auto bytes = CapacityValue(value, at, memory_form);
      if (!bytes.ok()) return bytes.status();
      if (*bytes == 0) return InvalidArgumentError(at + ": 0 asks no memory; " + memory_form);
      const std::uint64_t steps = (*bytes + kClaimMemoryStepBytes - 1) / kClaimMemoryStepBytes;
      if (most != 0 && (steps > most / kClaimMemoryStepBytes)) {
        return OutOfRangeError(
            at + ": " + FormatBytesHuman(*bytes) +
            " is more than any GPU in the cluster has (largest: " + FormatBytesHuman(largest) +
            ", of which a claim gets at most " + FormatQuantity(most) + " in " +
            FormatQuantity(kClaimMemoryStepBytes) + " steps)");
      }
    } else if (capacity_name == names::kDraCapacityCores) {
      auto cores = CapacityValue(value, at, cores_form);
      if (!cores.ok()) return cores.status();
      if (*cores < least_cores || *cores > 100) {
        return InvalidArgumentError(at + ": " + std::to_string(*cores) + " is not a share; " +
                                    cores_form);
      }
    } else {
      return InvalidArgumentError(
          at + ": unknown capacity; devices of " + std::string(names::kDraDriver) + " offer " +
          std::string(names::kDraCapacityMemory) + " (bytes) and " +
          std::string(names::kDraCapacityCores) + " (percent of the GPU's time)");
    }
  }
  return Status::Ok();
}

}  // namespace

bool ConfigAppliesTo(const json& config, std::string_view request) {
  const json* names = Find(config, "requests");
  if (names == nullptr || !names->is_array() || names->empty()) return true;
  const std::string_view base = request.substr(0, request.find('/'));
  for (const json& n : *names) {
    if (!n.is_string() || n.get<std::string>().empty()) continue;
    if (n.get<std::string>() == request || n.get<std::string>() == base) return true;
  }
  return false;
}

Status CheckClaimSpec(const json& spec, std::string_view where, const policy::Policy& policy,
                      TrustTier tier, std::uint64_t largest_gpu_memory) {
  const std::string at(where);
  const json* devices = Find(spec, "devices");
  const json* requests = devices != nullptr ? Find(*devices, "requests") : nullptr;
  std::vector<TesseraRequest> ours;
  std::optional<TesseraRequest> first_mode;  // the first request whose mode is certain
  for (std::size_t i = 0; requests != nullptr && requests->is_array() && i < requests->size();
       ++i) {
    const json& r = (*requests)[i];
    const std::string name = StringAt(r, "name");
    const std::string field = at + ".devices.requests[" + std::to_string(i) + "]";
    std::vector<TesseraRequest> alternatives;
    if (const json* exactly = Find(r, "exactly")) {
      std::optional<TesseraRequest> got;
      TESSERA_RETURN_IF_ERROR(CheckDeviceRequest(*exactly, name, field + ".exactly", policy, tier,
                                                 largest_gpu_memory, got));
      if (got) alternatives.push_back(*got);
    }
    const json* first = Find(r, "firstAvailable");
    for (std::size_t j = 0; first != nullptr && first->is_array() && j < first->size(); ++j) {
      std::optional<TesseraRequest> got;
      TESSERA_RETURN_IF_ERROR(
          CheckDeviceRequest((*first)[j], name + "/" + StringAt((*first)[j], "name"),
                             field + ".firstAvailable[" + std::to_string(j) + "]", policy, tier,
                             largest_gpu_memory, got));
      if (got) alternatives.push_back(*got);
    }
    // One mode a claim: a request all of whose alternatives run one mode must run the claim's
    // (one alternative of a request is allocated; the node judges the one that was).
    const bool one_mode =
        !alternatives.empty() &&
        std::all_of(alternatives.begin(), alternatives.end(),
                    [&](const TesseraRequest& a) { return a.mode == alternatives.front().mode; });
    if (one_mode && first_mode && first_mode->mode != alternatives.front().mode) {
      return InvalidArgumentError(
          alternatives.front().field + ".deviceClassName: " +
          std::string(alternatives.front().mode == SharingMode::kMps ? names::kDraClassMps
                                                                     : names::kDraClassShared) +
          " runs mode " + std::string(Name(alternatives.front().mode)) + ", but " +
          first_mode->field + " asks mode " + std::string(Name(first_mode->mode)) +
          "; a claim's GPUs run one mode (use one class, or two claims)");
    }
    if (one_mode && !first_mode) first_mode = alternatives.front();
    ours.insert(ours.end(), alternatives.begin(), alternatives.end());
  }
  std::vector<const json*> mps_user_configs;  // the driver's configs that set mpsUser
  const json* configs = devices != nullptr ? Find(*devices, "config") : nullptr;
  for (std::size_t i = 0; configs != nullptr && configs->is_array() && i < configs->size(); ++i) {
    const json* opaque = Find((*configs)[i], "opaque");
    if (opaque == nullptr || StringAt(*opaque, "driver") != names::kDraDriver) continue;
    const json* parameters = Find(*opaque, "parameters");
    GpuConfig config;
    TESSERA_RETURN_IF_ERROR(ApplyGpuConfig(
        parameters != nullptr ? *parameters : json(),
        at + ".devices.config[" + std::to_string(i) + "].opaque.parameters", false, config));
    if (!config.mps_user.empty()) mps_user_configs.push_back(&(*configs)[i]);
  }
  for (const TesseraRequest& r : ours) {
    if (r.mode != SharingMode::kMps) continue;
    if (std::any_of(mps_user_configs.begin(), mps_user_configs.end(),
                    [&](const json* c) { return ConfigAppliesTo(*c, r.name); })) {
      continue;
    }
    return InvalidArgumentError(r.field + ".deviceClassName: " + std::string(names::kDraClassMps) +
                                ": add a config of driver " + std::string(names::kDraDriver) +
                                " for request " + r.name + " whose " +
                                std::string(names::kDraConfigKind) +
                                " sets mpsUser (the numeric user ID the GPU processes run as)");
  }
  return Status::Ok();
}

namespace {

// One (sub)request's part of ClaimUsage: nothing unless it names one of tessera's classes.
ClaimUsage RequestUsage(const json& request) {
  ClaimUsage u;
  if (!IsTesseraDeviceClass(StringAt(request, "deviceClassName"))) return u;
  std::uint64_t count = 1;
  if (const json* c = Find(request, "count");
      c != nullptr && c->is_number_integer() && c->get<std::int64_t>() > 0) {
    count =
        static_cast<std::uint64_t>(std::min<std::int64_t>(c->get<std::int64_t>(), kMaxClaimCount));
  }
  std::uint64_t memory = kClaimMemoryDefaultBytes, cores = 0;
  const json* capacity = Find(request, "capacity");
  const json* asks = capacity != nullptr ? Find(*capacity, "requests") : nullptr;
  const auto quantity = [asks](std::string_view name) -> std::optional<std::uint64_t> {
    const json* v = asks != nullptr ? Find(*asks, name) : nullptr;
    if (v == nullptr || !v->is_string()) return std::nullopt;
    auto q = ParseQuantity(v->get<std::string>());
    return q.ok() ? std::optional<std::uint64_t>(*q) : std::nullopt;
  };
  if (auto m = quantity(names::kDraCapacityMemory); m && *m > 0) {
    memory = (*m + kClaimMemoryStepBytes - 1) / kClaimMemoryStepBytes * kClaimMemoryStepBytes;
  }
  if (auto c = quantity(names::kDraCapacityCores); c && *c <= 100) cores = *c;
  u.memory_bytes = memory * count;
  u.cores_percent = cores * count;
  return u;
}

}  // namespace

ClaimUsage ClaimUsageOf(const json& spec) {
  ClaimUsage total;
  const json* devices = Find(spec, "devices");
  const json* requests = devices != nullptr ? Find(*devices, "requests") : nullptr;
  for (std::size_t i = 0; requests != nullptr && requests->is_array() && i < requests->size();
       ++i) {
    const json& r = (*requests)[i];
    ClaimUsage most;
    if (const json* exactly = Find(r, "exactly")) most = RequestUsage(*exactly);
    const json* first = Find(r, "firstAvailable");
    for (std::size_t j = 0; first != nullptr && first->is_array() && j < first->size(); ++j) {
      const ClaimUsage alt = RequestUsage((*first)[j]);
      most.memory_bytes = std::max(most.memory_bytes, alt.memory_bytes);
      most.cores_percent = std::max(most.cores_percent, alt.cores_percent);
    }
    total.memory_bytes += most.memory_bytes;
    total.cores_percent += most.cores_percent;
  }
  return total;
}

}  // namespace tessera::contract
