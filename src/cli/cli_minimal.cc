// tessera::cli::Run for builds without the control-plane dependencies (the GPU test host).
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/core_commands.h"

namespace tessera::cli {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const int code = RunCoreCommand(args, out, err);
  if (code >= 0) return code;
  err << "this tessera was built without the control plane; available: run, version, names, "
         "inventory, doctor, drift, top\n";
  return 2;
}

}  // namespace tessera::cli
