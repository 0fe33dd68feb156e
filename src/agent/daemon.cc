#include "agent/daemon.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "agent/cdi_check.h"
#include "agent/device_plugin.h"
#include "agent/dra.h"
#include "agent/dra_plugin.h"
#include "agent/drift.h"
#include "agent/drift_actions.h"
#include "agent/local_gpu.h"
#include "agent/node_agent.h"
#include "agent/node_metrics.h"
#include "agent/nvml.h"
#include "agent/publisher.h"
#include "agent/slot_binder.h"
#include "agent/uninstall.h"
#include "governor/arbiter_host.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/events.h"
#include "k8s/listen.h"
#include "k8s/object.h"
#include "k8s/paths.h"

namespace tessera::agent {
namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void OnStopSignal(int) { g_stop = 1; }

int Fail(const Status& status) {
  std::fprintf(stderr, "tessera-node: %s\n", status.message().c_str());
  return ToExitCode(status);
}

std::string Or(const std::string& value, std::string_view fallback) {
  return value.empty() ? std::string(fallback) : value;
}

// Pods through the API server; Events posted as tessera-node on this node.
class ApiPods : public DriftApi {
 public:
  ApiPods(k8s::Client& client, std::string node)
      : client_(client), node_(node), events_(client, "tessera-node", std::move(node)) {}
  StatusOr<k8s::Json> GetPod(std::string_view ns, std::string_view name) override {
    return client_.Get(k8s::PodPath(ns, name));
  }
  void WarnPod(const k8s::Json& pod, std::string_view reason, std::string_view message) override {
    const auto& meta = pod["metadata"];
    events_.Warn({{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"namespace", meta.value("namespace", "")},
                  {"name", meta.value("name", "")},
                  {"uid", meta.value("uid", "")}},
                 reason, message);
  }
  void WarnNode(std::string_view reason, std::string_view message) override {
    events_.Warn({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_}}, reason, message);
  }
  Status Evict(std::string_view ns, std::string_view name) override {
    k8s::Json eviction = {
        {"apiVersion", "policy/v1"},
        {"kind", "Eviction"},
        {"metadata", {{"name", std::string(name)}, {"namespace", std::string(ns)}}}};
    return client_.Create(k8s::PodPath(ns, name) + "/eviction", eviction).status();
  }
  std::uint64_t events_dropped() override { return events_.dropped(); }

 private:
  k8s::Client& client_;
  const std::string node_;
  k8s::EventRecorder
      events_;  // Events go out from its thread: the drift pass never waits on the API
};

// The API server as the DRA plugin needs it: claims, and a namespace's trust label.
class ApiClaims : public dra::ClaimApi {
 public:
  explicit ApiClaims(k8s::Client& client) : client_(client) {}
  StatusOr<k8s::Json> GetClaim(std::string_view ns, std::string_view name) override {
    return client_.Get(k8s::ResourceClaimPath(ns, name));
  }
  StatusOr<std::optional<std::string>> TrustLabel(std::string_view ns) override {
    auto namespace_object = client_.Get(k8s::NamespacePath(ns));
    if (!namespace_object.ok()) return namespace_object.status();
    const k8s::Json* meta = k8s::Find(*namespace_object, "metadata");
    const k8s::Json* labels = meta != nullptr ? k8s::Find(*meta, "labels") : nullptr;
    if (labels == nullptr || k8s::Find(*labels, names::kLabelTrust) == nullptr)
      return std::optional<std::string>();
    return std::optional<std::string>(k8s::StringAt(*labels, names::kLabelTrust));
  }

 private:
  k8s::Client& client_;
};

// A public key file is a few kilobytes; anything past this is not one.
constexpr std::size_t kMaxKeyFileBytes = std::size_t{1} << 20;

// keyId -> Verifier from every <keyId>.pem in `dir`.
using DecisionKeys = std::map<std::string, std::shared_ptr<contract::Verifier>, std::less<>>;

