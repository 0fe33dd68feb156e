#include "agent/node_flags.h"

#include <cstdio>

#include <CLI/CLI.hpp>

#include "tessera/build_info.h"
#include "tessera/log.h"

namespace tessera::agent {

std::optional<int> ParseNodeFlags(int argc, const char* const* argv, NodeOptions& options) {
  CLI::App app{"tessera-node: publishes this node's GPU inventory and health", "tessera-node"};
  app.add_option("--node-name", options.node_name,
                 "the Node object to publish to (usually spec.nodeName)");
  app.add_option("--kubeconfig", options.kubeconfig,
                 "kubeconfig (default: $KUBECONFIG, in-cluster)");
  app.add_option("--gpus", options.gpus,
                 "GPUs tessera manages: all, or UUIDs/indices, comma-separated")
      ->capture_default_str();
  app.add_option("--interval-s", options.interval_s,
                 "rediscover and re-publish this often (seconds)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("--print-inventory", options.print_inventory,
               "print the inventory JSON once and exit (no API server)");
  app.add_option("--nvml-library", options.nvml_library, "NVML to load")->capture_default_str();
  app.add_option("--device-plugin-dir", options.device_plugin_dir,
                 "kubelet's device-plugin folder; the plugin is served when it exists "
                 "(default /var/lib/kubelet/device-plugins)");
  app.add_option("--allocation-path", options.allocation_path,
                 "how kubelet hands out this node's GPUs: device-plugin (tessera.dev/gpu-slot) or "
                 "dra (ResourceClaims of gpu.tessera.dev); one path a node")
      ->check(CLI::IsMember({"device-plugin", "dra"}))
      ->capture_default_str();
  app.add_option("--dra-plugin-dir", options.dra_plugin_dir,
                 "with --allocation-path dra: where dra.sock is served "
                 "(default /var/lib/kubelet/plugins/gpu.tessera.dev)");
  app.add_option("--plugins-registry-dir", options.plugins_registry_dir,
                 "with --allocation-path dra: kubelet's plugin registry; the plugin is served "
                 "when it exists (default /var/lib/kubelet/plugins_registry)");
  app.add_option("--pod-resources-socket", options.pod_resources_socket,
                 "kubelet's PodResources API "
                 "(default /var/lib/kubelet/pod-resources/kubelet.sock)");
  app.add_option("--state-dir", options.state_dir,
                 "per-slot limits files and regions (default /var/lib/tessera)");
  app.add_option("--cdi-dir", options.cdi_dir, "where CDI specs go (default /var/run/cdi)");
  app.add_option("--decision-keys", options.decision_keys_dir,
                 "folder of <keyId>.pem public keys that verify the scheduler's decisions");
  app.add_option("--hook-library", options.hook_library,
                 "libtessera-cuda.so on the host, mounted into every container "
                 "(default /usr/local/lib/tessera/libtessera-cuda.so)");
  app.add_option("--driver-lib-dir", options.driver_lib_dir,
                 "where libcuda/libnvidia-ml are (CDI mounts)")
      ->capture_default_str();
  app.add_option("--dev-root", options.dev_root,
                 "the host folder under which the driver's device nodes are (DIR/dev/nvidia*; "
                 "a driver container's root)")
      ->capture_default_str();
  app.add_option("--foreign-gpu-resource", options.foreign_gpu_resources,
                 "another device plugin's GPU resource; GPUs it handed out are not managed "
                 "(repeatable)")
      ->capture_default_str();
  app.add_option("--policy", options.policy_file,
                 "the policy file (tiers' enforcement); default: built-in");
  app.add_flag("--uninstall", options.uninstall,
               "remove what tessera put on this node (state folder, CDI specs, sockets, the "
               "installed preload library, the Node's tessera.dev/ annotations, labels and "
               "resources) and exit");
  app.add_flag("--force", options.force,
               "with --uninstall: even while containers still run on tessera GPUs");
  app.add_flag("--hold", options.hold,
               "with --uninstall: then wait for SIGTERM (the chart's uninstall DaemonSet)");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "HOST:PORT of GET /metrics (Prometheus) and /healthz; empty: not served")
      ->capture_default_str();
  app.add_option("--cleanup-interval-s", options.cleanup_interval_s,
                 "remove released slots' files this often (seconds)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  std::string level = "info";
  app.add_option("--log-level", level, "error, warn, info, debug")->capture_default_str();
  app.set_version_flag("--version", VersionLine("tessera-node"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tessera-node: %s\n", e.what());
    return 2;
  }
  auto parsed = log::ParseLevel(level);
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera-node: --log-level: %s\n", parsed.status().message().c_str());
    return 2;
  }
  log::SetLevel(*parsed);
  return std::nullopt;
}

}  // namespace tessera::agent
