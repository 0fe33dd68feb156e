// Tessera's placement policy (docs/design/0010-tessera-placement-policy.md).
//
// Fragmentation gradient descent against a workload estimated online: every arrival (Observe)
// feeds a decayed histogram of (CPU, milli, GPU count, acceptable models) keys, and the target
// workload is rebuilt from it at arrivals 1, 2, 4, ... and then at a stride that grows with the
// cluster (RebuildStride: the same rebuilds per cluster fill at any node count). No knowledge
// of future arrivals is used; an optional configured profile (e.g. yesterday's pods) seeds the
// histogram as a prior.
//
// The major key is FGD's sigmoid score of the fragmentation delta plus an expected cost, in GPU
// milli: how much the placement unbalances the node's free CPU against its free GPU milli,
// measured with the observed demand ratio (CPU per GPU milli), plus the estimated demand for
// pods of two or more GPUs that the node could host before and not after. Ties of that score
// (which the published FGD breaks by a random node rank) go to the least cost. Within a node a
// fractional share goes to the GPU with the best score, then the least free milli, then the
// least free memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "placement/fragmentation.h"
#include "placement/policies.h"

namespace tessera::placement {

class TesseraPolicy final : public PlacementPolicy {
 public:
  struct Options {
    // Weight of an observation halves after this many later arrivals.
    double half_life = 4096;
    // The target workload is rebuilt at arrivals 1, 2, 4, ... up to the stride, then every
    // stride arrivals; the stride is max(rebuild_stride, rebuild_per_node x nodes), rounded.
    std::uint64_t rebuild_stride = 256;
    // Arrivals between rebuilds per node of the cluster: 256 per the paper's 1,213 nodes, so a
    // larger cluster is rebuilt as often per fill as that one (and no more often), and at 1,213
    // nodes or fewer the stride is rebuild_stride (decisions as before). 0: a fixed stride.
    double rebuild_per_node = 256.0 / 1213.0;
    // Keys covering this share of the (decayed) arrivals, most popular first, form the target.
    double coverage = 0.95;
    // A configured profile's items are a prior worth this many arrivals (0: no prior).
    double prior_weight = 0;
  };

  explicit TesseraPolicy(const Cluster& cluster);
  TesseraPolicy(const Cluster& cluster, Options options, const WorkloadProfile* prior = nullptr);

  std::string_view name() const override { return "tessera"; }
  void Observe(const Request& request) override;
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
  // Scores depend on the node, the request and the estimated workload: the Scheduler caches
  // them per node and request shape, keyed on the node version and this epoch (bumped whenever
  // the target workload changes).
  std::uint64_t epoch() const override { return epoch_; }
  // The workload estimate (histogram, demands, arrivals seen) of a previous TesseraPolicy, then
  // a rebuild against this policy's cluster: what the scheduler extender keeps when its cluster
  // model is rebuilt because nodes changed.
  void ContinueFrom(const PlacementPolicy& previous) override;

  // Introspection (tests, docs).
  std::uint64_t observed() const override { return observed_; }
  // Arrivals between rebuilds once past the doubling phase, for this policy's cluster.
  std::uint64_t RebuildStride() const;
  const WorkloadProfile& target() const { return frag_->profile(); }
  // What a node that stops hosting a pod of this multi-GPU shape is expected to cost, in GPU
  // milli, as of the last rebuild (0: not tracked, or hosts to spare); the first shape with
  // these GPUs, milli and CPU, whatever models it accepts.
  double MultiGpuValue(std::uint32_t count, std::int32_t milli, std::int64_t cpu) const;

