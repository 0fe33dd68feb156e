// Calls one driver entry point N times through dlopen + dlsym (the path frameworks take), so
// callgrind can count the instructions each call costs with and without the preload library.
//   hook_cost_program launch|alloc N
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const long n = std::atol(argv[2]);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return 1;
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(cuda, "cuInit"));
  auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(
      dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(cuda, "cuCtxSetCurrent"));
  auto launch = reinterpret_cast<decltype(&cuLaunchKernel)>(dlsym(cuda, "cuLaunchKernel"));
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(cuda, "cuMemAlloc_v2"));
  auto free_fn = reinterpret_cast<decltype(&cuMemFree_v2)>(dlsym(cuda, "cuMemFree_v2"));
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS)
    return 1;
  // One untimed call of each, so one-time initialization is outside the N calls.
  CUdeviceptr p = 0;
  launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  if (alloc(&p, 4096) != CUDA_SUCCESS || free_fn(p) != CUDA_SUCCESS) return 1;
  if (std::strcmp(argv[1], "launch") == 0) {
    for (long i = 0; i < n; ++i) launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  } else {
    for (long i = 0; i < n; ++i) {
      if (alloc(&p, 4096) != CUDA_SUCCESS || free_fn(p) != CUDA_SUCCESS) return 1;
    }
  }
  return 0;
}
