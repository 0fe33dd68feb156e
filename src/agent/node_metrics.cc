#include "agent/node_metrics.h"

#include <chrono>
#include <thread>

#include <httplib.h>

#include "k8s/listen.h"

namespace tessera::agent {

NodeMetrics::NodeMetrics(std::string node, std::string version, std::string state_dir)
    : node_(std::move(node)), version_(std::move(version)), state_dir_(std::move(state_dir)) {}

void NodeMetrics::SetInventory(const Inventory& inventory) {
  std::vector<observe::GpuRow> gpus;
  for (const InventoryGpu& g : inventory.content.gpus) {
    if (!g.managed) continue;
    gpus.push_back({g.facts.index, g.facts.uuid, g.facts.model, g.facts.memory_bytes, g.healthy});
  }
  std::lock_guard<std::mutex> lock(mu_);
  gpus_ = std::move(gpus);
}

void NodeMetrics::SetCounts(const observe::NodeCounts& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  counts_ = counts;
}

std::vector<observe::ContainerRow> NodeMetrics::Sample(
    const std::map<std::string, std::uint64_t>& nvml_by_key, std::uint64_t now_ns) {
  if (state_dir_.empty()) return {};
  std::vector<observe::ContainerRow> rows =
      observe::ReadContainers(observe::StateDirContainers(state_dir_));
  std::lock_guard<std::mutex> lock(mu_);
  meter_.Update(rows, now_ns);
  delivered_.clear();
  for (observe::ContainerRow& row : rows) {
    if (row.delivered) delivered_[row.Key()] = *row.delivered;
    if (auto it = nvml_by_key.find(row.Key()); it != nvml_by_key.end()) row.nvml_bytes = it->second;
  }
  nvml_ = nvml_by_key;
  return rows;
}

observe::Snapshot NodeMetrics::Snapshot() {
  observe::Snapshot s;
  s.node = node_;
  s.version = version_;
  if (!state_dir_.empty())
    s.containers = observe::ReadContainers(observe::StateDirContainers(state_dir_));
  std::lock_guard<std::mutex> lock(mu_);
  s.gpus = gpus_;
  s.counts = counts_;
  for (observe::ContainerRow& row : s.containers) {
    if (auto it = delivered_.find(row.Key()); it != delivered_.end()) row.delivered = it->second;
    if (auto it = nvml_.find(row.Key()); it != nvml_.end()) row.nvml_bytes = it->second;
  }
  return s;
}

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
};

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                              NodeMetrics* metrics) {
  auto address = k8s::ParseListenAddress(listen);
  if (!address.ok()) return address.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->impl_ = std::make_unique<Impl>();
  httplib::Server& http = server->impl_->http;
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Render(), "text/plain; version=0.0.4");
  });
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  const auto& [host, port] = *address;
  server->port_ =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ < 0)
    return UnavailableError(listen + ": cannot listen (in use, or not an address of this host)");
  server->impl_->thread = std::thread([&http] { http.listen_after_bind(); });
  // stop() does nothing until the server runs: wait for it, so that a destructor right after
  // Start() cannot wait for ever.
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return server;
}

MetricsServer::~MetricsServer() {
  if (!impl_) return;
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace tessera::agent