 private:
  using Key = std::tuple<std::int64_t, std::int32_t, std::uint32_t, std::string>;
  struct Entry {
    double count = 0;
    std::vector<std::string> models;
  };
  void Rebuild();
  Choice Compute(std::size_t node, const Request& q, GpuMask usable);
  // What a score needs of the node's current state, per (epoch, node version).
  struct NodeCache {
    std::uint64_t epoch = ~0ULL;
    std::uint32_t version = 0;
    double f = 0;             // F of the current state
    double imbalance = 0;     // CPU/GPU imbalance of the current state
    std::uint64_t hosts = 0;  // bit i: the node can host multi_[i] now
  };
  const NodeCache& Current(std::size_t node);
  // The node's free CPU beyond (or short of) what its free GPU milli would take at the observed
  // demand ratio, in GPU milli.
  double Imbalance(std::int64_t cpu_free, std::int64_t gpu_free) const {
    return std::abs(static_cast<double>(cpu_free) / cpu_per_milli_ - static_cast<double>(gpu_free));
  }
  // F of a node state; `sorted`: the free milli in ascending order (the memo key).
  double Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
              const std::int32_t* sorted, std::size_t gpus);

  // The F memo (per epoch): open addressing, linear probing, a slot is live iff its generation
  // is the current one, so a rebuild clears it in O(1).
  struct MemoKey {
    std::int64_t cpu = 0;
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    bool operator==(const MemoKey&) const = default;
  };
  struct MemoSlot {
    MemoKey key;
    double f = 0;
    std::uint64_t generation = 0;
  };
  static std::size_t Hash(const MemoKey& k);
  double* MemoFind(const MemoKey& key);
  void MemoInsert(const MemoKey& key, double f);

  const Cluster& cluster_;
  Options options_;
  std::map<Key, Entry> histogram_;
  double gpu_demand_ = 0;  // decayed GPU milli observed
  double cpu_demand_ = 0;  // decayed CPU milli observed
  // Set by Rebuild (so cached scores stay consistent with the epoch): the demand ratio, and the
  // target's pods of two or more GPUs.
  double cpu_per_milli_ = 0;
  struct MultiItem {
    std::int64_t cpu = 0;
    std::int32_t milli = 0;
    std::uint32_t count = 0;
    std::uint64_t model_mask = ~0ULL;  // acceptable cluster model ids
    double value = 0;                  // weight x GPU milli of one such pod
  };
  std::vector<MultiItem> multi_;
  // Whether a pod of shape `m` fits a node state (`sorted`: its n free milli, ascending).
  static bool Fits(const MultiItem& m, std::uint32_t model, std::int64_t cpu_free,
                   const std::int32_t* sorted, std::size_t n) {
    if (cpu_free < m.cpu) return false;
    if (model != Cluster::kMixedModel && ((m.model_mask >> model) & 1ULL) == 0) return false;
    return m.count <= n && sorted[n - m.count] >= m.milli;  // the count-th largest fits
  }
  double scale_ = 1;  // weight of the next observation (grows instead of decaying the rest)
  std::uint64_t observed_ = 0;
  std::uint64_t next_rebuild_ = 1;
  std::uint64_t epoch_ = 0;
  std::unique_ptr<Fragmentation> frag_;
  std::vector<MemoSlot> memo_;
  std::size_t memo_size_ = 0;
  std::uint64_t memo_generation_ = 1;
  std::vector<std::uint32_t> model_;
  std::vector<NodeCache> current_;
  // Nodes still in the state they had when the policy was made share scores with the nodes that
  // were then in the same state (same model, CPU, free milli and memory per GPU): a score depends
  // on nothing else but the request and the usable GPUs (the key below), and the epoch.
  static constexpr std::uint32_t kNoGroup = ~0U;
  static constexpr std::size_t kGroupWays = 8;
  struct GroupScore {
    std::uint64_t epoch = ~0ULL;
    std::int64_t cpu = 0;
    std::uint32_t count = 0;
    std::int32_t milli = 0;
    GpuMask usable = 0;
    Choice choice;
  };
  std::vector<std::uint32_t> initial_version_;
  std::vector<std::uint32_t> group_;     // per node, or kNoGroup (alone, or mixed models)
  std::vector<GroupScore> group_score_;  // kGroupWays per group
};

}  // namespace tessera::placement
