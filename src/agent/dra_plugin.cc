#include "agent/dra_plugin.h"

#include <algorithm>
#include <filesystem>
#include <sys/stat.h>

#include <grpcpp/grpcpp.h>

#include "tessera/log.h"
#include "tessera/names.h"

#include "dra-health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace tessera::agent::dra {
namespace {

namespace api = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace reg = ::pluginregistration;
namespace health = ::v1alpha1;

// kubelet's names for what a DRA plugin serves (k8s.io/kubelet pluginregistration/v1 and dra/v1).
constexpr char kPluginType[] = "DRAPlugin";
constexpr char kServiceV1[] = "v1.DRAPlugin";
constexpr char kHealthService[] = "v1alpha1.DRAResourceHealth";
constexpr auto kHealthResend = std::chrono::seconds(10);
constexpr std::int64_t kHealthTimeoutSeconds = 60;

bool IsSocket(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

class DraPlugin::Service final : public api::DRAPlugin::Service {
 public:
  explicit Service(ClaimPreparer* preparer) : preparer_(preparer) {}

  // Every claim kubelet names gets an answer: its devices, or the reason it was not prepared
  // (kubelet fails the pod with it). Claims are prepared one by one; a claim that fails leaves
  // nothing behind (SlotBinder::PrepareClaim).
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const api::NodePrepareResourcesRequest* request,
                                    api::NodePrepareResourcesResponse* response) override {
    for (const api::Claim& claim : request->claims()) {
      api::NodePrepareResourceResponse& answer = (*response->mutable_claims())[claim.uid()];
      auto prepared = preparer_->Prepare(claim.namespace_(), claim.name(), claim.uid());
      if (!prepared.ok()) {
        TESSERA_LOG(kWarn, kAgent, "ResourceClaim %s/%s (%s) not prepared: %s",
                    claim.namespace_().c_str(), claim.name().c_str(), claim.uid().c_str(),
                    prepared.status().ToString().c_str());
        answer.set_error(prepared.status().ToString());
        continue;
      }
      for (const ClaimDevice& d : prepared->devices) {
        api::Device* device = answer.add_devices();
        device->add_request_names(d.request);
        device->set_pool_name(prepared->pool);
        device->set_device_name(d.device);
        device->add_cdi_device_ids(prepared->cdi_device);
        if (!d.share_id.empty()) device->set_share_id(d.share_id);
      }
      TESSERA_LOG(kInfo, kAgent, "ResourceClaim %s/%s: prepared (%s)", claim.namespace_().c_str(),
                  claim.name().c_str(), prepared->cdi_device.c_str());
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const api::NodeUnprepareResourcesRequest* request,
                                      api::NodeUnprepareResourcesResponse* response) override {
    for (const api::Claim& claim : request->claims()) {
      api::NodeUnprepareResourceResponse& answer = (*response->mutable_claims())[claim.uid()];
      if (const Status s = preparer_->Unprepare(claim.uid()); !s.ok()) {
        answer.set_error(s.ToString());
      } else {
        TESSERA_LOG(kInfo, kAgent, "ResourceClaim %s/%s: unprepared", claim.namespace_().c_str(),
                    claim.name().c_str());
      }
    }
    return grpc::Status::OK;
  }

 private:
  ClaimPreparer* const preparer_;
};

class DraPlugin::Health final : public health::DRAResourceHealth::Service {
 public:
  explicit Health(DraPlugin* plugin) : plugin_(plugin) {}

  // The whole pool's health when the stream opens, on every change, and every kHealthResend;
  // until kubelet goes away or the plugin stops.
  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const health::NodeWatchResourcesRequest*,
      grpc::ServerWriter<health::NodeWatchResourcesResponse>* writer) override {
    DraPlugin& p = *plugin_;
    std::unique_lock<std::mutex> lock(p.health_mu_);
    std::uint64_t sent = ~std::uint64_t{0};
    auto due = std::chrono::steady_clock::now();
    while (!p.stopping_.load() && !context->IsCancelled()) {
      if (p.health_version_ != sent || std::chrono::steady_clock::now() >= due) {
        health::NodeWatchResourcesResponse response;
        const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
        for (const DeviceHealthReport& d : p.health_) {
          health::DeviceHealth* h = response.add_devices();
          h->mutable_device()->set_pool_name(p.health_pool_);
          h->mutable_device()->set_device_name(d.device);
          h->set_health(d.healthy ? health::HEALTHY : health::UNHEALTHY);
          h->set_last_updated_time(now);
          h->set_health_check_timeout_seconds(kHealthTimeoutSeconds);
          h->set_message(d.reason);
        }
        sent = p.health_version_;
        due = std::chrono::steady_clock::now() + kHealthResend;
        lock.unlock();
        const bool written = writer->Write(response);
        lock.lock();
        if (!written) break;
      }
      p.health_cv_.wait_for(lock, std::chrono::seconds(1));
    }
    return grpc::Status::OK;
  }

 private:
  DraPlugin* const plugin_;
};

class DraPlugin::Registration final : public reg::Registration::Service {
 public:
  Registration(std::string endpoint, std::atomic<int>* registrations)
      : endpoint_(std::move(endpoint)), registrations_(registrations) {}

  grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                       reg::PluginInfo* info) override {
    info->set_type(kPluginType);
    info->set_name(std::string(names::kDraDriver));
    info->set_endpoint(endpoint_);
    info->add_supported_versions(kServiceV1);
    info->add_supported_versions(kHealthService);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* status,
                                        reg::RegistrationStatusResponse*) override {
    if (!status->plugin_registered()) {
      TESSERA_LOG(kError, kAgent, "kubelet refused the DRA plugin's registration: %s",
                  status->error().c_str());
      return {grpc::StatusCode::UNAVAILABLE, "registration refused: " + status->error()};
    }
    registrations_->fetch_add(1);
    TESSERA_LOG(kInfo, kAgent, "kubelet registered the DRA plugin %s",
                std::string(names::kDraDriver).c_str());
    return grpc::Status::OK;
  }

 private:
  const std::string endpoint_;
  std::atomic<int>* const registrations_;
};

struct DraPlugin::Servers {
  std::unique_ptr<grpc::Server> dra;
  std::unique_ptr<grpc::Server> registration;
  void Stop() {
    for (auto* s : {&registration, &dra}) {
      if (*s == nullptr) continue;
      (*s)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      (*s)->Wait();
      s->reset();
    }
  }
};

DraPlugin::DraPlugin(Options options, ClaimPreparer* preparer)
    : options_(std::move(options)),
      service_(std::make_unique<Service>(preparer)),
      health_service_(std::make_unique<Health>(this)),
      registration_(
          std::make_unique<Registration>(options_.plugin_dir + "/dra.sock", &registrations_)),
      servers_(std::make_unique<Servers>()) {}

DraPlugin::~DraPlugin() { Stop(); }

std::string DraPlugin::registration_socket() const {
  return options_.registry_dir + "/" + std::string(names::kDraDriver) + "-reg.sock";
}

// The DRA socket first, then the registration socket that makes kubelet call it.
Status DraPlugin::Serve() {
  servers_->Stop();
  std::error_code ec;
  std::filesystem::create_directories(options_.plugin_dir, ec);
  std::filesystem::create_directories(options_.registry_dir, ec);
  const std::string dra = dra_socket(), registration = registration_socket();
  std::filesystem::remove(dra, ec);
  std::filesystem::remove(registration, ec);
  grpc::ServerBuilder dra_builder;
  dra_builder.AddListeningPort("unix://" + dra, grpc::InsecureServerCredentials());
  dra_builder.RegisterService(service_.get());
  dra_builder.RegisterService(health_service_.get());
  servers_->dra = dra_builder.BuildAndStart();
  if (servers_->dra == nullptr) return UnavailableError("cannot serve the DRA plugin on " + dra);
  grpc::ServerBuilder reg_builder;
  reg_builder.AddListeningPort("unix://" + registration, grpc::InsecureServerCredentials());
  reg_builder.RegisterService(registration_.get());
  servers_->registration = reg_builder.BuildAndStart();
  if (servers_->registration == nullptr)
    return UnavailableError("cannot serve the DRA plugin's registration on " + registration);
  return Status::Ok();
}

Status DraPlugin::Start(std::chrono::milliseconds check_every) {
  TESSERA_RETURN_IF_ERROR(Serve());
  supervisor_ = std::thread([this, check_every] { Supervise(check_every); });
  return Status::Ok();
}

void DraPlugin::Supervise(std::chrono::milliseconds check_every) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stopping_.load()) {
    lock.unlock();
    if (!IsSocket(dra_socket()) || !IsSocket(registration_socket())) {
      TESSERA_LOG(kInfo, kAgent, "a DRA plugin socket is gone: serving both again");
      if (const Status s = Serve(); !s.ok()) TESSERA_LOG(kWarn, kAgent, "%s", s.message().c_str());
    }
    lock.lock();
    stop_cv_.wait_for(lock, check_every, [&] { return stopping_.load(); });
  }
}

void DraPlugin::SetHealth(std::string pool, std::vector<DeviceHealthReport> devices) {
  {
    const std::lock_guard<std::mutex> lock(health_mu_);
    const bool same =
        pool == health_pool_ && devices.size() == health_.size() &&
        std::equal(devices.begin(), devices.end(), health_.begin(),
                   [](const auto& a, const auto& b) {
                     return a.device == b.device && a.healthy == b.healthy && a.reason == b.reason;
                   });
    if (same) return;
    health_pool_ = std::move(pool);
    health_ = std::move(devices);
    ++health_version_;
  }
  health_cv_.notify_all();
}

void DraPlugin::Stop() {
  {
    const std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_.exchange(true)) return;
  }
  stop_cv_.notify_all();
  {
    const std::lock_guard<std::mutex> lock(health_mu_);  // the streams see stopping_
  }
  health_cv_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  servers_->Stop();
  std::error_code ec;
  std::filesystem::remove(registration_socket(), ec);
  std::filesystem::remove(dra_socket(), ec);
}

}  // namespace tessera::agent::dra
