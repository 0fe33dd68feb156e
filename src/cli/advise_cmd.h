#pragma once

#include <ostream>

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `tessera advise`; the returned callback result is stored in *exit_code.
void AddAdviseCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code);

}  // namespace tessera::cli
