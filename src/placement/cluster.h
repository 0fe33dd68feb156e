// The cluster model and its exact ledger (docs/design/0008-placement-engine.md).
//
// A Cluster holds static node and GPU facts (CPU, memory, labels; per GPU: UUID, model, memory,
// SMs, MIG mode and instances, NUMA node, NVLink peers, health) and the ledger of what is placed
// on them. Add() and Remove() are exact inverses: every quantity is an integer.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

#include "policy/policy.h"

namespace tessera::placement {

inline constexpr std::int32_t kMilliPerGpu = 1000;
inline constexpr std::uint32_t kPpmPerGpu = 1'000'000;
inline constexpr std::size_t kMaxGpusPerNode = 64;  // GPU sets are 64-bit masks
inline constexpr std::size_t kMaxModels = 64;       // model constraints are 64-bit masks

using GpuMask = std::uint64_t;

struct Gpu {
  std::string uuid;
  std::string model;
  std::uint64_t memory_bytes = 0;
  std::uint32_t sm_count = 0;
  bool mig_enabled = false;
  std::vector<std::string> mig_instances;  // the profile of each configured instance
  int numa_node = -1;
  std::vector<std::uint32_t> nvlink_peers;  // indices of GPUs of the same node
  bool healthy = true;
  bool cordoned = false;
};

struct Node {
  std::string name;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_bytes = 0;
  std::map<std::string, std::string> labels;
  std::vector<Gpu> gpus;
  bool cordoned = false;
};

// One pod's ask. gpu_count == 0 is a CPU-only pod. For GPU pods gpu_milli is the share of each
// of the gpu_count GPUs (1000 = a whole GPU); a multi-GPU pod asks for whole GPUs.
struct Request {
  std::string name;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_bytes = 0;  // host memory
  std::uint32_t gpu_count = 0;
  std::int32_t gpu_milli = 0;
  // Per GPU. 0: derived from milli as the contracts define for trace milli
  // (memory = milli / 1000 x the chosen GPU's memory, docs/design/0002).
  std::uint64_t gpu_memory_bytes = 0;
  // Per GPU, when gpu_memory_bytes is 0: memory as parts per million of the chosen GPU's memory,
  // rounded down to a MiB (cores-only asks and KAI's gpu-fraction, docs/design/0002). 0: milli.
  std::uint32_t memory_ppm = 0;
  std::uint32_t cores_percent = 0;  // compute share; 0: milli / 10
  std::vector<std::string> models;  // acceptable GPU models; empty: any
  std::string mig_profile;          // non-empty: one MIG instance of this profile per GPU
  SharingMode mode = SharingMode::kShared;
  std::string namespace_name;
  TrustTier tier = TrustTier::kTeam;
  policy::CoTenancy co_tenancy = policy::CoTenancy::kAny;  // from the trust policy's tier rule
  std::uint32_t uid = 0;                                   // MPS co-tenants must share it
  PriorityClass priority = PriorityClass::kNormal;

  bool is_gpu() const { return gpu_count > 0; }
  bool exclusive() const { return mode == SharingMode::kExclusive; }
};

// The memory one share of `request` takes on `gpu`: explicit bytes, else memory_ppm of the GPU
// (rounded down to a MiB), else gpu_milli / 1000 of the GPU (the trace's convention).
std::uint64_t MemoryOn(const Gpu& gpu, const Request& request);
std::uint64_t MemoryOn(std::uint64_t gpu_memory_bytes, const Request& request);

// Fills co_tenancy from the policy's rule for the request's tier.
void ApplyTrustPolicy(const policy::Policy& policy, Request& request);

// Where one request went: the node, and the share taken on each chosen GPU.
struct GpuShare {
  std::uint32_t gpu = 0;
  std::int32_t milli = 0;
  std::uint64_t memory_bytes = 0;
  int mig_instance = -1;
};
struct Allocation {
  std::uint32_t node = 0;
  std::vector<GpuShare> gpus;
};

// A co-tenant as the ledger remembers it.
struct TenantEntry {
  std::uint32_t namespace_id = 0;
  TrustTier tier = TrustTier::kTeam;
  policy::CoTenancy co_tenancy = policy::CoTenancy::kAny;
  SharingMode mode = SharingMode::kShared;
  std::uint32_t uid = 0;
  std::uint32_t count = 0;  // pods with exactly these attributes
};

struct GpuState {
  std::int32_t milli_free = kMilliPerGpu;
  std::uint64_t memory_free = 0;
  std::uint64_t mig_used = 0;  // bit i: MIG instance i is taken
  std::vector<TenantEntry> tenants;
  // What Record() put on the GPU beyond its capacity (a placement the ledger learns of after
  // the fact). Remove() takes it back from here first.
  std::uint64_t memory_over = 0;
  std::int32_t milli_over = 0;
  // True iff every tenant is a kAny, shared/native-mode pod: any such request may join.
  bool open() const { return restrictive_ == 0; }

