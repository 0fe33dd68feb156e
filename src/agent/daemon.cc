#include "agent/daemon.h"

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <set>
#include <signal.h>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/device_plugin.h"
#include "agent/drift.h"
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
#include "k8s/paths.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

namespace tessera::agent {
namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void OnStopSignal(int) { g_stop = 1; }

int Fail(const Status& status) {
  std::fprintf(stderr, "tessera-node: %s\n", status.message().c_str());
  return ToExitCode(status);
}

// The parent PID of `pid` (0 if unknown), from /proc/<pid>/stat.
pid_t ParentOf(unsigned int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = stat.rfind(')');  // the command may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

std::string Or(const std::string& value, std::string_view fallback) {
  return value.empty() ? std::string(fallback) : value;
}

// Pods through the API server; Events posted as tessera-node on this node.
class ApiPods : public PodApi {
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
  void WarnNode(std::string_view reason, std::string_view message) {
    events_.Warn({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_}}, reason, message);
  }
  // The pod named by a limits file's "namespace/name".
  StatusOr<k8s::Json> GetPodOf(const Limits& limits) {
    const std::size_t slash = limits.pod.find('/');
    if (slash == std::string::npos) return InvalidArgumentError("limits name no pod: \"" + limits.pod + "\"");
    return GetPod(limits.pod.substr(0, slash), limits.pod.substr(slash + 1));
  }
  std::uint64_t dropped() const { return events_.dropped(); }

 private:
  k8s::Client& client_;
  const std::string node_;
  k8s::EventRecorder events_;  // Events go out from its thread: the drift pass never waits on the API
};

// keyId -> Verifier from every <keyId>.pem in `dir`.
StatusOr<std::map<std::string, std::shared_ptr<contract::Verifier>, std::less<>>> LoadKeys(
    const std::string& dir) {
  std::map<std::string, std::shared_ptr<contract::Verifier>, std::less<>> keys;
  if (dir.empty()) return keys;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pem") continue;
    std::ifstream in(entry.path());
    std::stringstream pem;
    pem << in.rdbuf();
    auto v = contract::Verifier::FromPem(pem.str());
    if (!v.ok()) return v.status().WithContext("--decision-keys " + entry.path().string());
    keys[entry.path().stem().string()] = std::make_shared<contract::Verifier>(std::move(*v));
  }
  if (ec) return InvalidArgumentError("--decision-keys " + dir + ": " + ec.message());
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
  static StatusOr<std::unique_ptr<PluginSide>> Start(const NodeOptions& o, k8s::Client& client,
                                                     GpuSource& gpus, NodeMetrics* metrics) {
    auto side = std::unique_ptr<PluginSide>(new PluginSide(client, gpus));
    side->metrics_ = metrics;
    side->state_dir_ = Or(o.state_dir, names::kPathHostState);
    side->node_ = o.node_name;
    BinderOptions b;
    b.node_name = o.node_name;
    b.state_dir = Or(o.state_dir, names::kPathHostState);
    b.cdi_dir = Or(o.cdi_dir, names::kPathCdiSpecDir);
    b.hook_library = Or(o.hook_library, names::kPathHookLibrary);
    b.ld_so_preload = b.state_dir + "/ld.so.preload";
    b.driver_files = DriverFiles(o.driver_lib_dir);
    if (o.policy_file.empty()) {
      b.policy = policy::DefaultPolicy();
    } else {
      auto p = policy::LoadPolicyFile(o.policy_file);
      if (!p.ok()) return p.status().WithContext("--policy " + o.policy_file);
      b.policy = std::move(*p);
    }
    auto keys = LoadKeys(o.decision_keys_dir);
    if (!keys.ok()) return keys.status();
    if (keys->empty()) {
      TESSERA_LOG(kWarn, kAgent, "no decision keys (--decision-keys): every container will be refused a GPU");
    }
    b.keys = std::move(*keys);
    side->mps_ = std::make_unique<governor::NodeMps>(side->state_dir_ + "/mps", "nvidia-cuda-mps-control");
    b.mps = side->mps_.get();
    side->policy_ = b.policy;
    std::error_code ec;
    std::filesystem::create_directories(b.state_dir + "/slots", ec);
    std::filesystem::create_directories(b.cdi_dir, ec);
    TESSERA_RETURN_IF_ERROR(WriteFileAtomically(b.ld_so_preload, std::string(names::kPathHookLibrary) + "\n", 0444));
    side->owners_ = std::make_unique<PodResourcesClient>(Or(o.pod_resources_socket, names::kPathPodResourcesSocket));
    side->pods_ = std::make_unique<ApiPods>(client, o.node_name);
    side->binder_ = std::make_unique<SlotBinder>(std::move(b), side->owners_.get(), side->pods_.get());
    side->plugin_ = std::make_unique<DevicePlugin>(
        DevicePlugin::Options{Or(o.device_plugin_dir, names::kPathDevicePluginDir), "tessera-gpu-slot.sock",
                              std::string(names::kResourceGpuSlot)},
        side->binder_.get());
    TESSERA_RETURN_IF_ERROR(side->plugin_->Start());
    side->cleanup_ = std::jthread([s = side.get(), every = std::chrono::seconds(o.cleanup_interval_s)](
                                      std::stop_token stop) { s->CleanUp(stop, every); });
    // The GPUs' compute arbiters (ADR 0017): the containers bound to slots, from their limits
    // files, re-read every 200 ms; the arbiter thread decides every 200 us while any launch is
    // governed.
    side->arbiter_.Start();
    side->members_ = std::jthread([s = side.get()](std::stop_token stop) { s->FollowMembers(stop); });
    return side;
  }

