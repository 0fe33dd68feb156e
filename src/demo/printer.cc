#include "demo/printer.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "tessera/quantity.h"

namespace tessera::demo {
namespace {

// The code point at `text[i]` and its length in bytes (invalid bytes count as one each).
std::pair<char32_t, std::size_t> Decode(std::string_view text, std::size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  std::size_t n = b < 0x80           ? 1
                  : (b >> 5) == 0x6  ? 2
                  : (b >> 4) == 0xE  ? 3
                  : (b >> 3) == 0x1E ? 4
                                     : 1;
  if (i + n > text.size()) n = 1;
  if (n == 1) return {b, 1};
  char32_t cp = b & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return {cp, n};
}

bool Wide(char32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
         (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

// The longest prefix of `text` that fits `width` columns.
std::string_view Cut(std::string_view text, std::size_t width) {
  std::size_t i = 0;
  std::size_t used = 0;
  while (i < text.size()) {
    const auto [cp, n] = Decode(text, i);
    const std::size_t w = Wide(cp) ? 2U : 1U;
    if (used + w > width) break;
    used += w;
    i += n;
  }
  return text.substr(0, i);
}

std::string Pad(std::string_view text, std::size_t width, Table::Align align) {
  const std::size_t w = DisplayWidth(text);
  const std::string fill(w < width ? width - w : 0, ' ');
  return align == Table::Align::kRight ? fill + std::string(text) : std::string(text) + fill;
}

std::string RightTrim(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::string GpuName(const std::string& node, int gpu) {
  return node + " gpu" + std::to_string(gpu);
}

std::string Percent(int p) { return p == 0 ? "-" : std::to_string(p) + "%"; }

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

std::uint64_t AskBytes(const PodResult& p) {
  if (p.outcome == Outcome::kPlaced) return p.mode == "exclusive" ? 0 : p.memory_bytes;
  if (!p.spec.memory.empty()) {
    auto bytes = ParseQuantity(p.spec.memory);
    if (bytes.ok()) return *bytes;
  }
  if (!p.spec.kai_memory_mib.empty()) {
    auto bytes = ParseQuantity(p.spec.kai_memory_mib + "Mi");
    if (bytes.ok()) return *bytes;
  }
  return 0;
}

}  // namespace

std::size_t DisplayWidth(std::string_view text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, n] = Decode(text, i);
    width += Wide(cp) ? 2U : 1U;
    i += n;
  }
  return width;
}

std::vector<std::string> Wrap(std::string_view text, std::size_t width) {
  std::vector<std::string> lines;
  if (width == 0) width = 1;
  std::string line;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = text.find(' ', i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view word = text.substr(i, j - i);
    i = j;
    if (word.empty()) break;
    const std::size_t need = DisplayWidth(line) + (line.empty() ? 0 : 1) + DisplayWidth(word);
    if (!line.empty() && need > width) {
      lines.push_back(line);
      line.clear();
    }
    while (DisplayWidth(word) > width) {  // a word wider than a line: cut it
      if (!line.empty()) {
        lines.push_back(line);
        line.clear();
      }
      const std::string_view head = Cut(word, width);
      lines.emplace_back(head);
      word.remove_prefix(head.size());
    }
    if (word.empty()) continue;
    if (!line.empty()) line += ' ';
    line += word;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::string Paragraph(std::string_view first, std::size_t indent, std::string_view text,
                      std::size_t width) {
  const std::size_t room = width > indent ? width - indent : 1;
  std::string head(first);
  if (DisplayWidth(head) < indent) head += std::string(indent - DisplayWidth(head), ' ');
  std::string out;
  bool first_line = true;
  for (const std::string& line : Wrap(text, room)) {
    out += RightTrim((first_line ? head : std::string(indent, ' ')) + line) + "\n";
    first_line = false;
  }
  return out;
}

std::string Bar(std::uint64_t used, std::uint64_t total, int width) {
  if (width <= 0) return "[]";
  const auto cells = static_cast<std::uint64_t>(width);
  std::uint64_t filled = 0;
  const bool over = used > total;
  if (over || total == 0) {
    filled = used > 0 || total == 0 ? cells : 0;
  } else {
    // Rounded to the nearest cell, in integers (no overflow below 2^64 / width bytes).
    filled = (used * cells + total / 2) / total;
    if (used > 0 && filled == 0) filled = 1;
    if (used < total && filled == cells) filled = cells - 1;
  }
  std::string out = "[";
  for (std::uint64_t i = 0; i < cells; ++i) out += i < filled ? "█" : "░";
  out += "]";
  if (over) out += "!";
  return out;
}

std::string GiB(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1ULL << 30));
  return text;
}

std::string Rule(std::string_view title) {
  std::string out = "━━ " + std::string(title) + " ";
  const std::size_t w = DisplayWidth(out);
  for (std::size_t i = w; i < kLineWidth; ++i) out += "━";
  return out;
}

void Table::Add(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(std::size_t indent) const {
  std::vector<std::size_t> widths(columns_.size(), 0);
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = DisplayWidth(columns_[c].header);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
    if (columns_[c].max_width != 0) {
      widths[c] =
          std::min(widths[c], std::max(columns_[c].max_width, DisplayWidth(columns_[c].header)));
    }
  }
  auto render_row = [&](const std::vector<std::string>& cells) {
    std::vector<std::vector<std::string>> parts(cells.size());
    std::size_t height = 1;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      parts[c] = DisplayWidth(cells[c]) > widths[c] ? Wrap(cells[c], widths[c])
                                                    : std::vector<std::string>{cells[c]};
      height = std::max(height, parts[c].size());
    }
    std::string out;
    for (std::size_t line = 0; line < height; ++line) {
      std::string text(indent, ' ');
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const std::string cell = line < parts[c].size() ? parts[c][line] : "";
        text += Pad(cell, widths[c], columns_[c].align);
        if (c + 1 < cells.size()) text += "  ";
      }
      out += RightTrim(text) + "\n";
    }
    return out;
  };
  std::vector<std::string> headers;
  for (const Column& c : columns_) headers.push_back(c.header);
  std::string out = render_row(headers);
  for (const auto& row : rows_) out += render_row(row);
  return out;
}

