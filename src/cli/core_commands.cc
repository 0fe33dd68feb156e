#include "cli/core_commands.h"

#include "agent/node_agent.h"
#include "agent/nvml.h"

#include "cli/doctor_cmd.h"
#include "cli/run_cmd.h"
#include "tessera/names.h"
#include "tessera/region.h"

namespace tessera::cli {

namespace {

// `tessera inventory [--gpus all|UUID,...|i,...] [--node-name N]`: what tessera-node would publish
// for this machine's GPUs (NVML), without Kubernetes. Dependency-free: the GPU host runs it.
int InventoryCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string gpus = "all";
  std::string node = "localhost";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if ((args[i] == "--gpus" || args[i] == "--node-name") && has_value) {
      (args[i] == "--gpus" ? gpus : node) = args[i + 1];
      ++i;
    } else {
      err << "tessera inventory: " << args[i]
          << ": expected --gpus all|UUID,...|INDEX,... and --node-name NAME\n";
      return 2;
    }
  }
  auto managed = agent::ParseManagedSpec(gpus);
  if (!managed.ok()) {
    err << "tessera inventory: " << managed.status().message() << "\n";
    return 2;
  }
  auto source = agent::NvmlGpuSource::Open();
  if (!source.ok()) {
    err << "tessera inventory: " << source.status().message() << "\n";
    return 1;
  }
  const Status st = agent::PrintInventory(**source, node, TESSERA_VERSION, *managed, out);
  if (!st.ok()) {
    err << "tessera inventory: " << st.message() << "\n";
    return ToExitCode(st);
  }
  return 0;
}

}  // namespace

int RunCoreCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   const PolicyLoader& load_policy) {
  if (args.empty()) return -1;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "doctor") return DoctorCommand(rest, out, err, load_policy);
  if (args[0] == "doctor-worker") return DoctorWorkerCommand(rest, out);
  if (args[0] == "run") return RunCommand({args.begin() + 1, args.end()}, out, err);
  if (args[0] == "version") {
    out << "tessera " << TESSERA_VERSION << " (shared-region ABI " << shm::AbiVersion() << ")\n";
    return 0;
  }
  if (args[0] == "inventory") return InventoryCommand({args.begin() + 1, args.end()}, out, err);
  if (args[0] == "names") {
    for (const auto& n : names::kAllNames) out << n.kind << "\t" << n.value << "\t" << n.description << "\n";
    return 0;
  }
  return -1;
}

}  // namespace tessera::cli
