// tessera-node's /metrics (issue 11; families in names.h TESSERA_METRICS): the inventory's GPUs,
// the containers of the state folder with their regions read at scrape time, NVML's figure and
// the delivered compute share from the agent's latest sample, and the drift counters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/status.h"

#include "agent/inventory.h"
#include "observe/observe.h"

namespace tessera::agent {

class NodeMetrics {
 public:
  // `state_dir` empty: no containers (inventory-only agent, no device plugin).
  NodeMetrics(std::string node, std::string version, std::string state_dir);

  void SetInventory(const Inventory& inventory);
  void SetCounts(const observe::NodeCounts& counts);
  // One sample (the agent's drift pass): NVML bytes by container key (ContainerRow::Key()),
  // delivered shares over the time since the previous sample. Returns the rows it read, for
  // the agent's Events.
  std::vector<observe::ContainerRow> Sample(const std::map<std::string, std::uint64_t>& nvml_by_key,
                                            std::uint64_t now_ns);
  observe::Snapshot Snapshot();
  std::string Render() { return observe::RenderExposition(Snapshot()); }

 private:
  const std::string node_, version_, state_dir_;
  std::mutex mu_;
  std::vector<observe::GpuRow> gpus_;
  observe::NodeCounts counts_;
  observe::ShareMeter meter_;
  std::map<std::string, std::uint64_t> nvml_;
  std::map<std::string, double> delivered_;
};

// GET /metrics (and /healthz) over HTTP until destroyed.
class MetricsServer {
 public:
  // `listen`: HOST:PORT (port 0: any; see port()).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                        NodeMetrics* metrics);
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace tessera::agent
