// A library whose constructor uses CUDA before main() — and possibly before the preload
// library's own constructor has run (libfaketime's constructor-order snippet idea).
#include <dlfcn.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

extern "C" {
__attribute__((visibility("default"))) unsigned long long g_ctor_allocated = 0;
__attribute__((visibility("default"))) int g_ctor_result = -1;
}

__attribute__((constructor)) static void UseCudaEarly() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return;
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(cuda, "cuInit"));
  auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(
      dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(cuda, "cuCtxSetCurrent"));
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(cuda, "cuMemAlloc_v2"));
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS)
    return;
  CUdeviceptr p = 0;
  CUresult r;
  while ((r = alloc(&p, 4u << 20)) == CUDA_SUCCESS) g_ctor_allocated += 4u << 20;
  g_ctor_result = r;
}
