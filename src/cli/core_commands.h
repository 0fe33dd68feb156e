// The subcommands that need nothing but the core (they build on the GPU test host too):
// run, version, names.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessera::cli {

// Runs `args[0]` if it is one of the core subcommands; returns its exit code, or -1 if the
// subcommand is not a core one.
int RunCoreCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera::cli
