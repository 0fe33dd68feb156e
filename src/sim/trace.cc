#include "sim/trace.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>

#include "tessera/file.h"

namespace tessera::sim {
namespace {

struct ModelRow {
  std::string_view name;
  std::int64_t memory_mib;
  int rank;  // where the list of known models names it
};

// The trace vocabulary's rows of tessera/gpu_models.def (those with a trace name), in the order
// the list of known models names them.
const std::vector<ModelRow>& Models() {
  static const std::vector<ModelRow> rows = [] {
    std::vector<ModelRow> all = {
#define TESSERA_GPU_MODEL(id, name, memory, mig, aliases, trace_name, trace_mib, trace_rank) \
  {trace_name, trace_mib, trace_rank},
#include "tessera/gpu_models.def"
#undef TESSERA_GPU_MODEL
    };
    std::erase_if(all, [](const ModelRow& row) { return row.name.empty(); });
    std::sort(all.begin(), all.end(),
              [](const ModelRow& a, const ModelRow& b) { return a.rank < b.rank; });
    return all;
  }();
  return rows;
}

std::string Where(std::string_view file, std::size_t line) {
  return std::string(file) + ":" + std::to_string(line) + ": ";
}

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::vector<std::string_view> SplitLine(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// Calls fn(line_number, fields) for every non-empty data line; checks the header.
template <typename Fn>
Status ForEachRow(std::string_view text, std::string_view file,
                  const std::vector<std::string_view>& required, std::vector<std::size_t>* columns,
                  std::size_t* width, Fn fn) {
  std::size_t line_no = 0;
  std::size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = SplitLine(line);
    if (header) {
      header = false;
      *width = fields.size();
      for (std::string_view want : required) {
        if (!want.empty() && want[0] == '?') want.remove_prefix(1);  // optional column
        std::size_t found = fields.size();
        for (std::size_t i = 0; i < fields.size(); ++i) {
          if (fields[i] == want) found = i;
        }
        columns->push_back(found);
      }
      for (std::size_t i = 0; i < required.size(); ++i) {
        if ((*columns)[i] == fields.size() && !required[i].empty() && required[i][0] != '?') {
          return InvalidArgumentError(Where(file, line_no) + "header lacks column " +
                                      Quote(required[i]));
        }
      }
      continue;
    }
    if (fields.size() != *width) {
      return InvalidArgumentError(Where(file, line_no) + std::to_string(fields.size()) +
                                  " fields, the header has " + std::to_string(*width));
    }
    TESSERA_RETURN_IF_ERROR(fn(line_no, fields));
  }
  if (header) return InvalidArgumentError(std::string(file) + ": empty file (no header)");
  return Status::Ok();
}

StatusOr<std::int64_t> ParseInt(std::string_view text, std::string_view file, std::size_t line,
                                std::string_view column) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgumentError(Where(file, line) + "column " + Quote(column) + ": " + Quote(text) +
                                " is not an integer");
  }
  return v;
}

}  // namespace

std::optional<std::int64_t> TraceGpuMemoryMib(std::string_view model) {
  for (const ModelRow& row : Models()) {
    if (row.name == model) return row.memory_mib;
  }
  return std::nullopt;
}