StatusOr<DecisionKeys> LoadKeys(const std::string& dir) {
  DecisionKeys keys;
  if (dir.empty()) return keys;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pem") continue;
    StatusOr<std::string> text = ReadFile(entry.path().string(), kMaxKeyFileBytes);
    if (!text.ok()) return text.status().WithContext("--decision-keys");
    auto v = contract::Verifier::FromPem(*text);
    if (!v.ok()) {
      return AsInputError(v.status().WithContext("--decision-keys " + entry.path().string()));
    }
    keys[entry.path().stem().string()] = std::make_shared<contract::Verifier>(std::move(*v));
  }
  if (ec == std::errc::no_such_file_or_directory) {
    return NotFoundError("--decision-keys " + dir + ": " + ec.message());
  }
  if (ec) return InvalidInputError("--decision-keys " + dir + ": " + ec.message());
  return keys;
}

// The driver libraries a container needs (CDI mounts): libcuda and libnvidia-ml.
std::vector<std::string> DriverFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libcuda.so", 0) == 0 || name.rfind("libnvidia-ml.so", 0) == 0) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Everything the device plugin needs, started only where kubelet's device-plugin folder exists.
class PluginSide {
 public:
  // `policy` and `keys`: the node's inputs, read and checked before anything was started
  // (NodeDaemon::ValidateFlags).
  static StatusOr<std::unique_ptr<PluginSide>> Start(const NodeOptions& o, k8s::Client& client,
                                                     GpuSource& gpus, NodeMetrics* metrics,
                                                     const policy::Policy& policy,
                                                     const DecisionKeys& keys) {
    auto side = std::unique_ptr<PluginSide>(new PluginSide(gpus));
    side->metrics_ = metrics;
    side->state_dir_ = Or(o.state_dir, names::kPathHostState);
    side->node_ = o.node_name;
    side->driver_ = {CudaLibraryIn(o.driver_lib_dir), o.nvml_library};
    BinderOptions b;
    b.node_name = o.node_name;
    b.state_dir = Or(o.state_dir, names::kPathHostState);
    b.cdi_dir = Or(o.cdi_dir, names::kPathCdiSpecDir);
    const std::string cdi_dir = b.cdi_dir;
    b.hook_library = Or(o.hook_library, names::kPathHookLibrary);
    side->hook_library_ = b.hook_library;
    b.ld_so_preload = b.state_dir + "/ld.so.preload";
    b.driver = {DriverFiles(o.driver_lib_dir), o.dev_root};
    b.policy = policy;
    if (keys.empty()) {
      TESSERA_LOG(kWarn, kAgent,
                  "no decision keys (--decision-keys): every container will be refused a GPU");
    }
    b.keys = keys;
    side->mps_ =
        std::make_unique<governor::NodeMps>(side->state_dir_ + "/mps", "nvidia-cuda-mps-control");
    b.mps = side->mps_.get();
    side->policy_ = b.policy;
    std::error_code ec;
    std::filesystem::create_directories(b.state_dir + "/slots", ec);
    std::filesystem::create_directories(b.cdi_dir, ec);
    TESSERA_RETURN_IF_ERROR(
        WriteFileAtomically(b.ld_so_preload, std::string(names::kPathHookLibrary) + "\n", 0444));
    side->owners_ = std::make_unique<PodResourcesClient>(
        Or(o.pod_resources_socket, names::kPathPodResourcesSocket));
    side->pods_ = std::make_unique<ApiPods>(client, o.node_name);
    side->binder_ =
        std::make_unique<SlotBinder>(std::move(b), side->owners_.get(), side->pods_.get());
    if (o.allocation_path == "dra") {
      side->claims_ = std::make_unique<ApiClaims>(client);
      side->preparer_ = std::make_unique<dra::ClaimPreparer>(
          o.node_name, policy, side->claims_.get(), side->binder_.get());
      side->slices_ = std::make_unique<dra::SlicePublisher>(client);
      side->dra_ = std::make_unique<dra::DraPlugin>(
          dra::DraPlugin::Options{Or(o.dra_plugin_dir, names::kPathDraPluginDir),
                                  Or(o.plugins_registry_dir, names::kPathPluginsRegistry)},
          side->preparer_.get());
      TESSERA_RETURN_IF_ERROR(side->dra_->Start());
    } else {
      side->plugin_ = std::make_unique<DevicePlugin>(
          DevicePlugin::Options{Or(o.device_plugin_dir, names::kPathDevicePluginDir),
                                "tessera-gpu-slot.sock", std::string(names::kResourceGpuSlot)},
          side->binder_.get());
      TESSERA_RETURN_IF_ERROR(side->plugin_->Start());
    }
    side->drift_ = std::make_unique<DriftActions>(side->MakeDriftDeps());
    CdiCheckDeps cdi;
    cdi.containers = [s = side.get()] { return s->Watched(); };
    cdi.api = side->pods_.get();
    cdi.spec_path = [state = side->state_dir_, dir = cdi_dir](std::string_view slot) {
      return PathsOf(state, dir, slot).cdi_spec;
    };
    cdi.exists = [](const std::string& path) {
      std::error_code error;
      return std::filesystem::exists(path, error);
    };
    side->cdi_check_ = std::make_unique<CdiCheck>(std::move(cdi));
    side->cleanup_ =
        std::jthread([s = side.get(), every = std::chrono::seconds(o.cleanup_interval_s)](
                         std::stop_token stop) { s->CleanUp(stop, every); });
    // The GPUs' compute arbiters (ADR 0017): the containers bound to slots, from their limits
    // files, re-read every 200 ms; the arbiter thread decides every 200 us while any launch is
    // governed.
    side->arbiter_.Start();
    side->members_ =
        std::jthread([s = side.get()](std::stop_token stop) { s->FollowMembers(stop); });
    return side;
  }

