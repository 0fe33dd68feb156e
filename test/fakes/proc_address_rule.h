// The driver's rule for cuGetProcAddress over the hook table's rows, as the fakes model it (the
// fake libcuda.so.1 answers with it; the hook's table test checks the trampolines against it):
// among the rows of `symbol`, the newest whose version is not above the caller's, preferring the
// per-thread-default-stream variant when asked for.
#pragma once

#include <cstddef>
#include <string_view>

#include "hook/hook_table.h"

namespace tessera::fake {

// The row the driver would answer with, or -1. `known`: some row names `symbol` at all (then a
// miss is "version not sufficient", else "symbol not found").
inline int DriverProcAddressRow(std::string_view symbol, int cuda_version, bool per_thread,
                                bool* known) {
  int best = -1;
  *known = false;
  for (std::size_t i = 0; i < hook::kCudaHookCount; ++i) {
    const hook::CudaHookRow& row = hook::kCudaHooks[i];
    if (row.base != symbol) continue;
    *known = true;
    if (row.since > cuda_version) continue;
    const bool row_per_thread = row.variant == hook::Variant::kPerThreadStream;
    if (row_per_thread && !per_thread) continue;
    if (best >= 0) {
      const hook::CudaHookRow& have = hook::kCudaHooks[best];
      const bool have_per_thread = have.variant == hook::Variant::kPerThreadStream;
      if (!(row_per_thread && !have_per_thread) &&
          !(row_per_thread == have_per_thread && row.since > have.since)) {
        continue;
      }
    }
    best = static_cast<int>(i);
  }
  return best;
}

}  // namespace tessera::fake
