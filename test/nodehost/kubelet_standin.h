// The kubelet side of the device-plugin API on a host with no kubelet (issue #22 part 2: the GPU
// host, where tessera-node must govern real processes): the two services a device plugin calls
// (Registration on kubelet.sock, PodResources List and GetAllocatableResources) and the calls
// kubelet's device manager makes to a registered plugin (ListAndWatch, Allocate,
// PreStartContainer), in the order kubelet makes them for a container asking one device.
//
// Not a kubelet: one resource, one device per container, no checkpoint, no restarts. CI drives
// the plugin with the real kubelet device manager (src/agent/device_plugin_e2e_test.cc); this is
// for where that cannot run.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/status.h"

#include "agent/slots.h"

namespace tessera::nodehost {

// What kubelet hands the runtime for a container: Allocate's answer.
struct ContainerAllocation {
  std::string device;  // the plugin's device ID
  std::vector<std::pair<std::string, std::string>> envs;
  std::vector<agent::Mount> mounts;
  std::vector<std::string> cdi_devices;  // fully qualified CDI names ("vendor/class=name")
};

struct Owner {
  std::string pod_namespace;
  std::string pod_name;
  std::string container;
};

class KubeletStandin {
 public:
  struct Options {
    std::string plugin_dir;            // kubelet.sock is served here; plugins' sockets too
    std::string pod_resources_socket;  // PodResources (v1)
    std::string resource;              // the one extended resource handled
  };
  static StatusOr<std::unique_ptr<KubeletStandin>> Start(Options options);
  ~KubeletStandin();
  KubeletStandin(const KubeletStandin&) = delete;
  KubeletStandin& operator=(const KubeletStandin&) = delete;

  // Until a plugin has registered `resource` and listed at least one healthy device.
  Status WaitForDevices(std::chrono::milliseconds limit);
  // The healthy devices the plugin lists now.
  std::vector<std::string> HealthyDevices();

  // What kubelet does before a container asking one device starts: takes a healthy device no
  // container holds, Allocate, records the owner (PodResources reports it from now on), then
  // PreStartContainer when the plugin asked for it. An error leaves the device free again.
  StatusOr<ContainerAllocation> Admit(const Owner& owner);
  // The container is gone: its device is free and no longer reported.
  void Release(const std::string& device);

 private:
  struct Impl;
  explicit KubeletStandin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::nodehost
