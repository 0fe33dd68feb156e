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

// Scores are major x kMinorRange + minor; the minor key is 0..2 x kCostClamp (a cost in GPU
// milli, clamped, subtracted from kCostClamp).
constexpr std::int64_t kCostClamp = 99'999;
constexpr std::int64_t kMinorRange = 2 * kCostClamp + 1;

}  // namespace

TesseraPolicy::TesseraPolicy(const Cluster& cluster) : TesseraPolicy(cluster, Options{}) {}

TesseraPolicy::TesseraPolicy(const Cluster& cluster, Options options, const WorkloadProfile* prior)
    : cluster_(cluster),
      options_(options),
      frag_(std::make_unique<Fragmentation>(cluster, WorkloadProfile{})),
      model_(cluster.size()),
      f_epoch_(cluster.size(), ~0ULL),
      f_version_(cluster.size(), 0),
      f_(cluster.size(), 0) {
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
  // Decay by growing the weight of later observations; renormalise before it overflows.
  scale_ *= std::exp2(1.0 / options_.half_life);
  if (scale_ > 1e150) {
    for (auto& [k, e] : histogram_) e.count /= scale_;
    gpu_demand_ /= scale_;
    cpu_demand_ /= scale_;
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
  cpu_per_milli_ = gpu_demand_ > 0 ? cpu_demand_ / gpu_demand_ : 0;
  // Every observed shape of two or more GPUs, not only the popular ones: a rare shape (e.g.
  // eight GPUs with most of a node's CPU) is few pods but much GPU demand.
  multi_.clear();
  for (const auto& [key, entry] : histogram_) {
    const auto [cpu, milli, count, models] = key;
    if (count < 2 || milli <= 0 || total <= 0) continue;
    MultiItem m;
    m.cpu = cpu;
    m.milli = milli;
    m.count = count;
    if (!entry.models.empty()) {
      m.model_mask = 0;
      const auto& names = cluster_.models();
      for (const std::string& name : entry.models) {
        auto it = std::find(names.begin(), names.end(), name);
        if (it != names.end()) m.model_mask |= 1ULL << (it - names.begin());
      }
    }
    m.value = entry.count / total;  // share of arrivals; made a value below
    multi_.push_back(m);
  }
  // The value of a node that can host a shape is the chance that the shape's pods still to come
  // outnumber its hosts: D = the shape's share x the arrivals that would fill the free GPU milli
  // at the observed mean, H = the nodes that fit it now, P(Poisson(D) >= H).
  std::int64_t free_milli = 0;
  for (std::size_t i = 0; i < cluster_.size(); ++i) free_milli += cluster_.state(i).gpu_milli_free;
  const double mean_milli = total > 0 ? gpu_demand_ / total : 0;
  const double arrivals = mean_milli > 0 ? static_cast<double>(free_milli) / mean_milli : 0;
  for (MultiItem& m : multi_) {
    std::size_t hosts = 0;
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      const NodeState& st = cluster_.state(i);
      if (st.cpu_free < m.cpu) continue;
      const std::uint32_t nm = model_[i];
      if (nm != Cluster::kMixedModel && ((m.model_mask >> nm) & 1ULL) == 0) continue;
      std::uint32_t k = 0;
      for (const std::int32_t f : st.free_milli) k += f >= m.milli ? 1U : 0U;
      hosts += k >= m.count ? 1 : 0;
    }
    const double d = m.value * arrivals;
    double below = 0;  // P(X < hosts)
    if (d > 0) {
      double term = std::exp(-d);  // P(X = j), j = 0, 1, ...
      for (std::size_t j = 0; j < hosts && below < 1; ++j) {
        below += term;
        term *= d / static_cast<double>(j + 1);
        if (static_cast<double>(j) > d && term < 1e-12) break;  // the tail adds nothing
      }
    } else {
      below = 1;
    }
    m.value = std::max(0.0, 1 - below) * m.count * m.milli;
  }
  // Shapes with hosts to spare cost nothing (the minor key is whole milli): leave them out.
  std::erase_if(multi_, [](const MultiItem& m) { return m.value < 1e-3; });
  std::stable_sort(multi_.begin(), multi_.end(),
                   [](const MultiItem& a, const MultiItem& b) { return a.value > b.value; });
  ++epoch_;
}

