// One placement decision: filter every node, score the feasible ones with the policy, take the
// best (ties go to the smallest node rank), and use the policy's GPU choice.
#pragma once

#include <array>
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
  // Node classes live now (cacheable policies; 0 otherwise): introspection for tests and docs.
  std::size_t classes() const { return live_; }

 private:
  // Node classes (cacheable policies). Nodes with equal Cluster::AppendStateKey are
  // interchangeable to feasibility and to the policy's score and GPU choice, so a decision
  // filters and scores each class once, on one member, and takes the class's member of the
  // lowest (rank, index): the same node as filtering and scoring every node. Classes follow
  // the cluster's change log; a class's state never changes, so what is cached for it is valid
  // until the policy's epoch changes (scores) or the class is emptied and reused.
  //
  // The cache: per class, direct-mapped by the request's shape without its host memory. Shape
  // ids count up from 0 in order of first appearance, so up to kCacheWays shapes never evict
  // each other (the bundled pod lists have 85-91 (CPU, GPUs, milli, model) shapes; with 32 ways
  // a fifth of the decisions at 12,130 nodes refiltered most classes after an eviction, ADR
  // 0010). The host memory is the one check of the filter that reads it (Cluster::Feasible ==
  // FeasibleUnlessHostMemory && memory fits), and scores and GPU choices do not depend on it
  // (nor on the node's free host memory), so requests that differ only in host memory share an
  // entry; the class's free host memory is compared at each decision.
  struct CacheEntry {
    std::uint32_t shape = 0xffffffffU;  // host memory left out
    std::uint32_t score_epoch = 0;      // the policy's epoch (low 32 bits), for score and gpus
    bool scored = false;                // score and gpus hold a value for shape
    int score = 0;
    // Bit 31: the class is feasible for `shape` (host memory aside). Bits 0..30: its usable
    // GPUs, used by a rescore (no second filter pass) when no node of the cluster has more than
    // 31 GPUs; otherwise a rescore recomputes them.
    std::uint32_t feasible_usable = 0;
    GpuMask gpus = 0;
  };
  struct NodeClass {
    std::vector<std::uint32_t> members;  // node indices, in no order
    std::string key;
  };
  // The index of classes by free capacity: per class, dense, what the filter's first checks read
  // (cordon, free CPU, GPU model, free GPU milli) and its GPUs' free milli, largest first. A
  // class whose ClassFit fails a request cannot pass Cluster::Feasible for it (each check of
  // MayFit is one the filter makes, or implied by one), so when the class's cache entry does not
  // hold the request's shape it is recorded infeasible without running the filter, which reads
  // the member's node state (cold in a scan of thousands of classes). A class's state never
  // changes, so its ClassFit is computed once, when the class is made.
  static constexpr std::size_t kFitGpus = 8;
  struct ClassFit {
    std::int64_t cpu_free = 0;
    std::int64_t gpu_milli_free = 0;  // NodeState::gpu_milli_free
    std::uint32_t model = 0;          // Cluster::node_model
    bool cordoned = false;
    // top_milli[k]: the (k+1)-th largest of NodeState::free_milli, -1 past the node's GPUs.
    std::array<std::int32_t, kFitGpus> top_milli{};
  };
  // A request as ClassFit checks it (computed once per decision).
  struct FitQuery {
    std::int64_t cpu = 0;
    bool gpu = false;
    bool model_constrained = false;
    std::uint64_t model_mask = 0;
    bool milli_checked = false;  // not MIG: the GPU milli checks apply
    std::int64_t milli_sum = 0;  // gpu_count x gpu_milli
    bool top_checked = false;    // gpu_milli > 0: top_milli applies
    std::int32_t milli = 0;
    std::size_t top = 0;  // min(gpu_count, kFitGpus) - 1 (GPU requests)
  };
  static constexpr std::uint32_t kNoClass = 0xffffffffU;
  static constexpr std::uint32_t kStale = 0xffffffffU;  // class_best_: to be recomputed
  static constexpr std::uint32_t kFeasibleBit = 1U << 31;
  static constexpr std::uint32_t kUsableBits = kFeasibleBit - 1;
  static constexpr std::size_t kKeptUsableGpus = 31;
  static constexpr std::size_t kCacheWays = 128;
  std::uint32_t ShapeId(const ResolvedRequest& request, bool with_host_memory);
  std::optional<Allocation> DecideResolved(const ResolvedRequest& request,
                                           std::span<const std::uint32_t> nodes, bool observe);
  // Brings the classes up to the cluster's change log.
  void SyncClasses();
  void Reclassify(std::uint32_t node);
  std::uint32_t BestMember(std::uint32_t c);
  static FitQuery MakeFitQuery(const ResolvedRequest& request);
  ClassFit MakeClassFit(std::uint32_t node) const;
  // False only if no node of class c can take the request (Cluster::Feasible would refuse it).
  static bool MayFit(const ClassFit& fit, const FitQuery& q);
  // The class's cache entry for the request, filled (filter, then score on one member) if it
  // does not hold this shape and epoch yet.
  // (nullptr: not feasible.)
  const CacheEntry* Probe(std::uint32_t c, const ResolvedRequest& request, const FitQuery& fit,
                          std::uint32_t shape, CacheEntry* way, std::uint32_t epoch);
  bool Better(int score, std::size_t node, int best_score, std::size_t best) const {
    return score > best_score ||
           (score == best_score &&
            (ranks_[node] < ranks_[best] || (ranks_[node] == ranks_[best] && node < best)));
  }

  Cluster* cluster_;
  PlacementPolicy* policy_;
  std::vector<std::uint32_t> ranks_;
  std::unordered_map<std::string, std::uint32_t> shapes_;
  bool usable_kept_ = true;  // no node has more GPUs than kKeptUsableGpus
  std::vector<std::uint32_t> feasible_;
  std::size_t last_feasible_ = 0;

  // Per class id (ids of emptied classes are reused first, so they stay dense): a decision over
  // every node walks ids in order, and the per-way cache and the dense arrays sequentially.
  std::vector<NodeClass> classes_;
  std::vector<std::uint32_t> class_size_;   // members; 0: a free id
  std::vector<std::uint32_t> class_best_;   // the member of the lowest (rank, index), or kStale
  std::vector<std::int64_t> class_memory_;  // the members' free host memory
  std::vector<ClassFit> class_fit_;         // the index by free capacity
  std::size_t cache_stride_ = 0;            // class ids the cache has room for
  // Per way, an entry per class id: empty until a request shape of that way is decided, then
  // cache_stride_ entries (so only the ways in use take memory).
  std::vector<std::vector<CacheEntry>> ways_ = std::vector<std::vector<CacheEntry>>(kCacheWays);
  std::size_t live_ = 0;  // classes with members
  std::vector<std::uint32_t> free_classes_;
  std::unordered_map<std::string, std::uint32_t> class_ids_;
  std::vector<std::uint32_t> class_of_;       // per node
  std::vector<std::uint32_t> member_pos_;     // per node: its index in its class's members
  std::vector<std::uint32_t> class_version_;  // per node: the version it was classified at
  std::uint64_t synced_ = 0;                  // the cluster's change log position
  std::string key_;                           // scratch
};

}  // namespace tessera::placement
