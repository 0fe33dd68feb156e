// CUDA runtime workloads for the GPU acceptance run. The runtime reaches the driver through
// cuGetProcAddress (it even looks cuGetProcAddress itself up), so this exercises that path.
//   fill CHUNK_MIB   cudaMalloc until refused, report, hold until stdin closes
//   launch N         empty-kernel enqueue cost, ns per launch (async, N launches)
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

__global__ void Empty() {}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  if (mode == "fill") {
    const size_t chunk = std::strtoull(argv[2], nullptr, 10) << 20;
    size_t allocated = 0;
    cudaError_t last = cudaSuccess;
    for (;;) {
      void* p = nullptr;
      last = cudaMalloc(&p, chunk);
      if (last != cudaSuccess) break;
      allocated += chunk;
    }
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    std::printf("{\"allocated\":%zu,\"last_error\":%d,\"free\":%zu,\"total\":%zu,\"pid\":%d}\n",
                allocated, static_cast<int>(last), free_bytes, total, getpid());
    std::printf("HOLDING\n");
    std::fflush(stdout);
    char line[16];
    while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    }
    return 0;
  }
  if (mode == "launch") {
    const int n = std::atoi(argv[2]);
    for (int i = 0; i < 2000; ++i) Empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    // Enqueue cost: host time of N asynchronous launches (the GPU drains behind them).
    timespec t0{}, t1{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; ++i) Empty<<<1, 1>>>();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cudaDeviceSynchronize();
    const double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    std::printf("{\"launch_ns\":%.2f,\"error\":%d}\n", ns / n, static_cast<int>(cudaGetLastError()));
    return 0;
  }
  return 2;
}