 private:
  friend class Cluster;
  std::uint32_t restrictive_ = 0;  // tenants that are not "open"
};

struct NodeState {
  std::int64_t cpu_free = 0;
  std::int64_t memory_free = 0;
  std::uint32_t pods = 0;
  std::uint32_t version = 0;  // bumped on every change (score caches key on it)
  std::vector<GpuState> gpus;
  // Count of GPU pods per shape: key gpu_count for whole-GPU pods, 0 for fractional ones.
  std::map<std::uint32_t, std::uint32_t> gpu_pod_shapes;
  // Per GPU: milli_free, or 0 for a GPU that cannot be scheduled (unhealthy, cordoned, MIG
  // mode). What the scoring policies see.
  std::vector<std::int32_t> free_milli;
  std::int64_t gpu_milli_free = 0;  // sum of free_milli
};

// A request with its names resolved against one cluster (model set, namespace), computed once
// per request and reused for every node.
struct ResolvedRequest {
  const Request* request = nullptr;
  std::uint64_t model_mask = ~0ULL;  // bit per cluster model id
  bool model_constrained = false;
  std::uint32_t namespace_id = 0;
  bool open = true;  // the request itself imposes no co-tenancy restriction
};

class Cluster {
 public:
  // Validates: unique node names, at most 64 GPUs per node and 64 distinct models, a model and
  // memory on every GPU, NVLink peers in range, non-negative capacities.
  static StatusOr<Cluster> Create(std::vector<Node> nodes);

  std::size_t size() const { return nodes_.size(); }
  const Node& node(std::size_t i) const { return nodes_[i]; }
  const NodeState& state(std::size_t i) const { return states_[i]; }
  // state(i).version, from a dense array (a scan over every node's version stays in cache).
  std::uint32_t version(std::size_t i) const { return versions_[i]; }
  std::uint32_t model_id(std::size_t node, std::size_t gpu) const {
    return gpu_model_ids_[node][gpu];
  }
  // The node's single GPU model id, or kMixedModel if its GPUs differ or it has none.
  static constexpr std::uint32_t kMixedModel = 0xffffffffU;
  std::uint32_t node_model(std::size_t node) const { return node_models_[node]; }
  const std::vector<std::string>& models() const { return models_; }
  std::int64_t total_gpu_milli() const { return total_gpu_milli_; }
  std::size_t total_gpus() const { return total_gpus_; }

  // Health and cordons may change at any time; they only affect future placements.
  Status SetGpuHealth(std::size_t node, std::size_t gpu, bool healthy);
  Status SetGpuCordoned(std::size_t node, std::size_t gpu, bool cordoned);
  Status SetNodeCordoned(std::size_t node, bool cordoned);

  ResolvedRequest Resolve(const Request& request);

