// tessera-node's kubelet DRA plugin for `gpu.tessera.dev` (docs/design/0022-dra-driver.md): the
// DRAPlugin service (k8s.io/kubelet dra/v1: NodePrepareResources, NodeUnprepareResources) on
// <plugin-dir>/dra.sock and the plugin registration service (pluginregistration/v1) on
// <registry-dir>/gpu.tessera.dev-reg.sock, which kubelet's plugin watcher finds. C++ stubs are
// generated at build time from the upstream k8s.io/kubelet module (src/agent/CMakeLists.txt).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/status.h"

#include "agent/dra.h"

namespace tessera::agent::dra {

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
  // How many times kubelet reported the registration accepted.
  int registrations() const { return registrations_.load(); }
  std::string dra_socket() const { return options_.plugin_dir + "/dra.sock"; }
  std::string registration_socket() const;

 private:
  class Service;
  class Registration;
  Status Serve();
  void Supervise(std::chrono::milliseconds check_every);

  const Options options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Registration> registration_;
  struct Servers;
  std::unique_ptr<Servers> servers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> registrations_{0};
  std::thread supervisor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
};

}  // namespace tessera::agent::dra
