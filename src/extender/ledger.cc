#include "extender/ledger.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "contract/inventory.h"
#include "k8s/object.h"

namespace tessera::extender {

using contract::DecisionContainer;
using contract::DecisionDevice;
using contract::ParseDecision;
using contract::ParseNodeInventory;
using contract::ParsePodAsk;
using contract::PodAsk;
using contract::PodIdentity;
using contract::SameHardware;
using k8s::AnnotationOf;
using k8s::Find;
using k8s::StringAt;

using nlohmann::json;

struct Ledger::Share {
  std::string uuid;
  std::int32_t milli = 0;
  std::uint64_t memory = 0;
};

struct Ledger::Entry {
  enum class State : std::uint8_t { kReserved, kBinding, kBound };
  std::string uid;
  std::string pod;  // namespace/name, for messages
  std::string container;
  placement::Request request;
  ComputeMode compute = ComputeMode::kHard;  // how the share is held (into the decision)
  std::uint32_t compute_window_ms = 0;
  std::int32_t k8s_priority = 0;
  std::string node;
  std::vector<Share> shares;
  State state = State::kReserved;
  std::chrono::steady_clock::time_point expires{};
  std::chrono::steady_clock::time_point bound_at{};
  bool bound_here = false;   // this process posted the Binding
  bool seen = false;         // present in the latest relist
  bool unconfirmed = false;  // kept across a relist that did not show it; the watch must
  bool applied = false;      // counted on cluster_
};

namespace {

bool SameRequest(const placement::Request& a, const placement::Request& b) {
  return a.gpu_count == b.gpu_count && a.gpu_milli == b.gpu_milli &&
         a.gpu_memory_bytes == b.gpu_memory_bytes && a.memory_ppm == b.memory_ppm &&
         a.mode == b.mode && a.tier == b.tier && a.priority == b.priority && a.uid == b.uid &&
         a.namespace_name == b.namespace_name;
}

std::string NodeName(const json& node) {
  const json* meta = Find(node, "metadata");
  return meta != nullptr ? StringAt(*meta, "name") : std::string();
}

// The memory of the node's largest GPU (0: none).
std::uint64_t LargestOn(const placement::Node& node) {
  std::uint64_t largest = 0;
  for (const placement::Gpu& g : node.gpus) largest = std::max(largest, g.memory_bytes);
  return largest;
}

std::string DecisionText(const json& pod) {
  return AnnotationOf(pod, names::kAnnotationDecision).value_or("");
}

}  // namespace

Ledger::Ledger(policy::Policy policy, LedgerOptions options, Clock& clock)
    : policy_(std::move(policy)), options_(std::move(options)), clock_(clock) {}

Ledger::~Ledger() = default;

// --- nodes --------------------------------------------------------------------------------

void Ledger::UpsertNode(const json& node) {
  std::lock_guard lock(mu_);
  const std::string name = NodeName(node);
  if (name.empty()) return;
  // A node on the DRA path: kube-scheduler's allocator hands its GPUs out (ADR 0022), so the
  // ledger must not count them too.
  const json* meta = Find(node, "metadata");
  const json* labels = meta != nullptr ? Find(*meta, "labels") : nullptr;
  if (labels != nullptr && StringAt(*labels, names::kLabelAllocationPath) == "dra") {
    // Its GPUs still bound what admission lets a claim or a pod ask (LargestGpuMemory).
    const auto parsed = ParseNodeInventory(node);
    dra_nodes_[name] = parsed.ok() ? LargestOn(*parsed) : 0;
    bad_nodes_.erase(name);
    if (nodes_.erase(name) != 0) dirty_ = true;
    return;
  }
  dra_nodes_.erase(name);
  auto parsed = ParseNodeInventory(node);
  if (!parsed.ok()) {
    if (parsed.status().code() != StatusCode::kNotFound) {
      TESSERA_LOG(kWarn, kScheduler, "%s", parsed.status().message().c_str());
    }
    bad_nodes_[name] = parsed.status().message();
    if (nodes_.erase(name) != 0) dirty_ = true;
    return;
  }
  {
    std::set<std::string> models;
    for (const auto& [other, known] : nodes_) {
      if (other == name) continue;
      for (const placement::Gpu& g : known.gpus) models.insert(g.model);
    }
    for (const placement::Gpu& g : parsed->gpus) models.insert(g.model);
    if (models.size() > placement::kMaxModels) {
      const std::string why = "node " + name + ": its GPU models would make more than " +
                              std::to_string(placement::kMaxModels) +
                              " distinct models in the cluster; node left out";
      TESSERA_LOG(kError, kScheduler, "%s", why.c_str());
      bad_nodes_[name] = why;
      if (nodes_.erase(name) != 0) dirty_ = true;
      return;
    }
  }
  bad_nodes_.erase(name);
  auto it = nodes_.find(name);
  if (it != nodes_.end() && !dirty_ && cluster_ && SameHardware(it->second, *parsed)) {
    // Health and cordons change in place; everything else rebuilds the cluster.
    auto index = node_index_.find(name);
    if (index == node_index_.end()) {  // not in the model (it was refused): rebuild
      nodes_[name] = *std::move(parsed);
      dirty_ = true;
      return;
    }
    const std::uint32_t i = index->second;
    for (std::size_t g = 0; g < parsed->gpus.size(); ++g) {
      (void)cluster_->SetGpuHealth(i, g, parsed->gpus[g].healthy);
      (void)cluster_->SetGpuCordoned(i, g, parsed->gpus[g].cordoned);
    }
    (void)cluster_->SetNodeCordoned(i, parsed->cordoned);
    it->second = *std::move(parsed);
    return;
  }
  nodes_[name] = *std::move(parsed);
  dirty_ = true;
}

void Ledger::DeleteNode(const std::string& name) {
  std::lock_guard lock(mu_);
  bad_nodes_.erase(name);
  dra_nodes_.erase(name);
  if (nodes_.erase(name) != 0) dirty_ = true;
}

void Ledger::ReplaceNodes(const std::vector<json>& nodes) {
  {
    std::lock_guard lock(mu_);
    nodes_.clear();
    bad_nodes_.clear();
    dra_nodes_.clear();
    dirty_ = true;
  }
  for (const json& n : nodes) UpsertNode(n);
}

void Ledger::EnsureClusterLocked() {
  if (dirty_ || !cluster_) RebuildLocked();
}

void Ledger::RebuildLocked() {
  std::vector<placement::Node> list;
  list.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) list.push_back(node);
  auto cluster = placement::Cluster::Create(std::move(list));
  if (!cluster.ok()) {
    // Each node was validated alone; this is a cross-node problem. Keep the nodes out.
    TESSERA_LOG(kError, kScheduler, "cluster model: %s", cluster.status().message().c_str());
    cluster = placement::Cluster::Create({});
  }
  scheduler_.reset();
  // The old model is kept until the pods are on the new one: the new policy then continues from
  // what the old one learned (tessera's workload estimate), rebuilt against the new cluster as
  // it stands, so that a node joining does not make the scheduler forget the arrivals it saw.
  std::unique_ptr<placement::Cluster> old_cluster = std::move(cluster_);
  std::unique_ptr<placement::PlacementPolicy> old_policy = std::move(placement_);
  cluster_ = std::make_unique<placement::Cluster>(*std::move(cluster));
  placement_ =
      placement::MakePolicy(options_.placement, *cluster_, placement::WorkloadProfile{}, nullptr);
  scheduler_ = std::make_unique<placement::Scheduler>(cluster_.get(), placement_.get());
  node_index_.clear();
  gpu_index_.clear();
  for (std::uint32_t i = 0; i < cluster_->size(); ++i) {
    const placement::Node& n = cluster_->node(i);
    node_index_[n.name] = i;
    for (std::uint32_t g = 0; g < n.gpus.size(); ++g) gpu_index_[n.gpus[g].uuid] = {i, g};
  }
  dirty_ = false;
  for (auto& [uid, entry] : entries_) {
    entry.applied = false;
    ApplyLocked(entry);
  }
  if (old_policy != nullptr) placement_->ContinueFrom(*old_policy);
  old_policy.reset();  // before the cluster it was made for
}