  ~PluginSide() {
    members_ = {};
    arbiter_.Stop();
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
      b.minor = g.facts.index;
      b.managed = g.managed;
      b.healthy = g.healthy;
      b.health_reason = g.health_reason;
      if (g.managed) {
        const auto cost = Cost(g.facts.uuid);
        b.context_bytes = cost.first;
        b.stream_bytes = cost.second;
        for (std::uint64_t i = 0; i < kSlotsPerGpu; ++i) (g.healthy ? healthy : unhealthy).push_back({"", g.healthy});
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
                         "GPU " + g.facts.uuid + " of container " + c.limits.container + " turned unhealthy (" +
                             g.health_reason + "); nothing new is placed on it");
        }
      }
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
  PluginSide(k8s::Client& client, GpuSource& gpus) : client_(client), gpus_(gpus) {}

  // (context bytes, stream bytes) of a GPU, measured once with a probe process.
  std::pair<std::uint64_t, std::uint64_t> Cost(const std::string& uuid) {
    auto it = costs_.find(uuid);
    if (it != costs_.end()) return it->second;
    std::pair<std::uint64_t, std::uint64_t> cost{0, 0};
    auto gpu = ProbeLocalGpu(uuid, /*measure_context=*/true);
    if (gpu.ok() && gpu->context_measured) {
      cost = {gpu->context_bytes, gpu->stream_bytes};
    } else {
      TESSERA_LOG(kWarn, kAgent, "GPU %s: could not measure the CUDA context size (%s); contexts are not charged",
                  uuid.c_str(), gpu.ok() ? "NVML has no per-process figure" : gpu.status().ToString().c_str());
    }
    TESSERA_LOG(kInfo, kAgent, "GPU %s: context %llu bytes, stream %llu bytes", uuid.c_str(),
                static_cast<unsigned long long>(cost.first), static_cast<unsigned long long>(cost.second));
    return costs_[uuid] = cost;
  }

  void CleanUp(std::stop_token stop, std::chrono::seconds every) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      auto removed = binder_->RemoveReleased();
      if (!removed.ok()) {
        TESSERA_LOG(kDebug, kAgent, "slot clean-up: %s", removed.status().ToString().c_str());
      } else if (*removed > 0) {
        TESSERA_LOG(kInfo, kAgent, "removed the files of %d released slot(s)", *removed);
      }
      Sample(CheckDrift());
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, stop, every, [] { return false; });
    }
  }

  void FollowMembers(std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      std::vector<governor::Member> members;
      std::vector<std::string> mps_gpus;
      for (const WatchedContainer& c : Watched()) {
        for (governor::Member& m : governor::MembersOf(c.limits, c.region_path)) members.push_back(std::move(m));
        if (c.limits.mode == SharingMode::kMps) {
          for (const DeviceLimits& d : c.limits.devices) mps_gpus.push_back(d.uuid);
        }
      }
      if (Status s = arbiter_.SetMembers(members); !s.ok()) TESSERA_LOG(kDebug, kAgent, "%s", s.message().c_str());
      mps_->Retain(mps_gpus);  // the daemons of GPUs without MPS containers are quit
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, stop, std::chrono::milliseconds(200), [] { return false; });
    }
  }

  // The containers whose slots hold a limits file.
  std::vector<WatchedContainer> Watched() { return observe::StateDirContainers(state_dir_); }


  // NVML against regions and decisions; acts on containers above their cap per the tier's
  // onDrift, once per episode (an Event when a container crosses its cap, not every check).
  // Returns NVML's bytes per container (observe::ContainerRow::Key()) for the metrics.
  std::map<std::string, std::uint64_t> CheckDrift() {
    std::map<std::string, std::uint64_t> nvml_by_key;
    std::vector<std::string> managed;
    {
      std::lock_guard<std::mutex> lock(managed_mu_);
      managed = managed_;
    }
    std::map<std::string, std::vector<GpuProcess>> processes;
    for (const std::string& uuid : managed) {
      auto list = gpus_.Processes(uuid);
      if (!list.ok()) {  // this GPU's figures are unknown this pass; the others still count
        TESSERA_LOG(kDebug, kAgent, "drift: %s", list.status().ToString().c_str());
        continue;
      }
      processes[uuid] = std::move(*list);
    }
    DriftReport report = agent::CheckDrift(Watched(), processes, ProcCgroupOf);
    // The agent's own probe processes (context measurement) are not tenants.
    std::erase_if(report.unattributed, [](const UnattributedProcess& u) { return ParentOf(u.process.pid) == getpid(); });
    std::set<std::string> over_now, unattributed_now, drifting_now;
    for (const ContainerDrift& c : report.containers) {
      if (processes.count(c.uuid) == 0) continue;  // NVML did not answer for its GPU
      nvml_by_key[c.id + "/" + c.pod + "/" + c.container + "/" + c.uuid] = c.nvml_bytes;
      if (c.drift_bytes() != 0) {
        TESSERA_LOG(kDebug, kAgent, "drift %s %s: NVML %llu, region %llu", c.pod.c_str(), c.container.c_str(),
                    static_cast<unsigned long long>(c.nvml_bytes), static_cast<unsigned long long>(c.region_bytes));
      }
      // Drift worth a person's attention: above 256 MiB and 5% of the cap, once per episode.
      if (c.drift_bytes() > static_cast<std::int64_t>(std::max<std::uint64_t>(256ULL << 20, c.cap_bytes / 20))) {
        const std::string key = c.id + "/" + c.uuid;
        drifting_now.insert(key);
        if (drifting_.count(key) == 0) ReportDrift(c);
      }
      if (!c.over_cap()) continue;
      const std::string key = c.id + "/" + c.uuid;
      over_now.insert(key);
      if (over_cap_.count(key) == 0) ActOnOverCap(c);
    }
    for (const UnattributedProcess& u : report.unattributed) {
      const std::string key = u.uuid + "/" + std::to_string(u.process.pid);
      unattributed_now.insert(key);
      if (unattributed_.count(key) == 0) {
        ++counters_.unattributed;
        TESSERA_LOG(kWarn, kAgent, "pid %u holds %llu bytes on %s and belongs to no tessera container",
                    u.process.pid, static_cast<unsigned long long>(u.process.bytes), u.uuid.c_str());
        pods_->WarnNode(names::kEventUnattributedProcess,
                 "pid " + std::to_string(u.process.pid) + " holds " + FormatBytesHuman(u.process.bytes) + " on " +
                     u.uuid + " and belongs to no tessera container");
      }
    }
    over_cap_ = std::move(over_now);
    unattributed_ = std::move(unattributed_now);
    drifting_ = std::move(drifting_now);
    return nvml_by_key;
  }

  void ReportDrift(const ContainerDrift& c) {
    const std::size_t slash = c.pod.find('/');
    if (slash == std::string::npos) return;
    const k8s::Json pod = {
        {"metadata", {{"namespace", c.pod.substr(0, slash)}, {"name", c.pod.substr(slash + 1)}, {"uid", c.pod_uid}}}};
    pods_->WarnPod(pod, names::kEventMemoryDrift,
                   "container " + c.container + " holds " + FormatBytesHuman(c.nvml_bytes) + " on " + c.uuid +
                       " (NVML) but its region accounts " + FormatBytesHuman(c.region_bytes) +
                       ": memory the preload library did not see (module code, implicit driver growth, a process "
                       "bypassing it, or a rewritten region); its cap is " + FormatBytesHuman(c.cap_bytes));
  }

  // The metrics' sample, and an Event for each container whose allocations were refused at its
  // cap since the last sample (not for denials from before this agent started).
  void Sample(const std::map<std::string, std::uint64_t>& nvml_by_key) {
    if (metrics_ == nullptr) return;
    const auto rows = metrics_->Sample(nvml_by_key, static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count()));
    // At most one Event per container a minute (a job retrying allocations would post one every
    // pass); the count is of everything refused since the last Event. The Pod is named from the
    // limits file: no API read on this thread.
    const auto now = std::chrono::steady_clock::now();
    std::map<std::string, Told> denials;
    for (const observe::ContainerRow& row : rows) {
      if (!row.region_readable) continue;
      auto seen = denials_.find(row.Key());
      Told told = seen != denials_.end() ? seen->second : Told{sampled_once_ ? 0 : row.oom_denials, {}};
      if (row.oom_denials > told.count && (told.at == std::chrono::steady_clock::time_point{} ||
                                           now - told.at >= std::chrono::minutes(1))) {
        const k8s::Json pod = {{"metadata", {{"namespace", row.ns}, {"name", row.pod}, {"uid", row.pod_uid}}}};
        pods_->WarnPod(pod, names::kEventGpuMemoryDenied,
                       "container " + row.container + ": " + std::to_string(row.oom_denials - told.count) +
                           " allocation(s) refused at its cap of " + FormatBytesHuman(row.limit_bytes) + " on " +
                           row.uuid + " (in use " + FormatBytesHuman(row.used_bytes) + ", peak " +
                           FormatBytesHuman(row.peak_bytes) + "); the application saw out-of-memory");
        told = {row.oom_denials, now};
      }
      denials[row.Key()] = told;
    }
    denials_ = std::move(denials);
    sampled_once_ = true;
    metrics_->SetCounts({counters_.over_cap, counters_.unattributed, counters_.kills, counters_.evictions,
                         pods_->dropped()});
  }

  void ActOnOverCap(const ContainerDrift& c) {
    ++counters_.over_cap;
    const std::size_t slash = c.pod.find('/');
    const std::string ns = c.pod.substr(0, slash), name = c.pod.substr(slash + 1);
    auto pod = client_.Get(k8s::PodPath(ns, name));
    policy::DriftAction action = policy::DriftAction::kReport;
    if (pod.ok()) {
      const auto& annotations = (*pod)["metadata"].value("annotations", k8s::Json::object());
      auto decision = contract::ParseDecision(annotations.value(std::string(names::kAnnotationDecision), ""));
      if (decision.ok()) action = policy_.Rule(decision->tier).on_drift;
    }
    std::string done = "reported";
    if (action == policy::DriftAction::kKill) {
      for (unsigned int pid : c.pids) kill(static_cast<pid_t>(pid), SIGKILL);
      ++counters_.kills;
      done = "its " + std::to_string(c.pids.size()) + " GPU process(es) killed";
    } else if (action == policy::DriftAction::kEvict) {
      k8s::Json eviction = {{"apiVersion", "policy/v1"}, {"kind", "Eviction"},
                            {"metadata", {{"name", name}, {"namespace", ns}}}};
      auto r = client_.Create(k8s::PodPath(ns, name) + "/eviction", eviction);
      ++counters_.evictions;
      done = r.ok() ? "the pod evicted" : "eviction failed: " + r.status().message();
    }
    const std::string message = "container " + c.container + " holds " + FormatBytesHuman(c.nvml_bytes) + " on " +
                                c.uuid + " (NVML), above its cap of " + FormatBytesHuman(c.cap_bytes) +
                                "; its region says " + FormatBytesHuman(c.region_bytes) + "; " + done;
    TESSERA_LOG(kWarn, kAgent, "%s: %s", c.pod.c_str(), message.c_str());
    if (pod.ok()) pods_->WarnPod(*pod, names::kEventMemoryOverCap, message);
  }

  std::unique_ptr<PodResourcesClient> owners_;
  std::unique_ptr<ApiPods> pods_;
  std::unique_ptr<SlotBinder> binder_;
  std::unique_ptr<DevicePlugin> plugin_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> costs_;
  k8s::Client& client_;
  GpuSource& gpus_;
  std::string state_dir_, node_;
  policy::Policy policy_;
  std::mutex managed_mu_;
  std::vector<std::string> managed_;
  std::set<std::string> over_cap_, unattributed_;  // the episodes already acted on
  std::set<std::string> told_unhealthy_;           // GPUs whose containers were told
  std::set<std::string> drifting_;                 // drift episodes already reported
  struct Told {
    std::uint64_t count = 0;                      // denials already told (or there at start)
    std::chrono::steady_clock::time_point at{};   // when the last Event went out
  };
  std::map<std::string, Told> denials_;            // by container key
  bool sampled_once_ = false;
  NodeMetrics* metrics_ = nullptr;
  struct {
    std::uint64_t over_cap = 0, unattributed = 0, kills = 0, evictions = 0;
  } counters_;  // for the metrics endpoint (issue 11)
  governor::ArbiterHost arbiter_;
  std::unique_ptr<governor::NodeMps> mps_;
  std::jthread cleanup_;
  std::jthread members_;  // last: stopped first
};

