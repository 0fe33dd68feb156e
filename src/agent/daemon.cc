#include "agent/daemon.h"

#include <csignal>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "agent/node_agent.h"
#include "agent/nvml.h"
#include "agent/publisher.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "tessera/log.h"

namespace tessera::agent {
namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void OnStopSignal(int) { g_stop = 1; }

int Fail(const Status& status) {
  std::fprintf(stderr, "tessera-node: %s\n", status.message().c_str());
  return ToExitCode(status);
}

}  // namespace

int RunNode(const NodeOptions& options) {
  StatusOr<ManagedSpec> managed = ParseManagedSpec(options.gpus);
  if (!managed.ok()) return Fail(managed.status());
  if (!options.print_inventory && options.node_name.empty()) {
    return Fail(InvalidArgumentError("--node-name: required (or --print-inventory)"));
  }
  StatusOr<std::unique_ptr<NvmlGpuSource>> source = NvmlGpuSource::Open(options.nvml_library);
  if (!source.ok()) return Fail(source.status());
  if (options.print_inventory) {
    std::string node = options.node_name;
    if (node.empty()) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) == 0) node = host;
    }
    Status printed = PrintInventory(**source, node, TESSERA_VERSION, *managed, std::cout);
    std::cout.flush();
    return printed.ok() ? 0 : Fail(printed);
  }

  StatusOr<k8s::Config> config = k8s::ResolveConfig(options.kubeconfig);
  if (!config.ok()) return Fail(config.status().WithContext("--kubeconfig"));
  config->user_agent = "tessera-node/" TESSERA_VERSION;
  StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::New(*config);
  if (!client.ok()) return Fail(client.status());
  Publisher publisher(**client, options.node_name);

  LoopOptions loop;
  loop.node_name = options.node_name;
  loop.agent_version = TESSERA_VERSION;
  loop.managed = *managed;
  loop.interval = std::chrono::seconds(options.interval_s);
  if (StatusOr<std::int64_t> g = publisher.ExistingGeneration(); g.ok()) {
    loop.continue_after_generation = *g;
  } else {
    TESSERA_LOG(kWarn, kAgent, "node %s: %s", options.node_name.c_str(),
                g.status().ToString().c_str());
  }
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  Status ran = RunAgentLoop(
      loop, **source,
      [&](const Inventory& inventory) -> Status {
        StatusOr<PublishResult> r = publisher.Publish(inventory);
        if (!r.ok()) return r.status();
        if (r->patched_metadata || r->patched_status) {
          TESSERA_LOG(kInfo, kAgent, "node %s: published generation %lld",
                      options.node_name.c_str(), static_cast<long long>(inventory.generation));
        }
        return Status::Ok();
      },
      [] { return g_stop != 0; });
  return ran.ok() ? 0 : Fail(ran);
}

}  // namespace tessera::agent