  ~PluginSide() {
    members_ = {};
    arbiter_.Stop();
    if (dra_) dra_->Stop();  // first: no prepare while the rest stops
    cleanup_ = {};
    if (plugin_) plugin_->Stop();
  }

  // A new inventory: the GPUs the binder may hand out and the slots kubelet sees.
  void Update(const Inventory& inventory) {
    std::map<std::string, BinderGpu, std::less<>> gpus;
    std::vector<PluginDevice> healthy, unhealthy;
    {
      std::lock_guard<std::mutex> lock(managed_mu_);
      managed_.clear();
      for (const InventoryGpu& g : inventory.content.gpus) {
        if (g.managed) managed_.push_back(g.facts.uuid);
      }
    }
    for (const InventoryGpu& g : inventory.content.gpus) {
      BinderGpu b;
      b.minor = g.facts.minor >= 0 ? g.facts.minor : g.facts.index;  // its /dev/nvidia<minor>
      b.managed = g.managed;
      b.healthy = g.healthy;
      b.health_reason = g.health_reason;
      if (g.managed) {
        const auto cost = Cost(g.facts.uuid);
        b.context_bytes = cost.first;
        b.stream_bytes = cost.second;
        for (std::uint64_t i = 0; i < kSlotsPerGpu; ++i)
          (g.healthy ? healthy : unhealthy).push_back({"", g.healthy});
      }
      gpus[g.facts.uuid] = b;
    }
    // Containers on a GPU that just turned unhealthy are told (once).
    for (const InventoryGpu& g : inventory.content.gpus) {
      if (!g.managed || g.healthy || !told_unhealthy_.insert(g.facts.uuid).second) continue;
      for (const WatchedContainer& c : Watched()) {
        bool on_it = false;
        for (const auto& d : c.limits.devices) on_it |= d.uuid == g.facts.uuid;
        if (!on_it) continue;
        if (auto pod = pods_->GetPodOf(c.limits); pod.ok()) {
          pods_->WarnPod(*pod, names::kEventGpuUnhealthy,
                         "GPU " + g.facts.uuid + " of container " + c.limits.container +
                             " turned unhealthy (" + g.health_reason +
                             "); nothing new is placed on it");
        }
      }
    }
    if (dra_) {                // DRA: this node's pool, to the preparer, kubelet and the API server
      binder_->SetGpus(gpus);  // first: a claim judged on a GPU finds it in the binder
      preparer_->SetInventory(inventory.content, gpus);
      std::vector<dra::DeviceHealthReport> health;
      for (const InventoryGpu& g : inventory.content.gpus) {
        if (g.managed)
          health.push_back({dra::DeviceName(g.facts.index), g.healthy, g.health_reason});
      }
      dra_->SetHealth(inventory.content.node, std::move(health));
      auto published = slices_->Publish(inventory.content);
      if (!published.ok()) {
        TESSERA_LOG(kWarn, kAgent, "%s", published.status().ToString().c_str());
      } else if (*published) {
        TESSERA_LOG(kInfo, kAgent, "published ResourceSlice %s",
                    dra::SliceName(inventory.content.node).c_str());
      }
      return;
    }
    binder_->SetGpus(std::move(gpus));
    // Slots are numbered per node; an unhealthy GPU's share of them is reported unhealthy.
    std::vector<PluginDevice> devices;
    for (auto* list : {&healthy, &unhealthy}) {
      for (PluginDevice& d : *list) {
        d.id = SlotId(static_cast<int>(devices.size()));
        devices.push_back(d);
      }
    }
    plugin_->SetDevices(std::move(devices));
  }

