#include "agent/device_plugin.h"

#include <chrono>
#include <filesystem>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "tessera/log.h"

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace tessera::agent {
namespace {

namespace dp = ::v1beta1;
namespace pr = ::v1;

constexpr char kApiVersion[] = "v1beta1";
constexpr auto kRpcTimeout = std::chrono::seconds(10);

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + kRpcTimeout;
}

grpc::Status ToGrpc(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case StatusCode::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kPermissionDenied:
      return {grpc::StatusCode::PERMISSION_DENIED, s.message()};
    case StatusCode::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    default:
      return {grpc::StatusCode::UNAVAILABLE, s.message()};
  }
}

// inode of a path (0: none): a restarted kubelet makes a new kubelet.sock.
ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

// ---- PodResources client ----

struct PodResourcesClient::Impl {
  std::unique_ptr<pr::PodResourcesLister::Stub> stub;
  // kubelet rate-limits PodResources (100 qps, burst 10): a burst of containers starting at once
  // is answered RESOURCE_EXHAUSTED, so back off and ask again (up to ~6 s).
  StatusOr<pr::ListPodResourcesResponse> List() {
    auto pause = std::chrono::milliseconds(50);
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline());
      pr::ListPodResourcesResponse response;
      const grpc::Status s = stub->List(&ctx, pr::ListPodResourcesRequest(), &response);
      if (s.ok()) return response;
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || attempt == 7) {
        return UnavailableError("PodResources List: " + s.error_message());
      }
      std::this_thread::sleep_for(pause);
      pause *= 2;
    }
  }
};

PodResourcesClient::PodResourcesClient(const std::string& socket_path)
    : impl_(std::make_unique<Impl>()) {
  impl_->stub = pr::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials()));
}
PodResourcesClient::~PodResourcesClient() = default;

StatusOr<std::optional<DeviceOwner>> PodResourcesClient::OwnerOf(std::string_view resource,
                                                                 std::string_view device) {
  auto list = impl_->List();
  if (!list.ok()) return list.status();
  for (const auto& pod : list->pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& d : container.devices()) {
        if (d.resource_name() != resource) continue;
        for (const auto& id : d.device_ids()) {
          if (id == device)
            return std::optional<DeviceOwner>(
                DeviceOwner{pod.namespace_(), pod.name(), container.name()});
        }
      }
    }
  }
  return std::optional<DeviceOwner>();
}

StatusOr<std::set<std::string>> PodResourcesClient::HeldDevices(std::string_view resource) {
  auto list = impl_->List();
  if (!list.ok()) return list.status();
  std::set<std::string> held;
  for (const auto& pod : list->pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& d : container.devices()) {
        if (d.resource_name() == resource)
          held.insert(d.device_ids().begin(), d.device_ids().end());
      }
    }
  }
  return held;
}

StatusOr<std::set<std::string>> PodResourcesClient::AllocatableDevices(std::string_view resource) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  pr::AllocatableResourcesResponse response;
  const grpc::Status s =
      impl_->stub->GetAllocatableResources(&ctx, pr::AllocatableResourcesRequest(), &response);
  if (!s.ok())
    return UnavailableError("PodResources GetAllocatableResources: " + s.error_message());
  std::set<std::string> ids;
  for (const auto& d : response.devices()) {
    if (d.resource_name() == resource) ids.insert(d.device_ids().begin(), d.device_ids().end());
  }
  return ids;
}

// ---- the device plugin service ----

class DevicePlugin::Service final : public dp::DevicePlugin::Service {
 public:
  explicit Service(SlotBinder* binder, std::atomic<bool>* stopping)
      : binder_(binder), stopping_(stopping) {}

