// Snapshot <-> Prometheus text. Label sets (names.h, TESSERA_METRICS): node = Hostname; gpu =
// Hostname, gpu, UUID, device, modelName (dcgm-exporter's names); container = gpu + namespace,
// pod, container (dcgm-exporter's Kubernetes mapping).
#include <cmath>

#include "tessera/names.h"
#include "tessera/prometheus.h"

#include "observe/observe.h"

namespace tessera::observe {
namespace {

namespace n = names;
using prom::Labels;

Labels GpuLabels(const Snapshot& s, const GpuRow& g) {
  return {{"Hostname", s.node},
          {"gpu", g.index >= 0 ? std::to_string(g.index) : ""},
          {"UUID", g.uuid},
          {"device", g.index >= 0 ? "nvidia" + std::to_string(g.index) : ""},
          {"modelName", g.model}};
}

Labels ContainerLabels(const Snapshot& s, const ContainerRow& c) {
  GpuRow gpu;
  gpu.uuid = c.uuid;
  for (const GpuRow& g : s.gpus) {
    if (g.uuid == c.uuid) gpu = g;
  }
  Labels labels = GpuLabels(s, gpu);
  labels.push_back({"namespace", c.ns});
  labels.push_back({"pod", c.pod});
  labels.push_back({"container", c.container});
  return labels;
}

double Seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string Label(const prom::Sample& s, const std::string& key) {
  auto it = s.labels.find(key);
  return it == s.labels.end() ? "" : it->second;
}

std::uint64_t Count(double v) {
  return v > 0 && std::isfinite(v) ? static_cast<std::uint64_t>(std::llround(v)) : 0;
}

}  // namespace

std::string RenderExposition(const Snapshot& s) {
  prom::Exposition out;
  out.Add(n::kMetricNodeInfo, {{"Hostname", s.node}, {"version", s.version}}, 1);
  for (const GpuRow& g : s.gpus) {
    const Labels labels = GpuLabels(s, g);
    std::uint64_t allocated = 0, containers = 0, cores = 0;
    for (const ContainerRow& c : s.containers) {
      if (c.uuid != g.uuid) continue;
      allocated += c.limit_bytes;
      cores += c.cores_percent;
      ++containers;
    }
    if (g.memory_total != 0)
      out.Add(n::kMetricGpuMemoryTotal, labels, static_cast<double>(g.memory_total));
    out.Add(n::kMetricGpuMemoryAllocated, labels, static_cast<double>(allocated));
    out.Add(n::kMetricGpuComputeAllocated, labels, static_cast<double>(cores) / 100.0);
    out.Add(n::kMetricGpuContainers, labels, static_cast<double>(containers));
    out.Add(n::kMetricGpuHealthy, labels, g.healthy ? 1 : 0);
  }
  for (const ContainerRow& c : s.containers) {
    const Labels labels = ContainerLabels(s, c);
    Labels info = labels;
    info.push_back({"priority", std::string(Name(c.priority))});
    info.push_back({"mode", std::string(Name(c.mode))});
    info.push_back({"compute", std::string(Name(c.compute))});
    out.Add(n::kMetricContainerInfo, info, 1);
    out.Add(n::kMetricContainerMemoryLimit, labels, static_cast<double>(c.limit_bytes));
    if (c.cores_percent != 0)
      out.Add(n::kMetricContainerShareTarget, labels, c.cores_percent / 100.0);
    if (c.nvml_bytes)
      out.Add(n::kMetricContainerMemoryNvml, labels, static_cast<double>(*c.nvml_bytes));
    if (auto drift = c.drift_bytes(); drift && c.region_readable) {
      out.Add(n::kMetricContainerMemoryDrift, labels, static_cast<double>(*drift));
    }
    if (!c.region_readable) continue;
    out.Add(n::kMetricContainerMemoryUsed, labels, static_cast<double>(c.used_bytes));
    out.Add(n::kMetricContainerMemoryPeak, labels, static_cast<double>(c.peak_bytes));
    out.Add(n::kMetricContainerOomDenials, labels, static_cast<double>(c.oom_denials));
    if (!c.compute_readable) continue;
    if (c.delivered) out.Add(n::kMetricContainerShareDelivered, labels, *c.delivered);
    out.Add(n::kMetricContainerBusy, labels, Seconds(c.busy_ns));
    out.Add(n::kMetricContainerThrottled, labels, Seconds(c.throttled_ns));
    out.Add(n::kMetricContainerPriorityHeld, labels, Seconds(c.priority_held_ns));
    out.Add(n::kMetricContainerPriorityHolds, labels, static_cast<double>(c.priority_holds));
    out.Add(n::kMetricContainerLaunches, labels, static_cast<double>(c.launches));
    out.Add(n::kMetricContainerLaunchFailures, labels, static_cast<double>(c.launch_failures));
    out.Add(n::kMetricContainerGovernorFailures, labels, static_cast<double>(c.governor_failures));
    out.Add(n::kMetricContainerGovernorDown, labels, Seconds(c.governor_down_ns));
  }
  if (s.counts) {
    const Labels node = {{"Hostname", s.node}};
    out.Add(n::kMetricNodeOverCap, node, static_cast<double>(s.counts->over_cap));
    out.Add(n::kMetricNodeUnattributed, node, static_cast<double>(s.counts->unattributed));
    out.Add(n::kMetricNodeComputeDrift, node, static_cast<double>(s.counts->compute_drift));
    out.Add(n::kMetricNodeDriftKills, node, static_cast<double>(s.counts->kills));
    out.Add(n::kMetricNodeDriftEvictions, node, static_cast<double>(s.counts->evictions));
    out.Add(n::kMetricNodeEventsDropped, node, static_cast<double>(s.counts->events_dropped));
  }
  return out.Text();
}

StatusOr<Snapshot> SnapshotFromExposition(std::string_view text) {
  auto samples = prom::ParseExposition(text);
  if (!samples.ok()) return samples.status();
  Snapshot s;
  std::map<std::string, GpuRow> gpus;  // by UUID, in first-seen order below
  std::vector<std::string> gpu_order;
  std::map<std::string, ContainerRow> rows;  // by key
  std::vector<std::string> row_order;
  auto gpu_of = [&](const prom::Sample& x) -> GpuRow& {
    const std::string uuid = Label(x, "UUID");
    auto [it, fresh] = gpus.try_emplace(uuid);
    if (fresh) {
      gpu_order.push_back(uuid);
      it->second.uuid = uuid;
      const std::string index = Label(x, "gpu");
      it->second.index = index.empty() ? -1 : std::atoi(index.c_str());
      it->second.model = Label(x, "modelName");
    }
    return it->second;
  };
  auto row_of = [&](const prom::Sample& x) -> ContainerRow& {
    ContainerRow probe;
    probe.ns = Label(x, "namespace");
    probe.pod = Label(x, "pod");
    probe.container = Label(x, "container");
    probe.uuid = Label(x, "UUID");
    auto [it, fresh] = rows.try_emplace(probe.Key(), probe);
    if (fresh) row_order.push_back(probe.Key());
    return it->second;
  };
  NodeCounts counts;
  bool any_count = false;
  for (const prom::Sample& x : *samples) {
    const std::string& m = x.name;
    if (m == n::kMetricNodeInfo) {
      s.node = Label(x, "Hostname");
      s.version = Label(x, "version");
    } else if (m == n::kMetricGpuMemoryTotal) {
      gpu_of(x).memory_total = Count(x.value);
    } else if (m == n::kMetricGpuHealthy) {
      gpu_of(x).healthy = x.value != 0;
    } else if (m == n::kMetricContainerInfo) {
      ContainerRow& r = row_of(x);
      if (auto p = ParsePriorityClass(Label(x, "priority")); p.ok()) r.priority = *p;
      if (auto mode = ParseSharingMode(Label(x, "mode")); mode.ok()) r.mode = *mode;
      if (auto c = ParseComputeMode(Label(x, "compute")); c.ok()) r.compute = *c;
    } else if (m == n::kMetricContainerMemoryLimit) {
      row_of(x).limit_bytes = Count(x.value);
    } else if (m == n::kMetricContainerShareTarget) {
      row_of(x).cores_percent = static_cast<std::uint32_t>(std::llround(x.value * 100));
    } else if (m == n::kMetricContainerMemoryNvml) {
      row_of(x).nvml_bytes = Count(x.value);
    } else if (m == n::kMetricContainerMemoryUsed) {
      row_of(x).used_bytes = Count(x.value);
      row_of(x).region_readable = true;
    } else if (m == n::kMetricContainerMemoryPeak) {
      row_of(x).peak_bytes = Count(x.value);
    } else if (m == n::kMetricContainerOomDenials) {
      row_of(x).oom_denials = Count(x.value);
    } else if (m == n::kMetricContainerShareDelivered) {
      row_of(x).delivered = x.value;
    } else if (m == n::kMetricContainerBusy) {
      row_of(x).busy_ns = Count(x.value * 1e9);
      row_of(x).compute_readable = true;
    } else if (m == n::kMetricContainerThrottled) {
      row_of(x).throttled_ns = Count(x.value * 1e9);
    } else if (m == n::kMetricContainerPriorityHeld) {
      row_of(x).priority_held_ns = Count(x.value * 1e9);
    } else if (m == n::kMetricContainerPriorityHolds) {
      row_of(x).priority_holds = Count(x.value);
    } else if (m == n::kMetricContainerLaunches) {
      row_of(x).launches = Count(x.value);
    } else if (m == n::kMetricContainerLaunchFailures) {
      row_of(x).launch_failures = Count(x.value);
    } else if (m == n::kMetricContainerGovernorFailures) {
      row_of(x).governor_failures = Count(x.value);
    } else if (m == n::kMetricContainerGovernorDown) {
      row_of(x).governor_down_ns = Count(x.value * 1e9);
    } else if (m == n::kMetricNodeOverCap) {
      counts.over_cap = Count(x.value), any_count = true;
    } else if (m == n::kMetricNodeUnattributed) {
      counts.unattributed = Count(x.value), any_count = true;
    } else if (m == n::kMetricNodeComputeDrift) {
      counts.compute_drift = Count(x.value), any_count = true;
    } else if (m == n::kMetricNodeDriftKills) {
      counts.kills = Count(x.value), any_count = true;
    } else if (m == n::kMetricNodeDriftEvictions) {
      counts.evictions = Count(x.value), any_count = true;
    } else if (m == n::kMetricNodeEventsDropped) {
      counts.events_dropped = Count(x.value), any_count = true;
    }
  }
  if (s.node.empty() && rows.empty() && gpus.empty()) {
    return InvalidArgumentError(
        "metrics: no tessera_node_info and no tessera GPU or container family "
        "(is this a tessera-node /metrics endpoint?)");
  }
  for (const std::string& uuid : gpu_order) s.gpus.push_back(gpus[uuid]);
  for (const std::string& key : row_order) s.containers.push_back(rows[key]);
  if (any_count) s.counts = counts;
  return s;
}

}  // namespace tessera::observe
