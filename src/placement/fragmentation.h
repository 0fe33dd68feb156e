// The target workload ("typical pods") and FGD's node fragmentation measure (spec §5.1-5.2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "placement/cluster.h"

namespace tessera::placement {

// What the operator expects to run: the configured workload profile an online scheduler may
// know in advance. FGD optimises for it; the simulator reports fragmentation against it.
struct WorkloadProfile {
  struct Item {
    std::int64_t cpu_milli = 0;
    std::int32_t gpu_milli = 0;  // per GPU; 0 for CPU-only
    std::uint32_t gpu_count = 0;
    std::vector<std::string> models;  // acceptable models; empty: any
    double weight = 0;                // sums to 1 over the profile
  };
  std::vector<Item> items;
};

// F(node) = sum over the profile of weight x the node's GPU milli that item could not use.
class Fragmentation {
 public:
  Fragmentation(const Cluster& cluster, WorkloadProfile profile);

  // F for a hypothetical state of `node`: CPU left and per-GPU free milli (schedulable ones).
  double Of(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
            std::size_t gpus) const;
  // The same for a node whose GPUs are all of one model, given its free milli in ascending
  // order (F does not depend on which GPU is which there): a few comparisons per distinct milli
  // of the profile instead of a pass over the GPUs per item.
  double OfSorted(std::size_t node, std::int64_t cpu_free, const std::int32_t* sorted,
                  std::size_t gpus) const;
  // F of the node's current state.
  double Of(std::size_t node) const;
  const WorkloadProfile& profile() const { return profile_; }

 private:
  const Cluster& cluster_;
  WorkloadProfile profile_;
  std::vector<std::uint64_t> model_masks_;  // per item: acceptable cluster model ids
  std::vector<bool> constrained_;
  std::vector<std::int32_t> distinct_milli_;  // of the profile's GPU items
  std::vector<std::uint32_t> milli_index_;    // per item: its milli in distinct_milli_
};

}  // namespace tessera::placement
