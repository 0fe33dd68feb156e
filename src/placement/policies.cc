#include "placement/policies.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>

#include "placement/tessera_policy.h"

namespace tessera::placement {
namespace {

bool IsFractional(const Request& r) { return r.gpu_count == 1 && r.gpu_milli < kMilliPerGpu; }

}  // namespace

GpuMask LowestGpus(GpuMask usable, std::uint32_t k) {
  GpuMask out = 0;
  for (std::uint32_t i = 0; i < k && usable != 0; ++i) {
    const GpuMask bit = usable & (~usable + 1);
    out |= bit;
    usable &= ~bit;
  }
  return out;
}

GpuMask BestGpus(const NodeState& state, const Request& request, GpuMask usable) {
  if (!request.is_gpu()) return 0;
  if (request.gpu_milli >= kMilliPerGpu || !request.mig_profile.empty()) {
    return LowestGpus(usable, request.gpu_count);
  }
  // Fractional shares: the k usable GPUs with the least free milli, lowest index on ties.
  GpuMask out = 0;
  for (std::uint32_t i = 0; i < request.gpu_count; ++i) {
    std::size_t best = kMaxGpusPerNode;
    for (GpuMask m = usable & ~out; m != 0; m &= m - 1) {
      const std::size_t g = LowestBit(m);
      if (best == kMaxGpusPerNode || state.free_milli[g] < state.free_milli[best]) best = g;
    }
    if (best == kMaxGpusPerNode) break;
    out |= 1ULL << best;
  }
  return out;
}

// ---- Random ----------------------------------------------------------------------------------

std::optional<std::size_t> RandomPolicy::PickNode(std::span<const std::uint32_t> feasible) {
  return static_cast<std::size_t>(rand_->Intn(static_cast<int>(feasible.size())));
}

Choice RandomPolicy::Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
                           GpuMask usable) {
  const Request& q = *r.request;
  if (!IsFractional(q) || !q.mig_profile.empty()) {
    return {0, BestGpus(cluster.state(node), q, usable)};
  }
  const int pick = rand_->Intn(std::popcount(usable));
  GpuMask m = usable;
  for (int i = 0; i < pick; ++i) m &= m - 1;
  return {0, m & (~m + 1)};
}

// ---- Best-fit --------------------------------------------------------------------------------

Choice BestFitPolicy::Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
                            GpuMask usable) {
  const NodeState& s = cluster.state(node);
  const Request& q = *r.request;
  const std::int64_t total = static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli;
  double x = 0;
  x += (static_cast<double>(s.cpu_free - q.cpu_milli) / kCpuScale) * 0.5;
  x += (static_cast<double>(s.gpu_milli_free - total) / kGpuScale) * 0.5;
  return {static_cast<int>((1 - x) * 100), BestGpus(s, q, usable)};
}

// ---- Dot-product -----------------------------------------------------------------------------

Choice DotProductPolicy::Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
                               GpuMask usable) {
  const NodeState& s = cluster.state(node);
  const Request& q = *r.request;
  const std::int64_t total = static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli;
  const double v = (static_cast<double>(s.cpu_free) / kCpuScale) *
                       (static_cast<double>(q.cpu_milli) / kCpuScale) +
                   (static_cast<double>(s.gpu_milli_free) / kGpuScale) *
                       (static_cast<double>(total) / kGpuScale);
  return {static_cast<int>(100 * (1 - v / 2)), BestGpus(s, q, usable)};
}

// ---- GPU-packing -----------------------------------------------------------------------------

Choice GpuPackingPolicy::Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
                               GpuMask usable) {
  const NodeState& s = cluster.state(node);
  const Request& q = *r.request;
  const GpuMask gpus = BestGpus(s, q, usable);
  if (!q.is_gpu()) return {0, 0};
  const std::size_t n = s.free_milli.size();
  bool all_free = n > 0;
  for (std::size_t g = 0; g < n && all_free; ++g) all_free = s.free_milli[g] == kMilliPerGpu;
  if (all_free) {
    const int count = static_cast<int>(n);
    return {std::max(33 - count, count), gpus};
  }
  // The first k usable GPUs in ascending order of free milli (stable by index).
  std::vector<std::size_t> order;
  order.reserve(n);
  for (GpuMask m = usable; m != 0; m &= m - 1) order.push_back(LowestBit(m));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return s.free_milli[a] < s.free_milli[b]; });
  const std::size_t k = std::min<std::size_t>(q.gpu_count, order.size());
  int fully_free = 0;
  int sum = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const std::int32_t free = s.free_milli[order[i]];
    if (free == kMilliPerGpu) ++fully_free;
    sum += free * 100 / kMilliPerGpu;
  }
  if (fully_free > 0) return {std::max(50 - fully_free, 33), gpus};
  return {std::max(100 - sum / 10, 50), gpus};
}