  // GPUs of `node` that could each take one share of the request right now (health, cordon,
  // model, MIG, milli, memory, co-tenancy). 0 for a CPU-only request.
  GpuMask UsableGpus(std::size_t node, const ResolvedRequest& request) const;
  // Whether the request fits on the node; sets *usable to UsableGpus().
  bool Feasible(std::size_t node, const ResolvedRequest& request, GpuMask* usable) const {
    if (request.request->memory_bytes > states_[node].memory_free) {
      *usable = 0;
      return false;
    }
    return FeasibleUnlessHostMemory(node, request, usable);
  }
  // Feasible() but for the host memory (the one check that reads the request's host memory):
  // Feasible() == this && the request's host memory <= the node's free host memory.
  bool FeasibleUnlessHostMemory(std::size_t node, const ResolvedRequest& request,
                                GpuMask* usable) const;

  // The share the request takes on GPU `gpu` of `node` (memory resolved, MIG instance chosen).
  GpuShare ShareOn(std::size_t node, std::size_t gpu, const ResolvedRequest& request) const;

  // Ledger. Add refuses (and changes nothing) if the allocation does not fit; Remove refuses if
  // the allocation is not on the ledger. Add then Remove restores the exact prior state.
  Status Add(const ResolvedRequest& request, const Allocation& allocation);
  // Records an allocation that already exists (a pod running there), whatever the GPUs' health,
  // cordons, co-tenancy or free capacity say now: what does not fit is kept as over-commit
  // (memory_over, milli_over) and leaves the GPU with nothing free. Refuses only malformed
  // allocations. Remove() is its exact inverse too.
  Status Record(const ResolvedRequest& request, const Allocation& allocation);
  Status Remove(const ResolvedRequest& request, const Allocation& allocation);

  // Releases everything: the state of a fresh cluster.
  void Reset();

  // Appends to *key every fact about the node that a placement decision can read, its name, its
  // GPUs' UUIDs and its index excepted: static facts (CPU, memory, labels, cordon; per GPU model,
  // memory, SMs, MIG, NUMA, NVLink, health, cordon) and the ledger's state (free CPU and memory,
  // the GPU pod shapes present; per GPU free and over-committed milli and memory, MIG instances
  // taken, tenants in order without their pod counts). Nodes with equal keys are interchangeable
  // to feasibility, every policy's score and GPU choice (the Scheduler's node classes); nodes
  // with unequal keys may be too.
  void AppendStateKey(std::size_t node, std::string* key) const;

  // The change log: every change of a node's state (a version bump: Add, Record, Remove, health,
  // cordons, Reset) appends the node, so a reader that derives per-node state (the Scheduler's
  // node classes) catches up from where it was. change_end() is the position after the last
  // change. The log is trimmed once it holds more than max(4096, 2 x nodes) entries.
  std::uint64_t change_end() const { return change_base_ + changes_.size(); }
  // The nodes changed at positions from..change_end() (repeats possible); false if the log no
  // longer reaches back to `from` (then compare every node's version).
  bool ChangesSince(std::uint64_t from, std::span<const std::uint32_t>* nodes) const;

 private:
  explicit Cluster(std::vector<Node> nodes);
  bool GpuUsable(std::size_t node, std::size_t gpu, const ResolvedRequest& request) const;
  bool TenantCompatible(const TenantEntry& tenant, const ResolvedRequest& request) const;
  void RecomputeMilliFree(std::size_t node);
  void Commit(const ResolvedRequest& request, const Allocation& allocation);  // checked before
  std::uint32_t NamespaceId(std::string_view name);

  std::vector<Node> nodes_;
  std::vector<NodeState> states_;
  std::vector<std::uint32_t> versions_;  // states_[i].version
  std::vector<std::vector<std::uint32_t>> gpu_model_ids_;
  std::vector<std::uint32_t> node_models_;
  std::vector<std::uint64_t> node_gpu_memory_;  // every GPU's size if the node's are equal, else 0
  std::vector<std::string> models_;
  std::map<std::string, std::uint32_t, std::less<>> namespaces_;
  std::int64_t total_gpu_milli_ = 0;
  std::size_t total_gpus_ = 0;
  std::uint32_t next_version_ = 0;      // versions are unique across Reset()
  std::vector<std::uint32_t> changes_;  // the change log from position change_base_
  std::uint64_t change_base_ = 0;
};

}  // namespace tessera::placement
