// tessera-node governing processes on a host with no kubelet and no container runtime (issue #22
// part 2): the GPU host. One run takes a scenario (pods, their asks and commands) and plays
// kubelet and the API server around a real tessera-node:
//   - a fake API server (k8s_testing's) holds the Node and the pods, each pod carrying a decision
//     signed with a key made for the run (tessera-node is given its public half); it records the
//     Events and evictions tessera-node sends;
//   - the kubelet stand-in (kubelet_standin.h) serves kubelet.sock and PodResources and makes
//     Allocate and PreStartContainer calls for each container, as kubelet's device manager does;
//   - each container starts with what Allocate and the slot's CDI spec hand a runtime, in a
//     cgroup of its own named after its pod (container_standin.h).
// The report (JSON on stdout) says what each container did and what tessera-node said.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera::nodehost {

struct ScenarioContainer {
  std::string name;
  SharingMode mode = SharingMode::kShared;
  int gpu = 0;  // index into the node's inventory
  std::uint64_t memory_bytes = 0;
  std::uint32_t cores_percent = 0;
  ComputeMode compute = ComputeMode::kHard;
  std::uint32_t compute_window_ms = 0;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  // A process of the pod started outside the library: it joins the pod's cgroup without the
  // container's binds (no preload) and holds no slot; the drift check must flag it.
  bool outside_library = false;
};

struct ScenarioPod {
  std::string name;
  std::string pod_namespace = "default";
  TrustTier tier = TrustTier::kDepartment;
  PriorityClass priority = PriorityClass::kNormal;
  double start_after_s = 0;
  std::string mps_user;          // tessera.dev/mps-user (numeric), for mode mps
  bool forge_signature = false;  // sign with another key: tessera-node must refuse the slot
  std::vector<ScenarioContainer> containers;
};

struct Scenario {
  std::string node = "nodehost";
  double timeout_s = 600;  // containers still running then are stopped
  std::vector<ScenarioPod> pods;
};

// Parses a scenario; an error names the field (e.g. "pods[1].containers[0].memory: ...") and
// the accepted form. Unknown fields are refused.
StatusOr<Scenario> ParseScenario(const nlohmann::json& doc);

struct RunOptions {
  std::string dir;                     // the run's folder (state, CDI, sockets, logs)
  std::string node_binary;             // tessera-node
  std::string hook_library;            // the preload library tessera-node installs
  std::vector<std::string> node_args;  // more tessera-node flags (e.g. --nvml-library)
  // This program as it is to be started again for exec-container: /proc/self/exe, or a wrapper
  // where it runs through a carried loader (test/gpu/carry_node.sh).
  std::string self;
};

// Plays the scenario; the report (see the file comment). An error only where the run could not
// start (a folder, tessera-node, the plugin never registering); what a container or tessera-node
// did wrong is in the report.
StatusOr<nlohmann::json> RunScenario(const Scenario& scenario, const RunOptions& options);

// The command line: `run --scenario FILE --node-binary PATH --dir DIR --hook-library PATH
// [--self PATH] [-- TESSERA-NODE FLAGS...]` or `exec-container ...`. Returns the exit code.
int NodeHostMain(int argc, char** argv);

}  // namespace tessera::nodehost
