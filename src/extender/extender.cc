#include "extender/extender.h"

#include "tessera/log.h"
#include "tessera/names.h"

#include "k8s/object.h"

namespace tessera::extender {

using contract::Decision;
using contract::EncodeDecision;
using contract::PodAsk;
using contract::PodIdentity;
using contract::Rfc3339;
using contract::Signer;

using nlohmann::json;

namespace {

constexpr const char* kNotSynced =
    "tessera-scheduler: still reading nodes and pods from the API server; retry";

std::vector<std::string> NodeNames(const json& args) {
  std::vector<std::string> out;
  auto it = args.find("NodeNames");
  if (it != args.end() && it->is_array()) {
    for (const json& n : *it) {
      if (n.is_string()) out.push_back(n.get<std::string>());
    }
    return out;
  }
  // Not node-cache-capable: full Node objects.
  auto nodes = args.find("Nodes");
  if (nodes != args.end() && nodes->is_object()) {
    auto items = nodes->find("items");
    if (items != nodes->end() && items->is_array()) {
      for (const json& n : *items) {
        const json* meta = n.contains("metadata") ? &n["metadata"] : nullptr;
        if (meta != nullptr && meta->contains("name") && (*meta)["name"].is_string()) {
          out.push_back((*meta)["name"].get<std::string>());
        }
      }
    }
  }
  return out;
}

json FilterError(const std::string& message) {
  return {{"NodeNames", json::array()},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", json::object()},
          {"Error", message}};
}

}  // namespace

Extender::Extender(Ledger* ledger, PodWriter* writer, const contract::Signer* signer,
                   std::string key_id, std::function<std::int64_t()> unix_now)
    : ledger_(ledger),
      writer_(writer),
      signer_(signer),
      key_id_(std::move(key_id)),
      unix_now_(std::move(unix_now)) {}

json Extender::Filter(const json& args) {
  ++counters_.filters;
  if (!args.is_object() || !args.contains("Pod") || !args["Pod"].is_object()) {
    ++counters_.filter_errors;
    return FilterError("tessera-scheduler: ExtenderArgs.Pod: missing");
  }
  // Reservations are keyed by the pod's UID: a pod without one could take another's.
  if (PodIdentity(args["Pod"]).uid.empty()) {
    ++counters_.filter_errors;
    return FilterError(
        "tessera-scheduler: ExtenderArgs.Pod.metadata.uid: missing (kube-scheduler always sends "
        "it; a pod without one cannot be placed)");
  }
  if (!synced_) {
    ++counters_.filter_errors;
    return FilterError(kNotSynced);
  }
  const std::vector<std::string> nodes = NodeNames(args);
  FilterOutcome o = ledger_->Filter(args["Pod"], nodes);
  if (!o.error.empty()) {
    ++counters_.filter_errors;
    // A pod that asks wrongly can never fit: every node is unresolvable, with the reason.
    json failed = json::object();
    for (const std::string& n : nodes) failed[n] = o.error;
    return {{"NodeNames", json::array()},
            {"FailedNodes", json::object()},
            {"FailedAndUnresolvableNodes", failed},
            {"Error", ""}};
  }
  if (o.nodes.empty()) ++counters_.unschedulable;
  return {{"NodeNames", o.nodes},
          {"FailedNodes", o.failed},
          {"FailedAndUnresolvableNodes", o.unresolvable},
          {"Error", ""}};
}

json Extender::Prioritize(const json& args) {
  json out = json::array();
  if (!args.is_object() || !args.contains("Pod") || !args["Pod"].is_object()) return out;
  const PodAsk id = PodIdentity(args["Pod"]);
  for (const auto& [node, score] : ledger_->Prioritize(id.uid, NodeNames(args))) {
    out.push_back({{"Host", node}, {"Score", score}});
  }
  return out;
}

json Extender::Bind(const json& args) {
  ++counters_.binds;
  auto fail = [this](const std::string& message) {
    ++counters_.bind_failures;
    return json{{"Error", message}};
  };
  if (!synced_) return fail(kNotSynced);
  const std::string ns = k8s::StringAt(args, "PodNamespace");
  const std::string name = k8s::StringAt(args, "PodName");
  const std::string uid = k8s::StringAt(args, "PodUID");
  const std::string node = k8s::StringAt(args, "Node");
  if (ns.empty() || name.empty() || uid.empty() || node.empty()) {
    return fail(
        "tessera-scheduler: ExtenderBindingArgs: PodNamespace, PodName, PodUID and Node "
        "are required");
  }
  auto reservation = ledger_->BeginBind(uid, node);
  if (!reservation.ok()) return fail(reservation.status().message());

  Decision d;
  d.pod_uid = uid;
  d.pod_namespace = ns;
  d.pod_name = name;
  d.node = node;
  d.tier = reservation->tier;
  d.priority = reservation->priority;
  d.issued_at = Rfc3339(unix_now_());
  d.key_id = key_id_;
  d.containers.push_back(reservation->container);
  const std::string text = EncodeDecision(d);
  auto signature = signer_->Sign(text);
  if (!signature.ok()) {
    ledger_->FinishBind(uid, false);
    return fail(signature.status().message());
  }
  Status st = writer_->Bind(ns, name, uid, node,
                            {{std::string(names::kAnnotationDecision), text},
                             {std::string(names::kAnnotationDecisionSignature), *signature}});
  if (!st.ok()) {
    // The Binding may have been accepted with its answer lost: ask before rolling back.
    auto bound_to = writer_->NodeNameOf(ns, name, uid);
    if (bound_to.ok() && *bound_to == node) {
      st = Status::Ok();
    } else {
      ledger_->FinishBind(uid, false);
      TESSERA_LOG(kWarn, kScheduler, "bind %s/%s to %s failed, reservation rolled back: %s",
                  ns.c_str(), name.c_str(), node.c_str(), st.message().c_str());
      return fail("tessera-scheduler: bind " + ns + "/" + name + ": " + st.message());
    }
  }
  ledger_->FinishBind(uid, true);
  ++counters_.decisions;
  return json{{"Error", ""}};
}

json Extender::Preempt(const json& args) {
  ++counters_.preemptions;
  json out = {{"NodeNameToMetaVictims", json::object()}};
  if (!synced_ || !args.is_object() || !args.contains("Pod")) return out;
  std::map<std::string, std::vector<std::string>> candidates;
  std::map<std::string, json> pdb;
  auto meta = args.find("NodeNameToMetaVictims");
  if (meta != args.end() && meta->is_object()) {
    for (const auto& [node, victims] : meta->items()) {
      std::vector<std::string>& uids = candidates[node];
      if (!victims.is_object()) continue;
      pdb[node] = victims.value("NumPDBViolations", json(0));
      auto pods = victims.find("Pods");
      if (pods == victims.end() || !pods->is_array()) continue;
      for (const json& p : *pods) {
        const std::string uid = k8s::StringAt(p, "UID");
        if (!uid.empty()) uids.push_back(uid);
      }
    }
  }
  for (const auto& [node, uids] : ledger_->Preempt(args["Pod"], candidates)) {
    json pods = json::array();
    for (const std::string& uid : uids) pods.push_back({{"UID", uid}});
    out["NodeNameToMetaVictims"][node] = {{"Pods", pods}, {"NumPDBViolations", pdb[node]}};
  }
  return out;
}

}  // namespace tessera::extender