 private:
  explicit PluginSide(GpuSource& gpus) : gpus_(gpus) {}

  // (context bytes, stream bytes) of a GPU, measured once with a probe process.
  std::pair<std::uint64_t, std::uint64_t> Cost(const std::string& uuid) {
    auto it = costs_.find(uuid);
    if (it != costs_.end()) return it->second;
    std::pair<std::uint64_t, std::uint64_t> cost{0, 0};
    auto gpu = ProbeLocalGpu(uuid, /*measure_context=*/true, driver_);
    if (gpu.ok() && gpu->context_measured) {
      cost = {gpu->context_bytes, gpu->stream_bytes};
    } else {
      TESSERA_LOG(kWarn, kAgent,
                  "GPU %s: could not measure the CUDA context size (%s); contexts are not charged",
                  uuid.c_str(),
                  gpu.ok() ? "NVML has no per-process figure" : gpu.status().ToString().c_str());
    }
    TESSERA_LOG(kInfo, kAgent, "GPU %s: context %llu bytes, stream %llu bytes", uuid.c_str(),
                static_cast<unsigned long long>(cost.first),
                static_cast<unsigned long long>(cost.second));
    return costs_[uuid] = cost;
  }

  void CleanUp(std::stop_token stop, std::chrono::seconds every) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      if (dra_ == nullptr) {
        DevicePluginSlotsPass();
      } else {
        ClaimSlotsPass();
      }
      drift_->Pass();
      cdi_check_->Pass();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, stop, every, [] { return false; });
    }
  }

  // The device-plugin slots that kubelet released, and those held without their limits file.
  void DevicePluginSlotsPass() {
    {
      auto removed = binder_->RemoveReleased();
      if (!removed.ok()) {
        TESSERA_LOG(kDebug, kAgent, "slot clean-up: %s", removed.status().ToString().c_str());
      } else if (*removed > 0) {
        TESSERA_LOG(kInfo, kAgent, "removed the files of %d released slot(s)", *removed);
      }
      auto restored = binder_->RestoreHeld();
      if (!restored.ok()) {
        TESSERA_LOG(kDebug, kAgent, "slot restore: %s", restored.status().ToString().c_str());
      } else if (*restored > 0) {
        TESSERA_LOG(kWarn, kAgent, "wrote the limits of %d held slot(s) again", *restored);
      }
    }
  }

  // The claim slots kubelet will not release (their claim left the node while it lost its
  // checkpoint).
  void ClaimSlotsPass() {
    auto released = preparer_->ReleaseOrphans();
    if (!released.ok()) {
      TESSERA_LOG(kDebug, kAgent, "claim slot clean-up: %s", released.status().ToString().c_str());
    } else if (*released > 0) {
      TESSERA_LOG(kInfo, kAgent,
                  "released %d claim slot(s) whose claim left this node (kubelet did not)",
                  *released);
    }
  }

  void FollowMembers(std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      std::vector<governor::Member> members;
      std::vector<std::string> mps_gpus;
      for (const WatchedContainer& c : Watched()) {
        for (governor::Member& m : governor::MembersOf(c.limits, c.region_path))
          members.push_back(std::move(m));
        if (c.limits.mode == SharingMode::kMps) {
          for (const DeviceLimits& d : c.limits.devices) mps_gpus.push_back(d.uuid);
        }
      }
      if (Status s = arbiter_.SetMembers(members); !s.ok())
        TESSERA_LOG(kDebug, kAgent, "%s", s.message().c_str());
      mps_->Retain(mps_gpus);  // the daemons of GPUs without MPS containers are quit
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, stop, std::chrono::milliseconds(200), [] { return false; });
    }
  }

  // The containers whose slots hold a limits file.
  std::vector<WatchedContainer> Watched() { return observe::StateDirContainers(state_dir_); }

  // Drift enforcement's view of this node: NVML, the slots' containers, the metrics, the API
  // server and kill(2).
  DriftDeps MakeDriftDeps() {
    DriftDeps d;
    d.gpus = &gpus_;
    d.managed = [this] {
      std::lock_guard<std::mutex> lock(managed_mu_);
      return managed_;
    };
    d.containers = [this] { return Watched(); };
    d.maps_library = ProcMapsLibrary(hook_library_);
    if (metrics_ != nullptr) {
      d.sample = [m = metrics_](const std::map<std::string, std::uint64_t>& nvml_by_key,
                                std::uint64_t now_ns) { return m->Sample(nvml_by_key, now_ns); };
      d.set_counts = [m = metrics_](const observe::NodeCounts& counts) { m->SetCounts(counts); };
    }
    d.api = pods_.get();
    d.on_drift = [this](const StatusOr<k8s::Json>& pod) { return OnDriftOf(pod); };
    return d;
  }

  // The onDrift of a container's tier (DriftDeps::on_drift): its decision's tier under the
  // node's policy; report when the pod or its decision cannot be read.
  policy::DriftAction OnDriftOf(const StatusOr<k8s::Json>& pod) const {
    policy::DriftAction action = policy::DriftAction::kReport;
    if (pod.ok()) {
      const auto& annotations = (*pod)["metadata"].value("annotations", k8s::Json::object());
      auto decision =
          contract::ParseDecision(annotations.value(std::string(names::kAnnotationDecision), ""));
      if (decision.ok()) action = policy_.Rule(decision->tier).on_drift;
    }
    return action;
  }

  std::unique_ptr<PodResourcesClient> owners_;
  std::unique_ptr<ApiPods> pods_;
  std::unique_ptr<SlotBinder> binder_;
  std::unique_ptr<DevicePlugin> plugin_;  // --allocation-path device-plugin
  // --allocation-path dra
  std::unique_ptr<ApiClaims> claims_;
  std::unique_ptr<dra::ClaimPreparer> preparer_;
  std::unique_ptr<dra::SlicePublisher> slices_;
  std::unique_ptr<dra::DraPlugin> dra_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> costs_;
  GpuSource& gpus_;
  DriverLibraries driver_;  // what the context probe loads (--driver-lib-dir, --nvml-library)
  std::string state_dir_, node_, hook_library_;
  policy::Policy policy_;
  std::mutex managed_mu_;
  std::vector<std::string> managed_;
  std::set<std::string> told_unhealthy_;  // GPUs whose containers were told
  NodeMetrics* metrics_ = nullptr;
  std::unique_ptr<DriftActions> drift_;  // the clean-up thread's drift pass
  std::unique_ptr<CdiCheck> cdi_check_;  // ... and its check of what the runtime applied
  governor::ArbiterHost arbiter_;
  std::unique_ptr<governor::NodeMps> mps_;
  std::jthread cleanup_;
  std::jthread members_;  // last: stopped first
};

