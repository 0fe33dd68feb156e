#include "placement/tessera_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace tessera::placement {
namespace {

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

// `out` = the first n values of `in`, ascending (insertion sort: nodes have a few GPUs).
void SortedCopy(const std::int32_t* in, std::size_t n, std::int32_t* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t v = in[i];
    std::size_t j = i;
    for (; j > 0 && out[j - 1] > v; --j) out[j] = out[j - 1];
    out[j] = v;
  }
}

constexpr std::size_t kMemoInitialSlots = 1 << 12;  // a power of two

// FGD's score of a fragmentation delta, x = delta / 1000: a truncated sigmoid, 0..100.
int Sigmoid(double x) { return static_cast<int>(100 * (1 / (1 + std::exp(x)))); }

// Sigmoid() without exp() for most x: a grid of cells over x; a cell holds the score when
// Sigmoid is the same at both of its (slightly widened) ends and 100 / (1 + e^x) is not within
// 1e-9 of an integer there, so that no rounding of the exact expression can cross a step inside
// it (the expression is monotone up to a few ulps); other cells (the ~100 steps) evaluate it.
class SigmoidTable {
 public:
  SigmoidTable() {
    auto safe = [](double x) {
      const double v = 100 * (1 / (1 + std::exp(x)));
      const double frac = v - std::floor(v);
      return frac > 1e-9 && frac < 1 - 1e-9;
    };
    for (std::size_t c = 0; c < kCells; ++c) {
      const double x0 = kLo + static_cast<double>(c) / kScale - 1e-9;
      const double x1 = kLo + static_cast<double>(c + 1) / kScale + 1e-9;
      const int s0 = Sigmoid(x0);
      cell_[c] = static_cast<std::int8_t>(safe(x0) && safe(x1) && s0 == Sigmoid(x1) ? s0 : -1);
    }
  }
  int operator()(double x) const {
    if (!(x > kLo && x < kHi)) return Sigmoid(x);  // also NaN
    const int v = cell_[static_cast<std::size_t>((x - kLo) * kScale)];
    return v >= 0 ? v : Sigmoid(x);
  }

 private:
  static constexpr double kLo = -64;
  static constexpr double kHi = 64;
  static constexpr std::size_t kCells = 1 << 14;
  static constexpr double kScale = static_cast<double>(kCells) / (kHi - kLo);
  std::int8_t cell_[kCells];
};

const SigmoidTable& Sigmoids() {
  static const SigmoidTable table;
  return table;
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
      memo_(kMemoInitialSlots),
      model_(cluster.size()),
      current_(cluster.size()) {
  for (std::size_t i = 0; i < cluster.size(); ++i) model_[i] = cluster.node_model(i);
  // Group the nodes by state (model, CPU, per GPU: free milli and memory); singletons stay out.
  std::map<std::vector<std::int64_t>, std::vector<std::uint32_t>> by_state;
  initial_version_.resize(cluster.size());
  group_.assign(cluster.size(), kNoGroup);
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    const NodeState& st = cluster.state(i);
    initial_version_[i] = st.version;
    if (model_[i] == Cluster::kMixedModel) continue;
    std::vector<std::int64_t> key{model_[i], st.cpu_free, st.gpu_milli_free};
    for (std::size_t g = 0; g < st.free_milli.size(); ++g) {
      key.push_back(st.free_milli[g]);
      key.push_back(static_cast<std::int64_t>(st.gpus[g].memory_free));
    }
    by_state[std::move(key)].push_back(static_cast<std::uint32_t>(i));
  }
  std::uint32_t groups = 0;
  for (const auto& [key, members] : by_state) {
    if (members.size() < 2) continue;
    for (const std::uint32_t i : members) group_[i] = groups;
    ++groups;
  }
  group_score_.resize(std::size_t{groups} * kGroupWays);
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
    const std::uint64_t stride = RebuildStride();
    next_rebuild_ = observed_ < stride ? observed_ * 2 : observed_ + stride;
  }
}

std::uint64_t TesseraPolicy::RebuildStride() const {
  const double per_node = options_.rebuild_per_node * static_cast<double>(cluster_.size());
  const auto scaled = per_node > 0 ? static_cast<std::uint64_t>(std::llround(per_node)) : 0;
  return std::max<std::uint64_t>(std::max<std::uint64_t>(options_.rebuild_stride, scaled), 1);
}