std::optional<placement::Allocation> Ledger::AllocationLocked(const Entry& entry) const {
  auto node = node_index_.find(entry.node);
  if (node == node_index_.end()) return std::nullopt;
  placement::Allocation a;
  a.node = node->second;
  for (const Share& s : entry.shares) {
    auto gpu = gpu_index_.find(s.uuid);
    if (gpu == gpu_index_.end() || gpu->second.first != a.node) return std::nullopt;
    a.gpus.push_back({gpu->second.second, s.milli, s.memory, -1});
  }
  return a;
}

bool Ledger::ApplyLocked(Entry& entry) {
  if (entry.applied || dirty_ || !cluster_) return entry.applied;
  auto a = AllocationLocked(entry);
  if (!a) {
    TESSERA_LOG(kWarn, kScheduler, "pod %s: its GPUs on node %s are not in the inventory",
                entry.pod.c_str(), entry.node.c_str());
    return false;
  }
  // A placement that exists is counted whatever the GPU's state says now (cordoned, unhealthy,
  // or fuller than it should be after a lost bind answer): never drop real usage.
  const Status st = cluster_->Record(cluster_->Resolve(entry.request), *a);
  if (!st.ok()) {
    TESSERA_LOG(kError, kScheduler, "pod %s on node %s: not counted: %s", entry.pod.c_str(),
                entry.node.c_str(), st.message().c_str());
    return false;
  }
  entry.applied = true;
  return true;
}