// --uninstall: the host's files first (refused while containers run), then the Node object.
int Uninstall(const NodeOptions& options) {
  if (options.node_name.empty())
    return Fail(InvalidArgumentError("--node-name: required with --uninstall"));
  StatusOr<k8s::Config> config = k8s::ResolveConfig(options.kubeconfig);
  if (!config.ok()) return Fail(config.status().WithContext("--kubeconfig"));
  config->user_agent = "tessera-node/" TESSERA_VERSION;
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  if (!client.ok()) return Fail(client.status());
  UninstallPaths paths{Or(options.state_dir, names::kPathHostState),
                       Or(options.cdi_dir, names::kPathCdiSpecDir),
                       Or(options.device_plugin_dir, names::kPathDevicePluginDir),
                       Or(options.hook_library, names::kPathHookLibrary)};
  // The slots kubelet still holds for pods (when kubelet runs here): their containers may start
  // processes at any time, even with none running now.
  std::set<std::string> held;
  const std::string socket = Or(options.pod_resources_socket, names::kPathPodResourcesSocket);
  if (!options.force && std::filesystem::exists(socket)) {
    auto slots = PodResourcesClient(socket).HeldDevices(names::kResourceGpuSlot);
    if (!slots.ok()) {
      return Fail(FailedPreconditionError("cannot ask kubelet which GPU slots pods hold (" +
                                          slots.status().message() + "); retry, or pass --force"));
    }
    held = std::move(*slots);
  }
  auto files = RemoveNodeFiles(paths, options.force, held);
  if (!files.ok()) return Fail(files.status());
  auto node = UnpublishNode(**client, options.node_name);
  if (!node.ok()) return Fail(node.status());
  for (const std::string& f : *files) std::cout << "removed " << f << "\n";
  for (const std::string& n : *node)
    std::cout << "removed node " << options.node_name << " " << n << "\n";
  std::cout << "tessera-node: node " << options.node_name << " uninstalled\n";
  std::cout.flush();
  if (options.hold) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    int signal = 0;
    sigwait(&stop, &signal);
  }
  return 0;
}

}  // namespace

