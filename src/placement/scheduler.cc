#include "placement/scheduler.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace tessera::placement {

Scheduler::Scheduler(Cluster* cluster, PlacementPolicy* policy, std::vector<std::uint32_t> ranks)
    : cluster_(cluster), policy_(policy), ranks_(std::move(ranks)) {
  if (ranks_.size() != cluster_->size()) {
    ranks_.resize(cluster_->size());
    std::iota(ranks_.begin(), ranks_.end(), 0U);
  }
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    if (cluster_->node(i).gpus.size() > kKeptUsableGpus) usable_kept_ = false;
  }
  if (policy_->cacheable()) {
    class_of_.assign(cluster_->size(), kNoClass);
    member_pos_.assign(cluster_->size(), 0);
    class_version_.assign(cluster_->size(), 0);
    for (std::size_t i = 0; i < cluster_->size(); ++i) Reclassify(static_cast<std::uint32_t>(i));
    synced_ = cluster_->change_end();
  }
}

void Scheduler::SyncClasses() {
  const std::uint64_t end = cluster_->change_end();
  if (end == synced_) return;
  std::span<const std::uint32_t> changed;
  if (cluster_->ChangesSince(synced_, &changed)) {
    for (const std::uint32_t i : changed) Reclassify(i);
  } else {
    for (std::size_t i = 0; i < cluster_->size(); ++i) Reclassify(static_cast<std::uint32_t>(i));
  }
  synced_ = end;
}

void Scheduler::Reclassify(std::uint32_t node) {
  const std::uint32_t version = cluster_->version(node);
  const std::uint32_t old = class_of_[node];
  if (old != kNoClass && class_version_[node] == version) return;
  class_version_[node] = version;
  key_.clear();
  cluster_->AppendStateKey(node, &key_);
  std::uint32_t c = 0;
  if (auto it = class_ids_.find(key_); it != class_ids_.end()) {
    c = it->second;
    if (c == old) return;
  } else {
    if (free_classes_.empty()) {
      c = static_cast<std::uint32_t>(classes_.size());
      classes_.emplace_back();
      class_size_.push_back(0);
      class_best_.push_back(kStale);
      class_memory_.push_back(0);
      class_fit_.emplace_back();
      if (classes_.size() > cache_stride_) {  // twice the room, way by way
        cache_stride_ = std::max<std::size_t>(64, 2 * cache_stride_);
        for (std::vector<CacheEntry>& way : ways_) {
          if (!way.empty()) way.resize(cache_stride_);
        }
      }
    } else {
      c = free_classes_.back();
      free_classes_.pop_back();
      for (std::vector<CacheEntry>& way : ways_) {
        if (!way.empty()) way[c] = CacheEntry{};
      }
    }
    classes_[c].key = key_;
    class_ids_.emplace(key_, c);
    class_memory_[c] = cluster_->state(node).memory_free;
    class_fit_[c] = MakeClassFit(node);
  }
  if (old != kNoClass) {
    NodeClass& from = classes_[old];
    const std::uint32_t pos = member_pos_[node];
    from.members[pos] = from.members.back();
    member_pos_[from.members[pos]] = pos;
    from.members.pop_back();
    --class_size_[old];
    if (class_best_[old] == node) class_best_[old] = kStale;
    if (from.members.empty()) {
      --live_;
      class_ids_.erase(from.key);
      from.key.clear();
      free_classes_.push_back(old);
    }
  }
  NodeClass& to = classes_[c];
  member_pos_[node] = static_cast<std::uint32_t>(to.members.size());
  to.members.push_back(node);
  ++class_size_[c];
  std::uint32_t& best = class_best_[c];
  if (to.members.size() == 1) {
    ++live_;
    best = node;
  } else if (best != kStale &&
             (ranks_[node] < ranks_[best] || (ranks_[node] == ranks_[best] && node < best))) {
    best = node;
  }
  class_of_[node] = c;
}

std::uint32_t Scheduler::BestMember(std::uint32_t c) {
  std::uint32_t& best = class_best_[c];
  if (best == kStale) {
    const std::vector<std::uint32_t>& members = classes_[c].members;
    best = members[0];
    for (const std::uint32_t i : members) {
      if (ranks_[i] < ranks_[best] || (ranks_[i] == ranks_[best] && i < best)) best = i;
    }
  }
  return best;
}

