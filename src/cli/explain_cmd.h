#pragma once

#include <ostream>

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `tessera explain pod NS/NAME | -f FILE`: why a pod is where it is, or why it is Pending
// or would be denied (decision, policy rule, quota, every candidate GPU and why it was refused).
void AddExplainCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code);

}  // namespace tessera::cli
