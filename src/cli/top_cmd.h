// `tessera top`: a live terminal view per GPU and per container — who uses how much against what
// cap, delivered compute share against the target, time held for shares and priority, denials.
// Dependency-free (the GPU host runs it). Sources:
//   local (default): this machine's node state folder (tessera-node's slots) and every live
//   `tessera run`, with NVML's GPU list and per-container figures when NVML loads;
//   --from FILE|-: a tessera-node /metrics text (`curl -s NODE:9479/metrics | tessera top --from
//   -`).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tessera::cli {

struct TopHooks {
  std::function<bool()> stop;              // checked after each pause (Ctrl-C)
  std::function<void(int seconds)> sleep;  // between frames
};

int TopCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
               const TopHooks& hooks = {});

}  // namespace tessera::cli
