// Test helpers shared by the placement tests (test-only; not part of the library).
#pragma once

#include <cstdint>
#include <string>

#include "placement/cluster.h"

namespace tessera::placement::testing {

// A node with `gpus` GPUs of `model`, 16 GiB each.
inline Node MakeNode(const std::string& name, int gpus, std::int64_t cpu_milli = 96000,
                     std::int64_t memory_bytes = 256LL << 30, const std::string& model = "G2") {
  Node n;
  n.name = name;
  n.cpu_milli = cpu_milli;
  n.memory_bytes = memory_bytes;
  for (int g = 0; g < gpus; ++g) {
    Gpu gpu;
    gpu.model = model;
    gpu.memory_bytes = 16ULL << 30;
    n.gpus.push_back(gpu);
  }
  return n;
}

}  // namespace tessera::placement::testing
