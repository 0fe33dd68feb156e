#include "agent/inventory.h"

#include <ctime>

#include "tessera/json_writer.h"
#include "tessera/names.h"

namespace tessera::agent {
namespace {

std::string Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

StatusOr<ManagedSpec> ParseManagedSpec(std::string_view text) {
  ManagedSpec spec;
  const std::string all = Trim(text);
  if (all.empty()) return InvalidArgumentError("--gpus: empty (use \"all\", UUIDs or indices)");
  if (all == "all") {
    spec.all = true;
    return spec;
  }
  std::set<std::string> seen;
  std::size_t start = 0;
  while (start <= all.size()) {
    const std::size_t comma = std::min(all.find(',', start), all.size());
    const std::string item = Trim(std::string_view(all).substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) return InvalidArgumentError("--gpus: \"" + all + "\": empty item");
    if (item == "all")
      return InvalidArgumentError("--gpus: \"all\" cannot be combined with a list");
    if (!seen.insert(item).second) {
      return InvalidArgumentError("--gpus: \"" + item + "\" listed twice");
    }
    if (item.rfind("GPU-", 0) == 0) {
      spec.uuids.push_back(item);
      continue;
    }
    if (item.size() > 3 || item.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgumentError("--gpus: \"" + item +
                                  "\": neither a GPU UUID (GPU-...) nor an index (0, 1, ...)");
    }
    spec.indices.push_back(std::stoi(item));
  }
  return spec;
}

StatusOr<std::set<std::string>> ResolveManaged(const ManagedSpec& spec,
                                               const std::vector<GpuFacts>& gpus) {
  std::set<std::string> managed;
  if (spec.all) {
    for (const GpuFacts& gpu : gpus) managed.insert(gpu.uuid);
    return managed;
  }
  for (const std::string& uuid : spec.uuids) {
    bool found = false;
    for (const GpuFacts& gpu : gpus) found = found || gpu.uuid == uuid;
    if (!found) return InvalidArgumentError("--gpus: no GPU " + uuid + " on this node");
    managed.insert(uuid);
  }
  for (int index : spec.indices) {
    const GpuFacts* match = nullptr;
    for (const GpuFacts& gpu : gpus) {
      if (gpu.index == index) match = &gpu;
    }
    if (match == nullptr) {
      return InvalidArgumentError("--gpus: no GPU with index " + std::to_string(index) +
                                  " on this node (" + std::to_string(gpus.size()) + " GPUs)");
    }
    if (!managed.insert(match->uuid).second) {
      return InvalidArgumentError("--gpus: GPU " + std::to_string(index) +
                                  " is also named by its UUID");
    }
  }
  return managed;
}

InventoryContent BuildContent(std::string node, std::string agent_version,
                              const std::vector<GpuFacts>& gpus,
                              const std::set<std::string>& managed,
                              const std::map<std::string, std::string>& unhealthy) {
  InventoryContent content;
  content.node = std::move(node);
  content.agent_version = std::move(agent_version);
  for (const GpuFacts& facts : gpus) {
    InventoryGpu gpu;
    gpu.facts = facts;
    gpu.managed = managed.contains(facts.uuid);
    if (auto it = unhealthy.find(facts.uuid); it != unhealthy.end()) {
      gpu.healthy = false;
      gpu.health_reason = it->second;
    }
    content.gpus.push_back(std::move(gpu));
  }
  return content;
}

std::string FormatRfc3339(std::chrono::system_clock::time_point time) {
  const std::time_t t = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return out;
}

std::string ToJson(const Inventory& inventory) {
  const InventoryContent& c = inventory.content;
  std::string out;
  {
    ObjectWriter top(out);
    top.Str("apiVersion", kInventoryApiVersion);
    top.Str("node", c.node);
    top.Str("agentVersion", c.agent_version);
    top.Num("generation", inventory.generation);
    top.Str("updatedAt", FormatRfc3339(inventory.updated_at));
    top.Field("gpus") += '[';
    for (std::size_t i = 0; i < c.gpus.size(); ++i) {
      const InventoryGpu& g = c.gpus[i];
      if (i > 0) out += ',';
      ObjectWriter gpu(out);
      gpu.Str("uuid", g.facts.uuid);
      gpu.Num("index", g.facts.index);
      gpu.Str("model", g.facts.model);
      gpu.Num("memoryBytes", g.facts.memory_bytes);
      gpu.Num("smCount", g.facts.sm_count);
      gpu.Num("numaNode", g.facts.numa_node);
      gpu.Bool("managed", g.managed);
      gpu.Str("health", g.healthy ? "healthy" : "unhealthy");
      gpu.Str("healthReason", g.health_reason);
      gpu.Field("mig");
      ObjectWriter mig(out);
      mig.Str("mode", g.facts.mig_enabled ? "enabled" : "disabled");
      mig.Field("instances") += '[';
      for (std::size_t m = 0; m < g.facts.mig_instances.size(); ++m) {
        const MigInstance& instance = g.facts.mig_instances[m];
        if (m > 0) out += ',';
        ObjectWriter w(out);
        w.Str("uuid", instance.uuid);
        w.Str("profile", instance.profile);
        w.Num("memoryBytes", instance.memory_bytes);
        w.Num("smCount", instance.sm_count);
      }
      out += ']';
    }
    out += ']';
  }
  return out;
}

NodeResources SumResources(const InventoryContent& content) {
  NodeResources sums;
  for (const InventoryGpu& gpu : content.gpus) {
    if (!gpu.managed || !gpu.healthy) continue;
    sums.gpus += 1;
    sums.memory_bytes += gpu.facts.memory_bytes;
  }
  sums.cores = sums.gpus * kCoresPerGpu;
  sums.slots = sums.gpus * kSlotsPerGpu;
  return sums;
}

std::vector<std::pair<std::string, std::string>> ResourceQuantities(const NodeResources& sums) {
  return {{std::string(names::kResourceGpu), std::to_string(sums.gpus)},
          {std::string(names::kResourceGpuMemory), std::to_string(sums.memory_bytes)},
          {std::string(names::kResourceGpuCores), std::to_string(sums.cores)},
          {std::string(names::kResourceGpuSlot), std::to_string(sums.slots)}};
}

bool InventoryTracker::Update(InventoryContent content, std::chrono::system_clock::time_point now) {
  if (has_content_ && content == current_.content) return false;
  has_content_ = true;
  current_.content = std::move(content);
  current_.generation += 1;
  current_.updated_at = now;
  return true;
}

}  // namespace tessera::agent
