#pragma once

#include <ostream>

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `tessera demo` (docs/demo.md); the callback's exit code is stored in *exit_code.
void AddDemoCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code);

}  // namespace tessera::cli
