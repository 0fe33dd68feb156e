// tessera-node's kubelet DRA plugin for `gpu.tessera.dev` (docs/design/0022-dra-driver.md): the
// DRAPlugin service (k8s.io/kubelet dra/v1: NodePrepareResources, NodeUnprepareResources) on
// <plugin-dir>/dra.sock, beside it the devices' health (dra-health/v1alpha1 DRAResourceHealth,
// NodeWatchResources, which kubelet shows in the pods' status), and the plugin registration service
// (pluginregistration/v1) on <registry-dir>/gpu.tessera.dev-reg.sock, which kubelet's plugin
// watcher finds. C++ stubs are generated at build time from the upstream k8s.io/kubelet module
// (src/agent/CMakeLists.txt).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/status.h"

#include "agent/dra.h"

namespace tessera::agent::dra {

// A device's health as kubelet is told it.
struct DeviceHealthReport {
  std::string device;  // "gpu-<index>"
  bool healthy = true;
  std::string reason;  // why not (XID, ECC)
};

class DraPlugin {
 public:
  struct Options {
    std::string plugin_dir;    // dra.sock is served here
    std::string registry_dir;  // kubelet's plugins_registry
  };
  DraPlugin(Options options, ClaimPreparer* preparer);
  ~DraPlugin();
  DraPlugin(const DraPlugin&) = delete;
  DraPlugin& operator=(const DraPlugin&) = delete;

  // Serves both sockets, and serves them again whenever one is removed (checked every
  // `check_every`).
  Status Start(std::chrono::milliseconds check_every = std::chrono::milliseconds(500));
  void Stop();
  // The pool's devices' health: sent to every NodeWatchResources stream when it changes, and
  // again every 10 s (kubelet takes a device it has not heard of for 60 s as of unknown health).
  void SetHealth(std::string pool, std::vector<DeviceHealthReport> devices);
  // How many times kubelet reported the registration accepted.
  int registrations() const { return registrations_.load(); }
  std::string dra_socket() const { return options_.plugin_dir + "/dra.sock"; }
  std::string registration_socket() const;

 private:
  class Service;
  class Health;
  class Registration;
  Status Serve();
  void Supervise(std::chrono::milliseconds check_every);

  const Options options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Health> health_service_;
  std::unique_ptr<Registration> registration_;
  struct Servers;
  std::unique_ptr<Servers> servers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> registrations_{0};
  std::thread supervisor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  // What SetHealth gave, guarded by health_mu_; a change is signalled on health_cv_.
  std::mutex health_mu_;
  std::condition_variable health_cv_;
  std::string health_pool_;
  std::vector<DeviceHealthReport> health_;
  std::uint64_t health_version_ = 0;
};

}  // namespace tessera::agent::dra