// ---- GPU-clustering --------------------------------------------------------------------------

Choice GpuClusteringPolicy::Score(const Cluster& cluster, std::size_t node,
                                  const ResolvedRequest& r, GpuMask usable) {
  const NodeState& s = cluster.state(node);
  const Request& q = *r.request;
  const GpuMask gpus = BestGpus(s, q, usable);
  if (!q.is_gpu()) return {0, 0};
  const std::uint32_t tag = q.gpu_milli >= kMilliPerGpu ? q.gpu_count : 0U;
  const int base = static_cast<int>(25 * (8000 - s.gpu_milli_free) / 8000);
  const auto same = s.gpu_pod_shapes.find(tag);
  if (same != s.gpu_pod_shapes.end()) {
    return {base + (s.gpu_pod_shapes.size() == 1 ? 75 : 50), gpus};
  }
  return {base + (s.gpu_pod_shapes.empty() ? 25 : 0), gpus};
}

// ---- FGD -------------------------------------------------------------------------------------

FgdPolicy::FgdPolicy(const Cluster& cluster, WorkloadProfile profile)
    : frag_(cluster, std::move(profile)),
      cluster_(cluster),
      cluster_model_(cluster.size()),
      cached_version_(cluster.size(), 0xffffffffU),
      cached_f_(cluster.size(), 0) {
  for (std::size_t i = 0; i < cluster.size(); ++i) cluster_model_[i] = cluster.node_model(i);
}

double FgdPolicy::Current(std::size_t node) {
  const NodeState& s = cluster_.state(node);
  return Memo(node, s.cpu_free, s.free_milli.data(), s.free_milli.size());
}

double FgdPolicy::Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
                       std::size_t gpus) {
  const std::uint32_t model = cluster_model_[node];
  if (gpus > 8 || model == Cluster::kMixedModel) {
    return frag_.Of(node, cpu_free, free_milli, gpus);
  }
  std::uint16_t sorted[8] = {};
  for (std::size_t g = 0; g < gpus; ++g) sorted[g] = static_cast<std::uint16_t>(free_milli[g]);
  for (std::size_t i = 1; i < gpus; ++i) {  // insertion sort: at most 8 values
    const std::uint16_t v = sorted[i];
    std::size_t j = i;
    for (; j > 0 && sorted[j - 1] > v; --j) sorted[j] = sorted[j - 1];
    sorted[j] = v;
  }
  // Free milli is at most 1000 (10 bits): six values in one word, two plus count and model in
  // the other.
  MemoKey key;
  key.cpu = cpu_free;
  for (std::size_t g = 0; g < 6; ++g)
    key.gpus_lo |= static_cast<std::uint64_t>(sorted[g]) << (10 * g);
  key.gpus_hi = static_cast<std::uint64_t>(sorted[6]) |
                static_cast<std::uint64_t>(sorted[7]) << 10 |
                static_cast<std::uint64_t>(gpus) << 20 | static_cast<std::uint64_t>(model) << 32;
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const double f = frag_.Of(node, cpu_free, free_milli, gpus);
  memo_.emplace(key, f);
  return f;
}

namespace {
int SigmoidScore(double delta) {
  return static_cast<int>(100 * (1 / (1 + std::exp(-(delta / 1000)))));
}
}  // namespace

