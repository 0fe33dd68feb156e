// CUDA runtime workloads for the GPU acceptance run. The runtime reaches the driver through
// cuGetProcAddress (it even looks cuGetProcAddress itself up), so this exercises that path.
//   fill CHUNK_MIB   cudaMalloc until refused, report, hold until stdin closes
//   launch N         empty-kernel enqueue cost through the runtime, ns per launch
//   launch-driver N  the same through cuLaunchKernel
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

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
  if (mode == "launch" || mode == "launch-driver") {
    // Enqueue cost: host time of asynchronous launches of an empty kernel, in batches; the
    // median batch is reported. "launch" goes through the runtime (cudaLaunchKernel), and
    // "launch-driver" calls cuLaunchKernel itself (linked: our trampoline under the preload).
    const int n = std::atoi(argv[2]);
    const int batches = 10;
    cudaFree(nullptr);
    CUfunction fn = nullptr;
    cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&Empty));
    const bool driver = mode == "launch-driver";
    auto launch = [&] {
      if (driver) {
        cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      } else {
        Empty<<<1, 1>>>();
      }
    };
    for (int i = 0; i < 5000; ++i) launch();
    cudaDeviceSynchronize();
    std::vector<double> per_launch;
    for (int b = 0; b < batches; ++b) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_MONOTONIC, &t0);
      for (int i = 0; i < n; ++i) launch();
      clock_gettime(CLOCK_MONOTONIC, &t1);
      cudaDeviceSynchronize();
      per_launch.push_back(((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
    }
    std::sort(per_launch.begin(), per_launch.end());
    std::printf("{\"launch_ns\":%.2f,\"error\":%d}\n", per_launch[batches / 2],
                static_cast<int>(cudaGetLastError()));
    return 0;
  }
  return 2;
}
