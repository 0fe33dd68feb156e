#include "placement/fragmentation.h"

#include <algorithm>

namespace tessera::placement {

Fragmentation::Fragmentation(const Cluster& cluster, WorkloadProfile profile)
    : cluster_(cluster), profile_(std::move(profile)) {
  const auto& models = cluster_.models();
  for (const auto& item : profile_.items) {
    std::uint64_t mask = 0;
    for (const std::string& m : item.models) {
      auto it = std::find(models.begin(), models.end(), m);
      if (it != models.end()) mask |= 1ULL << (it - models.begin());
    }
    model_masks_.push_back(mask);
    constrained_.push_back(!item.models.empty());
    auto it = std::find(distinct_milli_.begin(), distinct_milli_.end(), item.gpu_milli);
    milli_index_.push_back(static_cast<std::uint32_t>(it - distinct_milli_.begin()));
    if (it == distinct_milli_.end()) distinct_milli_.push_back(item.gpu_milli);
  }
}

double Fragmentation::OfSorted(std::size_t node, std::int64_t cpu_free, const std::int32_t* sorted,
                               std::size_t gpus) const {
  constexpr std::size_t kMaxDistinct = 64;
  const std::uint32_t node_model = cluster_.node_model(node);
  if (node_model == Cluster::kMixedModel || distinct_milli_.size() > kMaxDistinct) {
    return Of(node, cpu_free, sorted, gpus);
  }
  // Per distinct milli: the GPUs it fits (a suffix of `sorted`) and the free milli of the rest.
  std::int64_t prefix[kMaxGpusPerNode + 1];
  prefix[0] = 0;
  for (std::size_t g = 0; g < gpus; ++g) prefix[g + 1] = prefix[g] + sorted[g];
  std::uint32_t fits_of[kMaxDistinct];
  std::int64_t partial_of[kMaxDistinct];
  for (std::size_t d = 0; d < distinct_milli_.size(); ++d) {
    const auto below = static_cast<std::size_t>(
        std::lower_bound(sorted, sorted + gpus, distinct_milli_[d]) - sorted);
    fits_of[d] = static_cast<std::uint32_t>(gpus - below);
    partial_of[d] = prefix[below];
  }
  // The same categories, order and arithmetic as Of().
  double c0 = 0, c1 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0;
  const double total_d = static_cast<double>(prefix[gpus]);
  for (std::size_t p = 0; p < profile_.items.size(); ++p) {
    const WorkloadProfile::Item& item = profile_.items[p];
    const double f = item.weight;
    const bool cpu_ok = cpu_free >= item.cpu_milli;
    if (item.gpu_count == 0 || item.gpu_milli == 0) {
      (cpu_ok ? c4 : c5) += f * total_d;
      continue;
    }
    const bool any_model = !constrained_[p] || ((model_masks_[p] >> node_model) & 1ULL) != 0;
    if (!any_model) {
      c6 += f * total_d;
      continue;
    }
    const std::uint32_t fitting = fits_of[milli_index_[p]];
    if (fitting >= item.gpu_count && cpu_ok) {
      c1 += f * static_cast<double>(partial_of[milli_index_[p]]);
    } else if (fitting < item.gpu_count) {
      (cpu_ok ? c1 : c0) += f * total_d;
    } else {
      c3 += f * total_d;
    }
  }
  return 0.0 + c0 + c1 + c3 + c4 + c5 + c6;
}

double Fragmentation::Of(std::size_t node) const {
  const NodeState& s = cluster_.state(node);
  return Of(node, s.cpu_free, s.free_milli.data(), s.free_milli.size());
}

double Fragmentation::Of(std::size_t node, std::int64_t cpu_free, const std::int32_t* free_milli,
                         std::size_t gpus) const {
  // Seven category accumulators, summed in a fixed order for bit-exactness (spec §5.2):
  // 0 GPU & CPU short, 1 GPU short (and partial fits), 3 CPU short, 4/5 CPU-only pods
  // (CPU fits / short), 6 model mismatch. The satisfied remainder (2) is not fragmentation.
  double c0 = 0, c1 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0;
  std::int64_t total = 0;
  for (std::size_t g = 0; g < gpus; ++g) total += free_milli[g];
  const double total_d = static_cast<double>(total);
  const std::uint32_t node_model = cluster_.node_model(node);
  for (std::size_t p = 0; p < profile_.items.size(); ++p) {
    const WorkloadProfile::Item& item = profile_.items[p];
    const double f = item.weight;
    const bool cpu_ok = cpu_free >= item.cpu_milli;
    if (item.gpu_count == 0 || item.gpu_milli == 0) {
      (cpu_ok ? c4 : c5) += f * total_d;
      continue;
    }
    std::uint32_t fitting = 0;
    std::int64_t partial = 0;
    bool any_model = false;
    if (node_model != Cluster::kMixedModel) {
      // One model on the node: the spec check is one bit.
      any_model = !constrained_[p] || ((model_masks_[p] >> node_model) & 1ULL) != 0;
      if (any_model) {
        for (std::size_t g = 0; g < gpus; ++g) {
          if (free_milli[g] >= item.gpu_milli) {
            ++fitting;
          } else {
            partial += free_milli[g];
          }
        }
      }
    } else {
      for (std::size_t g = 0; g < gpus; ++g) {
        const bool model_ok =
            !constrained_[p] || ((model_masks_[p] >> cluster_.model_id(node, g)) & 1ULL) != 0;
        any_model = any_model || model_ok;
        if (model_ok && free_milli[g] >= item.gpu_milli) {
          ++fitting;
        } else {
          partial += free_milli[g];
        }
      }
    }
    if (!any_model) {
      c6 += f * total_d;
    } else if (fitting >= item.gpu_count && cpu_ok) {
      c1 += f * static_cast<double>(partial);
    } else if (fitting < item.gpu_count) {
      (cpu_ok ? c1 : c0) += f * total_d;
    } else {
      c3 += f * total_d;
    }
  }
  return 0.0 + c0 + c1 + c3 + c4 + c5 + c6;
}

}  // namespace tessera::placement
