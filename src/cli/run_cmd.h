// `tessera run [--gpu-memory 4Gi] [--gpu-cores N] [--compute hard|work-conserving]
//              [--priority CLASS] [--mode shared|mps] [--gpu UUID|INDEX[,...]]
//              [--context-bytes auto|QUANTITY] [--fail-closed] [--keep] -- CMD ARGS...`
// Runs a command under a GPU memory cap, compute share and priority on a local GPU, without
// Kubernetes: plays the node agent's part (limits file + shared region in a private folder, the
// preload library, only the chosen GPU visible, the GPU's compute arbiter shared with every
// other `tessera run` of the machine, and in mode mps the GPU's MPS daemon), then cleans up.
// Dependency-free: it builds on the GPU test host.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

#include "governor/mps.h"

namespace tessera::cli {

struct RunOptions {
  std::uint64_t gpu_memory_bytes = 0;  // 0: no memory cap (the GPU's memory)
  std::uint32_t gpu_cores = 0;         // 0: no compute share
  ComputeMode compute = ComputeMode::kHard;
  std::uint32_t compute_window_ms = 0;  // --compute-window; 0: the default bucket
  PriorityClass priority = PriorityClass::kNormal;
  SharingMode mode = SharingMode::kShared;
  std::string arbiter_dir;  // "" = governor::DefaultLocalArbiterDir()
  std::string mps_control = "nvidia-cuda-mps-control";
  governor::SpatialPolicy spatial;  // --mps-lc-reserve
  std::vector<std::string> gpus;    // CUDA indices or UUIDs; empty = device 0. The cap applies
                                    // to each GPU separately.
  bool measure_context = true;      // --context-bytes auto (default)
  std::uint64_t context_bytes = 0;  // when not measured
  bool fail_closed = false;
  bool keep = false;
  std::string hook_library;  // "" = find it next to the binary
  std::vector<std::string> command;
};

// Parses the arguments after "run". Errors name the flag and the accepted form.
StatusOr<RunOptions> ParseRunArgs(const std::vector<std::string>& args);

// Runs the command; returns its exit code (128+signal if killed), or an error before it started.
StatusOr<int> RunUnderCap(const RunOptions& options, std::ostream& err);

// The preload library: `flag` (--hook-library), $TESSERA_HOOK_LIBRARY, or beside the binary
// (<prefix>/lib next to <prefix>/bin, or the build tree's src/hook); "" if none is found.
std::string FindHookLibrary(const std::string& flag);

// `tessera run ...` as the CLI calls it.
int RunCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera::cli
