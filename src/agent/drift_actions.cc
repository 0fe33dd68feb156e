#include "agent/drift_actions.h"

#include <algorithm>
#include <signal.h>
#include <sstream>
#include <unistd.h>
#include <utility>

#include "tessera/file.h"
#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

namespace tessera::agent {

unsigned int ProcParentOf(unsigned int pid) {
  // A process that is gone (or anything unreadable) has no known parent.
  StatusOr<std::string> stat = ReadFile("/proc/" + std::to_string(pid) + "/stat", 64 << 10);
  if (!stat.ok()) return 0;
  const std::size_t close = stat->rfind(')');  // the command may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat->substr(close + 1));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return static_cast<unsigned int>(ppid);
}

bool IsOwnChild(unsigned int pid) { return static_cast<pid_t>(ProcParentOf(pid)) == getpid(); }

void KillProcess(unsigned int pid) { kill(static_cast<pid_t>(pid), SIGKILL); }

namespace {
// The container's Pod as its limits file names it ("namespace/name" and uid), for Events that
// need no API read.
StatusOr<k8s::Json> PodOf(const ContainerDrift& c) {
  const std::size_t slash = c.pod.find('/');
  if (slash == std::string::npos) return InvalidInputError("pod " + c.pod + ": not namespace/name");
  return k8s::Json{{"metadata",
                    {{"namespace", c.pod.substr(0, slash)},
                     {"name", c.pod.substr(slash + 1)},
                     {"uid", c.pod_uid}}}};
}
}  // namespace

DriftActions::DriftActions(DriftDeps deps) : deps_(std::move(deps)), compute_(deps_.compute) {}

std::map<std::string, std::uint64_t> DriftActions::Check() {
  std::map<std::string, std::uint64_t> nvml_by_key;
  const std::vector<std::string> managed = deps_.managed();
  std::map<std::string, std::vector<GpuProcess>> processes;
  for (const std::string& uuid : managed) {
    auto list = deps_.gpus->Processes(uuid);
    if (!list.ok()) {  // this GPU's figures are unknown this pass; the others still count
      TESSERA_LOG(kDebug, kAgent, "drift: %s", list.status().ToString().c_str());
      continue;
    }
    processes[uuid] = std::move(*list);
  }
  DriftReport report = agent::CheckDrift(deps_.containers(), processes, deps_.cgroup_of);
  // The agent's own probe processes (context measurement) are not tenants.
  std::erase_if(report.unattributed,
                [&](const UnattributedProcess& u) { return deps_.own_process(u.process.pid); });
  std::set<std::string> over_now, unattributed_now, drifting_now;
  for (const ContainerDrift& c : report.containers) {
    if (processes.count(c.uuid) == 0) continue;  // NVML did not answer for its GPU
    nvml_by_key[c.id + "/" + c.pod + "/" + c.container + "/" + c.uuid] = c.nvml_bytes;
    if (c.drift_bytes() != 0) {
      TESSERA_LOG(kDebug, kAgent, "drift %s %s: NVML %llu, region %llu", c.pod.c_str(),
                  c.container.c_str(), static_cast<unsigned long long>(c.nvml_bytes),
                  static_cast<unsigned long long>(c.region_bytes));
    }
    // Drift worth a person's attention: above 256 MiB and 5% of the cap, once per episode.
    if (c.drift_bytes() >
        static_cast<std::int64_t>(std::max<std::uint64_t>(256ULL << 20, c.cap_bytes / 20))) {
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
      TESSERA_LOG(kWarn, kAgent,
                  "pid %u holds %llu bytes on %s and belongs to no tessera container",
                  u.process.pid, static_cast<unsigned long long>(u.process.bytes), u.uuid.c_str());
      deps_.api->WarnNode(names::kEventUnattributedProcess,
                          "pid " + std::to_string(u.process.pid) + " holds " +
                              FormatBytesHuman(u.process.bytes) + " on " + u.uuid +
                              " and belongs to no tessera container");
    }
  }
  over_cap_ = std::move(over_now);
  unattributed_ = std::move(unattributed_now);
  drifting_ = std::move(drifting_now);
  CheckCompute(report, processes);
  return nvml_by_key;
}

void DriftActions::CheckCompute(const DriftReport& report,
                                const std::map<std::string, std::vector<GpuProcess>>& processes) {
  // Only GPUs whose processes NVML listed this pass (their samples could not be attributed
  // otherwise, and would be lost); the others' tenants keep their window until the next pass.
  std::vector<ComputeTenant> tenants =
      ComputeTenantsOf(report, deps_.ns_pid_of, deps_.maps_library);
  std::erase_if(tenants,
                [&processes](const ComputeTenant& t) { return processes.count(t.uuid) == 0; });
  std::map<std::string, const ContainerDrift*> by_key;
  for (const ContainerDrift& c : report.containers) by_key[c.id + "/" + c.uuid] = &c;
  std::map<std::string, std::vector<UtilizationSample>> samples;
  std::map<std::string, std::string> errors;
  for (const auto& [uuid, listed] : processes) {
    auto got = deps_.gpus->ProcessUtilization(uuid, compute_.LastSeen(uuid));
    if (got.ok()) {
      samples[uuid] = std::move(*got);
    } else {
      errors[uuid] = got.status().message();
    }
  }
  // One action and one Event per container and pass, whatever it was flagged for.
  std::map<std::string, std::vector<ComputeFinding>> by_tenant;
  for (ComputeFinding& f : compute_.Evaluate(deps_.wall_us(), tenants, samples, errors)) {
    if (f.kind == ComputeFinding::Kind::kNoSamples) {
      TESSERA_LOG(kWarn, kAgent, "compute drift: %s", f.Describe().c_str());
      deps_.api->WarnNode(names::kEventComputeUnchecked, f.Describe());
      continue;
    }
    by_tenant[f.key].push_back(std::move(f));
  }
  for (const auto& [key, findings] : by_tenant) {
    const auto c = by_key.find(key);
    if (c != by_key.end()) ActOnCompute(*c->second, findings);
  }
}

void DriftActions::ActOnCompute(const ContainerDrift& c,
                                const std::vector<ComputeFinding>& findings) {
  ++counters_.compute;
  std::string what;
  std::set<unsigned int> pids;
  bool enforceable = false;
  for (const ComputeFinding& f : findings) {
    what += (what.empty() ? "" : "; and ") + f.Describe();
    if (!f.enforceable) continue;
    enforceable = true;
    pids.insert(f.pids.begin(), f.pids.end());
  }
  // Reported only: the Pod is named from the limits file, no API read (as for memory drift).
  StatusOr<k8s::Json> pod = PodOf(c);
  const std::string done = enforceable ? Enforce(c, {pids.begin(), pids.end()}, &pod) : "reported";
  const std::string message = "container " + c.container + ": " + what + "; " + done;
  TESSERA_LOG(kWarn, kAgent, "%s: %s", c.pod.c_str(), message.c_str());
  if (pod.ok()) deps_.api->WarnPod(*pod, names::kEventComputeDrift, message);
}

void DriftActions::ReportDrift(const ContainerDrift& c) {
  const StatusOr<k8s::Json> pod = PodOf(c);
  if (!pod.ok()) return;
  deps_.api->WarnPod(
      *pod, names::kEventMemoryDrift,
      "container " + c.container + " holds " + FormatBytesHuman(c.nvml_bytes) + " on " + c.uuid +
          " (NVML) but its region accounts " + FormatBytesHuman(c.region_bytes) +
          ": memory the preload library did not see (module code, implicit driver growth, a "
          "process bypassing it, or a rewritten region); its cap is " +
          FormatBytesHuman(c.cap_bytes));
}

void DriftActions::Sample(const std::map<std::string, std::uint64_t>& nvml_by_key) {
  if (!deps_.sample) return;
  const auto now = deps_.now();
  const auto rows = deps_.sample(
      nvml_by_key,
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count()));
  // At most one Event per container a minute (a job retrying allocations would post one every
  // pass); the count is of everything refused since the last Event. The Pod is named from the
  // limits file: no API read on this thread.
  std::map<std::string, Told> denials, failures, governor;
  for (const observe::ContainerRow& row : rows) {
    if (!row.region_readable) continue;
    TellRise(denials_, denials, row, row.oom_denials, names::kEventGpuMemoryDenied,
             [&row](std::uint64_t risen) {
               return "container " + row.container + ": " + std::to_string(risen) +
                      " allocation(s) refused at its cap of " + FormatBytesHuman(row.limit_bytes) +
                      " on " + row.uuid + " (in use " + FormatBytesHuman(row.used_bytes) +
                      ", peak " + FormatBytesHuman(row.peak_bytes) +
                      "); the application saw out-of-memory";
             });
    if (!row.compute_readable) continue;
    TellRise(failures_, failures, row, row.launch_failures, names::kEventLaunchFailed,
             [&row](std::uint64_t risen) {
               return "container " + row.container + ": " + std::to_string(risen) +
                      " kernel launch(es) on " + row.uuid + " refused by the driver (mode " +
                      std::string(Name(row.mode)) +
                      (row.mode == SharingMode::kMps
                           ? ": under an MPS SM limit a launch needing more SMs fails"
                           : "") +
                      "); the application saw the error";
             });
    TellRise(governor_, governor, row, row.governor_failures, names::kEventGovernorFailed,
             [&row](std::uint64_t risen) {
               return "container " + row.container + ": " + std::to_string(risen) +
                      " launch(es) on " + row.uuid +
                      " found the compute governor failed (its arbiter stopped deciding, or no "
                      "watcher thread); " +
                      (row.governor_down_ns != 0
                           ? "they waited for it (fail-closed, " +
                                 std::to_string(row.governor_down_ns / 1'000'000) +
                                 " ms so far): its share and priority held"
                           : std::string("they ran ungoverned (fail-open): its share and "
                                         "priority did not hold meanwhile"));
             });
  }
  denials_ = std::move(denials);
  failures_ = std::move(failures);
  governor_ = std::move(governor);
  sampled_once_ = true;
  if (deps_.set_counts) deps_.set_counts(counts());
}

