#include "contract/inventory.h"

#include <set>
#include <string_view>

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "k8s/object.h"

namespace tessera::contract {

using k8s::Find;
using k8s::StringAt;
namespace {

using nlohmann::json;

}  // namespace

StatusOr<placement::Node> ParseNodeInventory(const json& node) {
  placement::Node out;
  const json* meta = Find(node, "metadata");
  if (meta != nullptr) out.name = StringAt(*meta, "name");
  if (out.name.empty()) return InvalidArgumentError("node: metadata.name: missing");
  const std::string where =
      "node " + out.name + ": annotation " + std::string(names::kAnnotationInventory);
  const json* annotations = meta != nullptr ? Find(*meta, "annotations") : nullptr;
  const std::string text =
      annotations != nullptr ? StringAt(*annotations, names::kAnnotationInventory) : std::string();
  if (text.empty()) return NotFoundError(where + ": missing (no tessera node agent)");
  const json inventory = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (inventory.is_discarded() || !inventory.is_object()) {
    return InvalidArgumentError(where + ": not a JSON object");
  }
  if (StringAt(inventory, "apiVersion") != kInventoryApiVersion) {
    return InvalidArgumentError(where + ": apiVersion " +
                                QuoteForMessage(StringAt(inventory, "apiVersion")) +
                                ": this scheduler reads " + std::string(kInventoryApiVersion));
  }
  if (const std::string named = StringAt(inventory, "node"); named != out.name) {
    return InvalidArgumentError(where + ": node " + QuoteForMessage(named) +
                                ": the inventory belongs to another node");
  }
  const json* gpus = Find(inventory, "gpus");
  if (gpus == nullptr || !gpus->is_array()) {
    return InvalidArgumentError(where + ": gpus: expected an array");
  }
  std::set<std::string> cordoned;
  if (annotations != nullptr) {
    const std::string list = StringAt(*annotations, names::kAnnotationGpuCordon);
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      std::string uuid = list.substr(start, comma - start);
      while (!uuid.empty() && uuid.front() == ' ') uuid.erase(uuid.begin());
      while (!uuid.empty() && uuid.back() == ' ') uuid.pop_back();
      if (!uuid.empty()) cordoned.insert(uuid);
      start = comma + 1;
    }
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < gpus->size(); ++i) {
    const json& g = (*gpus)[i];
    const std::string field = where + ": gpus[" + std::to_string(i) + "]";
    if (!g.is_object()) return InvalidArgumentError(field + ": expected an object");
    if (const json* managed = Find(g, "managed");
        managed != nullptr && managed->is_boolean() && !managed->get<bool>()) {
      continue;
    }
    placement::Gpu gpu;
    gpu.uuid = StringAt(g, "uuid");
    if (gpu.uuid.empty()) return InvalidArgumentError(field + ".uuid: missing");
    if (!seen.insert(gpu.uuid).second) {
      return InvalidArgumentError(field + ".uuid: " + QuoteForMessage(gpu.uuid) + " listed twice");
    }
    gpu.model = StringAt(g, "model");
    if (gpu.model.empty()) return InvalidArgumentError(field + ".model: missing");
    const json* memory = Find(g, "memoryBytes");
    if (memory == nullptr || !memory->is_number_unsigned() || memory->get<std::uint64_t>() == 0) {
      return InvalidArgumentError(field + ".memoryBytes: expected a positive integer");
    }
    gpu.memory_bytes = memory->get<std::uint64_t>();
    if (const json* sm = Find(g, "smCount"); sm != nullptr && sm->is_number_unsigned()) {
      gpu.sm_count = sm->get<std::uint32_t>();
    }
    if (const json* numa = Find(g, "numaNode"); numa != nullptr && numa->is_number_integer()) {
      gpu.numa_node = numa->get<int>();
    }
    const std::string health = StringAt(g, "health");
    if (health != "healthy" && health != "unhealthy") {
      return InvalidArgumentError(field + ".health: " + QuoteForMessage(health) +
                                  ": expected healthy or unhealthy");
    }
    gpu.healthy = health == "healthy";
    if (const json* mig = Find(g, "mig")) {
      gpu.mig_enabled = StringAt(*mig, "mode") == "enabled";
    }
    gpu.cordoned = cordoned.contains(gpu.uuid);
    out.gpus.push_back(std::move(gpu));
  }
  if (out.gpus.size() > placement::kMaxGpusPerNode) {
    return InvalidArgumentError(where + ": gpus: more than 64 managed GPUs");
  }
  if (const json* spec = Find(node, "spec")) {
    if (const json* u = Find(*spec, "unschedulable"); u != nullptr && u->is_boolean()) {
      out.cordoned = u->get<bool>();
    }
  }
  return out;
}

bool SameHardware(const placement::Node& a, const placement::Node& b) {
  if (a.name != b.name || a.gpus.size() != b.gpus.size()) return false;
  for (std::size_t i = 0; i < a.gpus.size(); ++i) {
    const placement::Gpu& x = a.gpus[i];
    const placement::Gpu& y = b.gpus[i];
    if (x.uuid != y.uuid || x.model != y.model || x.memory_bytes != y.memory_bytes ||
        x.mig_enabled != y.mig_enabled) {
      return false;
    }
  }
  return true;
}

}  // namespace tessera::contract