void Ledger::ReleaseLocked(const std::string& uid) {
  auto it = entries_.find(uid);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.applied && !dirty_ && cluster_) {
    if (auto a = AllocationLocked(e)) {
      const Status st = cluster_->Remove(cluster_->Resolve(e.request), *a);
      if (!st.ok()) {
        TESSERA_LOG(kError, kScheduler, "pod %s: release: %s", e.pod.c_str(), st.message().c_str());
      }
    }
  }
  entries_.erase(it);
}

// --- pods ---------------------------------------------------------------------------------

void Ledger::ObservePod(const json& pod) {
  std::lock_guard lock(mu_);
  ObservePodLocked(pod);
}

void Ledger::ObservePodLocked(const json& pod) {
  const PodAsk id = PodIdentity(pod);
  if (id.uid.empty()) return;
  auto it = entries_.find(id.uid);
  if (id.terminal) {
    shown_.erase(id.uid);
    ReleaseLocked(id.uid);
    return;
  }
  if (id.node_name.empty()) return;  // not bound yet: a reservation, if any, stays
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (e.node == id.node_name) {
      e.seen = true;
      e.unconfirmed = false;
      e.k8s_priority = id.k8s_priority;
      if (e.state != Entry::State::kBound) {  // the watch overtook our own bind's answer
        e.state = Entry::State::kBound;
        e.bound_at = clock_.Now();
      }
      return;
    }
    ReleaseLocked(id.uid);  // bound elsewhere than reserved: its decision says where
  }
  const std::string text = DecisionText(pod);
  if (text.empty()) return;  // not placed by tessera
  auto d = ParseDecision(text);
  if (!d.ok() || d->pod_uid != id.uid || d->node != id.node_name || d->containers.size() != 1) {
    TESSERA_LOG(kWarn, kScheduler, "pod %s: decision annotation ignored: %s", id.key().c_str(),
                d.ok() ? "it names another pod or node" : d.status().message().c_str());
    return;
  }
  if (options_.verify &&
      !options_.verify(text, AnnotationOf(pod, names::kAnnotationDecisionSignature).value_or(""))) {
    TESSERA_LOG(kWarn, kScheduler,
                "pod %s: decision annotation ignored: its signature does not "
                "verify with this scheduler's key",
                id.key().c_str());
    return;
  }
  const DecisionContainer& c = d->containers.front();
  Entry e;
  e.uid = id.uid;
  e.pod = id.key();
  e.container = c.name;
  e.compute = c.compute;
  e.compute_window_ms = c.compute_window_ms;
  e.k8s_priority = id.k8s_priority;
  e.node = id.node_name;
  placement::Request& q = e.request;
  q.name = e.pod;
  q.namespace_name = id.namespace_name;
  q.tier = d->tier;
  q.priority = d->priority;
  q.mode = c.mode;
  placement::ApplyTrustPolicy(policy_, q);
  if (q.mode == SharingMode::kMps) {  // MPS co-tenants must share the user ID (not in the decision)
    const std::string user = AnnotationOf(pod, names::kAnnotationMpsUser).value_or("");
    std::uint32_t value = 0;
    if (std::from_chars(user.data(), user.data() + user.size(), value).ec == std::errc())
      q.uid = value;
  }
  q.gpu_count = static_cast<std::uint32_t>(c.devices.size());
  q.gpu_milli = static_cast<std::int32_t>(c.devices.front().cores_percent) * 10;
  q.gpu_memory_bytes = c.devices.front().memory_bytes;
  for (const DecisionDevice& dev : c.devices) {
    e.shares.push_back(
        {dev.uuid, static_cast<std::int32_t>(dev.cores_percent) * 10, dev.memory_bytes});
  }
  e.state = Entry::State::kBound;
  e.bound_at = clock_.Now();
  e.seen = true;
  Entry& stored = entries_[id.uid] = std::move(e);
  ApplyLocked(stored);
}

