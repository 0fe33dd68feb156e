// One placement decision: filter every node, score the feasible ones with the policy, take the
// best (ties go to the smallest node rank), and use the policy's GPU choice.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/status.h"

#include "placement/cluster.h"
#include "placement/policies.h"

namespace tessera::placement {

class Scheduler {
 public:
  // ranks[i]: node i's tie-break rank (a permutation); empty: node order.
  Scheduler(Cluster* cluster, PlacementPolicy* policy, std::vector<std::uint32_t> ranks = {});

  // Chooses where the request would go, or nullopt if no node can take it. Changes nothing.
  // `nodes`: only these node indices are candidates (each < cluster size); empty: every node.
  // `observe`: show the request to the policy as an arrival (false for a retry of a request
  // already shown, e.g. a pending pod kube-scheduler asks about again).
  std::optional<Allocation> Decide(const Request& request,
                                   std::span<const std::uint32_t> nodes = {}, bool observe = true);
  // Decide, then record the allocation on the cluster's ledger. kResourceExhausted if no node
  // can take the request.
  StatusOr<Allocation> Place(const Request& request);
  Status Release(const Request& request, const Allocation& allocation);

  std::size_t last_feasible() const { return last_feasible_; }

 private:
  // Per node, direct-mapped by the score shape; valid while the node's version (and, for the
  // score, the policy's epoch) is unchanged.
  // Scores and GPU choices do not depend on host memory, so they are keyed by a shape without
  // it and shared by more requests; feasibility is keyed by the whole request.
  struct CacheEntry {
    std::uint32_t version = 0;
    std::uint32_t shape = 0xffffffffU;        // the whole request, for `feasible`
    std::uint32_t score_shape = 0xffffffffU;  // host memory left out, for score and gpus
    // The score is dropped when the version changes, so it is valid iff its shape and the
    // policy's epoch (low 32 bits) match.
    std::uint32_t score_epoch = 0;
    int score = 0;
    // Bit 31: the node is feasible for `shape`. Bits 0..30: its usable GPUs, used by a rescore
    // (no second filter pass) when no node of the cluster has more than 31 GPUs; otherwise a
    // rescore recomputes them.
    std::uint32_t feasible_usable = 0;
    GpuMask gpus = 0;
  };
  static constexpr std::uint32_t kFeasibleBit = 1U << 31;
  static constexpr std::uint32_t kUsableBits = kFeasibleBit - 1;
  static constexpr std::size_t kKeptUsableGpus = 31;
  static constexpr std::size_t kCacheWays = 32;
  std::uint32_t ShapeId(const ResolvedRequest& request, bool with_host_memory);
  std::optional<Allocation> DecideResolved(const ResolvedRequest& request,
                                           std::span<const std::uint32_t> nodes, bool observe);

  Cluster* cluster_;
  PlacementPolicy* policy_;
  std::vector<std::uint32_t> ranks_;
  std::unordered_map<std::string, std::uint32_t> shapes_;
  std::vector<CacheEntry> cache_;  // way-major: way w of node i at w * nodes + i
  bool usable_kept_ = true;        // no node has more GPUs than kKeptUsableGpus
  std::vector<std::uint32_t> feasible_;
  std::size_t last_feasible_ = 0;
};

}  // namespace tessera::placement