StatusOr<std::vector<placement::Node>> ParseNodeCsv(std::string_view text, std::string_view file) {
  std::vector<placement::Node> nodes;
  std::vector<std::size_t> col;
  std::size_t width = 0;
  std::map<std::string, std::size_t, std::less<>> seen;
  TESSERA_RETURN_IF_ERROR(ForEachRow(
      text, file, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}, &col, &width,
      [&](std::size_t line, const std::vector<std::string_view>& f) -> Status {
        placement::Node n;
        n.name = std::string(f[col[0]]);
        if (n.name.empty()) return InvalidArgumentError(Where(file, line) + "empty node name");
        if (auto [it, fresh] = seen.emplace(n.name, line); !fresh) {
          return InvalidArgumentError(Where(file, line) + "sn: node " + Quote(n.name) +
                                      " repeats line " + std::to_string(it->second));
        }
        TESSERA_ASSIGN_OR_RETURN(n.cpu_milli, ParseInt(f[col[1]], file, line, "cpu_milli"));
        TESSERA_ASSIGN_OR_RETURN(const std::int64_t mib,
                                 ParseInt(f[col[2]], file, line, "memory_mib"));
        TESSERA_ASSIGN_OR_RETURN(const std::int64_t gpus, ParseInt(f[col[3]], file, line, "gpu"));
        if (n.cpu_milli < 0 || mib < 0 || gpus < 0 ||
            gpus > static_cast<std::int64_t>(placement::kMaxGpusPerNode)) {
          return InvalidArgumentError(Where(file, line) +
                                      "cpu_milli, memory_mib must be >= 0 and gpu in 0..64");
        }
        if (n.cpu_milli == 0 || mib == 0) {
          return InvalidArgumentError(Where(file, line) +
                                      (n.cpu_milli == 0 ? "cpu_milli" : "memory_mib") +
                                      ": 0: a node with no capacity can take no pod");
        }
        n.memory_bytes = mib << 20;
        const std::string_view model = f[col[4]];
        if (gpus > 0) {
          const std::optional<std::int64_t> mem = TraceGpuMemoryMib(model);
          if (!mem.has_value()) {
            std::string known;
            for (const ModelRow& row : Models())
              known += (known.empty() ? "" : ", ") + std::string(row.name);
            return InvalidArgumentError(Where(file, line) + "unknown GPU model " + Quote(model) +
                                        "; known: " + known);
          }
          for (std::int64_t g = 0; g < gpus; ++g) {
            placement::Gpu gpu;
            gpu.uuid = n.name + "-gpu" + std::to_string(g);
            gpu.model = std::string(model);
            gpu.memory_bytes = static_cast<std::uint64_t>(*mem) << 20;
            n.gpus.push_back(std::move(gpu));
          }
        }
        nodes.push_back(std::move(n));
        return Status::Ok();
      }));
  if (nodes.empty()) return InvalidArgumentError(std::string(file) + ": no nodes (empty cluster)");
  return nodes;
}

StatusOr<std::vector<placement::Node>> LoadNodeCsv(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  auto nodes = ParseNodeCsv(text, path);
  if (!nodes.ok()) return AsInputError(nodes.status());
  return nodes;
}

StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view file) {
  std::vector<TracePod> pods;
  std::vector<std::size_t> col;
  std::size_t width = 0;
  std::map<std::string, std::size_t, std::less<>> seen;
  TESSERA_RETURN_IF_ERROR(ForEachRow(
      text, file, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "?gpu_spec"}, &col,
      &width, [&](std::size_t line, const std::vector<std::string_view>& f) -> Status {
        TracePod p;
        p.name = std::string(f[col[0]]);
        p.line = line;
        if (p.name.empty()) return InvalidArgumentError(Where(file, line) + "empty pod name");
        if (auto [it, fresh] = seen.emplace(p.name, line); !fresh) {
          return InvalidArgumentError(Where(file, line) + "pod " + Quote(p.name) +
                                      " repeats line " + std::to_string(it->second));
        }
        TESSERA_ASSIGN_OR_RETURN(p.cpu_milli, ParseInt(f[col[1]], file, line, "cpu_milli"));
        TESSERA_ASSIGN_OR_RETURN(p.memory_mib, ParseInt(f[col[2]], file, line, "memory_mib"));
        TESSERA_ASSIGN_OR_RETURN(const std::int64_t k, ParseInt(f[col[3]], file, line, "num_gpu"));
        TESSERA_ASSIGN_OR_RETURN(const std::int64_t m,
                                 ParseInt(f[col[4]], file, line, "gpu_milli"));
        if (p.cpu_milli < 0) {
          return InvalidArgumentError(Where(file, line) +
                                      "cpu_milli: " + std::to_string(p.cpu_milli) + " is negative");
        }
        if (p.memory_mib < 0) {
          return InvalidArgumentError(
              Where(file, line) + "memory_mib: " + std::to_string(p.memory_mib) + " is negative");
        }
        if (k < 0 || k > static_cast<std::int64_t>(placement::kMaxGpusPerNode)) {
          return InvalidArgumentError(Where(file, line) + "num_gpu: " + std::to_string(k) +
                                      " is not in 0.." +
                                      std::to_string(placement::kMaxGpusPerNode));
        }
        p.num_gpu = static_cast<std::uint32_t>(k);
        if (k > 0) {
          // The authors' converter clamps milli to 0..1000.
          p.gpu_milli = static_cast<std::int32_t>(std::clamp<std::int64_t>(m, 0, 1000));
          if (col[5] < f.size()) {
            std::string_view spec = f[col[5]];
            std::size_t start = 0;
            while (start <= spec.size()) {
              std::size_t bar = spec.find('|', start);
              if (bar == std::string_view::npos) bar = spec.size();
              if (bar > start) p.models.emplace_back(spec.substr(start, bar - start));
              start = bar + 1;
            }
            for (const std::string& part : p.models) {
              p.spec_key += (p.spec_key.empty() ? "" : "|") + part;
            }
          }
        }
        pods.push_back(std::move(p));
        return Status::Ok();
      }));
  if (pods.empty()) return InvalidArgumentError(std::string(file) + ": no pods (empty pod list)");
  return pods;
}

