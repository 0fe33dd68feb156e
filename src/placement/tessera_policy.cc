#include "placement/tessera_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace tessera::placement {
namespace {

std::size_t LowestBit(GpuMask m) { return static_cast<std::size_t>(std::countr_zero(m)); }

std::string JoinModels(const std::vector<std::string>& models) {
  std::vector<std::string> sorted = models;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (const std::string& m : sorted) {
    if (!out.empty()) out += '|';
    out += m;
  }
  return out;
}

// Scores are major x kMinorRange + minor.
constexpr std::int64_t kMinorRange = 1000;

}  // namespace

TesseraPolicy::TesseraPolicy(const Cluster& cluster) : TesseraPolicy(cluster, Options{}) {}

TesseraPolicy::TesseraPolicy(const Cluster& cluster, Options options, const WorkloadProfile* prior)
    : cluster_(cluster),
      options_(options),
      frag_(std::make_unique<Fragmentation>(cluster, WorkloadProfile{})),
      model_(cluster.size()),
      f_epoch_(cluster.size(), ~0ULL),
      f_version_(cluster.size(), 0),
      f_(cluster.size(), 0),
      cache_(cluster.size() * kWays) {
  for (std::size_t i = 0; i < cluster.size(); ++i) model_[i] = cluster.node_model(i);
  if (prior != nullptr && options_.prior_weight > 0) {
    for (const WorkloadProfile::Item& item : prior->items) {
      const bool gpu = item.gpu_count > 0 && item.gpu_milli > 0;
      Key key{item.cpu_milli, gpu ? item.gpu_milli : 0, gpu ? item.gpu_count : 0U,
              gpu ? JoinModels(item.models) : ""};
      Entry& e = histogram_[key];
      e.count += item.weight * options_.prior_weight;
      if (gpu) e.models = item.models;
    }
    Rebuild();
  }
}

void TesseraPolicy::Observe(const Request& q) {
  const bool gpu = q.is_gpu() && (q.gpu_milli > 0 || !q.mig_profile.empty());
  const std::int32_t milli = !gpu ? 0 : (q.mig_profile.empty() ? q.gpu_milli : kMilliPerGpu);
  Key key{q.cpu_milli, milli, gpu ? q.gpu_count : 0U, gpu ? JoinModels(q.models) : ""};
  auto [it, inserted] = histogram_.try_emplace(std::move(key));
  if (inserted && gpu) it->second.models = q.models;
  it->second.count += scale_;
  const double demand = static_cast<double>(q.gpu_count) * static_cast<double>(milli);
  gpu_demand_ += scale_ * demand;  // decays with the histogram
  if (q.gpu_count >= 2) multi_demand_ += scale_ * demand;
  // Decay by growing the weight of later observations; renormalise before it overflows.
  scale_ *= std::exp2(1.0 / options_.half_life);
  if (scale_ > 1e150) {
    for (auto& [k, e] : histogram_) e.count /= scale_;
    gpu_demand_ /= scale_;
    multi_demand_ /= scale_;
    scale_ = 1;
  }
  ++observed_;
  if (observed_ >= next_rebuild_) {
    Rebuild();
    next_rebuild_ = observed_ < options_.rebuild_stride ? observed_ * 2
                                                        : observed_ + options_.rebuild_stride;
  }
}

void TesseraPolicy::Rebuild() {
  std::vector<std::pair<double, const std::pair<const Key, Entry>*>> sorted;
  double total = 0;
  for (const auto& kv : histogram_) {
    sorted.emplace_back(kv.second.count, &kv);
    total += kv.second.count;
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second->first > b.second->first;
  });
  WorkloadProfile profile;
  double cum = 0;
  for (const auto& [count, kv] : sorted) {
    if (total > 0 && cum >= options_.coverage * total) break;
    cum += count;
    WorkloadProfile::Item item;
    item.cpu_milli = std::get<0>(kv->first);
    item.gpu_milli = std::get<1>(kv->first);
    item.gpu_count = std::get<2>(kv->first);
    item.models = kv->second.models;
    item.weight = count;
    profile.items.push_back(std::move(item));
  }
  for (WorkloadProfile::Item& item : profile.items) item.weight /= cum;
  frag_ = std::make_unique<Fragmentation>(cluster_, std::move(profile));
  memo_.clear();
  // Decided with the workload, so cached scores (keyed on the epoch) stay consistent.
  spread_ = options_.spread_below_multi_gpu_share > 0 && gpu_demand_ > 0 &&
            multi_demand_ < options_.spread_below_multi_gpu_share * gpu_demand_;
  ++epoch_;
}

