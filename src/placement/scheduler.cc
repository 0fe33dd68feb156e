#include "placement/scheduler.h"

#include <bit>
#include <numeric>

namespace tessera::placement {

Scheduler::Scheduler(Cluster* cluster, PlacementPolicy* policy, std::vector<std::uint32_t> ranks)
    : cluster_(cluster), policy_(policy), ranks_(std::move(ranks)) {
  if (ranks_.size() != cluster_->size()) {
    ranks_.resize(cluster_->size());
    std::iota(ranks_.begin(), ranks_.end(), 0U);
  }
  if (policy_->cacheable()) cache_.resize(cluster_->size() * kCacheWays);
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    if (cluster_->node(i).gpus.size() > kKeptUsableGpus) usable_kept_ = false;
  }
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
    const std::uint32_t shape = ShapeId(r, true);
    const std::uint32_t score_shape = ShapeId(r, false);
    const std::size_t way = score_shape % kCacheWays;
    const auto epoch = static_cast<std::uint32_t>(policy_->epoch());
    std::size_t feasible = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = node_at(k);
      CacheEntry& e = cache_[way * n + i];
      const std::uint32_t version = cluster_->version(i);
      GpuMask usable = 0;
      bool have_usable = false;
      if (e.shape != shape || e.version != version) {
        if (e.version != version) e.score_shape = 0xffffffffU;
        e.shape = shape;
        e.version = version;
        const bool ok = cluster_->Feasible(i, r, &usable);
        e.feasible_usable =
            (ok ? kFeasibleBit : 0) | static_cast<std::uint32_t>(usable & kUsableBits);
        have_usable = true;
      }
      if ((e.feasible_usable & kFeasibleBit) == 0) continue;
      ++feasible;
      if (e.score_shape != score_shape || e.score_epoch != epoch) {
        if (!have_usable) {
          usable = usable_kept_ ? e.feasible_usable & kUsableBits : cluster_->UsableGpus(i, r);
        }
        const Choice c = policy_->Score(*cluster_, i, r, usable);
        e.score_shape = score_shape;
        e.score_epoch = epoch;
        e.score = c.score;
        e.gpus = c.gpus;
      }
      if (best == n || e.score > best_choice.score ||
          (e.score == best_choice.score && ranks_[i] < ranks_[best])) {
        best = i;
        best_choice = {e.score, e.gpus};
      }
    }
    last_feasible_ = feasible;
    if (best == n) return std::nullopt;
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