void Ledger::ForgetPod(const json& pod) {
  std::lock_guard lock(mu_);
  const std::string uid = PodIdentity(pod).uid;
  shown_.erase(uid);
  ReleaseLocked(uid);
}

void Ledger::ReplacePods(const std::vector<json>& pods) {
  std::lock_guard lock(mu_);
  for (auto& [uid, e] : entries_) e.seen = false;
  std::unordered_set<std::string> listed;
  for (const json& p : pods) {
    ObservePodLocked(p);
    listed.insert(PodIdentity(p).uid);
  }
  std::erase_if(shown_, [&](const std::string& uid) { return !listed.contains(uid); });
  const auto now = clock_.Now();
  std::vector<std::string> gone;
  for (auto& [uid, e] : entries_) {
    if (e.state != Entry::State::kBound || e.seen) continue;
    if (e.bound_here && now - e.bound_at < options_.relist_grace) {
      e.unconfirmed = true;  // the watch from this list on shows it, or the grace runs out
      next_expiry_ = std::min(next_expiry_, e.bound_at + options_.relist_grace);
      continue;
    }
    gone.push_back(uid);
  }
  for (const std::string& uid : gone) ReleaseLocked(uid);
}

// --- verbs --------------------------------------------------------------------------------

std::size_t Ledger::ExpireLocked() {
  const auto now = clock_.Now();
  if (now < next_expiry_) return 0;  // nothing can have expired yet
  next_expiry_ = std::chrono::steady_clock::time_point::max();
  std::vector<std::string> expired;
  for (const auto& [uid, e] : entries_) {
    const bool reserved = e.state == Entry::State::kReserved;
    // Kept across a relist but never seen since: deleted while the watch was down.
    const auto grace_ends = e.bound_at + options_.relist_grace;
    if ((reserved && e.expires <= now) || (e.unconfirmed && now >= grace_ends)) {
      expired.push_back(uid);
      continue;
    }
    if (reserved) next_expiry_ = std::min(next_expiry_, e.expires);
    if (e.unconfirmed) next_expiry_ = std::min(next_expiry_, grace_ends);
  }
  for (const std::string& uid : expired) {
    TESSERA_LOG(kInfo, kScheduler, "pod %s: reservation expired unbound; released",
                entries_.at(uid).pod.c_str());
    ReleaseLocked(uid);
  }
  return expired.size();
}

