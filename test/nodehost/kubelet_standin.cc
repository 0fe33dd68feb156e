#include "nodehost/kubelet_standin.h"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace tessera::nodehost {
namespace {

namespace dp = ::v1beta1;
namespace pr = ::v1;

constexpr char kApiVersion[] = "v1beta1";
constexpr auto kRpcTimeout = std::chrono::seconds(30);

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
}

Status FromGrpc(std::string_view call, const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return UnavailableError(std::string(call) + ": " + s.error_message());
}

}  // namespace

struct KubeletStandin::Impl : dp::Registration::Service, pr::PodResourcesLister::Service {
  Options options;
  std::unique_ptr<grpc::Server> server;

  std::mutex mu;
  std::condition_variable changed;
  bool stopping = false;
  // The registered plugin (the last registration wins, as in kubelet); null until its options
  // are known.
  std::shared_ptr<dp::DevicePlugin::Stub> plugin;
  bool pre_start_required = false;
  int generation = 0;                   // of the registration the state below comes from
  std::map<std::string, bool> devices;  // ID -> healthy, as ListAndWatch sent them last
  std::map<std::string, std::optional<Owner>> taken;  // reserved (no owner yet) or owned
  std::map<std::string, std::uint64_t> released_at;   // a device's last release (a sequence)
  std::uint64_t releases = 0;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;  // every watch, to cancel
  std::vector<std::thread> watchers;

  ~Impl() override {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;  // Register refuses from now on
    }
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& c : contexts) c->TryCancel();
    }
    for (std::thread& t : watchers) t.join();
  }

  // ---- Registration (kubelet.sock) ----
  // As kubelet: check the request, answer, then connect to the plugin on the side (its options,
  // then ListAndWatch).
  grpc::Status Register(grpc::ServerContext*, const dp::RegisterRequest* request,
                        dp::Empty*) override {
    if (request->version() != kApiVersion) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "version " + request->version() + " is not supported (" + kApiVersion + ")"};
    }
    if (request->resource_name() != options.resource) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "resource " + request->resource_name() +
                                                      " is not handled here (" + options.resource +
                                                      ")"};
    }
    const std::string endpoint = options.plugin_dir + "/" + request->endpoint();
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return {grpc::StatusCode::UNAVAILABLE, "kubelet stand-in is stopping"};
    for (auto& c : contexts) c->TryCancel();  // the previous registration's watch ends
    const int mine = ++generation;
    plugin.reset();
    devices.clear();
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    watchers.emplace_back([this, mine, endpoint, context = contexts.back().get()] {
      Connect(mine, endpoint, context);
    });
    return grpc::Status::OK;
  }

  void Connect(int mine, const std::string& endpoint, grpc::ClientContext* watch) {
    std::shared_ptr<dp::DevicePlugin::Stub> stub = dp::DevicePlugin::NewStub(
        grpc::CreateChannel("unix://" + endpoint, grpc::InsecureChannelCredentials()));
    dp::DevicePluginOptions plugin_options;
    {
      grpc::ClientContext context;
      SetDeadline(context);
      context.set_wait_for_ready(true);
      if (!stub->GetDevicePluginOptions(&context, dp::Empty(), &plugin_options).ok()) return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (mine != generation) return;
      plugin = stub;
      pre_start_required = plugin_options.pre_start_required();
    }
    watch->set_wait_for_ready(true);
    auto reader = stub->ListAndWatch(watch, dp::Empty());
    dp::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::lock_guard<std::mutex> lock(mu);
      if (mine != generation) break;
      devices.clear();
      for (const dp::Device& d : response.devices()) devices[d.id()] = d.health() == "Healthy";
      changed.notify_all();
    }
    (void)reader->Finish();
    std::lock_guard<std::mutex> lock(mu);
    if (mine == generation) {
      devices.clear();  // the plugin went away: nothing is allocatable until it registers again
      changed.notify_all();
    }
  }

  // ---- PodResources ----
  grpc::Status List(grpc::ServerContext*, const pr::ListPodResourcesRequest*,
                    pr::ListPodResourcesResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    // One entry per pod, its containers each with their devices, as kubelet answers.
    std::map<std::pair<std::string, std::string>, std::map<std::string, std::vector<std::string>>>
        pods;
    for (const auto& [device, owner] : taken) {
      if (owner) pods[{owner->pod_namespace, owner->pod_name}][owner->container].push_back(device);
    }
    for (const auto& [key, containers] : pods) {
      pr::PodResources* pod = response->add_pod_resources();
      pod->set_namespace_(key.first);
      pod->set_name(key.second);
      for (const auto& [name, ids] : containers) {
        pr::ContainerResources* c = pod->add_containers();
        c->set_name(name);
        pr::ContainerDevices* devs = c->add_devices();
        devs->set_resource_name(options.resource);
        for (const std::string& id : ids) devs->add_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext*, const pr::AllocatableResourcesRequest*,
                                       pr::AllocatableResourcesResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    pr::ContainerDevices* devs = response->add_devices();
    devs->set_resource_name(options.resource);
    for (const auto& [id, healthy] : devices) {
      if (healthy) devs->add_device_ids(id);
    }
    return grpc::Status::OK;
  }
};

KubeletStandin::KubeletStandin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeletStandin::~KubeletStandin() = default;

StatusOr<std::unique_ptr<KubeletStandin>> KubeletStandin::Start(Options options) {
  if (options.resource.empty()) return InvalidArgumentError("kubelet stand-in: no resource");
  std::error_code ec;
  std::filesystem::create_directories(options.plugin_dir, ec);
  if (ec) return UnavailableError("kubelet stand-in: " + options.plugin_dir + ": " + ec.message());
  const std::string kubelet_sock = options.plugin_dir + "/kubelet.sock";
  std::filesystem::remove(kubelet_sock, ec);
  std::filesystem::remove(options.pod_resources_socket, ec);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + kubelet_sock, grpc::InsecureServerCredentials());
  builder.AddListeningPort("unix://" + impl->options.pod_resources_socket,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<dp::Registration::Service*>(impl.get()));
  builder.RegisterService(static_cast<pr::PodResourcesLister::Service*>(impl.get()));
  impl->server = builder.BuildAndStart();
  if (!impl->server) {
    return UnavailableError("kubelet stand-in: cannot serve on " + kubelet_sock + " and " +
                            impl->options.pod_resources_socket);
  }
  return std::unique_ptr<KubeletStandin>(new KubeletStandin(std::move(impl)));
}

