// The `tessera` command line: one file per subcommand, one Run() that tests call directly.
#pragma once

#include <ostream>

#include "tessera/status.h"

namespace tessera::cli {

// Runs `tessera ARGS...`; returns the process exit code.
int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Exit codes, mapped once from Status codes: 0 ok, 2 bad input, 3 not found, 1 otherwise.
int ToExitCode(const Status& status);

}  // namespace tessera::cli
