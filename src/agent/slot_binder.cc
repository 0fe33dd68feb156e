#include "agent/slot_binder.h"

#include <charconv>
#include <filesystem>
#include <sys/stat.h>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/region.h"

namespace tessera::agent {
namespace {

std::string AnnotationOf(const k8s::Json& pod, std::string_view key) {
  const auto annotations = pod.find("metadata");
  if (annotations == pod.end()) return "";
  const auto a = annotations->find("annotations");
  if (a == annotations->end() || !a->is_object()) return "";
  const auto v = a->find(std::string(key));
  return v != a->end() && v->is_string() ? v->get<std::string>() : "";
}

std::string MetaOf(const k8s::Json& pod, const char* key) {
  const auto m = pod.find("metadata");
  if (m == pod.end()) return "";
  const auto v = m->find(key);
  return v != m->end() && v->is_string() ? v->get<std::string>() : "";
}

Status MakeDirs(const std::string& path, std::filesystem::perms perms) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return UnavailableError("cannot create " + path + ": " + ec.message());
  std::filesystem::permissions(path, perms, ec);
  return Status::Ok();
}

}  // namespace

StatusOr<Limits> LimitsFor(const contract::Decision& decision, std::string_view container,
                           const std::map<std::string, BinderGpu, std::less<>>& gpus,
                           const policy::Policy& policy) {
  const contract::DecisionContainer* c = nullptr;
  for (const auto& candidate : decision.containers) {
    if (candidate.name == container) c = &candidate;
  }
  if (c == nullptr) {
    return NotFoundError("the decision has no entry for container \"" + std::string(container) +
                         "\"");
  }
  if (c->devices.empty())
    return InvalidArgumentError("the decision gives container \"" + c->name + "\" no GPU");
  Limits limits;
  limits.pod_uid = decision.pod_uid;
  limits.pod = decision.pod_namespace + "/" + decision.pod_name;
  limits.container = c->name;
  limits.fail_closed = policy.Rule(decision.tier).enforcement == policy::Enforcement::kFailClosed;
  limits.priority = decision.priority;
  limits.mode = c->mode;
  limits.compute = c->compute;
  limits.compute_window_ms = c->compute_window_ms;
  for (const auto& d : c->devices) {
    const auto gpu = gpus.find(d.uuid);
    if (gpu == gpus.end())
      return NotFoundError("the decision names GPU " + d.uuid + ", which this node does not have");
    if (!gpu->second.managed)
      return FailedPreconditionError("the decision names GPU " + d.uuid +
                                     ", which tessera does not manage here");
    if (!gpu->second.healthy) {
      return FailedPreconditionError("the decision names GPU " + d.uuid + ", which is unhealthy (" +
                                     gpu->second.health_reason + ")");
    }
    limits.devices.push_back({d.uuid, d.memory_bytes, d.cores_percent, gpu->second.context_bytes,
                              gpu->second.stream_bytes});
  }
  return limits;
}

SlotBinder::SlotBinder(BinderOptions options, DeviceOwners* owners, PodApi* pods)
    : options_(std::move(options)), owners_(owners), pods_(pods) {}

void SlotBinder::SetGpus(std::map<std::string, BinderGpu, std::less<>> gpus) {
  std::lock_guard<std::mutex> lock(gpus_mu_);
  gpus_ = std::move(gpus);
}

std::map<std::string, BinderGpu, std::less<>> SlotBinder::Gpus() {
  std::lock_guard<std::mutex> lock(gpus_mu_);
  return gpus_;
}

void SlotBinder::Touch(std::string_view slot) {
  std::lock_guard<std::mutex> lock(touched_mu_);
  touched_[std::string(slot)] = std::chrono::steady_clock::now();
}

Status SlotBinder::Allocate(std::string_view slot) {
  TESSERA_RETURN_IF_ERROR(CheckSlotName(slot));
  Touch(slot);
  const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
  using std::filesystem::perms;
  TESSERA_RETURN_IF_ERROR(MakeDirs(p.etc_dir, perms::owner_all | perms::group_read |
                                                  perms::group_exec | perms::others_read |
                                                  perms::others_exec));
  // Every UID of the container accounts into the region.
  return MakeDirs(p.run_dir, perms::all);
}

SlotAllocation SlotBinder::AllocationOf(std::string_view slot) const {
  return AllocationFor(PathsOf(options_.state_dir, options_.cdi_dir, slot), slot,
                       options_.hook_library, options_.ld_so_preload);
}

