// The `tessera` command line: one file per subcommand, one Run() that tests call directly.
#pragma once

#include <ostream>

#include "tessera/status.h"

namespace tessera::cli {

// Runs `tessera ARGS...`; returns the process exit code.
int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Exit codes come from tessera::ToExitCode (include/tessera/status.h).
using ::tessera::ToExitCode;

}  // namespace tessera::cli
