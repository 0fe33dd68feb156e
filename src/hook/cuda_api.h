// cuda.h as the driver itself sees it: with __CUDA_API_VERSION_INTERNAL every entry point is
// declared under its real exported name (cuMemAlloc_v2, cuLaunchKernel_ptsz, the legacy
// cuMemAlloc, ...) and none is renamed by macro. Only the hook library and the fake driver
// include this; everything else includes <cuda.h>.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
