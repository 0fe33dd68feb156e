// A local GPU as `tessera run` and tessera-node see it, probed without touching
// CUDA in the calling process: a child process loads the driver, so the caller can still fork
// and exec CUDA programs afterwards. Dependency-free (dlopen of libcuda / libnvidia-ml).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tessera/status.h"

namespace tessera::agent {

struct LocalGpu {
  int index = 0;
  std::string uuid;
  std::string name;
  std::uint64_t memory_bytes = 0;
  // Device memory one process's CUDA context takes, measured with NVML for a probe process
  // (0 when NVML is not available).
  std::uint64_t context_bytes = 0;
  bool context_measured = false;
  // Device memory the driver takes per stream: the average over 128 streams the probe creates,
  // measured the same way (0 when not measured).
  std::uint64_t stream_bytes = 0;
};

// The driver libraries a probe loads: names the loader finds, or paths (a node whose driver
// lies outside the image's library folders, e.g. the GPU Operator's /run/nvidia/driver).
struct DriverLibraries {
  std::string cuda = "libcuda.so.1";
  std::string nvml = "libnvidia-ml.so.1";
};
// libcuda.so.1 in `dir` when it is there (tessera-node's --driver-lib-dir), else by name.
std::string CudaLibraryIn(const std::string& dir);

// `selector`: empty (device 0), a CUDA index ("1") or a UUID ("GPU-…").
StatusOr<LocalGpu> ProbeLocalGpu(const std::string& selector, bool measure_context,
                                 const DriverLibraries& libraries = {});

// SM counts by GPU UUID from the CUDA driver, asked in a child that exits (empty when the driver
// cannot say). For GPUs whose NVML has no multiprocessor count (nvmlDeviceGetAttributes is for MIG
// devices on many drivers). Never in the calling process: a process that has called cuInit cannot
// fork a child that uses CUDA (the H200's driver answered CUDA_ERROR_NOT_INITIALIZED when
// tessera-node counted SMs itself and then probed the context size in a forked child).
std::map<std::string, std::uint32_t> ProbeSmCounts(
    const std::string& cuda_library = "libcuda.so.1");

}  // namespace tessera::agent