int RunNode(const NodeOptions& options) {
  if (options.uninstall) return Uninstall(options);
  NodeDaemon node(options);
  const Status ran = node.Run();
  return ran.ok() ? 0 : Fail(ran);
}

// What the steps set up, in their order; Shutdown() releases it in the reverse order.
struct NodeDaemon::State {
  ManagedSpec managed;
  std::unique_ptr<NvmlGpuSource> source;
  std::unique_ptr<k8s::Client> client;
  std::unique_ptr<Publisher> publisher;
  LoopOptions loop;
  bool plugin_served = false;
  // Before the plugin side and the server: both use it until they are gone.
  std::unique_ptr<NodeMetrics> metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<PluginSide> plugin;
  std::unique_ptr<PodResourcesClient> pod_resources;
  policy::Policy policy = policy::DefaultPolicy();  // --policy
  DecisionKeys keys;                                // --decision-keys
};

NodeDaemon::NodeDaemon(NodeOptions options)
    : options_(std::move(options)), s_(std::make_unique<State>()) {}

NodeDaemon::~NodeDaemon() { Shutdown(); }

Status NodeDaemon::Run() {
  TESSERA_RETURN_IF_ERROR(ValidateFlags());
  TESSERA_RETURN_IF_ERROR(OpenNvml());
  if (options_.print_inventory) return PrintInventory();
  TESSERA_RETURN_IF_ERROR(ConnectApi());
  TESSERA_RETURN_IF_ERROR(ResumeGeneration());
  TESSERA_RETURN_IF_ERROR(StartMetrics());
  TESSERA_RETURN_IF_ERROR(StartPlugin());
  TESSERA_RETURN_IF_ERROR(WatchForeignGpus());
  return Loop();
}

