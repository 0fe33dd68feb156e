// tessera-node's entry point after flag parsing (cmd/tessera-node/main.cc): the ordered steps
// of the process. Returns the exit code: 0, 1 (environment: no NVML, API server), 2 (bad input).
#pragma once

#include <chrono>
#include <string>

namespace tessera::agent {

struct NodeOptions {
  std::string node_name;
  std::string kubeconfig;
  std::string gpus = "all";
  int interval_s = 30;
  bool print_inventory = false;
  std::string nvml_library = "libnvidia-ml.so.1";
};

int RunNode(const NodeOptions& options);

}  // namespace tessera::agent
