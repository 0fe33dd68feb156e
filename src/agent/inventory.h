// The node's GPU inventory (`tessera.dev/gpu-inventory`, schema tessera.dev/inventory/v1,
// docs/design/0002 §5) and the node-level allocatable sums (docs/design/0012), built from
// GpuFacts. Dependency-free (the JSON is written here), so the GPU host can print it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tessera/status.h"

#include "agent/nvml.h"
#include "contract/inventory_schema.h"

namespace tessera::agent {

using contract::kInventoryApiVersion;
inline constexpr std::uint64_t kCoresPerGpu = 100;  // tessera.dev/gpu-cores per GPU
inline constexpr std::uint64_t kSlotsPerGpu = 32;   // tessera.dev/gpu-slot per GPU (0002 §8)

// `--gpus`: "all", or a comma-separated list of GPU UUIDs and/or NVML indices.
struct ManagedSpec {
  bool all = false;
  std::vector<std::string> uuids;
  std::vector<int> indices;
};
// kInvalidArgument naming "--gpus" and the bad item.
StatusOr<ManagedSpec> ParseManagedSpec(std::string_view text);
// The UUIDs of the managed GPUs; an item that names no GPU is kInvalidArgument.
StatusOr<std::set<std::string>> ResolveManaged(const ManagedSpec& spec,
                                               const std::vector<GpuFacts>& gpus);

struct InventoryGpu {
  GpuFacts facts;
  bool managed = false;
  bool healthy = true;
  std::string health_reason;
  friend bool operator==(const InventoryGpu&, const InventoryGpu&) = default;
};

// Everything in the annotation except generation and updatedAt.
struct InventoryContent {
  std::string node;
  std::string agent_version;
  std::vector<InventoryGpu> gpus;
  friend bool operator==(const InventoryContent&, const InventoryContent&) = default;
};

// `unhealthy`: UUID -> reason (sticky: a GPU stays unhealthy until the agent restarts).
InventoryContent BuildContent(std::string node, std::string agent_version,
                              const std::vector<GpuFacts>& gpus,
                              const std::set<std::string>& managed,
                              const std::map<std::string, std::string>& unhealthy);

struct Inventory {
  InventoryContent content;
  std::int64_t generation = 0;
  std::chrono::system_clock::time_point updated_at;
};

// The annotation's JSON (one line, keys in the contract's order).
std::string ToJson(const Inventory& inventory);
// "2026-11-30T01:00:00Z"
std::string FormatRfc3339(std::chrono::system_clock::time_point time);

// Node-level sums over managed, healthy GPUs (docs/design/0012).
struct NodeResources {
  std::uint64_t gpus = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t cores = 0;
  std::uint64_t slots = 0;
  friend bool operator==(const NodeResources&, const NodeResources&) = default;
};
NodeResources SumResources(const InventoryContent& content);
// (resource name, quantity) for status.capacity/allocatable: tessera.dev/gpu etc.
std::vector<std::pair<std::string, std::string>> ResourceQuantities(const NodeResources& sums);

// Generation and updatedAt: both move only when the content changes.
class InventoryTracker {
 public:
  // Continue after `generation` (e.g. the one already on the Node): the next change gets +1.
  void ContinueAfter(std::int64_t generation) {
    if (generation > current_.generation) current_.generation = generation;
  }
  // Returns true when `content` differs from the last one (then generation and updatedAt move).
  bool Update(InventoryContent content, std::chrono::system_clock::time_point now);
  const Inventory& current() const { return current_; }

 private:
  Inventory current_;
  bool has_content_ = false;
};

}  // namespace tessera::agent