Scheduler::FitQuery Scheduler::MakeFitQuery(const ResolvedRequest& r) {
  const Request& q = *r.request;
  FitQuery f;
  f.cpu = q.cpu_milli;
  f.gpu = q.is_gpu();
  f.model_constrained = r.model_constrained;
  f.model_mask = r.model_mask;
  f.milli_checked = q.mig_profile.empty();
  f.milli_sum = static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli;
  f.top_checked = f.gpu && f.milli_checked && q.gpu_milli > 0;
  f.milli = q.gpu_milli;
  f.top = f.gpu ? std::min<std::size_t>(q.gpu_count, kFitGpus) - 1 : 0;
  return f;
}

Scheduler::ClassFit Scheduler::MakeClassFit(std::uint32_t node) const {
  const NodeState& s = cluster_->state(node);
  ClassFit fit;
  fit.cpu_free = s.cpu_free;
  fit.gpu_milli_free = s.gpu_milli_free;
  fit.model = cluster_->node_model(node);
  fit.cordoned = cluster_->node(node).cordoned;
  fit.top_milli.fill(-1);
  std::partial_sort_copy(s.free_milli.begin(), s.free_milli.end(), fit.top_milli.begin(),
                         fit.top_milli.end(), std::greater<>());
  return fit;
}

// Each check is one Cluster::Feasible makes, on the same values, or (top_milli) implied by one:
// a usable GPU of a non-MIG request of gpu_milli > 0 has free_milli >= gpu_milli
// (Cluster::UsableGpus), so gpu_count usable GPUs need the gpu_count-th largest free_milli, and
// so the min(gpu_count, kFitGpus)-th, to be >= gpu_milli (-1 past the node's GPUs fails it).
bool Scheduler::MayFit(const ClassFit& fit, const FitQuery& q) {
  if (fit.cordoned || q.cpu > fit.cpu_free) return false;
  if (!q.gpu) return true;
  if (q.model_constrained && fit.model != Cluster::kMixedModel &&
      ((q.model_mask >> fit.model) & 1ULL) == 0) {
    return false;
  }
  if (q.milli_checked && fit.gpu_milli_free < q.milli_sum) return false;
  return !q.top_checked || fit.top_milli[q.top] >= q.milli;
}

const Scheduler::CacheEntry* Scheduler::Probe(std::uint32_t c, const ResolvedRequest& r,
                                              const FitQuery& fit, std::uint32_t shape,
                                              CacheEntry* way, std::uint32_t epoch) {
  if (r.request->memory_bytes > class_memory_[c]) return nullptr;
  CacheEntry& e = way[c];
  GpuMask usable = 0;
  bool have_usable = false;
  if (e.shape != shape) {
    e.shape = shape;
    e.scored = false;
    // The index first: the filter reads the member's node state (cold at this scale).
    const bool ok =
        MayFit(class_fit_[c], fit) && cluster_->FeasibleUnlessHostMemory(BestMember(c), r, &usable);
    e.feasible_usable = (ok ? kFeasibleBit : 0) | static_cast<std::uint32_t>(usable & kUsableBits);
    have_usable = true;
  }
  if ((e.feasible_usable & kFeasibleBit) == 0) return nullptr;
  if (!e.scored || e.score_epoch != epoch) {
    const std::size_t rep = BestMember(c);
    if (!have_usable) {
      usable = usable_kept_ ? e.feasible_usable & kUsableBits : cluster_->UsableGpus(rep, r);
    }
    const Choice choice = policy_->Score(*cluster_, rep, r, usable);
    e.scored = true;
    e.score_epoch = epoch;
    e.score = choice.score;
    e.gpus = choice.gpus;
  }
  return &e;
}