Status NodeDaemon::ValidateFlags() {
  StatusOr<ManagedSpec> managed = ParseManagedSpec(options_.gpus);
  if (!managed.ok()) return managed.status();
  if (!options_.print_inventory && options_.node_name.empty()) {
    return InvalidArgumentError("--node-name: required (or --print-inventory)");
  }
  // Every flag's form before anything is opened or asked (NVML, the API server).
  if (options_.dev_root.empty() || options_.dev_root.front() != '/') {
    return InvalidArgumentError("--dev-root: \"" + options_.dev_root +
                                "\" is not an absolute path (e.g. / or /run/nvidia/driver)");
  }
  if (!options_.metrics_listen.empty()) {
    if (auto form = k8s::ParseListenAddress(options_.metrics_listen); !form.ok()) {
      return form.status().WithContext("--metrics-listen");
    }
  }
  // The input files too (a missing one exits 3, an invalid one 4), before NVML, the API server,
  // the metrics port or the device plugin are touched.
  if (!options_.print_inventory) {
    if (!options_.policy_file.empty()) {
      auto p = policy::LoadPolicyFile(options_.policy_file);
      if (!p.ok()) return p.status().WithContext("--policy");
      s_->policy = std::move(*p);
    }
    auto keys = LoadKeys(options_.decision_keys_dir);
    if (!keys.ok()) return keys.status();
    s_->keys = std::move(*keys);
  }
  s_->managed = std::move(*managed);
  return Status::Ok();
}

Status NodeDaemon::OpenNvml() {
  StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Open(options_.nvml_library, CudaLibraryIn(options_.driver_lib_dir));
  if (!source.ok()) return source.status();
  s_->source = std::move(*source);
  return Status::Ok();
}

Status NodeDaemon::PrintInventory() {
  std::string node = options_.node_name;
  if (node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) node = host;
  }
  Status printed =
      agent::PrintInventory(*s_->source, node, TESSERA_VERSION, s_->managed, std::cout);
  std::cout.flush();
  return printed;
}

Status NodeDaemon::ConnectApi() {
  StatusOr<k8s::Config> config = k8s::ResolveConfig(options_.kubeconfig);
  if (!config.ok()) return config.status().WithContext("--kubeconfig");
  config->user_agent = "tessera-node/" TESSERA_VERSION;
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  if (!client.ok()) return client.status();
  s_->client = std::move(*client);
  s_->publisher = std::make_unique<Publisher>(*s_->client, options_.node_name);
  return Status::Ok();
}

Status NodeDaemon::ResumeGeneration() {
  LoopOptions& loop = s_->loop;
  loop.node_name = options_.node_name;
  loop.agent_version = TESSERA_VERSION;
  loop.managed = s_->managed;
  loop.interval = std::chrono::seconds(options_.interval_s);
  if (StatusOr<std::int64_t> g = s_->publisher->ExistingGeneration(); g.ok()) {
    loop.continue_after_generation = *g;
  } else {
    TESSERA_LOG(kWarn, kAgent, "node %s: %s", options_.node_name.c_str(),
                g.status().ToString().c_str());
  }
  return Status::Ok();
}

// The folder whose existence says kubelet runs here: the plugin registry on the DRA path, the
// device-plugin folder otherwise.
std::string KubeletFolder(const NodeOptions& o) {
  return o.allocation_path == "dra" ? Or(o.plugins_registry_dir, names::kPathPluginsRegistry)
                                    : Or(o.device_plugin_dir, names::kPathDevicePluginDir);
}

