#include "placement/cluster.h"

#include <algorithm>
#include <bit>
#include <set>
#include <type_traits>
#include <utility>

namespace tessera::placement {
namespace {

bool ScopeAllows(policy::CoTenancy scope, std::uint32_t ns_a, TrustTier tier_a, std::uint32_t ns_b,
                 TrustTier tier_b) {
  switch (scope) {
    case policy::CoTenancy::kAny:
      return true;
    case policy::CoTenancy::kSameTier:
      return tier_a == tier_b;
    case policy::CoTenancy::kSameNamespace:
      return ns_a == ns_b;
    case policy::CoTenancy::kNone:
      return false;
  }
  return false;
}

bool IsOpen(policy::CoTenancy scope, SharingMode mode) {
  return scope == policy::CoTenancy::kAny &&
         (mode == SharingMode::kShared || mode == SharingMode::kNative);
}

}  // namespace

void ApplyTrustPolicy(const policy::Policy& policy, Request& request) {
  request.co_tenancy = policy.Rule(request.tier).co_tenancy;
}

Cluster::Cluster(std::vector<Node> nodes) : nodes_(std::move(nodes)) {}

StatusOr<Cluster> Cluster::Create(std::vector<Node> nodes) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.name.empty()) return InvalidArgumentError("node " + std::to_string(i) + ": empty name");
    if (!names.insert(n.name).second) {
      return InvalidArgumentError("node \"" + n.name + "\": duplicate name");
    }
    if (n.cpu_milli < 0 || n.memory_bytes < 0) {
      return InvalidArgumentError("node \"" + n.name + "\": negative CPU or memory");
    }
    if (n.gpus.size() > kMaxGpusPerNode) {
      return InvalidArgumentError("node \"" + n.name + "\": " + std::to_string(n.gpus.size()) +
                                  " GPUs; at most 64 are supported");
    }
    for (std::size_t g = 0; g < n.gpus.size(); ++g) {
      const Gpu& gpu = n.gpus[g];
      if (gpu.model.empty()) {
        return InvalidArgumentError("node \"" + n.name + "\" GPU " + std::to_string(g) +
                                    ": empty model");
      }
      if (gpu.mig_instances.size() > 64) {
        return InvalidArgumentError("node \"" + n.name + "\": more than 64 MIG instances");
      }
      for (const std::uint32_t peer : gpu.nvlink_peers) {
        if (peer >= n.gpus.size() || peer == g) {
          return InvalidArgumentError("node \"" + n.name + "\" GPU " + std::to_string(g) +
                                      ": NVLink peer " + std::to_string(peer) + " out of range");
        }
      }
    }
  }
  Cluster cluster(std::move(nodes));
  cluster.gpu_model_ids_.resize(cluster.nodes_.size());
  cluster.node_models_.assign(cluster.nodes_.size(), kMixedModel);
  for (std::size_t i = 0; i < cluster.nodes_.size(); ++i) {
    const Node& n = cluster.nodes_[i];
    for (const Gpu& gpu : n.gpus) {
      auto it = std::find(cluster.models_.begin(), cluster.models_.end(), gpu.model);
      if (it == cluster.models_.end()) {
        if (cluster.models_.size() == kMaxModels) {
          return InvalidArgumentError("more than 64 distinct GPU models");
        }
        cluster.models_.push_back(gpu.model);
        it = cluster.models_.end() - 1;
      }
      cluster.gpu_model_ids_[i].push_back(static_cast<std::uint32_t>(it - cluster.models_.begin()));
    }
    const auto& ids = cluster.gpu_model_ids_[i];
    if (!ids.empty() && std::all_of(ids.begin(), ids.end(), [&](auto m) { return m == ids[0]; })) {
      cluster.node_models_[i] = ids[0];
    }
    const bool same_memory =
        !n.gpus.empty() && std::all_of(n.gpus.begin(), n.gpus.end(), [&](const Gpu& gpu) {
          return gpu.memory_bytes == n.gpus[0].memory_bytes;
        });
    cluster.node_gpu_memory_.push_back(same_memory ? n.gpus[0].memory_bytes : 0);
    cluster.total_gpus_ += n.gpus.size();
    cluster.total_gpu_milli_ += static_cast<std::int64_t>(n.gpus.size()) * kMilliPerGpu;
  }
  cluster.Reset();
  return cluster;
}