double TesseraPolicy::Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
                           std::size_t gpus) {
  const std::uint32_t model = model_[node];
  if (gpus > 8 || model == Cluster::kMixedModel) return frag_->Of(node, cpu_free, free_milli, gpus);
  std::uint16_t sorted[8] = {};
  for (std::size_t g = 0; g < gpus; ++g) sorted[g] = static_cast<std::uint16_t>(free_milli[g]);
  std::sort(sorted, sorted + gpus);
  MemoKey key;
  key.cpu = cpu_free;
  for (std::size_t g = 0; g < 6; ++g) key.lo |= static_cast<std::uint64_t>(sorted[g]) << (10 * g);
  key.hi = static_cast<std::uint64_t>(sorted[6]) | static_cast<std::uint64_t>(sorted[7]) << 10 |
           static_cast<std::uint64_t>(gpus) << 20 | static_cast<std::uint64_t>(model) << 32;
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const double f = frag_->Of(node, cpu_free, free_milli, gpus);
  memo_.emplace(key, f);
  return f;
}

double TesseraPolicy::Current(std::size_t node) {
  const NodeState& s = cluster_.state(node);
  if (f_epoch_[node] != epoch_ || f_version_[node] != s.version) {
    f_epoch_[node] = epoch_;
    f_version_[node] = s.version;
    f_[node] = Memo(node, s.cpu_free, s.free_milli.data(), s.free_milli.size());
  }
  return f_[node];
}

Choice TesseraPolicy::Score(const Cluster& /*cluster*/, std::size_t node, const ResolvedRequest& r,
                            GpuMask usable) {
  const Request& q = *r.request;
  const std::uint32_t version = cluster_.state(node).version;
  const std::uint64_t h = static_cast<std::uint64_t>(q.cpu_milli) * 31 + q.gpu_count * 7 +
                          static_cast<std::uint64_t>(q.gpu_milli) * 13 + usable;
  CacheEntry& e = cache_[node * kWays + (h % kWays)];
  const bool mig = !q.mig_profile.empty();
  if (e.epoch == epoch_ && e.version == version && e.cpu == q.cpu_milli &&
      e.count == q.gpu_count && e.milli == q.gpu_milli && e.gpu_memory == q.gpu_memory_bytes &&
      e.model_mask == r.model_mask && e.usable == usable && e.mig == mig && !mig) {
    return e.choice;
  }
  const Choice c = Compute(node, q, usable);
  e = CacheEntry{epoch_, version, q.cpu_milli, q.gpu_count, q.gpu_milli, q.gpu_memory_bytes,
                 r.model_mask, usable, mig, c};
  return c;
}