void DriftActions::TellRise(std::map<std::string, Told>& told_before,
                            std::map<std::string, Told>& next, const observe::ContainerRow& row,
                            std::uint64_t count, std::string_view reason,
                            const std::function<std::string(std::uint64_t)>& message) {
  const auto now = deps_.now();
  auto seen = told_before.find(row.Key());
  Told told = seen != told_before.end() ? seen->second : Told{sampled_once_ ? 0 : count, {}};
  if (count > told.count &&
      (told.at == DriftDeps::Clock::time_point{} || now - told.at >= std::chrono::minutes(1))) {
    const k8s::Json pod = {
        {"metadata", {{"namespace", row.ns}, {"name", row.pod}, {"uid", row.pod_uid}}}};
    deps_.api->WarnPod(pod, reason, message(count - told.count));
    told = {count, now};
  }
  next[row.Key()] = told;
}

observe::NodeCounts DriftActions::counts() const {
  return {counters_.over_cap,  counters_.unattributed,      counters_.kills,
          counters_.evictions, deps_.api->events_dropped(), counters_.compute};
}

std::string DriftActions::Enforce(const ContainerDrift& c, const std::vector<unsigned int>& pids,
                                  StatusOr<k8s::Json>* pod) {
  const std::size_t slash = c.pod.find('/');
  const std::string ns = c.pod.substr(0, slash), name = c.pod.substr(slash + 1);
  *pod = deps_.api->GetPod(ns, name);
  const policy::DriftAction action = deps_.on_drift(*pod);
  if (action == policy::DriftAction::kKill) {
    for (unsigned int pid : pids) deps_.kill(pid);
    ++counters_.kills;
    return "its " + std::to_string(pids.size()) + " GPU process(es) killed";
  }
  if (action == policy::DriftAction::kEvict) {
    Status r = deps_.api->Evict(ns, name);
    ++counters_.evictions;
    return r.ok() ? "the pod evicted" : "eviction failed: " + r.message();
  }
  return "reported";
}

void DriftActions::ActOnOverCap(const ContainerDrift& c) {
  ++counters_.over_cap;
  StatusOr<k8s::Json> pod = InternalError("not read");
  const std::string done = Enforce(c, c.pids, &pod);
  const std::string message = "container " + c.container + " holds " +
                              FormatBytesHuman(c.nvml_bytes) + " on " + c.uuid +
                              " (NVML), above its cap of " + FormatBytesHuman(c.cap_bytes) +
                              "; its region says " + FormatBytesHuman(c.region_bytes) + "; " + done;
  TESSERA_LOG(kWarn, kAgent, "%s: %s", c.pod.c_str(), message.c_str());
  if (pod.ok()) deps_.api->WarnPod(*pod, names::kEventMemoryOverCap, message);
}

}  // namespace tessera::agent
