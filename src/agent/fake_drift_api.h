// The API server as the node's drift and CDI checks see it, for tests.
#pragma once

#include <string>
#include <vector>

#include "agent/drift_actions.h"

namespace tessera::agent {

struct Event {
  std::string target;  // "Pod ns/name" or "Node"
  std::string reason;
  std::string message;
};

// Records every call; GetPod answers a pod of the asked name (uid "uid-from-api") with the
// fields of `pod_fields` merged in, or `pod_error`.
class FakeApi : public DriftApi {
 public:
  StatusOr<k8s::Json> GetPod(std::string_view ns, std::string_view name) override {
    gets.push_back(std::string(ns) + "/" + std::string(name));
    if (!pod_error.ok()) return pod_error;
    k8s::Json pod = {
        {"metadata",
         {{"namespace", std::string(ns)}, {"name", std::string(name)}, {"uid", "uid-from-api"}}}};
    if (pod_fields.is_object()) pod.update(pod_fields);
    return pod;
  }
  void WarnPod(const k8s::Json& pod, std::string_view reason, std::string_view message) override {
    const auto& meta = pod["metadata"];
    events.push_back({"Pod " + meta.value("namespace", "") + "/" + meta.value("name", ""),
                      std::string(reason), std::string(message)});
  }
  void WarnNode(std::string_view reason, std::string_view message) override {
    events.push_back({"Node", std::string(reason), std::string(message)});
  }
  Status Evict(std::string_view ns, std::string_view name) override {
    evictions.push_back(std::string(ns) + "/" + std::string(name));
    return evict_result;
  }
  std::uint64_t events_dropped() override { return dropped; }

  std::vector<Event> Of(std::string_view reason) const {
    std::vector<Event> out;
    for (const Event& e : events) {
      if (e.reason == reason) out.push_back(e);
    }
    return out;
  }

  k8s::Json pod_fields;
  Status pod_error = Status::Ok();
  Status evict_result = Status::Ok();
  std::uint64_t dropped = 0;
  std::vector<std::string> gets, evictions;
  std::vector<Event> events;
};

}  // namespace tessera::agent