std::string AskText(const PodSpec& s) {
  if (!s.kai_memory_mib.empty()) return "gpu-memory " + s.kai_memory_mib + " (KAI)";
  if (!s.kai_fraction.empty()) return "gpu-fraction " + s.kai_fraction + " (KAI)";
  if (s.gpus > 0) return std::to_string(s.gpus) + (s.gpus == 1 ? " whole GPU" : " whole GPUs");
  std::string out = s.memory;
  if (s.cores > 0) out += (out.empty() ? "" : " + ") + std::to_string(s.cores) + "%";
  return out.empty() ? "-" : out;
}

std::uint64_t StrandedBytes(const ScenarioResult& r) {
  std::uint64_t smallest = std::numeric_limits<std::uint64_t>::max();
  for (const PodResult& p : r.pods) {
    const std::uint64_t ask = AskBytes(p);
    if (ask > 0) smallest = std::min(smallest, ask);
  }
  std::uint64_t stranded = 0;
  for (const GpuRow& g : r.gpus) {
    if (g.pods.empty() || g.memory_used >= g.memory_bytes) continue;
    const std::uint64_t free = g.memory_bytes - g.memory_used;
    if (free < smallest) stranded += free;
  }
  return stranded;
}

int GpusUsed(const ScenarioResult& r) {
  int n = 0;
  for (const GpuRow& g : r.gpus) n += g.pods.empty() ? 0 : 1;
  return n;
}

std::string RenderBanner() {
  return Rule("tessera demo: the seeds' GPU-sharing scenarios on a real control plane") + "\n";
}