std::uint32_t Scheduler::ShapeId(const ResolvedRequest& r, bool with_host_memory) {
  const Request& q = *r.request;
  std::string key;
  key.reserve(96);
  auto add = [&key](std::uint64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  add(static_cast<std::uint64_t>(q.cpu_milli));
  add(with_host_memory ? static_cast<std::uint64_t>(q.memory_bytes) : ~0ULL);
  key.push_back(with_host_memory ? 'm' : 's');
  add(q.gpu_count);
  add(static_cast<std::uint64_t>(q.gpu_milli));
  add(q.gpu_memory_bytes);
  add(q.memory_ppm);
  add(r.model_mask);
  add(r.namespace_id);
  add(q.uid);
  add(static_cast<std::uint64_t>(q.mode) << 16 | static_cast<std::uint64_t>(q.tier) << 8 |
      static_cast<std::uint64_t>(q.co_tenancy));
  key += q.mig_profile;
  auto [it, inserted] =
      shapes_.try_emplace(std::move(key), static_cast<std::uint32_t>(shapes_.size()));
  return it->second;
}

std::optional<Allocation> Scheduler::Decide(const Request& request,
                                            std::span<const std::uint32_t> nodes, bool observe) {
  const ResolvedRequest r = cluster_->Resolve(request);
  return DecideResolved(r, nodes, observe);
}

std::optional<Allocation> Scheduler::DecideResolved(const ResolvedRequest& r,
                                                    std::span<const std::uint32_t> nodes,
                                                    bool observe) {
  if (observe) policy_->Observe(*r.request);
  const std::size_t n = cluster_->size();
  // The nodes to look at: all (k -> k), or the given subset (k -> nodes[k]).
  const std::size_t count = nodes.empty() ? n : nodes.size();
  auto node_at = [&](std::size_t k) -> std::size_t { return nodes.empty() ? k : nodes[k]; };
  feasible_.clear();
  std::size_t best = n;
  Choice best_choice;
  if (!policy_->cacheable()) {
    // Filter, then let the policy pick or score every feasible node.
    std::vector<GpuMask> usable_of;
    usable_of.reserve(count);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = node_at(k);
      GpuMask usable = 0;
      if (cluster_->Feasible(i, r, &usable)) {
        feasible_.push_back(static_cast<std::uint32_t>(i));
        usable_of.push_back(usable);
      }
    }
    last_feasible_ = feasible_.size();
    if (feasible_.empty()) return std::nullopt;
    if (auto pick = policy_->PickNode(feasible_); pick.has_value()) {
      best = feasible_[*pick];
      best_choice = policy_->Score(*cluster_, best, r, usable_of[*pick]);
    } else {
      for (std::size_t j = 0; j < feasible_.size(); ++j) {
        const std::size_t i = feasible_[j];
        const Choice c = policy_->Score(*cluster_, i, r, usable_of[j]);
        if (best == n || c.score > best_choice.score ||
            (c.score == best_choice.score && ranks_[i] < ranks_[best])) {
          best = i;
          best_choice = c;
        }
      }
    }
  } else {
    SyncClasses();
    const std::uint32_t shape = ShapeId(r, false);
    std::vector<CacheEntry>& entries = ways_[shape % kCacheWays];
    if (entries.size() != cache_stride_) entries.resize(cache_stride_);  // the way's first use
    CacheEntry* const way = entries.data();
    const FitQuery fit = MakeFitQuery(r);
    const auto epoch = static_cast<std::uint32_t>(policy_->epoch());
    std::size_t feasible = 0;
    int best_score = 0;
    GpuMask best_gpus = 0;
    auto consider = [&](const CacheEntry& e, std::size_t i) {
      if (best == n || Better(e.score, i, best_score, best)) {
        best = i;
        best_score = e.score;
        best_gpus = e.gpus;
      }
    };
    if (nodes.empty()) {
      // Every node: each class once, its best member for it.
      for (std::uint32_t c = 0; c < class_size_.size(); ++c) {
        if (class_size_[c] == 0) continue;
        const CacheEntry* e = Probe(c, r, fit, shape, way, epoch);
        if (e == nullptr) continue;
        feasible += class_size_[c];
        // A worse score needs no member: only an equal one is decided by rank.
        if (best != n && e->score < best_score) continue;
        consider(*e, BestMember(c));
      }
    } else {
      for (std::size_t k = 0; k < count; ++k) {
        const std::size_t i = node_at(k);
        const CacheEntry* e = Probe(class_of_[i], r, fit, shape, way, epoch);
        if (e == nullptr) continue;
        ++feasible;
        consider(*e, i);
      }
    }
    last_feasible_ = feasible;
    if (best == n) return std::nullopt;
    best_choice = {best_score, best_gpus};
  }
  Allocation a;
  a.node = static_cast<std::uint32_t>(best);
  for (GpuMask m = best_choice.gpus; m != 0; m &= m - 1) {
    a.gpus.push_back(cluster_->ShareOn(best, static_cast<std::size_t>(std::countr_zero(m)), r));
  }
  return a;
}

StatusOr<Allocation> Scheduler::Place(const Request& request) {
  const ResolvedRequest r = cluster_->Resolve(request);
  std::optional<Allocation> a = DecideResolved(r, {}, true);
  if (!a.has_value()) {
    return ResourceExhaustedError("request \"" + request.name + "\": no node can take it");
  }
  TESSERA_RETURN_IF_ERROR(cluster_->Add(r, *a));
  return *std::move(a);
}

Status Scheduler::Release(const Request& request, const Allocation& allocation) {
  return cluster_->Remove(cluster_->Resolve(request), allocation);
}

}  // namespace tessera::placement