Choice TesseraPolicy::Compute(std::size_t node, const Request& q, GpuMask usable) {
  const NodeState& s = cluster_.state(node);
  const Node& spec = cluster_.node(node);
  const double f0 = Current(node);
  const std::int64_t cpu_after = s.cpu_free - q.cpu_milli;
  const std::size_t n = s.free_milli.size();
  std::int32_t scratch[kMaxGpusPerNode];
  std::copy(s.free_milli.begin(), s.free_milli.end(), scratch);

  // What is left on the node after placement, as a share of its capacity (0: full): the mean
  // of CPU, GPU milli and, for requests with explicit GPU memory, GPU memory.
  std::int64_t gpu_cap = 0;
  std::uint64_t mem_cap = 0, mem_free = 0;
  for (std::size_t g = 0; g < n; ++g) {
    gpu_cap += kMilliPerGpu;
    mem_cap += spec.gpus[g].memory_bytes;
    mem_free += s.gpus[g].memory_free;
  }
  const bool fresh = s.gpu_milli_free == gpu_cap && s.cpu_free == spec.cpu_milli;
  const bool spread = spread_;
  auto leftover = [&](std::int64_t gpu_taken, std::uint64_t mem_taken) {
    double terms = 1;
    double left = spec.cpu_milli > 0
                      ? static_cast<double>(cpu_after) / static_cast<double>(spec.cpu_milli)
                      : 0;
    if (gpu_cap > 0) {
      left += static_cast<double>(s.gpu_milli_free - gpu_taken) / static_cast<double>(gpu_cap);
      ++terms;
      if (q.gpu_memory_bytes != 0 && mem_cap > 0) {  // explicit memory: pack on it too
        left += static_cast<double>(mem_free - std::min(mem_free, mem_taken)) /
                static_cast<double>(mem_cap);
        ++terms;
      }
    }
    return std::clamp(left / terms, 0.0, 1.0);
  };
  // Major key: FGD's score of the fragmentation delta (a sigmoid in 0..100). Minor key (0..999):
  // a node nothing runs on comes last, so whole nodes stay whole for multi-GPU pods; among used
  // nodes, the tightest fit. (Spread mode: the emptiest node first.)
  auto score = [&](double delta, double left) {
    const int major = static_cast<int>(100 * (1 / (1 + std::exp(delta / 1000))));
    std::int64_t minor = 0;
    if (spread) {
      minor = std::lround(left * (kMinorRange - 1));
    } else if (!fresh) {
      minor = 1 + std::lround((1 - left) * (kMinorRange - 2));
    }
    return static_cast<int>(major * kMinorRange + minor);
  };

  if (!q.is_gpu()) {
    return {score(Memo(node, cpu_after, scratch, n) - f0, leftover(0, 0)), 0};
  }
  const bool fractional = q.gpu_count == 1 && q.gpu_milli < kMilliPerGpu && q.mig_profile.empty();
  if (!fractional) {
    const GpuMask gpus = q.mig_profile.empty() ? LowestGpus(usable, q.gpu_count)
                                               : BestGpus(s, q, usable);
    std::uint64_t mem = 0;
    for (GpuMask m = gpus; m != 0; m &= m - 1) {
      const std::size_t g = LowestBit(m);
      if (q.mig_profile.empty()) scratch[g] -= q.gpu_milli;
      mem += q.gpu_memory_bytes;
    }
    const std::int64_t taken = q.mig_profile.empty() ? static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli : 0;
    return {score(Memo(node, cpu_after, scratch, n) - f0, leftover(taken, mem)), gpus};
  }
  // A fractional share: the GPU with the smallest delta; then the least free milli, memory.
  Choice best{0, 0};
  std::size_t best_g = kMaxGpusPerNode;
  std::int32_t tried[kMaxGpusPerNode];
  double tried_delta[kMaxGpusPerNode];
  std::size_t tried_n = 0;
  const double left = leftover(q.gpu_milli, q.gpu_memory_bytes);
  for (GpuMask m = usable; m != 0; m &= m - 1) {
    const std::size_t g = LowestBit(m);
    const std::int32_t free = s.free_milli[g];
    double delta = 0;
    bool found = false;
    for (std::size_t i = 0; i < tried_n && !found; ++i) {
      if (tried[i] == free) {
        delta = tried_delta[i];
        found = true;
      }
    }
    if (!found) {
      scratch[g] = free - q.gpu_milli;
      delta = Memo(node, cpu_after, scratch, n) - f0;
      scratch[g] = free;
      tried[tried_n] = free;
      tried_delta[tried_n++] = delta;
    }
    const int sc = score(delta, left);
    bool better = best_g == kMaxGpusPerNode || sc > best.score;
    if (!better && sc == best.score) {
      const std::int32_t bf = s.free_milli[best_g];
      better = free < bf || (free == bf && s.gpus[g].memory_free < s.gpus[best_g].memory_free);
    }
    if (better) {
      best = {sc, 1ULL << g};
      best_g = g;
    }
  }
  return best;
}

}  // namespace tessera::placement
