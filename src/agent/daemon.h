// tessera-node's entry point after flag parsing (cmd/tessera-node/main.cc): the ordered steps
// of the process. Returns the exit code: 0, 1 (environment: no NVML, API server), 2 (bad input).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

struct NodeOptions {
  std::string node_name;
  std::string kubeconfig;
  std::string gpus = "all";
  int interval_s = 30;
  bool print_inventory = false;
  std::string nvml_library = "libnvidia-ml.so.1";
  // The device plugin (docs/design/0016): served when `device_plugin_dir` exists.
  std::string device_plugin_dir;     // default names::kPathDevicePluginDir
  std::string pod_resources_socket;  // default names::kPathPodResourcesSocket
  // How kubelet hands out this node's GPUs: "device-plugin" (the slots above, decisions from
  // tessera-scheduler) or "dra" (ResourceSlices of gpu.tessera.dev and the kubelet DRA plugin,
  // docs/design/0022-dra-driver.md). One path a node.
  std::string allocation_path = "device-plugin";
  std::string dra_plugin_dir;        // default names::kPathDraPluginDir
  std::string plugins_registry_dir;  // default names::kPathPluginsRegistry
  std::string state_dir;             // default names::kPathHostState
  std::string cdi_dir;               // default names::kPathCdiSpecDir
  std::string decision_keys_dir;     // <keyId>.pem public keys; none: every decision is refused
  std::string hook_library;          // the preload library on the host
  std::string driver_lib_dir = "/usr/lib/x86_64-linux-gnu";  // libcuda/libnvidia-ml for CDI
  std::string dev_root = "/";  // the GPUs' device nodes are under <dev_root>/dev on the host
  std::string policy_file;     // default: the built-in policy
  int cleanup_interval_s = 5;
  // Remove everything tessera put on this node (files, Node annotations/labels/resources) and
  // exit; refused while containers still run on tessera GPUs unless `force`.
  bool uninstall = false;
  bool force = false;
  bool hold = false;  // after --uninstall, wait for SIGTERM (a DaemonSet's container must not exit)
  // GET /metrics (Prometheus) and /healthz; empty: not served.
  std::string metrics_listen = "0.0.0.0:9479";
  // Resources of other device plugins whose devices are GPUs (UUIDs, or UUID::replica as NVIDIA's
  // time-slicing names them): a GPU one of them handed out is reported as not managed.
  std::vector<std::string> foreign_gpu_resources = {"nvidia.com/gpu"};
};

// --uninstall, or the steps of NodeDaemon::Run; a failed step's message goes to stderr.
int RunNode(const NodeOptions& options);

// The steps of the agent's process, in the order Run() takes them (like demo::Demo::Run). Each
// step uses what the steps before it set up, and returns the error that ends the process (RunNode
// prints it and exits with ToExitCode); tests run them one by one. Whatever a step started is
// stopped by Shutdown() (and the destructor), in the reverse order.
class NodeDaemon {
 public:
  explicit NodeDaemon(NodeOptions options);
  ~NodeDaemon();
  NodeDaemon(const NodeDaemon&) = delete;
  NodeDaemon& operator=(const NodeDaemon&) = delete;

  // ValidateFlags, OpenNvml, then PrintInventory (--print-inventory) or ConnectApi,
  // ResumeGeneration, StartMetrics, StartPlugin, WatchForeignGpus and Loop.
  Status Run();

  Status ValidateFlags();     // --gpus parses; --node-name given (unless --print-inventory)
  Status OpenNvml();          // --nvml-library
  Status PrintInventory();    // the inventory JSON on stdout, once
  Status ConnectApi();        // --kubeconfig: the API client and the Node's publisher
  Status ResumeGeneration();  // continues after the Node's published generation (never fails)
  Status StartMetrics();      // --metrics-listen (a port that cannot be bound is not an error)
  Status StartPlugin();       // the device plugin, where kubelet's device-plugin folder exists
  Status WatchForeignGpus();  // GPUs other device plugins handed out (kubelet's PodResources)
  Status Loop();              // discovers and publishes until SIGTERM or SIGINT
  void Shutdown();

  const NodeOptions& options() const { return options_; }
  // After StartMetrics: the port /metrics is served on (0: not served).
  int metrics_port() const;
  // After StartMetrics: whether the device plugin is to be served.
  bool plugin_served() const;

 private:
  struct State;
  const NodeOptions options_;
  std::unique_ptr<State> s_;
};

}  // namespace tessera::agent
