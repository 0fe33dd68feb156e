// launch_loop: a launch-bound loop in C++, for the governed launch path's overhead with less noise
// than an interpreter adds (issue #21: "governed launches cost a launch-bound loop <= 3 % of its
// throughput when the share does not bind"). Tiny kernels through the CUDA runtime (which reaches
// the driver through cuGetProcAddress, as PyTorch does), `--host-us` of host work after each
// launch, a synchronize every `--sync-every` launches, for `--seconds`. Prints one JSON line:
// {"launches_per_s": ..., "per_second": [...]} (the first second is left out of the rate).
// Build: nvcc -O2 -std=c++17 -arch=sm_90 launch_loop.cu -o launch_loop
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

__global__ void small_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
}

namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Spin(double us) {
  const double end = NowS() + us * 1e-6;
  while (NowS() < end) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5, host_us = 0;
  int sync_every = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0)
      seconds = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--host-us") == 0)
      host_us = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--sync-every") == 0)
      sync_every = std::atoi(argv[i + 1]);
  }
  const int n = 4096;
  float* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) {
    std::printf("{\"error\": \"cudaMalloc\"}\n");
    return 1;
  }
  cudaMemset(x, 0, n * sizeof(float));
  cudaDeviceSynchronize();
  std::vector<long> per_second;
  const double start = NowS();
  double next = start + 1;
  long launches = 0, this_second = 0;
  while (NowS() - start < seconds) {
    small_kernel<<<n / 256, 256>>>(x, n);
    ++launches;
    ++this_second;
    if (host_us > 0) Spin(host_us);
    if (launches % sync_every == 0) {
      cudaDeviceSynchronize();
      const double now = NowS();
      if (now >= next) {
        per_second.push_back(this_second);
        this_second = 0;
        next += 1;
      }
    }
  }
  cudaDeviceSynchronize();
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("{\"error\": \"launch\"}\n");
    return 1;
  }
  long kept = 0;
  for (std::size_t i = 1; i < per_second.size(); ++i) kept += per_second[i];
  const double rate = per_second.size() > 1 ? static_cast<double>(kept) / (per_second.size() - 1)
                                            : static_cast<double>(launches) / seconds;
  std::printf("{\"launches_per_s\": %.1f, \"per_second\": [", rate);
  for (std::size_t i = 0; i < per_second.size(); ++i)
    std::printf("%s%ld", i ? ", " : "", per_second[i]);
  std::printf("]}\n");
  return 0;
}
