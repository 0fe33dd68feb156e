// tessera-node's kubelet device plugin (API v1beta1, gRPC on a unix socket in kubelet's
// device-plugin folder) for `tessera.dev/gpu-slot`, and its PodResources client
// (docs/design/0016-device-plugin.md). C++ stubs are generated at build time from the .proto
// files of the upstream k8s.io/kubelet module (src/agent/CMakeLists.txt).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/status.h"

#include "agent/slot_binder.h"

namespace tessera::agent {

struct PluginDevice {
  std::string id;
  bool healthy = true;
  friend bool operator==(const PluginDevice&, const PluginDevice&) = default;
};

// kubelet's PodResources API (v1 List) as DeviceOwners.
class PodResourcesClient : public DeviceOwners {
 public:
  explicit PodResourcesClient(const std::string& socket_path);
  ~PodResourcesClient() override;
  StatusOr<std::optional<DeviceOwner>> OwnerOf(std::string_view resource,
                                               std::string_view device) override;
  StatusOr<std::set<std::string>> HeldDevices(std::string_view resource) override;
  // The devices of `resource` kubelet can allocate now (registered, healthy).
  StatusOr<std::set<std::string>> AllocatableDevices(std::string_view resource);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class DevicePlugin {
 public:
  struct Options {
    std::string plugin_dir;   // kubelet's device-plugin folder (kubelet.sock is there)
    std::string socket_name;  // ours, in the same folder
    std::string resource;     // tessera.dev/gpu-slot
  };
  DevicePlugin(Options options, SlotBinder* binder);
  ~DevicePlugin();
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Serves on the socket and keeps registered with kubelet: registers now (retrying until
  // kubelet answers), and again whenever kubelet restarts (its restart removes our socket, or
  // kubelet.sock is a new file), checked every `check_every`.
  Status Start(std::chrono::milliseconds check_every = std::chrono::milliseconds(500));
  void Stop();

  // The devices ListAndWatch streams; a change is sent to kubelet at once.
  void SetDevices(std::vector<PluginDevice> devices);
  // How many times kubelet accepted a registration (for tests and logs).
  int registrations() const { return registrations_.load(); }

 private:
  class Service;
  Status Serve();
  Status Register();
  void Supervise(std::chrono::milliseconds check_every);

  const Options options_;
  std::unique_ptr<Service> service_;
  struct Server;
  std::unique_ptr<Server> server_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> registrations_{0};
  std::thread supervisor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
};

}  // namespace tessera::agent
