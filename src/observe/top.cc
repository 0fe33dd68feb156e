// `tessera top`'s screen: one block per GPU, one line per container on it.
#include <algorithm>
#include <cstdio>

#include "tessera/json_writer.h"

#include "observe/observe.h"

namespace tessera::observe {
namespace {

// "7.9G", "512M", "0": four characters or so, binary units.
std::string Bytes(std::uint64_t b) {
  char text[32];
  const double g = static_cast<double>(b) / (1ULL << 30), m = static_cast<double>(b) / (1ULL << 20);
  if (b == 0) return "0";
  if (g >= 100)
    std::snprintf(text, sizeof(text), "%.0fG", g);
  else if (g >= 1)
    std::snprintf(text, sizeof(text), "%.1fG", g);
  else
    std::snprintf(text, sizeof(text), "%.0fM", std::max(1.0, m));
  return text;
}

std::string Percent(double ratio) {
  char text[16];
  std::snprintf(text, sizeof(text), "%.0f%%", ratio * 100);
  return text;
}

std::string_view Class(PriorityClass p) {
  switch (p) {
    case PriorityClass::kLatencyCritical:
      return "LC";
    case PriorityClass::kBestEffort:
      return "BE";
    default:
      return "N";
  }
}

std::string_view GateName(shm::Gate g) {
  switch (g) {
    case shm::Gate::kOpen:
      return "run";
    case shm::Gate::kHeldShare:
      return "held";
    case shm::Gate::kHeldPriority:
      return "held!";
    default:
      return "free";
  }
}

// A bar of `width` cells, `used` of `total` filled.
std::string Bar(double used, double total, int width) {
  const int filled =
      total > 0 ? std::clamp(static_cast<int>(used / total * width + 0.5), 0, width) : 0;
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

// Control characters out (names may come from another machine's metrics: no terminal escapes).
std::string Printable(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

std::string Fit(std::string text, std::size_t width) {
  text = Printable(std::move(text));
  if (text.size() > width) text = text.substr(0, width - 1) + "~";
  return text;
}

// Every line cut at `columns`.
std::string Clamp(const std::string& screen, int columns) {
  std::string out;
  std::size_t start = 0;
  while (start < screen.size()) {
    std::size_t end = screen.find('\n', start);
    if (end == std::string::npos) end = screen.size();
    out +=
        screen.substr(start, std::min<std::size_t>(end - start, static_cast<std::size_t>(columns)));
    if (end < screen.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string RenderTop(const Snapshot& s, int columns) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "tessera top  node %s%s%s\n",
                s.node.empty() ? "(local)" : Printable(s.node).c_str(),
                s.version.empty() ? "" : "  tessera ", Printable(s.version).c_str());
  out += line;
  if (s.counts) {
    std::snprintf(line, sizeof(line),
                  "drift: %llu over-cap episode(s), %llu compute episode(s), %llu unattributed "
                  "process(es), %llu kill(s), %llu eviction(s)\n",
                  static_cast<unsigned long long>(s.counts->over_cap),
                  static_cast<unsigned long long>(s.counts->compute_drift),
                  static_cast<unsigned long long>(s.counts->unattributed),
                  static_cast<unsigned long long>(s.counts->kills),
                  static_cast<unsigned long long>(s.counts->evictions));
    out += line;
  }
  // GPUs in the snapshot, then any a container names that the snapshot does not list.
  std::vector<GpuRow> gpus = s.gpus;
  for (const ContainerRow& c : s.containers) {
    if (std::none_of(gpus.begin(), gpus.end(), [&](const GpuRow& g) { return g.uuid == c.uuid; })) {
      GpuRow g;
      g.uuid = c.uuid;
      gpus.push_back(g);
    }
  }
  const std::size_t pod_width = static_cast<std::size_t>(std::clamp(columns - 73, 16, 48));
  for (const GpuRow& g : gpus) {
    std::uint64_t allocated = 0, used = 0, cores = 0;
    int count = 0;
    for (const ContainerRow& c : s.containers) {
      if (c.uuid != g.uuid) continue;
      allocated += c.limit_bytes;
      used += c.used_bytes;
      cores += c.cores_percent;
      ++count;
    }
    const std::string index = g.index >= 0 ? std::to_string(g.index) : "?";
    std::snprintf(line, sizeof(line), "\nGPU %s  %s%s%s%s\n", index.c_str(),
                  Printable(g.model).c_str(), g.model.empty() ? "" : "  ",
                  Printable(g.uuid).c_str(), g.healthy ? "" : "  UNHEALTHY");
    out += line;
    const double total = static_cast<double>(g.memory_total != 0 ? g.memory_total : allocated);
    std::snprintf(line, sizeof(line),
                  "  memory %s used, %s capped of %s %s  compute %s reserved  %d container(s)\n",
                  Bytes(used).c_str(), Bytes(allocated).c_str(),
                  g.memory_total ? Bytes(g.memory_total).c_str() : "?",
                  Bar(static_cast<double>(allocated), total, 20).c_str(),
                  Percent(static_cast<double>(cores) / 100.0).c_str(), count);
    out += line;
    if (count == 0) continue;
    std::snprintf(line, sizeof(line), "  %-*s %-10s %-2s %5s %5s %5s %5s %5s %5s %7s %6s %5s\n",
                  static_cast<int>(pod_width), "POD", "CONTAINER", "PR", "CAP", "USED", "PEAK",
                  "NVML", "SHARE", "GOT", "HELD", "DENIED", "GATE");
    out += line;
    std::vector<const ContainerRow*> rows;
    for (const ContainerRow& c : s.containers) {
      if (c.uuid == g.uuid) rows.push_back(&c);
    }
    std::sort(rows.begin(), rows.end(), [](const ContainerRow* a, const ContainerRow* b) {
      return a->limit_bytes != b->limit_bytes ? a->limit_bytes > b->limit_bytes
                                              : a->Key() < b->Key();
    });
    for (const ContainerRow* c : rows) {
      const std::string pod = c->ns.empty() ? c->pod : c->ns + "/" + c->pod;
      const std::string share = c->cores_percent == 0
                                    ? "-"
                                    : std::to_string(c->cores_percent) +
                                          (c->compute == ComputeMode::kWorkConserving ? "%w" : "%");
      char held[16];
      std::snprintf(held, sizeof(held), "%.1fs",
                    static_cast<double>(c->throttled_ns + c->priority_held_ns) / 1e9);
      std::snprintf(
          line, sizeof(line), "  %-*s %-10s %-2s %5s %5s %5s %5s %5s %5s %7s %6llu %5s\n",
          static_cast<int>(pod_width), Fit(pod, pod_width).c_str(), Fit(c->container, 10).c_str(),
          std::string(Class(c->priority)).c_str(), Bytes(c->limit_bytes).c_str(),
          c->region_readable ? Bytes(c->used_bytes).c_str() : "?",
          c->region_readable ? Bytes(c->peak_bytes).c_str() : "?",
          c->nvml_bytes ? Bytes(*c->nvml_bytes).c_str() : "-", share.c_str(),
          c->delivered ? Percent(*c->delivered).c_str() : "-", c->compute_readable ? held : "?",
          static_cast<unsigned long long>(c->oom_denials),
          c->compute_readable ? std::string(GateName(c->gate)).c_str() : "?");
      out += line;
    }
  }
  if (gpus.empty()) out += "\nno GPU and no container to show\n";
  out +=
      "\nPR: priority (LC latency-critical, N normal, BE best-effort)."
      "\nSHARE: compute share (w: work-conserving). GOT: delivered over the last window."
      "\nHELD: time launches waited (share or priority). DENIED: allocations refused at the cap."
      "\nNVML: the driver's figure (node agent only). GATE: the arbiter's verdict now.\n";
  return Clamp(out, columns);
}

std::string SnapshotJson(const Snapshot& snapshot) {
  std::string out;
  {
    ObjectWriter o(out);
    o.Str("node", snapshot.node);
    if (!snapshot.version.empty()) o.Str("version", snapshot.version);
    AppendJsonArray(o.Field("gpus"), snapshot.gpus, [](const GpuRow& g, std::string& into) {
      ObjectWriter w(into);
      w.Num("index", g.index);
      w.Str("uuid", g.uuid);
      w.Str("model", g.model);
      w.Num("memoryBytes", g.memory_total);
      w.Bool("healthy", g.healthy);
    });
    AppendJsonArray(o.Field("containers"), snapshot.containers,
                    [](const ContainerRow& c, std::string& into) {
                      ObjectWriter w(into);
                      w.Str("id", c.id);
                      w.Str("namespace", c.ns);
                      w.Str("pod", c.pod);
                      w.Str("podUid", c.pod_uid);
                      w.Str("container", c.container);
                      w.Str("uuid", c.uuid);
                      w.Str("priority", Name(c.priority));
                      w.Str("mode", Name(c.mode));
                      w.Str("compute", Name(c.compute));
                      w.Num("limitBytes", c.limit_bytes);
                      w.Num("coresPercent", c.cores_percent);
                      w.Bool("regionReadable", c.region_readable);
                      if (c.region_readable) {
                        w.Num("usedBytes", c.used_bytes);
                        w.Num("peakBytes", c.peak_bytes);
                        w.Num("oomDenials", c.oom_denials);
                      }
                      if (c.compute_readable) {
                        w.Num("busyNs", c.busy_ns);
                        w.Num("throttledNs", c.throttled_ns);
                        w.Num("priorityHeldNs", c.priority_held_ns);
                        w.Num("priorityHolds", c.priority_holds);
                        w.Num("launches", c.launches);
                        w.Num("launchFailures", c.launch_failures);
                        w.Num("governorFailures", c.governor_failures);
                        w.Num("governorDownNs", c.governor_down_ns);
                        w.Str("gate", GateName(c.gate));
                      }
                      if (c.nvml_bytes) w.Num("nvmlBytes", *c.nvml_bytes);
                      if (c.delivered) w.Real("delivered", *c.delivered, 4);
                    });
    if (snapshot.counts) {
      ObjectWriter n(o.Field("counts"));
      n.Num("overCap", snapshot.counts->over_cap);
      n.Num("unattributed", snapshot.counts->unattributed);
      n.Num("computeDrift", snapshot.counts->compute_drift);
      n.Num("kills", snapshot.counts->kills);
      n.Num("evictions", snapshot.counts->evictions);
      n.Num("eventsDropped", snapshot.counts->events_dropped);
    }
  }
  out += '\n';
  return out;
}

}  // namespace tessera::observe
