// tessera-scheduler's extender verbs over HTTP+JSON, as kube-scheduler's HTTPExtender sends
// them (k8s.io/kube-scheduler/extender/v1: ExtenderArgs, ExtenderFilterResult,
// HostPriorityList, ExtenderBindingArgs/Result, ExtenderPreemptionArgs/Result), with
// nodeCacheCapable: true (node names, not Node objects).
//
// The verbs are plain functions of JSON in, JSON out, over a Ledger and a PodWriter, so that
// tests drive them without HTTP; server.h puts them behind httplib.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/names.h"
#include "tessera/status.h"

#include "contract/decision.h"
#include "extender/ledger.h"

namespace tessera::extender {

// The bind's one write. The real one is the Kubernetes client (daemon.cc); tests use a fake
// that records calls and fails on demand.
class PodWriter {
 public:
  virtual ~PodWriter() = default;
  // POST pods/<name>/binding with the UID precondition; the Binding's annotations (the signed
  // decision) are set on the pod by the API server in the same write as spec.nodeName, so a pod
  // is never bound without its decision nor annotated without being bound.
  virtual Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
                      const std::string& node,
                      const std::map<std::string, std::string>& annotations) = 0;
  // spec.nodeName as the API server has it now ("" while unbound): settles a Binding whose
  // answer was lost.
  virtual StatusOr<std::string> NodeNameOf(const std::string& ns, const std::string& name,
                                           const std::string& uid) = 0;
};

// One member per row of TESSERA_SCHEDULER_COUNTERS (tessera/names.h), each a counter family that
// /metrics exposes through ForEach: a counter without its metric row cannot be declared.
struct ExtenderCounters {
#define TESSERA_EXTENDER_COUNTER(member, constant, name, type, labels, help) \
  static_assert(std::string_view(type) == "counter", name);                  \
  std::atomic<std::uint64_t> member{0};
  TESSERA_SCHEDULER_COUNTERS(TESSERA_EXTENDER_COUNTER)
#undef TESSERA_EXTENDER_COUNTER

  // f(metric family name, value) for every counter, in the list's order.
  template <typename F>
  void ForEach(F&& f) const {
#define TESSERA_EXTENDER_COUNTER(member, constant, name, type, labels, help) \
  f(names::constant, member.load());
    TESSERA_SCHEDULER_COUNTERS(TESSERA_EXTENDER_COUNTER)
#undef TESSERA_EXTENDER_COUNTER
  }
};

class Extender {
 public:
  // `key_id` names the signer's key in the decision (node agents look the public key up by it).
  Extender(Ledger* ledger, PodWriter* writer, const contract::Signer* signer, std::string key_id,
           std::function<std::int64_t()> unix_now);

  // Until the first full list of nodes and pods, every verb answers with an error and
  // kube-scheduler retries the pod later.
  void SetSynced(bool synced) { synced_ = synced; }
  bool synced() const { return synced_; }
  // With leader election, only the leader answers the verbs (the others: 503, so that a proxy
  // or a retrying client goes to the leader). `leading` is asked on every call (the Lease's
  // live state, never a cached flag that could outlive the lease); unset: always leading.
  void SetLeaderCheck(std::function<bool()> leading) { leading_ = std::move(leading); }
  bool serving() const { return synced_ && (!leading_ || leading_()); }

  nlohmann::json Filter(const nlohmann::json& args);
  nlohmann::json Prioritize(const nlohmann::json& args);
  nlohmann::json Bind(const nlohmann::json& args);
  nlohmann::json Preempt(const nlohmann::json& args);

  const ExtenderCounters& counters() const { return counters_; }

 private:
  Ledger* ledger_;
  PodWriter* writer_;
  const contract::Signer* signer_;
  std::string key_id_;
  std::function<std::int64_t()> unix_now_;
  std::atomic<bool> synced_{false};
  std::function<bool()> leading_;  // set before serving starts
  ExtenderCounters counters_;
};

}  // namespace tessera::extender