void Cluster::Reset() {
  states_.assign(nodes_.size(), NodeState{});
  versions_.assign(nodes_.size(), 0);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    NodeState& s = states_[i];
    s.cpu_free = nodes_[i].cpu_milli;
    s.memory_free = nodes_[i].memory_bytes;
    s.gpus.resize(nodes_[i].gpus.size());
    for (std::size_t g = 0; g < s.gpus.size(); ++g) {
      s.gpus[g].memory_free = nodes_[i].gpus[g].memory_bytes;
    }
    RecomputeMilliFree(i);
  }
}

void Cluster::RecomputeMilliFree(std::size_t node) {
  NodeState& s = states_[node];
  const Node& n = nodes_[node];
  s.free_milli.resize(s.gpus.size());
  s.gpu_milli_free = 0;
  for (std::size_t g = 0; g < s.gpus.size(); ++g) {
    const Gpu& gpu = n.gpus[g];
    const bool schedulable = gpu.healthy && !gpu.cordoned && !gpu.mig_enabled && !n.cordoned;
    s.free_milli[g] = schedulable ? s.gpus[g].milli_free : 0;
    s.gpu_milli_free += s.free_milli[g];
  }
  s.version = ++next_version_;
  versions_[node] = s.version;
  if (changes_.size() >= std::max<std::size_t>(4096, 2 * nodes_.size())) {
    change_base_ += changes_.size();
    changes_.clear();
  }
  changes_.push_back(static_cast<std::uint32_t>(node));
}

bool Cluster::ChangesSince(std::uint64_t from, std::span<const std::uint32_t>* nodes) const {
  if (from < change_base_ || from > change_end()) return false;
  *nodes = std::span<const std::uint32_t>(changes_).subspan(from - change_base_);
  return true;
}

