// tessera::cli::Run for builds without the control-plane dependencies (the GPU test host).
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/core_commands.h"

namespace tessera::cli {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (const int code = RunMetaCommand(args, out, err, /*control_plane=*/false); code >= 0)
    return code;
  const int code = RunCoreCommand(args, out, err);
  if (code >= 0) return code;
  err << "tessera: " << args[0]
      << ": not in this build\n";  // (the table lists it, nothing runs it)
  return 2;
}

}  // namespace tessera::cli