StatusOr<Limits> SlotBinder::VerifiedLimits(const k8s::Json& pod, const DeviceOwner& owner) {
  const std::string text = AnnotationOf(pod, names::kAnnotationDecision);
  const std::string signature = AnnotationOf(pod, names::kAnnotationDecisionSignature);
  if (text.empty())
    return FailedPreconditionError("the pod has no " + std::string(names::kAnnotationDecision) +
                                   " annotation");
  if (signature.empty()) {
    return FailedPreconditionError(
        "the pod has no " + std::string(names::kAnnotationDecisionSignature) + " annotation");
  }
  auto decision = contract::ParseDecision(text);
  if (!decision.ok()) return decision.status().WithContext("the decision is malformed");
  const auto key = options_.keys.find(decision->key_id);
  if (key == options_.keys.end()) {
    return PermissionDeniedError("the decision is signed with key \"" + decision->key_id +
                                 "\", which this node does not hold");
  }
  TESSERA_RETURN_IF_ERROR(
      key->second->Verify(text, signature).WithContext("the decision's signature"));
  if (decision->pod_uid != MetaOf(pod, "uid")) {
    return PermissionDeniedError("the decision is for pod uid " + decision->pod_uid +
                                 ", not this pod");
  }
  if (decision->pod_namespace != owner.pod_namespace || decision->pod_name != owner.pod_name) {
    return PermissionDeniedError("the decision is for pod " + decision->pod_namespace + "/" +
                                 decision->pod_name + ", not this pod");
  }
  if (decision->node != options_.node_name) {
    return PermissionDeniedError("the decision is for node " + decision->node + ", not " +
                                 options_.node_name);
  }
  return LimitsFor(*decision, owner.container, Gpus(), options_.policy);
}

namespace {

// The region at `path` if it holds exactly `devices` with their limits, else a fresh one.
StatusOr<shm::Mapping> KeptOrFreshRegion(const std::string& path,
                                         const std::vector<shm::DeviceLimit>& devices) {
  auto existing = shm::Mapping::Attach(path);
  if (existing.ok()) {
    const shm::Region& r = *existing->region();
    bool same = r.header.device_count == devices.size();
    for (std::size_t i = 0; same && i < devices.size(); ++i) {
      const shm::Device& d = r.devices[i];
      same = shm::FindDevice(r, devices[i].uuid) == static_cast<int>(i) &&
             d.limit_bytes == devices[i].limit_bytes && d.cores_percent == devices[i].cores_percent;
    }
    if (same) return existing;
  }
  return shm::Mapping::Create(path, devices);
}

}  // namespace