std::size_t Ledger::DropReservations() {
  std::lock_guard lock(mu_);
  std::vector<std::string> dropped;
  for (const auto& [uid, e] : entries_) {
    if (e.state == Entry::State::kReserved) dropped.push_back(uid);
  }
  for (const std::string& uid : dropped) ReleaseLocked(uid);
  return dropped.size();
}

std::size_t Ledger::ExpireReservations() {
  std::lock_guard lock(mu_);
  return ExpireLocked();
}

std::string Ledger::ReasonLocked(std::size_t i, const placement::ResolvedRequest& r) const {
  const placement::Node& n = cluster_->node(i);
  const placement::NodeState& s = cluster_->state(i);
  const placement::Request& q = *r.request;
  if (n.cordoned) return "tessera: node cordoned";
  std::size_t schedulable = 0;
  std::size_t idle = 0;
  bool compute = false;
  bool memory = false;
  for (std::size_t g = 0; g < n.gpus.size(); ++g) {
    const placement::Gpu& gpu = n.gpus[g];
    if (!gpu.healthy || gpu.cordoned || gpu.mig_enabled) continue;
    ++schedulable;
    const placement::GpuState& gs = s.gpus[g];
    if (gs.tenants.empty()) ++idle;
    const bool c = gs.milli_free >= q.gpu_milli;
    const bool m = gs.memory_free >= placement::MemoryOn(gpu, q);
    compute = compute || c;
    memory = memory || (c && m);
  }
  if (schedulable == 0) return "tessera: no healthy, uncordoned GPU";
  if (q.exclusive() || q.gpu_count > 1) {
    if (schedulable < q.gpu_count) return "tessera: fewer GPUs than asked";
    if (idle < q.gpu_count) return "tessera: not enough idle GPUs";
    return "tessera: co-tenancy rules";
  }
  if (!compute) return "tessera: no GPU with the asked compute share free";
  if (!memory) return "tessera: no GPU with the asked memory free";
  return "tessera: co-tenancy rules of the pods on its GPUs";
}