StatusOr<std::vector<TracePod>> LoadPodCsv(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  auto pods = ParsePodCsv(text, path);
  if (!pods.ok()) return AsInputError(pods.status());
  return pods;
}

std::vector<std::string> UnplaceablePods(const std::vector<TracePod>& pods,
                                         const std::vector<placement::Node>& nodes,
                                         std::string_view file, std::size_t limit) {
  std::int64_t max_cpu = 0;
  std::int64_t max_memory = 0;
  std::size_t max_gpus = 0;
  std::map<std::string, std::size_t, std::less<>> gpus_of_model;  // the most on one node
  for (const placement::Node& n : nodes) {
    max_cpu = std::max(max_cpu, n.cpu_milli);
    max_memory = std::max(max_memory, n.memory_bytes);
    max_gpus = std::max(max_gpus, n.gpus.size());
    std::map<std::string_view, std::size_t> here;
    for (const placement::Gpu& g : n.gpus) ++here[g.model];
    for (const auto& [model, count] : here) {
      std::size_t& most = gpus_of_model[std::string(model)];
      most = std::max(most, count);
    }
  }
  std::vector<std::string> out;
  std::size_t more = 0;
  for (const TracePod& p : pods) {
    std::string why;
    if (p.cpu_milli > max_cpu) {
      why = "cpu_milli: " + std::to_string(p.cpu_milli) + " is more than any node has (" +
            std::to_string(max_cpu) + ")";
    } else if ((p.memory_mib << 20) > max_memory) {
      why = "memory_mib: " + std::to_string(p.memory_mib) + " is more than any node has (" +
            std::to_string(max_memory >> 20) + ")";
    } else if (p.gpu_milli > 0 && p.num_gpu > max_gpus) {
      why = "num_gpu: " + std::to_string(p.num_gpu) + " is more than any node has (" +
            std::to_string(max_gpus) + ")";
    } else if (p.gpu_milli > 0 && !p.models.empty()) {
      std::size_t most = 0;
      bool known = false;
      for (const std::string& m : p.models) {
        if (auto it = gpus_of_model.find(m); it != gpus_of_model.end()) {
          known = true;
          most = std::max(most, it->second);
        }
      }
      if (!known) {
        why = "gpu_spec: " + Quote(p.spec_key) + " names no GPU model of the node list";
      } else if (p.num_gpu > most) {
        why = "num_gpu: " + std::to_string(p.num_gpu) + " GPUs of " + Quote(p.spec_key) +
              ": no node has that many (at most " + std::to_string(most) + ")";
      }
    }
    if (why.empty()) continue;
    if (out.size() < limit) {
      out.push_back(Where(file, p.line) + "pod " + Quote(p.name) + ": " + why);
    } else {
      ++more;
    }
  }
  if (more > 0) out.push_back(std::to_string(more) + " more such pods in " + std::string(file));
  return out;
}

placement::Request ToRequest(const TracePod& pod) {
  placement::Request r;
  r.name = pod.name;
  r.cpu_milli = pod.cpu_milli;
  r.memory_bytes = pod.memory_mib << 20;
  r.gpu_count = pod.gpu_milli > 0 ? pod.num_gpu : 0;
  r.gpu_milli = r.gpu_count > 0 ? pod.gpu_milli : 0;
  r.cores_percent = static_cast<std::uint32_t>(r.gpu_milli / 10);
  r.models = pod.models;
  return r;
}

}  // namespace tessera::sim
