// Loading the Alibaba GPU trace (cluster-trace-gpu-v2023) CSVs: the node list and a pod list
// (spec §1). Errors name the file and line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "placement/cluster.h"

namespace tessera::sim {

struct TracePod {
  std::string name;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  std::uint32_t num_gpu = 0;
  std::int32_t gpu_milli = 0;       // per GPU, clamped to 0..1000; 0 for CPU-only pods
  std::vector<std::string> models;  // gpu_spec split on '|', empty parts dropped
  std::string spec_key;             // models re-joined with '|' (duplicates kept)
  std::size_t line = 0;             // in its file (0: not read from one)

  std::int64_t total_milli() const { return static_cast<std::int64_t>(num_gpu) * gpu_milli; }
};

// GPU memory (MiB) of a model the trace may name; nullopt if unknown.
std::optional<std::int64_t> TraceGpuMemoryMib(std::string_view model);

// Nodes in file order: `sn,cpu_milli,memory_mib,gpu,model`. Refused, with the file, line and
// field: a repeated name, an unknown GPU model, a node with no CPU or no memory (it could take
// no pod).
StatusOr<std::vector<placement::Node>> ParseNodeCsv(std::string_view text, std::string_view file);
StatusOr<std::vector<placement::Node>> LoadNodeCsv(const std::string& path);

// Pods in file order: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`.
StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view file);
StatusOr<std::vector<TracePod>> LoadPodCsv(const std::string& path);

// Pods that no node of `nodes` can ever take (more GPUs, GPU milli, CPU or memory than any node
// has, or only GPU models the node list lacks), one line each: "FILE:LINE: pod "x": FIELD: ...".
// The replay counts them as failed; this says why before it starts. At most `limit` lines, then
// one that counts the rest.
std::vector<std::string> UnplaceablePods(const std::vector<TracePod>& pods,
                                         const std::vector<placement::Node>& nodes,
                                         std::string_view file, std::size_t limit = 10);

// The request a trace pod makes (memory from MiB; GPU memory derived from milli).
placement::Request ToRequest(const TracePod& pod);

}  // namespace tessera::sim
