// The scheduler's ledger of GPU reservations (docs/design/0012-scheduler-extender.md).
//
// kube-scheduler assumes a pod and binds it asynchronously, so a decision made at bind would
// over-commit. Instead Filter chooses the node and the GPU(s) and reserves them here under the
// pod UID with a time-to-live; Bind turns the reservation into the decision annotation and the
// Binding; a failed or expired bind rolls it back. Bound pods are rebuilt from the API (their
// decision annotations) after a restart, so the API server is the ledger's durable copy.
//
// Thread-safe: the HTTP verbs and the watch threads call in concurrently; one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/clock.h"
#include "tessera/status.h"

#include "contract/decision.h"
#include "contract/pod_ask.h"
#include "placement/cluster.h"
#include "placement/policies.h"
#include "placement/scheduler.h"
#include "policy/policy.h"

namespace tessera::extender {

struct LedgerOptions {
  placement::PolicyKind placement = placement::PolicyKind::kTessera;
  // A reservation not bound within this time is released (kube-scheduler binds in milliseconds;
  // the margin covers a slow API server).
  std::chrono::milliseconds reservation_ttl{30'000};
  // After a relist, a pod this process bound within this time is kept even if the list (which
  // may predate the binding) does not show it bound yet.
  std::chrono::milliseconds relist_grace{60'000};
  // Checks a bound pod's decision annotation against its signature annotation before the ledger
  // counts it (the scheduler's own public key); empty: counted unchecked (tests).
  std::function<bool(const std::string& decision, const std::string& signature)> verify;
};

// Filter's answer in kube-scheduler's terms.
struct FilterOutcome {
  std::vector<std::string> nodes;             // the one chosen node, or none
  std::map<std::string, std::string> failed;  // preemption may help
  std::map<std::string, std::string> unresolvable;
  std::string error;  // the pod itself is wrong (names the field)
};

// What Bind writes: the reservation of one pod.
struct Reservation {
  std::string node;
  contract::DecisionContainer container;
  TrustTier tier = TrustTier::kTeam;
  PriorityClass priority = PriorityClass::kNormal;
};

// Why a pod could or could not go on one GPU (`tessera explain`).
struct GpuVerdict {
  std::string node;
  std::string uuid;
  std::uint64_t memory_free = 0;
  std::int32_t cores_free = 0;  // percent
  bool fits = false;
  std::string why;  // "fits", or the first rule that refuses it
};

// One GPU's books, for tests, metrics and `tessera` CLIs.
struct GpuBooks {
  std::string node;
  std::string uuid;
  std::uint64_t memory_bytes = 0;
  std::uint64_t memory_used = 0;
  std::int32_t milli_used = 0;
  std::vector<std::string> pods;  // UIDs
};

class Ledger {
 public:
  // `clock` judges every time-to-live and grace; it must outlive the ledger.
  Ledger(policy::Policy policy, LedgerOptions options, Clock& clock = Clock::Real());
  ~Ledger();

  // Nodes (from the Node watch).
  void UpsertNode(const nlohmann::json& node);
  void DeleteNode(const std::string& name);
  void ReplaceNodes(const std::vector<nlohmann::json>& nodes);
  // Pods (from the Pod watch). A DELETED event, or a pod that finished, releases its GPUs.
  void ObservePod(const nlohmann::json& pod);
  void ForgetPod(const nlohmann::json& pod);
  void ReplacePods(const std::vector<nlohmann::json>& pods);

  // The extender verbs.
  FilterOutcome Filter(const nlohmann::json& pod, const std::vector<std::string>& nodes);
  // 10 for the node holding the pod's reservation, 0 otherwise (kube-scheduler's 0-10 scale).
  std::vector<std::pair<std::string, int>> Prioritize(const std::string& uid,
                                                      const std::vector<std::string>& nodes);
  // Marks the reservation as being bound (it no longer expires) and returns it; kNotFound if
  // the pod holds no reservation on that node.
  StatusOr<Reservation> BeginBind(const std::string& uid, const std::string& node);
  // bound: the Binding was accepted. Otherwise the reservation is rolled back.
  void FinishBind(const std::string& uid, bool bound);
  // For each candidate node (with kube-scheduler's victims, UIDs), the victims that make room
  // for `pod` on one of its GPUs: kube-scheduler's non-tessera victims plus the fewest
  // lower-priority tessera pods (lowest priority first, then reprieved where possible). Nodes
  // where no such set exists are left out.
  std::map<std::string, std::vector<std::string>> Preempt(
      const nlohmann::json& pod, const std::map<std::string, std::vector<std::string>>& candidates);

  // Releases reservations past their time-to-live; returns how many.
  std::size_t ExpireReservations();
  // Releases every reservation not being bound (a replica that stops leading: kube-scheduler
  // will bind those pods through the new leader, which decides again).
  std::size_t DropReservations();

  std::vector<GpuBooks> Books();
  // A dry run of Filter for `pod` on every known GPU: nothing is reserved. kInvalidArgument
  // (naming the field) if the pod's ask is malformed.
  StatusOr<std::vector<GpuVerdict>> Explain(const nlohmann::json& pod);
  std::size_t reservations() const;
  std::size_t bound() const;
  std::size_t nodes() const;
  // Arrivals the placement policy has learned from (its workload estimate; 0 for a policy that
  // does not learn).
  std::uint64_t arrivals_observed() const;
  // The most memory any known GPU has (0 with no GPU nodes): the admission webhook's bound.
  std::uint64_t LargestGpuMemory() const;

 private:
  struct Entry;
  struct Share;
  void RebuildLocked();
  void EnsureClusterLocked();
  std::optional<placement::Allocation> AllocationLocked(const Entry& entry) const;
  bool ApplyLocked(Entry& entry);
  void ReleaseLocked(const std::string& uid);
  void ObservePodLocked(const nlohmann::json& pod);
  std::string ReasonLocked(std::size_t node, const placement::ResolvedRequest& request) const;
  std::size_t ExpireLocked();

  const policy::Policy policy_;
  const LedgerOptions options_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, placement::Node> nodes_;  // by name, parsed inventories
  std::map<std::string, std::string> bad_nodes_;  // name -> why the inventory is unusable
  // Nodes labelled tessera.dev/path=dra, left out of the books (ADR 0022) -> their largest GPU's
  // memory (0: no usable inventory), which still bounds admission.
  std::map<std::string, std::uint64_t> dra_nodes_;
  bool dirty_ = true;  // nodes_ changed: rebuild the cluster
  std::unique_ptr<placement::Cluster> cluster_;
  std::unique_ptr<placement::PlacementPolicy> placement_;
  std::unique_ptr<placement::Scheduler> scheduler_;
  std::unordered_map<std::string, std::uint32_t> node_index_;  // a lookup per named node per filter
  std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> gpu_index_;  // uuid -> node, gpu
  std::map<std::string, Entry> entries_;                                      // by pod UID
  // The earliest a reservation or an unconfirmed bind can expire (never later): passes before
  // it skip the walk over every entry.
  std::chrono::steady_clock::time_point next_expiry_{};
  // UIDs of live pods the placement policy has been shown (Filter decided them once); dropped
  // when the pod is deleted, finishes or is missing from a relist; at most kMaxShown.
  static constexpr std::size_t kMaxShown = 100'000;
  std::unordered_set<std::string> shown_;
};

}  // namespace tessera::extender