Status KubeletStandin::WaitForDevices(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const bool any = impl_->changed.wait_for(lock, limit, [&] {
    return std::any_of(impl_->devices.begin(), impl_->devices.end(),
                       [](const auto& d) { return d.second; });
  });
  if (any) return Status::Ok();
  return UnavailableError(impl_->plugin ? "the plugin for " + impl_->options.resource +
                                              " listed no healthy device"
                                        : "no plugin registered " + impl_->options.resource);
}

std::vector<std::string> KubeletStandin::HealthyDevices() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [id, healthy] : impl_->devices) {
    if (healthy) out.push_back(id);
  }
  return out;
}

StatusOr<ContainerAllocation> KubeletStandin::Admit(const Owner& owner) {
  ContainerAllocation allocation;
  std::shared_ptr<dp::DevicePlugin::Stub> stub;
  bool pre_start = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // A free healthy device, the one released longest ago first (a device just released may
    // still have its files removed by the plugin's clean-up).
    std::uint64_t best = 0;
    for (const auto& [id, healthy] : impl_->devices) {
      if (!healthy || impl_->taken.contains(id)) continue;
      const auto at = impl_->released_at.find(id);
      const std::uint64_t when = at == impl_->released_at.end() ? 0 : at->second;
      if (allocation.device.empty() || when < best) {
        allocation.device = id;
        best = when;
      }
    }
    if (allocation.device.empty() || !impl_->plugin) {
      return ResourceExhaustedError("no free healthy " + impl_->options.resource + " device");
    }
    impl_->taken[allocation.device] = std::nullopt;
    stub = impl_->plugin;
    pre_start = impl_->pre_start_required;
  }
  const auto give_back = [&](Status s) {
    Release(allocation.device);
    return s;
  };
  dp::AllocateRequest request;
  request.add_container_requests()->add_devices_ids(allocation.device);
  dp::AllocateResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    Status s = FromGrpc("Allocate", stub->Allocate(&context, request, &response));
    if (!s.ok()) return give_back(s);
  }
  if (response.container_responses_size() != 1) {
    return give_back(InternalError("Allocate answered " +
                                   std::to_string(response.container_responses_size()) +
                                   " containers for 1"));
  }
  const dp::ContainerAllocateResponse& c = response.container_responses(0);
  for (const auto& [key, value] : c.envs()) allocation.envs.emplace_back(key, value);
  std::sort(allocation.envs.begin(), allocation.envs.end());
  for (const dp::Mount& m : c.mounts()) {
    allocation.mounts.push_back({m.container_path(), m.host_path(), m.read_only()});
  }
  for (const dp::CDIDevice& d : c.cdi_devices()) allocation.cdi_devices.push_back(d.name());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->taken[allocation.device] = owner;  // kubelet records the allocation, then PreStart
  }
  if (pre_start) {
    dp::PreStartContainerRequest pre;
    pre.add_devices_ids(allocation.device);
    dp::PreStartContainerResponse ignored;
    grpc::ClientContext context;
    SetDeadline(context);
    Status s = FromGrpc("PreStartContainer", stub->PreStartContainer(&context, pre, &ignored));
    if (!s.ok()) return give_back(s);
  }
  return allocation;
}

void KubeletStandin::Release(const std::string& device) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->taken.erase(device) != 0) impl_->released_at[device] = ++impl_->releases;
}

}  // namespace tessera::nodehost