void TesseraPolicy::ContinueFrom(const PlacementPolicy& previous) {
  const auto* p = dynamic_cast<const TesseraPolicy*>(&previous);
  if (p == nullptr || p == this || p->observed_ == 0) return;
  histogram_ = p->histogram_;
  gpu_demand_ = p->gpu_demand_;
  cpu_demand_ = p->cpu_demand_;
  scale_ = p->scale_;
  observed_ = p->observed_;
  next_rebuild_ = p->next_rebuild_;
  Rebuild();
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
  ++memo_generation_;  // every memoised F was for the old profile
  memo_size_ = 0;
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
  // Hosts per shape: each node's free milli sorted once, then one comparison per shape.
  std::vector<std::size_t> hosts(multi_.size(), 0);
  std::int32_t free_sorted[kMaxGpusPerNode];
  for (std::size_t i = 0; i < cluster_.size(); ++i) {
    const NodeState& st = cluster_.state(i);
    SortedCopy(st.free_milli.data(), st.free_milli.size(), free_sorted);
    for (std::size_t k = 0; k < multi_.size(); ++k) {
      if (Fits(multi_[k], model_[i], st.cpu_free, free_sorted, st.free_milli.size())) ++hosts[k];
    }
  }
  // Shapes compete for nested host sets: a node that can host a shape that asks at least as
  // much of everything (GPUs, milli, CPU, within the same models) can host this one, so that
  // shape's pods use up this one's hosts too.
  std::vector<double> share(multi_.size());
  for (std::size_t k = 0; k < multi_.size(); ++k) {
    const MultiItem& m = multi_[k];
    for (const MultiItem& j : multi_) {
      // (A shape whose models this cluster lacks, mask 0, competes for nobody's hosts.)
      const bool dominates = j.count >= m.count && j.milli >= m.milli && j.cpu >= m.cpu &&
                             (j.model_mask == m.model_mask ||
                              (j.model_mask != 0 && (j.model_mask & ~m.model_mask) == 0));
      if (dominates) share[k] += j.value;
    }
  }
  for (std::size_t k = 0; k < multi_.size(); ++k) {
    MultiItem& m = multi_[k];
    const double d = share[k] * arrivals;
    double below = 0;  // P(X < hosts)
    if (d > 0) {
      double term = std::exp(-d);  // P(X = j), j = 0, 1, ...
      for (std::size_t j = 0; j < hosts[k] && below < 1; ++j) {
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

double TesseraPolicy::MultiGpuValue(std::uint32_t count, std::int32_t milli,
                                    std::int64_t cpu) const {
  for (const MultiItem& m : multi_) {
    if (m.count == count && m.milli == milli && m.cpu == cpu) return m.value;
  }
  return 0;
}

std::size_t TesseraPolicy::Hash(const MemoKey& k) {
  auto mix = [](std::uint64_t x) {  // splitmix64's finaliser
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  };
  return static_cast<std::size_t>(mix(mix(mix(static_cast<std::uint64_t>(k.cpu)) ^ k.lo) ^ k.hi));
}

double* TesseraPolicy::MemoFind(const MemoKey& key) {
  const std::size_t mask = memo_.size() - 1;
  for (std::size_t i = Hash(key) & mask;; i = (i + 1) & mask) {
    MemoSlot& slot = memo_[i];
    if (slot.generation != memo_generation_) return nullptr;
    if (slot.key == key) return &slot.f;
  }
}

void TesseraPolicy::MemoInsert(const MemoKey& key, double f) {
  if (2 * (memo_size_ + 1) > memo_.size()) {  // keep the load under 1/2
    std::vector<MemoSlot> old(memo_.size() * 2);
    old.swap(memo_);
    memo_size_ = 0;
    for (const MemoSlot& slot : old) {
      if (slot.generation == memo_generation_) MemoInsert(slot.key, slot.f);
    }
  }
  const std::size_t mask = memo_.size() - 1;
  std::size_t i = Hash(key) & mask;
  while (memo_[i].generation == memo_generation_) i = (i + 1) & mask;
  memo_[i] = {key, f, memo_generation_};
  ++memo_size_;
}

double TesseraPolicy::Memo(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
                           const std::int32_t* sorted, std::size_t gpus) {
  const std::uint32_t model = model_[node];
  if (gpus > 8 || model == Cluster::kMixedModel) return frag_->Of(node, cpu_free, free_milli, gpus);
  auto at = [&](std::size_t g) {
    return static_cast<std::uint64_t>(g < gpus ? static_cast<std::uint16_t>(sorted[g]) : 0);
  };
  MemoKey key;
  key.cpu = cpu_free;
  for (std::size_t g = 0; g < 6; ++g) key.lo |= at(g) << (10 * g);
  key.hi = at(6) | at(7) << 10 | static_cast<std::uint64_t>(gpus) << 20 |
           static_cast<std::uint64_t>(model) << 32;
  if (const double* f = MemoFind(key); f != nullptr) return *f;
  const double f = frag_->OfSorted(node, cpu_free, sorted, gpus);
  MemoInsert(key, f);
  return f;
}

const TesseraPolicy::NodeCache& TesseraPolicy::Current(std::size_t node) {
  const NodeState& s = cluster_.state(node);
  NodeCache& c = current_[node];
  if (c.epoch == epoch_ && c.version == s.version) return c;
  c.epoch = epoch_;
  c.version = s.version;
  const std::size_t n = s.free_milli.size();
  std::int32_t sorted[kMaxGpusPerNode];
  SortedCopy(s.free_milli.data(), n, sorted);
  c.f = Memo(node, s.cpu_free, s.free_milli.data(), sorted, n);
  c.imbalance = cpu_per_milli_ > 0 ? Imbalance(s.cpu_free, s.gpu_milli_free) : 0;
  c.hosts = 0;
  const std::size_t multi_n = std::min<std::size_t>(multi_.size(), 64);
  for (std::size_t i = 0; i < multi_n; ++i) {
    if (Fits(multi_[i], model_[node], s.cpu_free, sorted, n)) c.hosts |= 1ULL << i;
  }
  return c;
}

Choice TesseraPolicy::Score(const Cluster& /*cluster*/, std::size_t node, const ResolvedRequest& r,
                            GpuMask usable) {
  const Request& q = *r.request;
  if (group_[node] == kNoGroup || cluster_.state(node).version != initial_version_[node] ||
      !q.mig_profile.empty()) {
    return Compute(node, q, usable);
  }
  const std::size_t way = (static_cast<std::uint64_t>(q.cpu_milli) * 31 + q.gpu_count * 7 +
                           static_cast<std::uint64_t>(q.gpu_milli)) %
                          kGroupWays;
  GroupScore& g = group_score_[group_[node] * kGroupWays + way];
  if (g.epoch != epoch_ || g.cpu != q.cpu_milli || g.count != q.gpu_count ||
      g.milli != q.gpu_milli || g.usable != usable) {
    g = {epoch_, q.cpu_milli, q.gpu_count, q.gpu_milli, usable, Compute(node, q, usable)};
  }
  return g.choice;
}

Choice TesseraPolicy::Compute(std::size_t node, const Request& q, GpuMask usable) {
  const NodeState& s = cluster_.state(node);
  const NodeCache& now = Current(node);
  const double f0 = now.f;
  const std::int64_t cpu_after = s.cpu_free - q.cpu_milli;
  const std::size_t n = s.free_milli.size();
  const std::uint32_t model = model_[node];
  std::int32_t scratch[kMaxGpusPerNode];
  std::copy(s.free_milli.begin(), s.free_milli.end(), scratch);
  std::int32_t sorted[kMaxGpusPerNode];  // scratch, ascending

  // The expected cost (GPU milli) of going from the current state to (cpu_after, scratch):
  // imbalance growth (stranded capacity in the making), plus the value of every multi-GPU shape
  // the node hosts now and would not host after.
  auto cost = [&](std::int64_t gpu_taken) {
    double c = 0;
    if (cpu_per_milli_ > 0) c += Imbalance(cpu_after, s.gpu_milli_free - gpu_taken) - now.imbalance;
    for (std::uint64_t m = now.hosts; m != 0; m &= m - 1) {
      const MultiItem& item = multi_[LowestBit(m)];
      if (!Fits(item, model, cpu_after, sorted, n)) c += item.value;
    }
    return c;
  };
  // Major key: FGD's sigmoid score (0..100) of the fragmentation delta plus that cost: both are
  // GPU milli the placement is expected to leave unusable, so they are added before FGD's
  // truncated sigmoid, not ranked one after the other. Minor key: the least cost.
  const SigmoidTable& sigmoid = Sigmoids();
  auto score = [&](double delta, double c) {
    const int major = sigmoid((delta + c) / 1000);
    const std::int64_t minor =
        kCostClamp - std::clamp<std::int64_t>(std::llround(c), -kCostClamp, kCostClamp);
    return static_cast<int>(major * kMinorRange + minor);
  };
  // Score of the state in scratch after taking `taken` GPU milli.
  auto after = [&](std::int64_t taken) {
    SortedCopy(scratch, n, sorted);
    return score(Memo(node, cpu_after, scratch, sorted, n) - f0, cost(taken));
  };

  if (!q.is_gpu()) return {after(0), 0};
  const bool fractional = q.gpu_count == 1 && q.gpu_milli < kMilliPerGpu && q.mig_profile.empty();
  if (!fractional) {
    const GpuMask gpus =
        q.mig_profile.empty() ? LowestGpus(usable, q.gpu_count) : BestGpus(s, q, usable);
    std::int64_t taken = 0;
    if (q.mig_profile.empty()) {
      for (GpuMask m = gpus; m != 0; m &= m - 1) scratch[LowestBit(m)] -= q.gpu_milli;
      taken = static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli;
    }
    return {after(taken), gpus};
  }
  // A fractional share: the GPU with the best score; then the least free milli, memory. GPUs
  // with equal free milli score the same.
  Choice best{0, 0};
  std::size_t best_g = kMaxGpusPerNode;
  ForEachUsableGpuScore(
      s, usable,
      [&](std::size_t g) {
        const std::int32_t free = s.free_milli[g];
        scratch[g] = free - q.gpu_milli;
        const int sc = after(q.gpu_milli);
        scratch[g] = free;
        return sc;
      },
      [&](std::size_t g, int sc) {
        bool better = best_g == kMaxGpusPerNode || sc > best.score;
        if (!better && sc == best.score) {
          const std::int32_t free = s.free_milli[g];
          const std::int32_t bf = s.free_milli[best_g];
          better = free < bf || (free == bf && s.gpus[g].memory_free < s.gpus[best_g].memory_free);
        }
        if (better) {
          best = {sc, 1ULL << g};
          best_g = g;
        }
      });
  return best;
}

}  // namespace tessera::placement