std::string RenderCluster(const DemoResult& r) {
  std::string out = "\nCluster (local processes; up in " + Seconds(r.startup_seconds) + ")\n";
  out +=
      "  control plane      etcd, kube-apiserver, kube-scheduler (upstream), kube-scheduler "
      "calling\n"
      "                     tessera-scheduler as its extender\n";
  out += "  tessera-scheduler  placement " + r.placement +
         ", admission webhooks over TLS (a CA made for this run),\n"
         "                     decisions signed with an Ed25519 key made for this run\n";
  out +=
      "  GPU nodes          simulated (no kubelet or container runtime here): each Node is\n"
      "                     registered by simnodes and its GPUs published by a real tessera-node\n"
      "                     reading the fake NVML\n\n";
  Table t(
      {{"node"}, {"GPUs", Table::Align::kRight}, {"each", Table::Align::kRight}, {"stands for"}});
  for (const NodeResult& n : r.nodes) {
    t.Add({n.spec.name, std::to_string(n.uuids.size()), GiB(n.spec.gpu_memory), n.spec.stands_for});
  }
  return out + t.Render(2);
}

std::string RenderPolicy(const DemoResult& r) {
  std::string out =
      "\nPolicy in force (tessera policy file v1; tiers it leaves out keep the seeds' defaults)\n";
  Table t({{"tier"},
           {"modes, preferred first"},
           {"co-tenancy"},
           {"on failure"},
           {"on drift"},
           {"namespaces", Table::Align::kLeft, 22}});
  for (const PolicyRow& p : r.policy) {
    t.Add({p.tier, p.modes, p.co_tenancy, p.enforcement, p.on_drift,
           p.namespaces.empty() ? "-" : Join(p.namespaces, ", ")});
  }
  out += t.Render(2);
  out += "  (* = every namespace the file does not name)\n";
  for (const std::string& q : r.quotas) out += Paragraph("  quota", 14, q);
  bool first = true;
  for (const std::string& p : r.priorities) {
    out += Paragraph(first ? "  priority" : "", 14, p);
    first = false;
  }
  return out;
}