Status SlotBinder::WriteSlot(std::string_view slot, const Limits& limits, std::string_view mps_user,
                             bool keep_region, bool with_allocation) {
  const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
  TESSERA_RETURN_IF_ERROR(Allocate(slot));
  const auto gpus = Gpus();
  std::vector<shm::DeviceLimit> region_devices;
  std::vector<int> minors;
  for (const DeviceLimits& d : limits.devices) {
    const auto gpu = gpus.find(d.uuid);
    if (gpu == gpus.end())
      return UnavailableError("GPU " + d.uuid + " is not (yet) in this node's inventory");
    region_devices.push_back({d.uuid, d.memory_bytes, d.cores_percent});
    minors.push_back(gpu->second.minor);
  }
  // The region first (a fresh one for a new container), then the limits file that makes the
  // slot usable, then the CDI spec the runtime reads at container creation.
  // Mode mps: the GPU's MPS daemon (started if needed) for the pod's user, its pipe folder
  // mounted and the client environment of this allocation (ADR 0017).
  // Every spec mounts itself into the container: a container that has it got its CDI device
  // (agent/cdi_check.h), and the tenant can read which devices that was.
  std::vector<Mount> mounts = {{std::string(names::kPathCdiSpecInContainer), p.cdi_spec, true}};
  std::vector<std::string> mps_env;
  if (with_allocation) {  // DRA: no Allocate answer carries the slot's mounts and environment
    const SlotAllocation a = AllocationOf(slot);
    mounts.insert(mounts.end(), a.mounts.begin(), a.mounts.end());
    for (const auto& [key, value] : a.envs) mps_env.push_back(key + "=" + value);
  }
  if (limits.mode == SharingMode::kMps) {
    if (options_.mps == nullptr)
      return FailedPreconditionError("mode mps: this node runs no MPS daemons");
    if (limits.devices.size() != 1)
      return FailedPreconditionError("mode mps: one GPU per container");
    const std::string user(mps_user);
    unsigned long uid = 0;
    const auto [end, ec] = std::from_chars(user.data(), user.data() + user.size(), uid);
    if (user.empty() || ec != std::errc() || end != user.data() + user.size()) {
      return FailedPreconditionError(
          "mode mps: " + std::string(with_allocation ? "the config's mpsUser" : "annotation ") +
          (with_allocation ? "" : std::string(names::kAnnotationMpsUser)) +
          " must name the numeric user ID the GPU processes run as");
    }
    auto endpoint = options_.mps->Ensure(limits.devices[0].uuid, static_cast<uid_t>(uid));
    if (!endpoint.ok()) return endpoint.status();
    // The pipe folder only: the daemon (root, host namespaces) writes its logs elsewhere, out
    // of the tenant's reach.
    mounts.push_back({std::string(kMpsPipeInContainer), endpoint->pipe_dir, false});
    // Spatial priority: the SM limit is fixed when the client's context is created, from the
    // reserve for latency-critical clients and what those already on the GPU ask for.
    const std::vector<std::string> client_env = governor::MpsClientEnvironment(
        std::string(kMpsPipeInContainer), "", limits.devices[0].memory_bytes,
        governor::ActiveThreadPercent(
            limits.devices[0].cores_percent, limits.priority, governor::SpatialPolicy{},
            LatencyCriticalMpsAsks(options_.state_dir, limits.devices[0].uuid, slot)),
        limits.priority);
    mps_env.insert(mps_env.end(), client_env.begin(), client_env.end());
  }
  // Keeping it (RestoreHeld): the running container's processes account in the region they
  // mapped; a fresh one would start its usage at zero beside them. Only a region of the
  // decision's devices and limits is kept (not a stale or edited one).
  auto region = keep_region ? KeptOrFreshRegion(p.region, region_devices)
                            : shm::Mapping::Create(p.region, region_devices);
  if (!region.ok()) return region.status().WithContext("creating the region");
  TESSERA_RETURN_IF_ERROR(WriteFileAtomically(p.limits, FormatLimitsFile(limits), 0444));
  return WriteFileAtomically(p.cdi_spec, CdiSpec(slot, minors, options_.driver, mounts, mps_env),
                             0644);
}

Status SlotBinder::Prepare(std::string_view slot) { return PrepareSlot(slot, false); }

Status SlotBinder::PrepareSlot(std::string_view slot, bool restore) {
  TESSERA_RETURN_IF_ERROR(ParseSlotId(slot).status());
  // One preparation of a slot at a time: kubelet's PreStartContainer and a restore.
  const std::shared_ptr<std::mutex> slot_mu = SlotMutex(slot);
  const std::lock_guard<std::mutex> slot_lock(*slot_mu);
  if (restore) {  // a PreStartContainer since the pass looked wins
    std::error_code ec;
    if (TouchedWithinGrace(slot) ||
        std::filesystem::exists(PathsOf(options_.state_dir, options_.cdi_dir, slot).limits, ec))
      return AbortedError(std::string(slot) + " was prepared meanwhile");
  }
  Touch(slot);
  auto owner = owners_->OwnerOf(names::kResourceGpuSlot, slot);
  if (!owner.ok())
    return owner.status().WithContext("asking kubelet's PodResources API who holds " +
                                      std::string(slot));
  if (!owner->has_value()) {
    return NotFoundError("kubelet's PodResources API names no container holding " +
                         std::string(slot));
  }
  const DeviceOwner& o = **owner;
  auto pod = pods_->GetPod(o.pod_namespace, o.pod_name);
  if (!pod.ok())
    return pod.status().WithContext("reading pod " + o.pod_namespace + "/" + o.pod_name);
  // Whatever happens next, the slot must not keep a previous container's limits.
  const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
  std::error_code ec;
  std::filesystem::remove(p.limits, ec);
  std::filesystem::remove(p.cdi_spec, ec);
  Status written = [&]() -> Status {
    auto limits = VerifiedLimits(*pod, o);
    if (!limits.ok()) return limits.status();
    return WriteSlot(slot, *limits, AnnotationOf(*pod, names::kAnnotationMpsUser),
                     /*keep_region=*/restore, /*with_allocation=*/false);
  }();
  if (!written.ok()) {
    const std::string message = "container " + o.container + " gets no GPU: " + written.message();
    TESSERA_LOG(kWarn, kAgent, "pod %s/%s %s: %s", o.pod_namespace.c_str(), o.pod_name.c_str(),
                std::string(slot).c_str(), message.c_str());
    pods_->WarnPod(*pod, names::kEventDecisionRejected, message);
    std::filesystem::remove(p.limits, ec);
    std::filesystem::remove(p.cdi_spec, ec);
    {  // RestoreHeld must not try this container again (it was told)
      std::lock_guard<std::mutex> lock(touched_mu_);
      restore_tried_[std::string(slot)] = OwnerKey(o);
    }
    return written;
  }
  TESSERA_LOG(kInfo, kAgent, "pod %s/%s container %s: %s prepared", o.pod_namespace.c_str(),
              o.pod_name.c_str(), o.container.c_str(), std::string(slot).c_str());
  return Status::Ok();
}