FilterOutcome Ledger::Filter(const json& pod, const std::vector<std::string>& nodes) {
  FilterOutcome out;
  auto ask = ParsePodAsk(pod, policy_);
  if (!ask.ok()) {
    out.error = ask.status().message();
    return out;
  }
  if (!ask->wants_gpu()) {
    out.nodes = nodes;
    return out;
  }
  std::lock_guard lock(mu_);
  ExpireLocked();
  EnsureClusterLocked();
  const auto now = clock_.Now();
  if (auto it = entries_.find(ask->uid); it != entries_.end()) {
    Entry& e = it->second;
    const bool listed = std::find(nodes.begin(), nodes.end(), e.node) != nodes.end();
    // Pods are immutable where it matters, so a different ask under the same UID is not the
    // same pod's retry: never hand it the reservation (or the bound pod's node).
    if (e.state == Entry::State::kReserved ? !SameRequest(e.request, ask->request)
                                           : e.request.namespace_name != ask->namespace_name) {
      out.error = "tessera: pod " + ask->key() + " (UID " + ask->uid +
                  ") asks differently from what was reserved for that UID";
      return out;
    }
    if (e.state != Entry::State::kReserved) {
      if (listed) {
        out.nodes = {e.node};
      } else {
        for (const std::string& n : nodes)
          out.unresolvable[n] = "tessera: pod already placed on " + e.node;
      }
      return out;
    }
    if (listed && e.applied) {  // kube-scheduler asks again: keep the reservation
      e.expires = now + options_.reservation_ttl;
      next_expiry_ = std::min(next_expiry_, e.expires);
      out.nodes = {e.node};
      return out;
    }
    ReleaseLocked(ask->uid);
  }
  std::vector<std::uint32_t> candidates;
  candidates.reserve(nodes.size());
  for (const std::string& n : nodes) {
    if (auto it = node_index_.find(n); it != node_index_.end()) {
      candidates.push_back(it->second);
    } else if (dra_nodes_.contains(n)) {
      out.unresolvable[n] = "tessera: the node hands out its GPUs through DRA (ResourceClaims of " +
                            std::string(names::kDraDriver) +
                            "), not to tessera.dev resource requests";
    } else if (auto bad = bad_nodes_.find(n);
               bad != bad_nodes_.end() && bad->second.find("missing") == std::string::npos) {
      out.unresolvable[n] = "tessera: the node's GPU inventory is unusable";
    } else {
      out.unresolvable[n] = "tessera: no tessera GPUs on the node";
    }
  }
  if (candidates.empty()) return out;
  // A pod is one arrival for the policy's estimate however often it is decided (kube-scheduler
  // asks again after no node could take it, after its reservation expired or its bind failed).
  const bool shown = !ask->uid.empty() && shown_.contains(ask->uid);
  std::optional<placement::Allocation> a = scheduler_->Decide(ask->request, candidates, !shown);
  if (!shown && !ask->uid.empty()) {
    if (shown_.size() >= kMaxShown) shown_.clear();  // bounded: forgets, never grows
    shown_.insert(ask->uid);
  }
  const placement::ResolvedRequest r = cluster_->Resolve(ask->request);
  if (!a) {
    for (std::uint32_t i : candidates) out.failed[cluster_->node(i).name] = ReasonLocked(i, r);
    return out;
  }
  if (const Status st = cluster_->Add(r, *a); !st.ok()) {
    out.error = "tessera: ledger refused its own decision: " + st.message();
    return out;
  }
  Entry e;
  e.uid = ask->uid;
  e.pod = ask->key();
  e.container = ask->container;
  e.request = ask->request;
  e.compute = ask->compute;
  e.compute_window_ms = ask->compute_window_ms;
  e.k8s_priority = ask->k8s_priority;
  e.node = cluster_->node(a->node).name;
  for (const placement::GpuShare& s : a->gpus) {
    e.shares.push_back({cluster_->node(a->node).gpus[s.gpu].uuid, s.milli, s.memory_bytes});
  }
  e.state = Entry::State::kReserved;
  e.expires = now + options_.reservation_ttl;
  next_expiry_ = std::min(next_expiry_, e.expires);
  e.applied = true;
  out.nodes = {e.node};
  entries_[e.uid] = std::move(e);
  return out;
}

std::vector<std::pair<std::string, int>> Ledger::Prioritize(const std::string& uid,
                                                            const std::vector<std::string>& nodes) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(uid);
  std::vector<std::pair<std::string, int>> out;
  out.reserve(nodes.size());
  for (const std::string& n : nodes) {
    out.emplace_back(n, it != entries_.end() && it->second.node == n ? 10 : 0);
  }
  return out;
}

StatusOr<Reservation> Ledger::BeginBind(const std::string& uid, const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(uid);
  if (it == entries_.end() || !it->second.applied) {
    return NotFoundError("pod " + uid +
                         " holds no GPU reservation (it expired, or the scheduler restarted); "
                         "kube-scheduler will schedule it again");
  }
  Entry& e = it->second;
  if (e.node != node) {
    return FailedPreconditionError("pod " + e.pod + ": GPUs are reserved on node " + e.node +
                                   ", not " + node);
  }
  if (e.state == Entry::State::kReserved) e.state = Entry::State::kBinding;
  Reservation out;
  out.node = e.node;
  out.tier = e.request.tier;
  out.priority = e.request.priority;
  out.container.name = e.container;
  out.container.mode = e.request.mode;
  out.container.compute = e.compute;
  out.container.compute_window_ms = e.compute_window_ms;
  for (const Share& s : e.shares) {
    out.container.devices.push_back({s.uuid, s.memory, static_cast<std::uint32_t>(s.milli / 10)});
  }
  return out;
}