// --uninstall: the host's files first (refused while containers run), then the Node object.
int Uninstall(const NodeOptions& options) {
  if (options.node_name.empty()) return Fail(InvalidArgumentError("--node-name: required with --uninstall"));
  StatusOr<k8s::Config> config = k8s::ResolveConfig(options.kubeconfig);
  if (!config.ok()) return Fail(config.status().WithContext("--kubeconfig"));
  config->user_agent = "tessera-node/" TESSERA_VERSION;
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  if (!client.ok()) return Fail(client.status());
  UninstallPaths paths{Or(options.state_dir, names::kPathHostState), Or(options.cdi_dir, names::kPathCdiSpecDir),
                       Or(options.device_plugin_dir, names::kPathDevicePluginDir),
                       Or(options.hook_library, names::kPathHookLibrary)};
  // The slots kubelet still holds for pods (when kubelet runs here): their containers may start
  // processes at any time, even with none running now.
  std::set<std::string> held;
  const std::string socket = Or(options.pod_resources_socket, names::kPathPodResourcesSocket);
  if (!options.force && std::filesystem::exists(socket)) {
    auto slots = PodResourcesClient(socket).HeldDevices(names::kResourceGpuSlot);
    if (!slots.ok()) {
      return Fail(FailedPreconditionError("cannot ask kubelet which GPU slots pods hold (" + slots.status().message() +
                                          "); retry, or pass --force"));
    }
    held = std::move(*slots);
  }
  auto files = RemoveNodeFiles(paths, options.force, held);
  if (!files.ok()) return Fail(files.status());
  auto node = UnpublishNode(**client, options.node_name);
  if (!node.ok()) return Fail(node.status());
  for (const std::string& f : *files) std::cout << "removed " << f << "\n";
  for (const std::string& n : *node) std::cout << "removed node " << options.node_name << " " << n << "\n";
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
  StatusOr<ManagedSpec> managed = ParseManagedSpec(options.gpus);
  if (!managed.ok()) return Fail(managed.status());
  if (!options.print_inventory && options.node_name.empty()) {
    return Fail(InvalidArgumentError("--node-name: required (or --print-inventory)"));
  }
  StatusOr<std::unique_ptr<NvmlGpuSource>> source = NvmlGpuSource::Open(options.nvml_library);
  if (!source.ok()) return Fail(source.status());
  if (options.print_inventory) {
    std::string node = options.node_name;
    if (node.empty()) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) == 0) node = host;
    }
    Status printed = PrintInventory(**source, node, TESSERA_VERSION, *managed, std::cout);
    std::cout.flush();
    return printed.ok() ? 0 : Fail(printed);
  }

  StatusOr<k8s::Config> config = k8s::ResolveConfig(options.kubeconfig);
  if (!config.ok()) return Fail(config.status().WithContext("--kubeconfig"));
  config->user_agent = "tessera-node/" TESSERA_VERSION;
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  if (!client.ok()) return Fail(client.status());
  Publisher publisher(**client, options.node_name);

  LoopOptions loop;
  loop.node_name = options.node_name;
  loop.agent_version = TESSERA_VERSION;
  loop.managed = *managed;
  loop.interval = std::chrono::seconds(options.interval_s);
  if (StatusOr<std::int64_t> g = publisher.ExistingGeneration(); g.ok()) {
    loop.continue_after_generation = *g;
  } else {
    TESSERA_LOG(kWarn, kAgent, "node %s: %s", options.node_name.c_str(),
                g.status().ToString().c_str());
  }
  const std::string plugin_dir = Or(options.device_plugin_dir, names::kPathDevicePluginDir);
  const bool plugin_served = std::filesystem::is_directory(plugin_dir);
  // Declared before the plugin side and the server: both use it until they are gone.
  NodeMetrics metrics(options.node_name, TESSERA_VERSION,
                      plugin_served ? Or(options.state_dir, names::kPathHostState) : "");
  std::unique_ptr<MetricsServer> metrics_server;
  if (!options.metrics_listen.empty()) {
    // A malformed address is an error; one that cannot be bound (the port taken) is not: the
    // device plugin and enforcement matter more than the metrics, and they still run.
    if (auto form = k8s::ParseListenAddress(options.metrics_listen); !form.ok()) {
      return Fail(form.status().WithContext("--metrics-listen"));
    }
    auto served = MetricsServer::Start(options.metrics_listen, &metrics);
    if (served.ok()) {
      metrics_server = std::move(*served);
      TESSERA_LOG(kInfo, kAgent, "metrics on %s (port %d)", options.metrics_listen.c_str(), metrics_server->port());
    } else {
      TESSERA_LOG(kError, kAgent, "--metrics-listen: %s; running without metrics", served.status().message().c_str());
    }
  }
  std::unique_ptr<PluginSide> plugin;
  if (plugin_served) {
    auto started = PluginSide::Start(options, **client, **source, &metrics);
    if (!started.ok()) return Fail(started.status());
    plugin = std::move(*started);
    publisher.LeaveToKubelet(std::string(names::kResourceGpuSlot));
  } else {
    TESSERA_LOG(kWarn, kAgent, "%s does not exist: no device plugin (inventory only)", plugin_dir.c_str());
  }
  // GPUs another device plugin handed out (kubelet's PodResources knows), when kubelet is there.
  PodResourcesClient pod_resources(Or(options.pod_resources_socket, names::kPathPodResourcesSocket));
  if (std::filesystem::exists(Or(options.pod_resources_socket, names::kPathPodResourcesSocket))) {
    loop.taken_by_others = [&] {
      std::set<std::string> taken;
      for (const std::string& resource : options.foreign_gpu_resources) {
        auto held = pod_resources.HeldDevices(resource);
        if (!held.ok()) continue;
        for (const std::string& id : *held) taken.insert(id.substr(0, id.find("::")));
      }
      return taken;
    };
  }
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  Status ran = RunAgentLoop(
      loop, **source,
      [&](const Inventory& inventory) -> Status {
        if (plugin) plugin->Update(inventory);
        metrics.SetInventory(inventory);
        StatusOr<PublishResult> r = publisher.Publish(inventory);
        if (!r.ok()) return r.status();
        if (r->patched_metadata || r->patched_status) {
          TESSERA_LOG(kInfo, kAgent, "node %s: published generation %lld",
                      options.node_name.c_str(), static_cast<long long>(inventory.generation));
        }
        return Status::Ok();
      },
      [] { return g_stop != 0; });
  return ran.ok() ? 0 : Fail(ran);
}

}  // namespace tessera::agent