std::string RenderScenario(const Scenario& s, const ScenarioResult& r, int index, int count,
                           bool gpu_present) {
  std::string out =
      "\n" + Rule(std::to_string(index) + "/" + std::to_string(count) + "  " + s.title) + "\n";
  out += Paragraph("  from", 8, s.seed);
  for (const std::string& line : s.story) out += "  " + line + "\n";
  // Who is asking: namespaces with their tiers.
  std::vector<std::string> tenants;
  std::set<std::string> seen;
  for (const PodResult& p : r.pods) {
    if (seen.insert(p.spec.ns).second) tenants.push_back(p.spec.ns + " (" + p.tier + ")");
  }
  const bool one_namespace = seen.size() == 1;
  std::string where =
      s.node.empty() ? "any node" : s.node + " (a nodeSelector pins the pods there)";
  out += Paragraph("  tenants", 12, Join(tenants, ", ") + "; on " + where);
  out += "\n";

  Table pods({{"pod"},
              {"asks"},
              {"priority/mode"},
              {"result"},
              {"GPU"},
              {"memory", Table::Align::kRight},
              {"cores", Table::Align::kRight}});
  for (const PodResult& p : r.pods) {
    std::string cls = p.spec.priority;
    if (!p.spec.mode.empty()) cls += (cls.empty() ? "" : ", ") + std::string("mode ") + p.spec.mode;
    std::string result = p.outcome == Outcome::kPlaced   ? "placed"
                         : p.outcome == Outcome::kDenied ? "denied"
                                                         : "waits";
    if (!p.as_expected) result += " (!)";
    const bool placed = p.outcome == Outcome::kPlaced;
    pods.Add({one_namespace ? p.spec.name : p.spec.ns + "/" + p.spec.name, AskText(p.spec),
              cls.empty() ? "-" : cls, result, placed ? GpuName(p.node, p.gpu) : "-",
              placed ? GiB(p.memory_bytes) : "", placed ? Percent(static_cast<int>(p.cores)) : ""});
  }
  out += pods.Render(2);

  // Admission's translations (the KAI manifests): what every pod got, then each one's own.
  std::vector<const PodResult*> translated;
  for (const PodResult& p : r.pods) {
    if (!p.spec.kai_memory_mib.empty() || !p.spec.kai_fraction.empty()) translated.push_back(&p);
  }
  if (!translated.empty()) {
    out += "\n  Admitted as (tessera's mutating webhook)\n";
    std::vector<std::string> common;
    for (const std::string& item : translated.front()->admitted_as) {
      bool everywhere = true;
      for (const PodResult* p : translated) {
        everywhere = everywhere && std::find(p->admitted_as.begin(), p->admitted_as.end(), item) !=
                                       p->admitted_as.end();
      }
      if (everywhere) common.push_back(item);
    }
    if (translated.size() > 1 && !common.empty())
      out += Paragraph("  every pod", 18, Join(common, "; "));
    for (const PodResult* p : translated) {
      std::vector<std::string> own;
      for (const std::string& item : p->admitted_as) {
        if (translated.size() == 1 ||
            std::find(common.begin(), common.end(), item) == common.end()) {
          own.push_back(item);
        }
      }
      if (!own.empty()) out += Paragraph("  " + p->spec.name, 18, Join(own, "; "));
    }
  }

  // Refusals, with their reasons as the API server and kube-scheduler gave them.
  bool any_refusal = false;
  for (const PodResult& p : r.pods) {
    if (p.outcome == Outcome::kPlaced) continue;
    if (!any_refusal) out += "\n  Refused, and why\n";
    any_refusal = true;
    const std::string name = "  " + (one_namespace ? p.spec.name : p.spec.ns + "/" + p.spec.name);
    const std::size_t indent = 6;
    out += name + "\n";
    const std::string by =
        p.outcome == Outcome::kDenied ? "admission webhook: " : "kube-scheduler: ";
    out += Paragraph("", indent, by + p.reason);
    for (const std::string& v : p.verdicts) out += Paragraph("", indent, "tessera, per GPU: " + v);
    if (!p.as_expected) {
      out += Paragraph("", indent, "(!) the demo expected " + std::string(Name(p.spec.expect)));
    }
  }

  // The books.
  out += "\n  GPU ledger afterwards (tessera-scheduler's /ledger)\n";
  Table ledger({{"GPU"},
                {"memory"},
                {"used / total", Table::Align::kRight},
                {"cores", Table::Align::kRight},
                {"pods", Table::Align::kLeft, 30}});
  for (const GpuRow& g : r.gpus) {
    char used[64];
    std::snprintf(used, sizeof(used), "%.2f / %.2f GiB",
                  static_cast<double>(g.memory_used) / (1ULL << 30),
                  static_cast<double>(g.memory_bytes) / (1ULL << 30));
    ledger.Add({GpuName(g.node, g.gpu), Bar(g.memory_used, g.memory_bytes, 24), used,
                Percent(g.cores_used), g.pods.empty() ? "-" : Join(g.pods, ", ")});
  }
  out += ledger.Render(2);

  // Enforcement: what tessera-node and the preload library would do for each placed pod.
  bool any_placed = false;
  bool any_shared = false;
  for (const PodResult& p : r.pods) {
    any_placed = any_placed || p.outcome == Outcome::kPlaced;
    any_shared = any_shared || (p.outcome == Outcome::kPlaced && p.mode != "exclusive");
  }
  if (any_placed) {
    out += gpu_present ? "\n  Enforcement (this machine has a GPU: the $ lines show it for real)\n"
                       : "\n  Enforcement (no GPU here): where it would act\n";
    out +=
        Paragraph("  ", 2,
                  std::string(any_shared ? "Past its cap, an allocation (cudaMalloc, cuMemAlloc, "
                                           "pools, VMM, graphs) fails with "
                                           "CUDA_ERROR_OUT_OF_MEMORY in that pod alone, and "
                                           "cudaMemGetInfo and NVML report the cap as the total. "
                                         : "") +
                      "Each $ line runs a command under the same limits on a GPU host, without "
                      "Kubernetes.");
    std::vector<std::pair<std::string, std::string>> tier_rules;  // tier, rule
    for (const PodResult& p : r.pods) {
      if (p.outcome != Outcome::kPlaced) continue;
      bool first = true;
      for (const std::string& e : p.enforcement) {
        out += Paragraph(first ? "  " + p.spec.name : "", 22, e);
        first = false;
      }
      out += "    $ " + p.run_command + "\n";
      for (const std::string& t : p.tier_rules) {
        const std::pair<std::string, std::string> rule{p.tier, t};
        if (std::find(tier_rules.begin(), tier_rules.end(), rule) == tier_rules.end()) {
          tier_rules.push_back(rule);
        }
      }
    }
    for (const auto& [tier, rule] : tier_rules) out += Paragraph("  " + tier + " tier", 22, rule);
    for (const PodResult& p : r.pods) {
      if (p.spec.name != s.show_limits_of || p.limits_file.empty()) continue;
      out += "\n" + Paragraph("  ", 4,
                              "/etc/tessera/limits of " + p.spec.name +
                                  " (tessera-node writes it from the signed decision; read-only):");
      std::size_t start = 0;
      while (start < p.limits_file.size()) {
        std::size_t end = p.limits_file.find('\n', start);
        if (end == std::string::npos) end = p.limits_file.size();
        out += "      " + p.limits_file.substr(start, end - start) + "\n";
        start = end + 1;
      }
    }
  }
  if (!s.moral.empty()) {
    out += "\n";
    bool first = true;
    for (const std::string& m : s.moral) {
      out += (first ? "  → " : "    ") + m + "\n";
      first = false;
    }
  }
  out += "  (" + Seconds(r.seconds) + ")\n";
  return out;
}