  void SetDevices(std::vector<PluginDevice> devices) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (devices == devices_) return;
      devices_ = std::move(devices);
      ++version_;
    }
    cv_.notify_all();
  }
  void WakeAll() { cv_.notify_all(); }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const dp::Empty*,
                                      dp::DevicePluginOptions* options) override {
    options->set_pre_start_required(true);
    options->set_get_preferred_allocation_available(false);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const dp::Empty*,
                            grpc::ServerWriter<dp::ListAndWatchResponse>* writer) override {
    std::uint64_t sent = ~0ULL;
    for (;;) {
      dp::ListAndWatchResponse response;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1),
                     [&] { return version_ != sent || stopping_->load(); });
        if (stopping_->load() || ctx->IsCancelled()) return grpc::Status::OK;
        if (version_ == sent) continue;
        sent = version_;
        for (const PluginDevice& d : devices_) {
          auto* device = response.add_devices();
          device->set_id(d.id);
          device->set_health(d.healthy ? "Healthy" : "Unhealthy");
        }
      }
      if (!writer->Write(response)) return grpc::Status::OK;  // kubelet went away
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const dp::PreferredAllocationRequest*,
                                      dp::PreferredAllocationResponse*) override {
    return {grpc::StatusCode::UNIMPLEMENTED, "slots are interchangeable: no preference"};
  }

  grpc::Status Allocate(grpc::ServerContext*, const dp::AllocateRequest* request,
                        dp::AllocateResponse* response) override {
    for (const auto& container : request->container_requests()) {
      if (container.devices_ids_size() != 1) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "a container takes exactly one tessera.dev/gpu-slot (asked for " +
                    std::to_string(container.devices_ids_size()) + ")"};
      }
      const std::string& slot = container.devices_ids(0);
      if (const Status s = binder_->Allocate(slot); !s.ok()) return ToGrpc(s);
      const SlotAllocation a = binder_->AllocationOf(slot);
      auto* out = response->add_container_responses();
      for (const Mount& m : a.mounts) {
        auto* mount = out->add_mounts();
        mount->set_container_path(m.container_path);
        mount->set_host_path(m.host_path);
        mount->set_read_only(m.read_only);
      }
      for (const auto& [k, v] : a.envs) (*out->mutable_envs())[k] = v;
      out->add_cdi_devices()->set_name(a.cdi_device);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const dp::PreStartContainerRequest* request,
                                 dp::PreStartContainerResponse*) override {
    for (const auto& slot : request->devices_ids()) {
      if (const Status s = binder_->Prepare(slot); !s.ok()) return ToGrpc(s);
    }
    return grpc::Status::OK;
  }

 private:
  SlotBinder* const binder_;
  std::atomic<bool>* const stopping_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PluginDevice> devices_;
  std::uint64_t version_ = 0;
};

struct DevicePlugin::Server {
  std::unique_ptr<grpc::Server> server;
};

DevicePlugin::DevicePlugin(Options options, SlotBinder* binder)
    : options_(std::move(options)), service_(std::make_unique<Service>(binder, &stopping_)) {}

DevicePlugin::~DevicePlugin() { Stop(); }

void DevicePlugin::SetDevices(std::vector<PluginDevice> devices) {
  service_->SetDevices(std::move(devices));
}

Status DevicePlugin::Serve() {
  const std::string path = options_.plugin_dir + "/" + options_.socket_name;
  if (server_ != nullptr && server_->server != nullptr) {
    server_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->server->Wait();
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = std::make_unique<Server>();
  server_->server = builder.BuildAndStart();
  if (server_->server == nullptr)
    return UnavailableError("cannot serve the device plugin on " + path);
  return Status::Ok();
}

Status DevicePlugin::Register() {
  auto channel = grpc::CreateChannel("unix://" + options_.plugin_dir + "/kubelet.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = dp::Registration::NewStub(channel);
  dp::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(options_.socket_name);
  request.set_resource_name(options_.resource);
  request.mutable_options()->set_pre_start_required(true);
  request.mutable_options()->set_get_preferred_allocation_available(false);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  dp::Empty reply;
  const grpc::Status s = stub->Register(&ctx, request, &reply);
  if (!s.ok())
    return UnavailableError("registering " + options_.resource +
                            " with kubelet: " + s.error_message());
  ++registrations_;
  TESSERA_LOG(kInfo, kAgent, "device plugin %s registered with kubelet (%s)",
              options_.resource.c_str(), options_.socket_name.c_str());
  return Status::Ok();
}

Status DevicePlugin::Start(std::chrono::milliseconds check_every) {
  TESSERA_RETURN_IF_ERROR(Serve());
  supervisor_ = std::thread([this, check_every] { Supervise(check_every); });
  return Status::Ok();
}

void DevicePlugin::Supervise(std::chrono::milliseconds check_every) {
  const std::string ours = options_.plugin_dir + "/" + options_.socket_name;
  const std::string kubelet = options_.plugin_dir + "/kubelet.sock";
  ino_t registered_with = 0;
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stopping_.load()) {
    lock.unlock();
    if (InodeOf(ours) == 0) {  // kubelet restarted and removed our socket
      TESSERA_LOG(kInfo, kAgent, "device plugin socket %s is gone: serving again", ours.c_str());
      if (const Status s = Serve(); !s.ok()) TESSERA_LOG(kWarn, kAgent, "%s", s.message().c_str());
      registered_with = 0;
    }
    const ino_t now = InodeOf(kubelet);
    if (now != 0 && now != registered_with) {
      if (const Status s = Register(); s.ok()) {
        registered_with = now;
      } else {
        TESSERA_LOG(kWarn, kAgent, "%s (retrying)", s.message().c_str());
      }
    }
    lock.lock();
    stop_cv_.wait_for(lock, check_every, [&] { return stopping_.load(); });
  }
}

void DevicePlugin::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_.exchange(true) && !supervisor_.joinable() && server_ == nullptr) return;
  }
  stop_cv_.notify_all();
  service_->WakeAll();
  if (supervisor_.joinable()) supervisor_.join();
  if (server_ != nullptr && server_->server != nullptr) {
    server_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->server->Wait();
  }
  server_.reset();
  std::error_code ec;
  std::filesystem::remove(options_.plugin_dir + "/" + options_.socket_name, ec);
}

}  // namespace tessera::agent