Status NodeDaemon::StartMetrics() {
  s_->plugin_served = std::filesystem::is_directory(KubeletFolder(options_));
  s_->metrics = std::make_unique<NodeMetrics>(
      options_.node_name, TESSERA_VERSION,
      s_->plugin_served ? Or(options_.state_dir, names::kPathHostState) : "");
  if (options_.metrics_listen.empty()) return Status::Ok();
  // (Its form was checked with the flags.) An address that cannot be bound (the port taken) is
  // no error: the device plugin and enforcement matter more than the metrics, and they still run.
  auto served = MetricsServer::Start(options_.metrics_listen, s_->metrics.get());
  if (served.ok()) {
    s_->metrics_server = std::move(*served);
    TESSERA_LOG(kInfo, kAgent, "metrics on %s (port %d)", options_.metrics_listen.c_str(),
                s_->metrics_server->port());
  } else {
    TESSERA_LOG(kError, kAgent, "--metrics-listen: %s; running without metrics",
                served.status().message().c_str());
  }
  return Status::Ok();
}

Status NodeDaemon::StartPlugin() {
  // The DRA path never advertises the device plugin's sums, kubelet's folder there or not.
  if (options_.allocation_path == "dra") s_->publisher->AdvertiseNoResources();
  if (!s_->plugin_served) {
    TESSERA_LOG(kWarn, kAgent, "%s does not exist: no %s plugin (inventory only)",
                KubeletFolder(options_).c_str(), options_.allocation_path.c_str());
    return Status::Ok();
  }
  auto started = PluginSide::Start(options_, *s_->client, *s_->source, s_->metrics.get(),
                                   s_->policy, s_->keys);
  if (!started.ok()) return started.status();
  s_->plugin = std::move(*started);
  if (options_.allocation_path != "dra")
    s_->publisher->LeaveToKubelet(std::string(names::kResourceGpuSlot));
  return Status::Ok();
}

Status NodeDaemon::WatchForeignGpus() {
  const std::string socket = Or(options_.pod_resources_socket, names::kPathPodResourcesSocket);
  s_->pod_resources = std::make_unique<PodResourcesClient>(socket);
  if (std::filesystem::exists(socket)) {
    s_->loop.taken_by_others = [this] {
      std::set<std::string> taken;
      for (const std::string& resource : options_.foreign_gpu_resources) {
        auto held = s_->pod_resources->HeldDevices(resource);
        if (!held.ok()) continue;
        for (const std::string& id : *held) taken.insert(id.substr(0, id.find("::")));
      }
      return taken;
    };
  }
  return Status::Ok();
}

Status NodeDaemon::Loop() {
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  return RunAgentLoop(
      s_->loop, *s_->source,
      [this](const Inventory& inventory) -> Status {
        if (s_->plugin) s_->plugin->Update(inventory);
        s_->metrics->SetInventory(inventory);
        StatusOr<PublishResult> r = s_->publisher->Publish(inventory);
        if (!r.ok()) return r.status();
        if (r->patched_metadata || r->patched_status) {
          TESSERA_LOG(kInfo, kAgent, "node %s: published generation %lld",
                      options_.node_name.c_str(), static_cast<long long>(inventory.generation));
        }
        return Status::Ok();
      },
      [] { return g_stop != 0; });
}

void NodeDaemon::Shutdown() {
  if (s_ == nullptr) return;
  s_->pod_resources.reset();
  s_->plugin.reset();
  s_->metrics_server.reset();
  s_->metrics.reset();
  s_->loop.taken_by_others = nullptr;
  s_->publisher.reset();
  s_->client.reset();
  s_->source.reset();
}

int NodeDaemon::metrics_port() const { return s_->metrics_server ? s_->metrics_server->port() : 0; }

bool NodeDaemon::plugin_served() const { return s_->plugin_served; }

}  // namespace tessera::agent