Status SlotBinder::PrepareClaim(std::string_view slot, const Limits& limits,
                                std::string_view mps_user) {
  TESSERA_RETURN_IF_ERROR(ParseClaimSlot(slot).status());
  const std::shared_ptr<std::mutex> slot_mu = SlotMutex(slot);
  const std::lock_guard<std::mutex> slot_lock(*slot_mu);
  Touch(slot);
  const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
  const std::string wanted = FormatLimitsFile(limits);
  std::error_code ec;
  // Prepared before (kubelet asks again after its own restart, under running containers): kept
  // as it is, region included, when the claim still asks the same; anything else is written anew.
  if (ReadFile(p.limits, kMaxLimitsFileBytes).value_or("") == wanted &&
      std::filesystem::exists(p.cdi_spec, ec) && std::filesystem::exists(p.region, ec)) {
    return Status::Ok();
  }
  // Anything else changed (a measured context size, the pod the claim is reserved for, the
  // policy): the files are written anew, and the region is kept where it has the claim's devices
  // and caps (its running containers account there).
  Status written = WriteSlot(slot, limits, mps_user, /*keep_region=*/true,
                             /*with_allocation=*/true);
  if (!written.ok()) {  // nothing half-prepared: no limits file, no CDI spec
    std::filesystem::remove(p.limits, ec);
    std::filesystem::remove(p.cdi_spec, ec);
  }
  return written;
}

Status SlotBinder::ReleaseClaim(std::string_view slot) {
  TESSERA_RETURN_IF_ERROR(ParseClaimSlot(slot).status());
  const std::shared_ptr<std::mutex> slot_mu = SlotMutex(slot);
  const std::lock_guard<std::mutex> slot_lock(*slot_mu);
  const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
  std::error_code ec;
  std::filesystem::remove(p.cdi_spec, ec);
  if (ec) return InternalError("removing " + p.cdi_spec + ": " + ec.message());
  std::filesystem::remove_all(p.dir, ec);
  if (ec) return InternalError("removing " + p.dir + ": " + ec.message());
  std::lock_guard<std::mutex> lock(touched_mu_);
  touched_.erase(std::string(slot));
  return Status::Ok();
}

std::optional<Limits> SlotBinder::SlotLimits(std::string_view slot) const {
  auto text = ReadFile(PathsOf(options_.state_dir, "", slot).limits, kMaxLimitsFileBytes);
  if (!text.ok()) return std::nullopt;
  auto limits = ParseLimitsFile(*text);
  if (!limits.ok()) return std::nullopt;
  return std::move(*limits);
}

std::vector<Limits> SlotBinder::OtherSlotLimits(std::string_view except_slot) const {
  std::vector<Limits> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.state_dir + "/slots", ec)) {
    const std::string slot = entry.path().filename().string();
    if (slot == except_slot || !CheckSlotName(slot).ok()) continue;
    if (auto limits = SlotLimits(slot)) out.push_back(std::move(*limits));
  }
  return out;
}

std::vector<std::pair<std::string, std::optional<Limits>>> SlotBinder::ClaimSlots() const {
  std::vector<std::pair<std::string, std::optional<Limits>>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.state_dir + "/slots", ec)) {
    const std::string slot = entry.path().filename().string();
    if (ParseClaimSlot(slot).ok()) out.emplace_back(slot, SlotLimits(slot));
  }
  return out;
}

