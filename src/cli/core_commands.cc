#include "cli/core_commands.h"

#include "cli/run_cmd.h"
#include "tessera/names.h"
#include "tessera/region.h"

namespace tessera::cli {

int RunCoreCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) return -1;
  if (args[0] == "run") return RunCommand({args.begin() + 1, args.end()}, out, err);
  if (args[0] == "version") {
    out << "tessera " << TESSERA_VERSION << " (shared-region ABI " << shm::AbiVersion() << ")\n";
    return 0;
  }
  if (args[0] == "names") {
    for (const auto& n : names::kAllNames) out << n.kind << "\t" << n.value << "\t" << n.description << "\n";
    return 0;
  }
  return -1;
}

}  // namespace tessera::cli