void Cluster::AppendStateKey(std::size_t node, std::string* key) const {
  auto add = [key](auto v) {
    static_assert(std::is_integral_v<decltype(v)>);
    key->append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  auto add_string = [&](const std::string& text) {
    add(text.size());
    key->append(text);
  };
  const Node& n = nodes_[node];
  const NodeState& s = states_[node];
  add(n.cpu_milli);
  add(n.memory_bytes);
  add(static_cast<std::uint8_t>(n.cordoned));
  add(n.labels.size());
  for (const auto& [k, v] : n.labels) {
    add_string(k);
    add_string(v);
  }
  add(n.gpus.size());
  for (std::size_t g = 0; g < n.gpus.size(); ++g) {
    const Gpu& gpu = n.gpus[g];
    add(gpu_model_ids_[node][g]);
    add(gpu.memory_bytes);
    add(gpu.sm_count);
    add(static_cast<std::uint8_t>(gpu.mig_enabled | gpu.healthy << 1 | gpu.cordoned << 2));
    add(gpu.mig_instances.size());
    for (const std::string& m : gpu.mig_instances) add_string(m);
    add(gpu.numa_node);
    add(gpu.nvlink_peers.size());
    for (const std::uint32_t peer : gpu.nvlink_peers) add(peer);
  }
  add(s.cpu_free);
  add(s.memory_free);
  // Not the pod counts (the node's, each shape's, each tenant's): no decision reads them.
  add(s.gpu_pod_shapes.size());
  for (const auto& [shape, count] : s.gpu_pod_shapes) add(shape);
  for (std::size_t g = 0; g < s.gpus.size(); ++g) {
    const GpuState& gs = s.gpus[g];
    add(gs.milli_free);
    add(gs.memory_free);
    add(gs.mig_used);
    add(gs.memory_over);
    add(gs.milli_over);
    add(gs.restrictive_);
    add(s.free_milli[g]);
    add(gs.tenants.size());
    for (const TenantEntry& t : gs.tenants) {
      add(t.namespace_id);
      add(static_cast<std::uint32_t>(t.tier) << 16 | static_cast<std::uint32_t>(t.co_tenancy) << 8 |
          static_cast<std::uint32_t>(t.mode));
      add(t.uid);
    }
  }
}

Status Cluster::SetGpuHealth(std::size_t node, std::size_t gpu, bool healthy) {
  if (node >= nodes_.size() || gpu >= nodes_[node].gpus.size()) {
    return InvalidArgumentError("no such GPU");
  }
  nodes_[node].gpus[gpu].healthy = healthy;
  RecomputeMilliFree(node);
  return Status::Ok();
}

Status Cluster::SetGpuCordoned(std::size_t node, std::size_t gpu, bool cordoned) {
  if (node >= nodes_.size() || gpu >= nodes_[node].gpus.size()) {
    return InvalidArgumentError("no such GPU");
  }
  nodes_[node].gpus[gpu].cordoned = cordoned;
  RecomputeMilliFree(node);
  return Status::Ok();
}

Status Cluster::SetNodeCordoned(std::size_t node, bool cordoned) {
  if (node >= nodes_.size()) return InvalidArgumentError("no such node");
  nodes_[node].cordoned = cordoned;
  RecomputeMilliFree(node);
  return Status::Ok();
}

std::uint32_t Cluster::NamespaceId(std::string_view name) {
  auto it = namespaces_.find(name);
  if (it != namespaces_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(namespaces_.size());
  namespaces_.emplace(std::string(name), id);
  return id;
}

ResolvedRequest Cluster::Resolve(const Request& request) {
  ResolvedRequest r;
  r.request = &request;
  r.namespace_id = NamespaceId(request.namespace_name);
  r.open = IsOpen(request.co_tenancy, request.mode);
  if (!request.models.empty()) {
    r.model_constrained = true;
    r.model_mask = 0;
    for (const std::string& m : request.models) {
      auto it = std::find(models_.begin(), models_.end(), m);
      if (it != models_.end()) r.model_mask |= 1ULL << (it - models_.begin());
    }
  }
  return r;
}

bool Cluster::TenantCompatible(const TenantEntry& t, const ResolvedRequest& r) const {
  const Request& q = *r.request;
  if (t.mode == SharingMode::kExclusive || q.exclusive()) return false;
  if ((t.mode == SharingMode::kMps || q.mode == SharingMode::kMps) && t.uid != q.uid) return false;
  return ScopeAllows(t.co_tenancy, t.namespace_id, t.tier, r.namespace_id, q.tier) &&
         ScopeAllows(q.co_tenancy, r.namespace_id, q.tier, t.namespace_id, t.tier);
}

std::uint64_t MemoryOn(const Gpu& gpu, const Request& q) { return MemoryOn(gpu.memory_bytes, q); }

std::uint64_t MemoryOn(std::uint64_t gpu_memory_bytes, const Request& q) {
  if (q.gpu_memory_bytes != 0) return q.gpu_memory_bytes;
  if (q.memory_ppm != 0) {
    constexpr std::uint64_t kMiB = 1ULL << 20;
    const std::uint64_t bytes = gpu_memory_bytes / kPpmPerGpu * q.memory_ppm +
                                gpu_memory_bytes % kPpmPerGpu * q.memory_ppm / kPpmPerGpu;
    return bytes / kMiB * kMiB;
  }
  const auto milli = static_cast<std::uint64_t>(q.gpu_milli);
  return gpu_memory_bytes / kMilliPerGpu * milli +
         gpu_memory_bytes % kMilliPerGpu * milli / kMilliPerGpu;
}

bool Cluster::GpuUsable(std::size_t node, std::size_t g, const ResolvedRequest& r) const {
  const Gpu& gpu = nodes_[node].gpus[g];
  const GpuState& gs = states_[node].gpus[g];
  const Request& q = *r.request;
  if (!gpu.healthy || gpu.cordoned) return false;
  if (r.model_constrained && ((r.model_mask >> gpu_model_ids_[node][g]) & 1ULL) == 0) return false;
  if (!q.mig_profile.empty()) {
    if (!gpu.mig_enabled) return false;
    bool found = false;
    for (std::size_t i = 0; i < gpu.mig_instances.size() && !found; ++i) {
      found = ((gs.mig_used >> i) & 1ULL) == 0 && gpu.mig_instances[i] == q.mig_profile;
    }
    if (!found) return false;
  } else {
    if (gpu.mig_enabled) return false;
    if (gs.milli_free < q.gpu_milli) return false;
    if (gs.memory_free < MemoryOn(gpu, q)) return false;
  }
  if (gs.tenants.empty()) return true;
  if (gs.open() && r.open) return true;
  for (const TenantEntry& t : gs.tenants) {
    if (!TenantCompatible(t, r)) return false;
  }
  return true;
}

GpuMask Cluster::UsableGpus(std::size_t node, const ResolvedRequest& r) const {
  const Request& q = *r.request;
  const Node& nd = nodes_[node];
  if (!q.is_gpu() || nd.cordoned) return 0;
  const std::size_t n = nd.gpus.size();
  const NodeState& s = states_[node];
  GpuMask mask = 0;
  if (!q.mig_profile.empty() || q.gpu_milli <= 0) {
    for (std::size_t g = 0; g < n; ++g) {
      if (GpuUsable(node, g, r)) mask |= 1ULL << g;
    }
    return mask;
  }
  // The common case, GpuUsable's non-MIG half inlined and kept to dense arrays: a GPU with the
  // request's milli free is healthy, not cordoned and not in MIG mode (free_milli is 0
  // otherwise); a node of one model is checked against the model set once, and on a node of one
  // GPU size the memory the request takes is computed once.
  const std::uint32_t model = node_models_[node];
  const bool per_gpu_model = r.model_constrained && model == kMixedModel;
  if (r.model_constrained && !per_gpu_model && ((r.model_mask >> model) & 1ULL) == 0) return 0;
  const std::uint64_t uniform = node_gpu_memory_[node];
  const std::uint64_t uniform_memory = uniform != 0 ? MemoryOn(uniform, q) : 0;
  for (std::size_t g = 0; g < n; ++g) {
    if (s.free_milli[g] < q.gpu_milli) continue;
    if (per_gpu_model && ((r.model_mask >> gpu_model_ids_[node][g]) & 1ULL) == 0) continue;
    const GpuState& gs = s.gpus[g];
    if (gs.memory_free < (uniform != 0 ? uniform_memory : MemoryOn(nd.gpus[g], q))) continue;
    if (!gs.tenants.empty() && !(gs.open() && r.open)) {
      bool compatible = true;
      for (const TenantEntry& t : gs.tenants) compatible = compatible && TenantCompatible(t, r);
      if (!compatible) continue;
    }
    mask |= 1ULL << g;
  }
  return mask;
}

bool Cluster::FeasibleUnlessHostMemory(std::size_t node, const ResolvedRequest& r,
                                       GpuMask* usable) const {
  const NodeState& s = states_[node];
  const Request& q = *r.request;
  *usable = 0;
  if (nodes_[node].cordoned) return false;
  if (q.cpu_milli > s.cpu_free) return false;
  if (!q.is_gpu()) return true;
  const std::uint32_t nm = node_models_[node];
  if (r.model_constrained && nm != kMixedModel && ((r.model_mask >> nm) & 1ULL) == 0) return false;
  if (q.mig_profile.empty() &&
      s.gpu_milli_free < static_cast<std::int64_t>(q.gpu_count) * q.gpu_milli) {
    return false;
  }
  *usable = UsableGpus(node, r);
  return static_cast<std::uint32_t>(std::popcount(*usable)) >= q.gpu_count;
}

GpuShare Cluster::ShareOn(std::size_t node, std::size_t g, const ResolvedRequest& r) const {
  const Gpu& gpu = nodes_[node].gpus[g];
  const Request& q = *r.request;
  GpuShare share;
  share.gpu = static_cast<std::uint32_t>(g);
  if (!q.mig_profile.empty()) {
    const GpuState& gs = states_[node].gpus[g];
    for (std::size_t i = 0; i < gpu.mig_instances.size(); ++i) {
      if (((gs.mig_used >> i) & 1ULL) == 0 && gpu.mig_instances[i] == q.mig_profile) {
        share.mig_instance = static_cast<int>(i);
        break;
      }
    }
    return share;
  }
  share.milli = q.gpu_milli;
  share.memory_bytes = MemoryOn(gpu, q);
  return share;
}

Status Cluster::Add(const ResolvedRequest& r, const Allocation& a) {
  const Request& q = *r.request;
  if (a.node >= nodes_.size()) return InvalidArgumentError("allocation: no such node");
  NodeState& s = states_[a.node];
  if (q.cpu_milli > s.cpu_free || q.memory_bytes > s.memory_free) {
    return ResourceExhaustedError("node \"" + nodes_[a.node].name + "\": CPU or memory short");
  }
  if (a.gpus.size() != q.gpu_count) {
    return InvalidArgumentError("allocation has " + std::to_string(a.gpus.size()) +
                                " GPUs, the request asks for " + std::to_string(q.gpu_count));
  }
  GpuMask seen = 0;
  for (const GpuShare& share : a.gpus) {
    if (share.gpu >= s.gpus.size() || ((seen >> share.gpu) & 1ULL) != 0) {
      return InvalidArgumentError("allocation: bad or repeated GPU index");
    }
    seen |= 1ULL << share.gpu;
    if (!GpuUsable(a.node, share.gpu, r)) {
      return ResourceExhaustedError("node \"" + nodes_[a.node].name + "\" GPU " +
                                    std::to_string(share.gpu) + " cannot take the request");
    }
    const GpuState& gs = s.gpus[share.gpu];
    if (share.milli > gs.milli_free || share.memory_bytes > gs.memory_free ||
        (share.mig_instance >= 0 && ((gs.mig_used >> share.mig_instance) & 1ULL) != 0)) {
      return ResourceExhaustedError("node \"" + nodes_[a.node].name + "\" GPU " +
                                    std::to_string(share.gpu) + ": share does not fit");
    }
  }
  Commit(r, a);
  return Status::Ok();
}

Status Cluster::Record(const ResolvedRequest& r, const Allocation& a) {
  const Request& q = *r.request;
  if (a.node >= nodes_.size()) return InvalidArgumentError("allocation: no such node");
  const NodeState& s = states_[a.node];
  if (a.gpus.size() != q.gpu_count) {
    return InvalidArgumentError("allocation has " + std::to_string(a.gpus.size()) +
                                " GPUs, the request asks for " + std::to_string(q.gpu_count));
  }
  GpuMask seen = 0;
  for (const GpuShare& share : a.gpus) {
    if (share.gpu >= s.gpus.size() || ((seen >> share.gpu) & 1ULL) != 0 || share.milli < 0 ||
        share.milli > kMilliPerGpu) {
      return InvalidArgumentError("allocation: bad or repeated GPU index, or share");
    }
    seen |= 1ULL << share.gpu;
  }
  Commit(r, a);
  return Status::Ok();
}

void Cluster::Commit(const ResolvedRequest& r, const Allocation& a) {
  const Request& q = *r.request;
  NodeState& s = states_[a.node];
  s.cpu_free -= q.cpu_milli;
  s.memory_free -= q.memory_bytes;
  ++s.pods;
  const bool open = IsOpen(q.co_tenancy, q.mode);
  for (const GpuShare& share : a.gpus) {
    GpuState& gs = s.gpus[share.gpu];
    const std::int32_t milli = std::min(share.milli, gs.milli_free);
    const std::uint64_t memory = std::min(share.memory_bytes, gs.memory_free);
    gs.milli_over += share.milli - milli;  // 0 unless Record()ed beyond capacity
    gs.memory_over += share.memory_bytes - memory;
    gs.milli_free -= milli;
    gs.memory_free -= memory;
    if (share.mig_instance >= 0) gs.mig_used |= 1ULL << share.mig_instance;
    auto it = std::find_if(gs.tenants.begin(), gs.tenants.end(), [&](const TenantEntry& t) {
      return t.namespace_id == r.namespace_id && t.tier == q.tier && t.co_tenancy == q.co_tenancy &&
             t.mode == q.mode && t.uid == q.uid;
    });
    if (it == gs.tenants.end()) {
      gs.tenants.push_back(TenantEntry{r.namespace_id, q.tier, q.co_tenancy, q.mode, q.uid, 0});
      it = gs.tenants.end() - 1;
    }
    ++it->count;
    if (!open) ++gs.restrictive_;
  }
  if (q.is_gpu()) {
    ++s.gpu_pod_shapes[q.gpu_milli >= kMilliPerGpu ? q.gpu_count : 0U];
  }
  RecomputeMilliFree(a.node);
}

Status Cluster::Remove(const ResolvedRequest& r, const Allocation& a) {
  const Request& q = *r.request;
  if (a.node >= nodes_.size()) return InvalidArgumentError("allocation: no such node");
  NodeState& s = states_[a.node];
  const Node& n = nodes_[a.node];
  if (s.pods == 0 || s.cpu_free + q.cpu_milli > n.cpu_milli ||
      s.memory_free + q.memory_bytes > n.memory_bytes || a.gpus.size() != q.gpu_count) {
    return FailedPreconditionError("node \"" + n.name + "\": allocation is not on the ledger");
  }
  std::vector<std::vector<TenantEntry>::iterator> entries;
  GpuMask seen = 0;
  for (const GpuShare& share : a.gpus) {
    if (share.gpu >= s.gpus.size() || ((seen >> share.gpu) & 1ULL) != 0) {
      return InvalidArgumentError("allocation: bad or repeated GPU index");
    }
    seen |= 1ULL << share.gpu;
    GpuState& gs = s.gpus[share.gpu];
    auto it = std::find_if(gs.tenants.begin(), gs.tenants.end(), [&](const TenantEntry& t) {
      return t.namespace_id == r.namespace_id && t.tier == q.tier && t.co_tenancy == q.co_tenancy &&
             t.mode == q.mode && t.uid == q.uid;
    });
    // Over-commit goes back first; only the rest was taken from the free capacity.
    const std::int32_t milli_back = share.milli - std::min(share.milli, gs.milli_over);
    const std::uint64_t memory_back =
        share.memory_bytes - std::min(share.memory_bytes, gs.memory_over);
    if (it == gs.tenants.end() || gs.milli_free + milli_back > kMilliPerGpu ||
        gs.memory_free + memory_back > n.gpus[share.gpu].memory_bytes ||
        (share.mig_instance >= 0 && ((gs.mig_used >> share.mig_instance) & 1ULL) == 0)) {
      return FailedPreconditionError("node \"" + n.name + "\" GPU " + std::to_string(share.gpu) +
                                     ": allocation is not on the ledger");
    }
    entries.push_back(it);
  }
  if (q.is_gpu()) {
    auto shape = s.gpu_pod_shapes.find(q.gpu_milli >= kMilliPerGpu ? q.gpu_count : 0U);
    if (shape == s.gpu_pod_shapes.end()) {
      return FailedPreconditionError("node \"" + n.name + "\": allocation is not on the ledger");
    }
    if (--shape->second == 0) s.gpu_pod_shapes.erase(shape);
  }
  s.cpu_free += q.cpu_milli;
  s.memory_free += q.memory_bytes;
  --s.pods;
  const bool open = IsOpen(q.co_tenancy, q.mode);
  for (std::size_t i = 0; i < a.gpus.size(); ++i) {
    const GpuShare& share = a.gpus[i];
    GpuState& gs = s.gpus[share.gpu];
    const std::int32_t milli_over = std::min(share.milli, gs.milli_over);
    const std::uint64_t memory_over = std::min(share.memory_bytes, gs.memory_over);
    gs.milli_over -= milli_over;
    gs.memory_over -= memory_over;
    gs.milli_free += share.milli - milli_over;
    gs.memory_free += share.memory_bytes - memory_over;
    if (share.mig_instance >= 0) gs.mig_used &= ~(1ULL << share.mig_instance);
    if (--entries[i]->count == 0) gs.tenants.erase(entries[i]);
    if (!open) --gs.restrictive_;
  }
  RecomputeMilliFree(a.node);
  return Status::Ok();
}

}  // namespace tessera::placement