StatusOr<int> SlotBinder::RestoreHeld() {
  auto held = owners_->HeldDevices(names::kResourceGpuSlot);
  if (!held.ok()) return held.status();
  {
    std::lock_guard<std::mutex> lock(touched_mu_);
    std::erase_if(restore_tried_, [&](const auto& tried) { return held->count(tried.first) == 0; });
  }
  std::set<std::string> missing;  // this pass's findings; a slot is restored on its second
  int restored = 0;
  for (const std::string& slot : *held) {
    if (!ParseSlotId(slot).ok()) continue;
    const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
    std::error_code ec;
    // No folder: the container's mount (if any) is of a folder that is gone; files written now
    // would not reach it (the library then fails closed on its own).
    if (!std::filesystem::is_directory(p.etc_dir, ec) || std::filesystem::exists(p.limits, ec))
      continue;
    missing.insert(slot);
    if (missing_before_.count(slot) == 0 || TouchedWithinGrace(slot)) continue;
    auto owner = owners_->OwnerOf(names::kResourceGpuSlot, slot);
    if (!owner.ok() || !owner->has_value()) continue;
    const std::string key = OwnerKey(**owner);
    {
      std::lock_guard<std::mutex> lock(touched_mu_);
      const auto tried = restore_tried_.find(slot);
      if (tried != restore_tried_.end() && tried->second == key) continue;
    }
    // Not ok: refused (told, and remembered, by PrepareSlot), prepared meanwhile, or the API
    // unreachable (the next pass tries again).
    if (!PrepareSlot(slot, /*restore=*/true).ok()) continue;
    {
      std::lock_guard<std::mutex> lock(touched_mu_);
      restore_tried_[slot] = key;
    }
    ++restored;
    const DeviceOwner& o = **owner;
    auto pod = pods_->GetPod(o.pod_namespace, o.pod_name);
    if (!pod.ok()) continue;
    pods_->WarnPod(*pod, names::kEventLimitsMissing,
                   "container " + o.container + " held " + slot +
                       " without its limits file (kubelet did not call PreStartContainer, or the "
                       "node's files were removed under it): written again from the pod's "
                       "decision; its processes that started meanwhile were refused the GPU "
                       "(fail closed) and get it when they restart");
  }
  missing_before_ = std::move(missing);
  return restored;
}

bool SlotBinder::TouchedWithinGrace(std::string_view slot) {
  std::lock_guard<std::mutex> lock(touched_mu_);
  const auto t = touched_.find(slot);
  return t != touched_.end() &&
         t->second > std::chrono::steady_clock::now() - options_.release_grace;
}

std::shared_ptr<std::mutex> SlotBinder::SlotMutex(std::string_view slot) {
  std::lock_guard<std::mutex> lock(slot_mus_mu_);
  auto it = slot_mus_.find(slot);
  if (it == slot_mus_.end())
    it = slot_mus_.emplace(std::string(slot), std::make_shared<std::mutex>()).first;
  return it->second;
}

std::uint32_t LatencyCriticalMpsAsks(const std::string& state_dir, std::string_view uuid,
                                     std::string_view except_slot) {
  std::uint32_t sum = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/slots", ec)) {
    const std::string slot = entry.path().filename().string();
    if (slot == except_slot || !CheckSlotName(slot).ok()) continue;
    sum += governor::LatencyCriticalMpsShare(
        ReadFile(PathsOf(state_dir, "", slot).limits, kMaxLimitsFileBytes).value_or(""), uuid);
  }
  return std::min(sum, 100u);
}

StatusOr<int> SlotBinder::RemoveReleased() {
  auto held = owners_->HeldDevices(names::kResourceGpuSlot);
  if (!held.ok()) return held.status();
  int removed = 0;
  std::error_code ec;
  const std::string slots_dir = options_.state_dir + "/slots";
  // Under the lock: a slot touched now waits for the next pass.
  std::lock_guard<std::mutex> lock(touched_mu_);
  const auto recent = std::chrono::steady_clock::now() - options_.release_grace;
  for (const auto& entry : std::filesystem::directory_iterator(slots_dir, ec)) {
    const std::string slot = entry.path().filename().string();
    if (!ParseSlotId(slot).ok() || held->count(slot) != 0) continue;
    if (auto t = touched_.find(slot); t != touched_.end()) {
      if (t->second > recent) continue;
      touched_.erase(t);
    }
    const SlotPaths p = PathsOf(options_.state_dir, options_.cdi_dir, slot);
    std::filesystem::remove(p.cdi_spec, ec);
    std::filesystem::remove_all(p.dir, ec);
    ++removed;
  }
  return removed;
}

}  // namespace tessera::agent
