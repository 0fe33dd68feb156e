// Pod and Node objects as the API server returns them (tessera-shaped: asks, inventories), for
// the tests and benchmarks of the parts that read them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::contract::testing {

struct PodSpec {
  std::string ns = "default";
  std::string name = "p";
  std::string uid = "uid-p";
  std::map<std::string, std::string> limits;  // resource -> quantity text
  std::map<std::string, std::string> annotations;
  std::int32_t priority = 0;
  std::string node;  // spec.nodeName
  std::string phase = "Pending";
  bool host_pid = false;          // spec.hostPID (mode mps needs it)
  std::int64_t run_as_user = -1;  // spec.securityContext.runAsUser; -1: unset
};

inline nlohmann::json MakePod(const PodSpec& s) {
  nlohmann::json limits = nlohmann::json::object();
  for (const auto& [k, v] : s.limits) limits[k] = v;
  nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"namespace", s.ns}, {"name", s.name}, {"uid", s.uid}}},
      {"spec",
       {{"priority", s.priority},
        {"containers", {{{"name", "main"}, {"image", "x"}, {"resources", {{"limits", limits}}}}}}}},
      {"status", {{"phase", s.phase}}}};
  if (!s.annotations.empty()) pod["metadata"]["annotations"] = s.annotations;
  if (!s.node.empty()) pod["spec"]["nodeName"] = s.node;
  if (s.host_pid) pod["spec"]["hostPID"] = true;
  if (s.run_as_user >= 0) pod["spec"]["securityContext"]["runAsUser"] = s.run_as_user;
  return pod;
}

// A pod asking for `memory` (quantity text) and optionally `cores` percent of one shared GPU.
inline nlohmann::json FractionalPod(const std::string& name, const std::string& memory,
                                    const std::string& cores = "", std::int32_t priority = 0) {
  PodSpec s;
  s.name = name;
  s.uid = "uid-" + name;
  s.priority = priority;
  if (!memory.empty()) s.limits["tessera.dev/gpu-memory"] = memory;
  if (!cores.empty()) s.limits["tessera.dev/gpu-cores"] = cores;
  return MakePod(s);
}

inline std::string GpuUuid(const std::string& node, int index) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%08x-0000-0000-0000-%012d",
                static_cast<unsigned>(std::hash<std::string>{}(node)&0xffffffffU), index);
  return buf;
}

inline nlohmann::json MakeNode(const std::string& name, int gpus, std::uint64_t memory_bytes,
                               const std::string& model = "NVIDIA H200") {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"uuid", GpuUuid(name, i)},
                    {"index", i},
                    {"model", model},
                    {"memoryBytes", memory_bytes},
                    {"smCount", 132},
                    {"numaNode", 0},
                    {"managed", true},
                    {"health", "healthy"},
                    {"healthReason", ""},
                    {"mig", {{"mode", "disabled"}, {"instances", nlohmann::json::array()}}}});
  }
  const nlohmann::json inventory = {{"apiVersion", "tessera.dev/inventory/v1"},
                                    {"node", name},
                                    {"agentVersion", "test"},
                                    {"generation", 1},
                                    {"updatedAt", "2026-11-30T00:00:00Z"},
                                    {"gpus", list}};
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name}, {"annotations", {{"tessera.dev/gpu-inventory", inventory.dump()}}}}},
          {"spec", nlohmann::json::object()}};
}

}  // namespace tessera::contract::testing