void Ledger::FinishBind(const std::string& uid, bool bound) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(uid);
  if (it == entries_.end()) return;
  if (!bound) {
    if (it->second.state != Entry::State::kBound) ReleaseLocked(uid);
    return;
  }
  it->second.state = Entry::State::kBound;
  it->second.bound_here = true;
  it->second.bound_at = clock_.Now();
}

std::map<std::string, std::vector<std::string>> Ledger::Preempt(
    const json& pod, const std::map<std::string, std::vector<std::string>>& candidates) {
  std::map<std::string, std::vector<std::string>> out;
  auto ask = ParsePodAsk(pod, policy_);
  if (!ask.ok() || !ask->wants_gpu()) return candidates;  // not ours to judge
  std::lock_guard lock(mu_);
  EnsureClusterLocked();
  const placement::ResolvedRequest r = cluster_->Resolve(ask->request);
  auto change = [this](Entry& e, bool add) {
    auto a = AllocationLocked(e);
    const placement::ResolvedRequest er = cluster_->Resolve(e.request);
    const Status st = add ? cluster_->Record(er, *a) : cluster_->Remove(er, *a);
    if (!st.ok()) {
      TESSERA_LOG(kError, kScheduler, "preempt: pod %s: %s", e.pod.c_str(), st.message().c_str());
    }
  };
  for (const auto& [name, victims] : candidates) {
    auto idx = node_index_.find(name);
    if (idx == node_index_.end()) continue;
    const std::uint32_t i = idx->second;
    std::vector<std::string> result;
    for (const std::string& uid : victims) {
      if (!entries_.contains(uid)) result.push_back(uid);  // not a tessera pod: kube's call
    }
    std::vector<Entry*> lower;
    for (auto& [uid, e] : entries_) {
      if (e.node == name && e.applied && e.state == Entry::State::kBound &&
          e.k8s_priority < ask->k8s_priority) {
        lower.push_back(&e);
      }
    }
    auto memory = [](const Entry* e) {
      std::uint64_t m = 0;
      for (const Share& s : e->shares) m += s.memory;
      return m;
    };
    std::sort(lower.begin(), lower.end(), [&](const Entry* a, const Entry* b) {
      if (a->k8s_priority != b->k8s_priority) return a->k8s_priority < b->k8s_priority;
      if (memory(a) != memory(b)) return memory(a) > memory(b);
      return a->uid < b->uid;
    });
    placement::GpuMask usable = 0;
    if (cluster_->Feasible(i, r, &usable)) continue;  // fits already: nothing to preempt for
    std::vector<Entry*> removed;
    bool fits = false;
    for (Entry* e : lower) {
      change(*e, false);
      removed.push_back(e);
      if (cluster_->Feasible(i, r, &usable)) {
        fits = true;
        break;
      }
    }
    std::vector<Entry*> chosen;
    if (fits) {
      // Reprieve the most important first, as kube-scheduler does for its own resources.
      for (auto it = removed.rbegin(); it != removed.rend(); ++it) {
        change(**it, true);
        if (!cluster_->Feasible(i, r, &usable)) {
          change(**it, false);
          chosen.push_back(*it);
        }
      }
    }
    for (Entry* e : fits ? chosen : removed) change(*e, true);  // leave the ledger as it was
    if (!fits) continue;
    for (const Entry* e : chosen) result.push_back(e->uid);
    out[name] = std::move(result);
  }
  return out;
}

// --- introspection ------------------------------------------------------------------------