double TesseraPolicy::Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
                           std::size_t gpus) {
  const std::uint32_t model = model_[node];
  if (gpus > 8 || model == Cluster::kMixedModel) return frag_->Of(node, cpu_free, free_milli, gpus);
  std::uint16_t sorted[8] = {};
  for (std::size_t g = 0; g < gpus; ++g) sorted[g] = static_cast<std::uint16_t>(free_milli[g]);
  for (std::size_t i = 1; i < gpus; ++i) {  // insertion sort: at most 8 values
    const std::uint16_t v = sorted[i];
    std::size_t j = i;
    for (; j > 0 && sorted[j - 1] > v; --j) sorted[j] = sorted[j - 1];
    sorted[j] = v;
  }
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
  const double f0 = Current(node);
  const std::int64_t cpu_after = s.cpu_free - q.cpu_milli;
  const std::size_t n = s.free_milli.size();
  std::int32_t scratch[kMaxGpusPerNode];
  std::copy(s.free_milli.begin(), s.free_milli.end(), scratch);

  // Imbalance: the node's free CPU beyond (or short of) what its free GPU milli would take at
  // the observed demand ratio, in GPU milli. Its growth is stranded capacity in the making.
  auto imbalance = [&](std::int64_t cpu_free, std::int64_t gpu_free) {
    return std::abs(static_cast<double>(cpu_free) / cpu_per_milli_ -
                    static_cast<double>(gpu_free));
  };
  // Whether a pod of the target needing two or more GPUs fits in a node state.
  const std::uint32_t model = model_[node];
  auto fits = [&](const MultiItem& m, std::int64_t cpu_free, const std::int32_t* free) {
    if (cpu_free < m.cpu) return false;
    if (model != Cluster::kMixedModel && ((m.model_mask >> model) & 1ULL) == 0) return false;
    std::uint32_t k = 0;
    for (std::size_t g = 0; g < n; ++g) k += free[g] >= m.milli ? 1U : 0U;
    return k >= m.count;
  };
  // The shapes the node can host now (at most 64 are looked at; the rest are rare enough).
  std::uint64_t hosts_now = 0;
  const std::size_t multi_n = std::min<std::size_t>(multi_.size(), 64);
  for (std::size_t i = 0; i < multi_n; ++i) {
    if (fits(multi_[i], s.cpu_free, s.free_milli.data())) hosts_now |= 1ULL << i;
  }
  const double imbalance_now =
      cpu_per_milli_ > 0 ? imbalance(s.cpu_free, s.gpu_milli_free) : 0;
  // The expected cost (GPU milli) of going from the current state to (cpu_after, after).
  auto cost = [&](std::int64_t gpu_taken, const std::int32_t* after) {
    double c = 0;
    if (cpu_per_milli_ > 0) c += imbalance(cpu_after, s.gpu_milli_free - gpu_taken) - imbalance_now;
    for (std::uint64_t m = hosts_now; m != 0; m &= m - 1) {
      const MultiItem& item = multi_[LowestBit(m)];
      if (!fits(item, cpu_after, after)) c += item.value;
    }
    return c;
  };
  // Major key: FGD's score of the fragmentation delta (a sigmoid in 0..100). Minor key: the
  // least cost.
  auto score = [&](double delta, double c) {
    const int major = static_cast<int>(100 * (1 / (1 + std::exp(delta / 1000))));
    const std::int64_t minor =
        kCostClamp - std::clamp<std::int64_t>(std::llround(c), -kCostClamp, kCostClamp);
    return static_cast<int>(major * kMinorRange + minor);
  };

  if (!q.is_gpu()) {
    return {score(Memo(node, cpu_after, scratch, n) - f0, cost(0, scratch)), 0};
  }
  const bool fractional = q.gpu_count == 1 && q.gpu_milli < kMilliPerGpu && q.mig_profile.empty();
  if (!fractional) {
    const GpuMask gpus = q.mig_profile.empty() ? LowestGpus(usable, q.gpu_count)
                                               : BestGpus(s, q, usable);
    std::int64_t taken = 0;
    if (q.mig_profile.empty()) {
      for (GpuMask m = gpus; m != 0; m &= m - 1) scratch[LowestBit(m)] -= q.gpu_milli;
      taken = static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli;
    }
    return {score(Memo(node, cpu_after, scratch, n) - f0, cost(taken, scratch)), gpus};
  }
  // A fractional share: the GPU with the best score; then the least free milli, memory. GPUs
  // with equal free milli score the same.
  Choice best{0, 0};
  std::size_t best_g = kMaxGpusPerNode;
  std::int32_t tried[kMaxGpusPerNode];
  int tried_score[kMaxGpusPerNode];
  std::size_t tried_n = 0;
  for (GpuMask m = usable; m != 0; m &= m - 1) {
    const std::size_t g = LowestBit(m);
    const std::int32_t free = s.free_milli[g];
    int sc = 0;
    bool found = false;
    for (std::size_t i = 0; i < tried_n && !found; ++i) {
      if (tried[i] == free) {
        sc = tried_score[i];
        found = true;
      }
    }
    if (!found) {
      scratch[g] = free - q.gpu_milli;
      sc = score(Memo(node, cpu_after, scratch, n) - f0, cost(q.gpu_milli, scratch));
      scratch[g] = free;
      tried[tried_n] = free;
      tried_score[tried_n++] = sc;
    }
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