std::string RenderSummary(const DemoResult& r) {
  std::string out = "\n" + Rule("Summary") + "\n";
  Table t({{"scenario"},
           {"placed", Table::Align::kRight},
           {"denied", Table::Align::kRight},
           {"waiting", Table::Align::kRight},
           {"GPUs used", Table::Align::kRight},
           {"idle GPUs", Table::Align::kRight},
           {"stranded", Table::Align::kRight},
           {"as expected", Table::Align::kRight}});
  int placed = 0, denied = 0, waiting = 0, expected = 0, pods = 0;
  std::uint64_t stranded = 0;
  for (const ScenarioResult& s : r.scenarios) {
    int sp = 0, sd = 0, sw = 0, se = 0;
    for (const PodResult& p : s.pods) {
      sp += p.outcome == Outcome::kPlaced ? 1 : 0;
      sd += p.outcome == Outcome::kDenied ? 1 : 0;
      sw += p.outcome == Outcome::kUnschedulable ? 1 : 0;
      se += p.as_expected ? 1 : 0;
    }
    const std::uint64_t st = StrandedBytes(s);
    const int used = GpusUsed(s);
    t.Add({s.id, std::to_string(sp), std::to_string(sd), std::to_string(sw),
           std::to_string(used) + " of " + std::to_string(s.gpus.size()),
           std::to_string(static_cast<int>(s.gpus.size()) - used), GiB(st),
           std::to_string(se) + "/" + std::to_string(s.pods.size())});
    placed += sp;
    denied += sd;
    waiting += sw;
    expected += se;
    pods += static_cast<int>(s.pods.size());
    stranded += st;
  }
  t.Add({"all", std::to_string(placed), std::to_string(denied), std::to_string(waiting), "", "",
         GiB(stranded), std::to_string(expected) + "/" + std::to_string(pods)});
  out += t.Render(2);
  std::vector<std::string> over;
  for (const ScenarioResult& s : r.scenarios) {
    for (const GpuRow& g : s.gpus) {
      if (g.memory_used > g.memory_bytes || g.cores_used > 100) {
        over.push_back(s.id + ": " + GpuName(g.node, g.gpu));
      }
    }
  }
  out += Paragraph("  ", 2,
                   "GPUs used: of the GPUs the scenario could use. Stranded: free memory left on "
                   "used GPUs that is smaller than any of the scenario's asks.");
  out += over.empty()
             ? Paragraph("  ", 2, "No GPU was booked past its memory or 100 % of its compute.")
             : Paragraph("  (!) ", 6, "over-committed: " + Join(over, ", "));
  return out;
}

}  // namespace tessera::demo
