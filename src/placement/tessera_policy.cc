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
constexpr std::int64_t kMinorRange = 20'000'000;

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
      gaps_(kMilliPerGpu + 1, 0),
      gap_version_(cluster.size(), 0),
      gap_free_(cluster.size()) {
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
  cpu_demand_ += scale_ * static_cast<double>(q.cpu_milli);
  if (q.gpu_count >= 2) multi_demand_ += scale_ * demand;
  // Decay by growing the weight of later observations; renormalise before it overflows.
  scale_ *= std::exp2(1.0 / options_.half_life);
  if (scale_ > 1e150) {
    for (auto& [k, e] : histogram_) e.count /= scale_;
    gpu_demand_ /= scale_;
    cpu_demand_ /= scale_;
    multi_demand_ /= scale_;
    scale_ = 1;
  }
  ++observed_;
  if (options_.sum_of_squares != 0) {
    SyncGaps();
    ++epoch_;
  }
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
  cpu_per_milli_ = gpu_demand_ > 0 ? cpu_demand_ / gpu_demand_ : 0;
  multi_.clear();
  for (const WorkloadProfile::Item& item : frag_->profile().items) {
    if (item.gpu_count < 2 || item.gpu_milli <= 0) continue;
    MultiItem m;
    m.cpu = item.cpu_milli;
    m.milli = item.gpu_milli;
    m.count = item.gpu_count;
    if (!item.models.empty()) {
      m.model_mask = 0;
      const auto& models = cluster_.models();
      for (const std::string& name : item.models) {
        auto it = std::find(models.begin(), models.end(), name);
        if (it != models.end()) m.model_mask |= 1ULL << (it - models.begin());
      }
    }
    m.value = item.weight * item.gpu_count * item.gpu_milli;
    multi_.push_back(m);
  }
  ++epoch_;
}

void TesseraPolicy::SyncGaps() {
  for (std::size_t i = 0; i < cluster_.size(); ++i) {
    const NodeState& st = cluster_.state(i);
    if (gap_version_[i] == st.version) continue;
    gap_version_[i] = st.version;
    for (const std::int32_t f : gap_free_[i]) --gaps_[static_cast<std::size_t>(f)];
    gap_free_[i] = st.free_milli;
    for (const std::int32_t f : gap_free_[i]) ++gaps_[static_cast<std::size_t>(f)];
  }
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
  return Compute(node, *r.request, usable);
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
  // Imbalance of the node's free CPU against its free GPU milli, measured with the observed
  // demand ratio (CPU per GPU milli), as a share of the node's CPU.
  auto imbalance = [&](std::int64_t cpu_free, std::int64_t gpu_free) {
    if (spec.cpu_milli <= 0) return 0.0;
    return std::abs(static_cast<double>(cpu_free) - cpu_per_milli_ * static_cast<double>(gpu_free)) /
           static_cast<double>(spec.cpu_milli);
  };
  const double imb0 = imbalance(s.cpu_free, s.gpu_milli_free);
  // Expected multi-GPU demand this placement shuts out of the node: the target's pods of two or
  // more GPUs that fit before and not after, weighted as FGD weighs them.
  const std::uint32_t nm = model_[node];
  auto multi_fits = [&](const MultiItem& m, std::int64_t cpu_free, const std::int32_t* free) {
    if (cpu_free < m.cpu) return false;
    if (nm != Cluster::kMixedModel && ((m.model_mask >> nm) & 1ULL) == 0) return false;
    std::uint32_t k = 0;
    for (std::size_t g = 0; g < n; ++g) k += free[g] >= m.milli ? 1U : 0U;
    return k >= m.count;
  };
  double multi_loss = 0;
  auto set_multi_loss = [&](const std::int32_t* after) {
    multi_loss = 0;
    for (const MultiItem& m : multi_) {
      if (multi_fits(m, s.cpu_free, s.free_milli.data()) && !multi_fits(m, cpu_after, after)) {
        multi_loss += m.value;
      }
    }
  };
  std::int64_t gpu_taken_now = 0;
  auto score = [&](double delta, double left, std::int64_t ss = 0) {
    const int major = static_cast<int>(100 * (1 / (1 + std::exp(delta / 1000))));
    std::int64_t minor = 0;
    const double imb = imbalance(cpu_after, s.gpu_milli_free - gpu_taken_now);
    if (options_.minor_mode == 1) {
      minor = fresh ? 0 : 1 + std::lround((1 - std::min(imb, 1.0)) * 998);
    } else if (options_.minor_mode == 2) {
      minor = 500 - std::lround(std::clamp(imb - imb0, -1.0, 1.0) * 499);
    } else if (options_.minor_mode == 4) {
      const double imb_cost = cpu_per_milli_ > 0 ? (imb - imb0) * static_cast<double>(spec.cpu_milli) / cpu_per_milli_ : 0;
      const double cost = imb_cost + multi_loss;
      minor = 10000 - std::lround(std::clamp(cost, -9999.0, 9999.0));
    } else if (options_.minor_mode == 3) {
      minor = fresh ? 0 : 1 + 499 - std::lround(std::clamp(imb - imb0, -1.0, 1.0) * 498);
    } else if (spread) {
      minor = std::lround(left * (999));
    } else if (!fresh) {
      minor = 1 + std::lround((1 - left) * (998));
    }
    minor = minor * 20000 + std::clamp<std::int64_t>(9999 - ss, 0, 19998);
    return static_cast<int>(major * kMinorRange + minor);
  };
  // Sum-of-squares potential change when a GPU goes from free a to free b.
  auto ss_delta = [&](std::int32_t a, std::int32_t b) -> std::int64_t {
    if (options_.sum_of_squares == 0) return 0;
    std::int64_t d = 0;
    if (a > 0 && a < kMilliPerGpu) d += -2 * gaps_[static_cast<std::size_t>(a)] + 1;
    if (b > 0 && b < kMilliPerGpu) d += 2 * gaps_[static_cast<std::size_t>(b)] + 1;
    return d;
  };

  if (!q.is_gpu()) {
    set_multi_loss(scratch);
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
    gpu_taken_now = taken;
    set_multi_loss(scratch);
    return {score(Memo(node, cpu_after, scratch, n) - f0, leftover(taken, mem)), gpus};
  }
  // A fractional share: the GPU with the smallest delta; then the least free milli, memory.
  Choice best{0, 0};
  std::size_t best_g = kMaxGpusPerNode;
  std::int32_t tried[kMaxGpusPerNode];
  double tried_delta[kMaxGpusPerNode];
  double tried_loss[kMaxGpusPerNode];
  std::size_t tried_n = 0;
  const double left = leftover(q.gpu_milli, q.gpu_memory_bytes);
  gpu_taken_now = q.gpu_milli;
  for (GpuMask m = usable; m != 0; m &= m - 1) {
    const std::size_t g = LowestBit(m);
    const std::int32_t free = s.free_milli[g];
    double delta = 0;
    bool found = false;
    for (std::size_t i = 0; i < tried_n && !found; ++i) {
      if (tried[i] == free) {
        delta = tried_delta[i];
        multi_loss = tried_loss[i];
        found = true;
      }
    }
    if (!found) {
      scratch[g] = free - q.gpu_milli;
      delta = Memo(node, cpu_after, scratch, n) - f0;
      set_multi_loss(scratch);
      scratch[g] = free;
      tried[tried_n] = free;
      tried_loss[tried_n] = multi_loss;
      tried_delta[tried_n++] = delta;
    }
    const int sc = score(delta, left, ss_delta(free, free - q.gpu_milli));
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
