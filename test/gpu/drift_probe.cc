// A tenant for the drift check on a real GPU (test/gpu/drift.sh). `hold BYTES`: allocate and wait
// for stdin to close. `tamper CHUNK`: fill the cap through the preload library, then do what a
// hostile tenant can — zero its (writable) region's counters — and allocate past the cap.
// Prints region=PATH and HOLDING, then waits for stdin to close. Build: g++ -std=c++20 -Iinclude
// -Ithird_party/cuda/include test/gpu/drift_probe.cc -ldl
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include "tessera/shm_layout.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string role = argv[1];
  const unsigned long long bytes = std::strtoull(argv[2], nullptr, 10);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(lib, "cuInit"));
  auto retain =
      reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
  auto set = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(lib, "cuCtxSetCurrent"));
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(lib, "cuMemAlloc_v2"));
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS || set(ctx) != CUDA_SUCCESS)
    return 1;
  CUdeviceptr p = 0;
  int within = 0, beyond = 0;
  if (role == "hold") {
    within = alloc(&p, bytes) == CUDA_SUCCESS;
  } else {
    while (alloc(&p, bytes) == CUDA_SUCCESS) ++within;
    const char* path = std::getenv("TESSERA_REGION_FILE");
    const int fd = path ? open(path, O_RDWR) : -1;
    void* mem = fd >= 0 ? mmap(nullptr, sizeof(tessera::shm::Region), PROT_READ | PROT_WRITE,
                               MAP_SHARED, fd, 0)
                        : MAP_FAILED;
    if (mem == MAP_FAILED) return 1;
    auto* region = static_cast<tessera::shm::Region*>(mem);
    for (int round = 0; round < within; ++round) {
      for (auto& d : region->devices) d.used_bytes.store(0);
      for (auto& slot : region->slots) {
        for (auto& u : slot.used_bytes) u.store(0);
      }
      beyond += alloc(&p, bytes) == CUDA_SUCCESS;
    }
  }
  const char* region = std::getenv("TESSERA_REGION_FILE");
  std::printf("pid=%d within=%d beyond=%d region=%s\nHOLDING\n", getpid(), within, beyond,
              region ? region : "");
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
