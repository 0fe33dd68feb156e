// The subcommands that need nothing but the core (they build on the GPU test host too):
// run, version, names, inventory, doctor, drift, top.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/doctor_cmd.h"

namespace tessera::cli {

// Runs `args[0]` if it is one of the core subcommands; returns its exit code, or -1 if the
// subcommand is not a core one.
// `load_policy` reads a policy file where the build can (tessera doctor --policy).
int RunCoreCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   const PolicyLoader& load_policy = nullptr);

}  // namespace tessera::cli
