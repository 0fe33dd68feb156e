// tessera-node's steps that need no Kubernetes: print the inventory once, and the loop that
// rediscovers GPUs every interval, turns health events into unhealthy GPUs and hands each
// inventory to a publisher. Dependency-free (the GPU host builds it).
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <set>
#include <string>

#include "tessera/status.h"

#include "agent/inventory.h"
#include "agent/nvml.h"

namespace tessera::agent {

struct LoopOptions {
  std::string node_name;
  std::string agent_version;
  ManagedSpec managed;
  std::chrono::milliseconds interval{30000};  // rediscovery and re-publish period
  std::int64_t continue_after_generation = 0;
  std::chrono::milliseconds retry_initial{200};  // backoff after a failed publish
  std::chrono::milliseconds retry_max{30000};
  // GPUs another device plugin has handed out (asked at every rediscovery): never managed.
  std::function<std::set<std::string>()> taken_by_others;
};

// Discovers once, takes the health events NVML has pending (no waiting), and writes the
// annotation's JSON (generation 1) and a newline.
Status PrintInventory(GpuSource& source, const std::string& node_name,
                      const std::string& agent_version, const ManagedSpec& managed,
                      std::ostream& out);

using PublishFn = std::function<Status(const Inventory& inventory)>;

// Runs until `stopping()` is true (checked at least once a second). Publishes at start, after
// every interval and at once after a health change; a failed publish is retried with backoff.
// Errors only when the first discovery fails or --gpus names a GPU that is not there.
Status RunAgentLoop(const LoopOptions& options, GpuSource& source, const PublishFn& publish,
                    const std::function<bool()>& stopping);

}  // namespace tessera::agent
