// `tessera sim`: replay a trace through the placement policies (docs/sim.md).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::sim {

// args: everything after "sim". Returns the exit code (docs/protocol.md): 0 success, 2 bad
// arguments, 3 a file not found, 4 an invalid input, 1 other failures. `usage`: what --help
// prints first (tessera's command table gives its usage line and summary).
int RunSimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  std::string_view usage = "usage: tessera sim --trace DIR [OPTIONS]\n");

// What --help prints after the usage: the description and every option.
std::string SimHelp();

}  // namespace tessera::sim