Choice FgdPolicy::Score(const Cluster& cluster, std::size_t node, const ResolvedRequest& r,
                        GpuMask usable) {
  const NodeState& s = cluster.state(node);
  const Request& q = *r.request;
  if (cached_version_[node] != s.version) {
    cached_version_[node] = s.version;
    cached_f_[node] = Current(node);
  }
  const double f0 = cached_f_[node];
  const std::int64_t cpu_after = s.cpu_free - q.cpu_milli;
  std::int32_t scratch[kMaxGpusPerNode];
  const std::size_t n = s.free_milli.size();
  std::copy(s.free_milli.begin(), s.free_milli.end(), scratch);
  if (!q.is_gpu()) {
    return {SigmoidScore(f0 - Memo(node, cpu_after, scratch, n)), 0};
  }
  if (!IsFractional(q) || !q.mig_profile.empty()) {
    const GpuMask gpus = IsFractional(q) ? BestGpus(s, q, usable) : LowestGpus(usable, q.gpu_count);
    for (GpuMask m = gpus; m != 0; m &= m - 1) {
      const std::size_t g = LowestBit(m);
      scratch[g] = q.mig_profile.empty() ? scratch[g] - q.gpu_milli : scratch[g];
    }
    return {SigmoidScore(f0 - Memo(node, cpu_after, scratch, n)), gpus};
  }
  // Fractional: try each usable GPU; GPUs with equal free milli are equivalent.
  Choice best{-1, 0};
  ForEachUsableGpuScore(
      s, usable,
      [&](std::size_t g) {
        const std::int32_t free = s.free_milli[g];
        scratch[g] = free - q.gpu_milli;
        const int score = SigmoidScore(f0 - Memo(node, cpu_after, scratch, n));
        scratch[g] = free;
        return score;
      },
      [&](std::size_t g, int score) {
        if (score > best.score) best = {score, 1ULL << g};
      });
  return best;
}

// ---- Names and factory -----------------------------------------------------------------------

namespace {
struct PolicyRow {
  PolicyKind kind;
  std::string_view name;
  std::string_view published;
};
constexpr PolicyRow kPolicyRows[] = {
#define TESSERA_POLICY_ROW(id, name, published) {PolicyKind::id, name, published},
    TESSERA_PLACEMENT_POLICIES(TESSERA_POLICY_ROW)
#undef TESSERA_POLICY_ROW
};

std::string Simplify(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  return out;
}
}  // namespace

std::string_view Name(PolicyKind kind) { return kPolicyRows[static_cast<std::size_t>(kind)].name; }
std::string_view PublishedName(PolicyKind kind) {
  return kPolicyRows[static_cast<std::size_t>(kind)].published;
}

StatusOr<PolicyKind> ParsePolicyKind(std::string_view text) {
  const std::string want = Simplify(text);
  for (const PolicyRow& row : kPolicyRows) {
    const std::string published = Simplify(row.published);  // "06fgd"
    if (want == Simplify(row.name) || want == published || want == published.substr(2)) {
      return row.kind;
    }
  }
  return InvalidArgumentError("policy \"" + std::string(text) +
                              "\": unknown; accepted: " + AcceptedPolicyNames());
}

std::string AcceptedPolicyNames() {
  std::string out;
  for (const PolicyRow& row : kPolicyRows) {
    if (!out.empty()) out += ", ";
    out += row.name;
  }
  return out;
}

std::unique_ptr<PlacementPolicy> MakePolicy(PolicyKind kind, const Cluster& cluster,
                                            const WorkloadProfile& profile, Rand* rand) {
  switch (kind) {
    case PolicyKind::kRandom:
      return std::make_unique<RandomPolicy>(rand);
    case PolicyKind::kDotProduct:
      return std::make_unique<DotProductPolicy>();
    case PolicyKind::kGpuClustering:
      return std::make_unique<GpuClusteringPolicy>();
    case PolicyKind::kGpuPacking:
      return std::make_unique<GpuPackingPolicy>();
    case PolicyKind::kBestFit:
      return std::make_unique<BestFitPolicy>();
    case PolicyKind::kFgd:
      return std::make_unique<FgdPolicy>(cluster, profile);
    case PolicyKind::kTessera:  // online: learns the workload from arrivals, not `profile`
      return std::make_unique<TesseraPolicy>(cluster);
  }
  return nullptr;
}

}  // namespace tessera::placement
