// Placement policies: each a small class behind one interface (docs/design/0008).
//
// A policy sees only what an online scheduler sees: the cluster's current state, the requests
// that have arrived so far (Observe), and the workload profile it was configured with. It scores
// one feasible node at a time (integer 0..100, higher is better) and names the GPUs it would use;
// the Scheduler takes the best score and breaks ties by node rank.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/status.h"

#include "placement/cluster.h"
#include "placement/fragmentation.h"
#include "placement/random.h"

namespace tessera::placement {

struct Choice {
  int score = 0;
  GpuMask gpus = 0;
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // Each arriving request, before it is placed.
  virtual void Observe(const Request& /*request*/) {}
  // Score and GPU choice for a feasible node; `usable` is Cluster::UsableGpus for it.
  virtual Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
                       GpuMask usable) = 0;
  // A policy that picks among the feasible nodes itself (Random) returns an index into
  // `feasible`; nullopt: the best score wins.
  virtual std::optional<std::size_t> PickNode(std::span<const std::uint32_t> /*feasible*/) {
    return std::nullopt;
  }
  // Whether Score depends only on (node state, request, epoch()), where the node's state is
  // what Cluster::AppendStateKey covers (not its name or index): lets the Scheduler cache scores
  // and score nodes in equal states once (its node classes).
  virtual bool cacheable() const { return true; }
  // A policy whose scores also depend on what it has learned (TesseraPolicy's workload
  // estimate) changes this whenever that changes; cached scores of another epoch are not used.
  // Read after Observe(), so an arrival that changes the estimate is scored with the new one.
  virtual std::uint64_t epoch() const { return 0; }
  // Carries over what `previous` (the policy of an earlier model of the same cluster, e.g.
  // before a node joined) has learned, where both are of the same kind; no-op otherwise.
  virtual void ContinueFrom(const PlacementPolicy& /*previous*/) {}
  // Arrivals the policy has learned from (0 for a policy that does not learn).
  virtual std::uint64_t observed() const { return 0; }
};

// The GPU choice "best" (spec §4): a fractional share goes to the usable GPU with the least free
// milli (lowest index on ties); whole GPUs are the k lowest-index usable ones.
GpuMask BestGpus(const NodeState& state, const Request& request, GpuMask usable);
// The k lowest-index usable GPUs.
GpuMask LowestGpus(GpuMask usable, std::uint32_t k);

// The index of the lowest set bit of a non-empty mask.
inline std::size_t LowestBit(GpuMask m) { return static_cast<std::size_t>(std::countr_zero(m)); }

// For a fractional share: visit(g, score) for each usable GPU g in index order, where score(g)
// is computed once per distinct free milli (GPUs with equal free milli score the same: the
// scoring policies' shared scan).
template <typename Score, typename Visit>
void ForEachUsableGpuScore(const NodeState& state, GpuMask usable, Score&& score, Visit&& visit) {
  std::int32_t tried[kMaxGpusPerNode];
  int tried_score[kMaxGpusPerNode];
  std::size_t tried_n = 0;
  for (GpuMask m = usable; m != 0; m &= m - 1) {
    const std::size_t g = LowestBit(m);
    const std::int32_t free = state.free_milli[g];
    int sc = 0;
    bool found = false;
    for (std::size_t i = 0; i < tried_n && !found; ++i) {
      if (tried[i] == free) {
        sc = tried_score[i];
        found = true;
      }
    }
    if (!found) {
      sc = score(g);
      tried[tried_n] = free;
      tried_score[tried_n++] = sc;
    }
    visit(g, sc);
  }
}

// Normalisers of the published baselines (the simulator's largest node: 128 CPUs, 8 GPUs).
inline constexpr double kCpuScale = 128000.0;
inline constexpr double kGpuScale = 8000.0;

class RandomPolicy final : public PlacementPolicy {
 public:
  explicit RandomPolicy(Rand* rand) : rand_(rand) {}
  std::string_view name() const override { return "random"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
  std::optional<std::size_t> PickNode(std::span<const std::uint32_t> feasible) override;
  bool cacheable() const override { return false; }

 private:
  Rand* rand_;
};

class BestFitPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "best-fit"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
};

class DotProductPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "dot-product"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
};

class GpuPackingPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpu-packing"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
};

class GpuClusteringPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpu-clustering"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;
};

// Fragmentation Gradient Descent (Weng et al., ATC'23): the node and GPUs whose fragmentation
// (against the configured workload profile) grows least.
class FgdPolicy final : public PlacementPolicy {
 public:
  FgdPolicy(const Cluster& cluster, WorkloadProfile profile);
  std::string_view name() const override { return "fgd"; }
  Choice Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& request,
               GpuMask usable) override;

 private:
  double Current(std::size_t node);
  // F of a hypothetical node state, memoised on (model, CPU left, sorted free milli): nodes of
  // one shape share the work. Single-model nodes with at most 8 GPUs only.
  double Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
              std::size_t gpus);
  struct MemoKey {
    std::int64_t cpu = 0;
    std::uint64_t gpus_lo = 0;  // sorted free milli, 10 bits each; gpus_hi adds count, model
    std::uint64_t gpus_hi = 0;
    bool operator==(const MemoKey&) const = default;
  };
  struct MemoHash {
    std::size_t operator()(const MemoKey& k) const {
      std::uint64_t h = static_cast<std::uint64_t>(k.cpu) * 0x9E3779B97F4A7C15ULL;
      h ^= k.gpus_lo + 0x7F4A7C159E3779B9ULL + (h << 6) + (h >> 2);
      h ^= k.gpus_hi + 0x94D049BB133111EBULL + (h << 6) + (h >> 2);
      return static_cast<std::size_t>(h);
    }
  };
  std::unordered_map<MemoKey, double, MemoHash> memo_;
  Fragmentation frag_;
  const Cluster& cluster_;
  std::vector<std::uint32_t> cluster_model_;
  std::vector<std::uint32_t> cached_version_;
  std::vector<double> cached_f_;
};

// The policy names `tessera sim --policy` accepts, in the published order.
#define TESSERA_PLACEMENT_POLICIES(X)                     \
  X(kRandom, "random", "01-Random")                       \
  X(kDotProduct, "dot-product", "02-DotProd")             \
  X(kGpuClustering, "gpu-clustering", "03-GpuClustering") \
  X(kGpuPacking, "gpu-packing", "04-GpuPacking")          \
  X(kBestFit, "best-fit", "05-BestFit")                   \
  X(kFgd, "fgd", "06-FGD")                                \
  X(kTessera, "tessera", "07-Tessera")

enum class PolicyKind : std::uint8_t {
#define TESSERA_POLICY_KIND(id, name, published) id,
  TESSERA_PLACEMENT_POLICIES(TESSERA_POLICY_KIND)
#undef TESSERA_POLICY_KIND
};

std::string_view Name(PolicyKind kind);
std::string_view PublishedName(PolicyKind kind);  // sc_policy in the authors' CSVs
// Accepts the names above, case-insensitively, and the published ones ("06-FGD", "FGD", ...).
StatusOr<PolicyKind> ParsePolicyKind(std::string_view text);
std::string AcceptedPolicyNames();

// rand: needed by Random (may be null otherwise). profile: needed by FGD.
std::unique_ptr<PlacementPolicy> MakePolicy(PolicyKind kind, const Cluster& cluster,
                                            const WorkloadProfile& profile, Rand* rand);

}  // namespace tessera::placement