StatusOr<std::vector<GpuVerdict>> Ledger::Explain(const json& pod) {
  auto ask = ParsePodAsk(pod, policy_);
  if (!ask.ok()) return ask.status();
  std::vector<GpuVerdict> out;
  if (!ask->wants_gpu()) return out;
  std::lock_guard lock(mu_);
  EnsureClusterLocked();
  const placement::ResolvedRequest r = cluster_->Resolve(ask->request);
  const placement::Request& q = ask->request;
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    const placement::Node& n = cluster_->node(i);
    const placement::GpuMask usable = cluster_->UsableGpus(i, r);
    for (std::size_t g = 0; g < n.gpus.size(); ++g) {
      const placement::Gpu& gpu = n.gpus[g];
      const placement::GpuState& gs = cluster_->state(i).gpus[g];
      GpuVerdict v;
      v.node = n.name;
      v.uuid = gpu.uuid;
      v.memory_free = gs.memory_free;
      v.cores_free = gs.milli_free / 10;
      const std::uint64_t memory = placement::MemoryOn(gpu, q);
      if (n.cordoned) {
        v.why = "node cordoned";
      } else if (!gpu.healthy) {
        v.why = "GPU unhealthy";
      } else if (gpu.cordoned) {
        v.why = "GPU cordoned (" + std::string(names::kAnnotationGpuCordon) + ")";
      } else if (gpu.mig_enabled) {
        v.why = "MIG mode: only MIG asks";
      } else if (q.exclusive() && !gs.tenants.empty()) {
        v.why = "whole GPU asked, " + std::to_string(gs.tenants.size()) + " tenant group(s) on it";
      } else if (gs.milli_free < q.gpu_milli) {
        v.why = "compute: " + std::to_string(v.cores_free) + "% free, asks " +
                std::to_string(q.gpu_milli / 10) + "%";
      } else if (gs.memory_free < memory) {
        v.why = "memory: " + FormatBytesHuman(gs.memory_free) + " free, asks " +
                FormatBytesHuman(memory);
      } else if (((usable >> g) & 1ULL) == 0) {
        v.why = "co-tenancy: the trust rules of this pod or of the pods on the GPU forbid sharing";
      } else {
        v.fits = true;
        v.why = "fits";
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::vector<GpuBooks> Ledger::Books() {
  std::lock_guard lock(mu_);
  EnsureClusterLocked();
  std::vector<GpuBooks> out;
  std::map<std::string, std::vector<std::string>> pods_of;
  for (const auto& [uid, e] : entries_) {
    if (!e.applied) continue;
    for (const Share& s : e.shares) pods_of[s.uuid].push_back(uid);
  }
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    const placement::Node& n = cluster_->node(i);
    for (std::size_t g = 0; g < n.gpus.size(); ++g) {
      const placement::GpuState& gs = cluster_->state(i).gpus[g];
      GpuBooks b;
      b.node = n.name;
      b.uuid = n.gpus[g].uuid;
      b.memory_bytes = n.gpus[g].memory_bytes;
      b.memory_used = n.gpus[g].memory_bytes - gs.memory_free;
      b.milli_used = placement::kMilliPerGpu - gs.milli_free;
      b.pods = pods_of[b.uuid];
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::size_t Ledger::reservations() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(),
                    [](const auto& kv) { return kv.second.state != Entry::State::kBound; }));
}

std::size_t Ledger::bound() const {
  std::lock_guard lock(mu_);
  return entries_.size() - static_cast<std::size_t>(
                               std::count_if(entries_.begin(), entries_.end(), [](const auto& kv) {
                                 return kv.second.state != Entry::State::kBound;
                               }));
}

std::uint64_t Ledger::LargestGpuMemory() const {
  std::lock_guard lock(mu_);
  std::uint64_t largest = 0;
  for (const auto& [name, node] : nodes_) largest = std::max(largest, LargestOn(node));
  for (const auto& [name, dra_largest] : dra_nodes_) largest = std::max(largest, dra_largest);
  return largest;
}

std::size_t Ledger::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

std::uint64_t Ledger::arrivals_observed() const {
  std::lock_guard lock(mu_);
  return placement_ != nullptr ? placement_->observed() : 0;
}

}  // namespace tessera::extender
