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

  std::int64_t total_milli() const { return static_cast<std::int64_t>(num_gpu) * gpu_milli; }
};

// GPU memory (MiB) of a model the trace may name; nullopt if unknown.
std::optional<std::int64_t> TraceGpuMemoryMib(std::string_view model);

// Nodes in file order: `sn,cpu_milli,memory_mib,gpu,model`.
StatusOr<std::vector<placement::Node>> ParseNodeCsv(std::string_view text, std::string_view file);
StatusOr<std::vector<placement::Node>> LoadNodeCsv(const std::string& path);

// Pods in file order: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`.
StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view file);
StatusOr<std::vector<TracePod>> LoadPodCsv(const std::string& path);

// The request a trace pod makes (memory from MiB; GPU memory derived from milli).
placement::Request ToRequest(const TracePod& pod);

}  // namespace tessera::sim
