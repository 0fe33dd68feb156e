// `tessera sim`: replay a trace through the placement policies (docs/sim.md).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessera::sim {

// args: everything after "sim". Returns the exit code: 0 success, 2 bad arguments or input,
// 3 a file not found, 1 other failures.
int RunSimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The usage text.
std::string SimUsage();

}  // namespace tessera::sim
