// busy_probe: the measurements behind ADR 0017's choice of busy-time mechanism, on the real GPU.
// A launch-bound loop (a ~2 us kernel, then `--host-us` of host work) run with each candidate:
//   none        no measurement (the baseline)
//   record1     an event recorded after every launch
//   bracket     an event recorded before and after every launch
//   query       cuEventQuery of the previous launch's event before every launch, plus record1
//   gate        a bracket behind a gate (cuStreamWaitValue32 on a pinned word, written after the
//               launch and its end event are queued), for every launch
// For each: the host's time per iteration (its overhead against `none`), and the mean bracket of
// one kernel where the mode has one (against the kernel's own time measured back to back, the
// truth: a bracket on an idle stream also holds the launch's submission latency).
// Prints one JSON line per mode. Build: nvcc -O2 -std=c++17 -arch=sm_90 busy_probe.cu -lcuda
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "host_clock.h"  // beside this file

__global__ void small_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
}

__device__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// The same work, timing itself on the SMs: the earliest block start and the latest block end
// (what a kernel record of CUPTI reports, give or take the launch's own setup).
__global__ void timed_kernel(float* x, int n, unsigned long long* span) {
  const unsigned long long start = GlobalTimer();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMin(&span[0], start);
    atomicMax(&span[1], GlobalTimer());
  }
}

namespace {

#define CHECK(x)                                                           \
  do {                                                                     \
    const CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                              \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #x, r_, __LINE__); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20000;
  double host_us = 8;
  bool legacy = false;  // --legacy 1: the legacy default stream (PyTorch's), else a stream of ours
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--host-us")) host_us = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--legacy")) legacy = std::atoi(argv[i + 1]) != 0;
  }
  const int n = 4096;
  float* x = nullptr;
  cudaMalloc(&x, n * sizeof(float));
  cudaStream_t stream = nullptr;
  if (!legacy) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  CUstream s = stream;
  std::vector<CUevent> events(2 * iterations + 2);
  for (auto& e : events) CHECK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  unsigned* word = nullptr;
  CHECK(cuMemHostAlloc(reinterpret_cast<void**>(&word), 64,
                       CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  *word = 0;
  CUdeviceptr word_device = 0;
  CHECK(cuMemHostGetDevicePointer(&word_device, word, 0));
  const auto launch = [&] { small_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n); };
  for (int i = 0; i < 1000; ++i) launch();
  cudaStreamSynchronize(stream);

  // The truth: the kernel's own time, back to back (no idle stream, no submission latency).
  CHECK(cuEventRecord(events[0], s));
  for (int i = 0; i < 2000; ++i) launch();
  CHECK(cuEventRecord(events[1], s));
  CHECK(cuEventSynchronize(events[1]));
  float ms = 0;
  CHECK(cuEventElapsedTime(&ms, events[0], events[1]));
  const double kernel_us = ms * 1000.0 / 2000;
  std::printf("{\"mode\":\"back-to-back\",\"kernel_us\":%.3f}\n", kernel_us);

  // The kernel's time on the SMs, launched on an idle stream (%globaltimer, first block start to
  // last block end), against brackets behind a gate with 0, 1, 2 and 4 kernels in them: the
  // brackets' intercept is what a probe counts beyond its kernels.
  {
    const int m = 2000;
    unsigned long long* spans = nullptr;
    cudaMalloc(&spans, 2 * sizeof(unsigned long long) * m);
    std::vector<unsigned long long> init(2 * m);
    for (int i = 0; i < m; ++i) init[2 * i] = ~0ULL, init[2 * i + 1] = 0;
    cudaMemcpy(spans, init.data(), init.size() * sizeof(init[0]), cudaMemcpyHostToDevice);
    for (int i = 0; i < m; ++i) {
      timed_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n, spans + 2 * i);
      cudaStreamSynchronize(stream);
      Spin(host_us);
    }
    cudaMemcpy(init.data(), spans, init.size() * sizeof(init[0]), cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int i = 0; i < m; ++i) sum += static_cast<double>(init[2 * i + 1] - init[2 * i]);
    std::printf("{\"mode\":\"on-sm\",\"kernel_us\":%.3f}\n", sum / m / 1000.0);
    unsigned seq0 = 1u << 30;
    for (const int kernels : {0, 1, 2, 4, 0}) {
      double total = 0;
      for (int i = 0; i < m; ++i) {
        CHECK(cuStreamWaitValue32(s, word_device, ++seq0, CU_STREAM_WAIT_VALUE_GEQ));
        CHECK(cuEventRecord(events[0], s));
        for (int k = 0; k < kernels; ++k) launch();
        CHECK(cuEventRecord(events[1], s));
        __atomic_store_n(word, seq0, __ATOMIC_RELEASE);
        CHECK(cuEventSynchronize(events[1]));
        CHECK(cuEventElapsedTime(&ms, events[0], events[1]));
        total += ms * 1000.0;
        Spin(host_us);
      }
      std::printf("{\"mode\":\"gated-bracket\",\"kernels\":%d,\"bracket_us\":%.3f}\n", kernels,
                  total / m);
    }
    *word = 0;  // the modes below count their gate from 0 again
    std::fflush(stdout);
  }

  unsigned seq = 0;
  for (const std::string mode : {"none", "record1", "bracket", "query", "gate", "none"}) {
    const double t0 = NowUs();
    for (int i = 0; i < iterations; ++i) {
      CUevent before = events[2 * i], after = events[2 * i + 1];
      if (mode == "query" && i > 0) (void)cuEventQuery(events[2 * i - 1]);
      if (mode == "gate")
        CHECK(cuStreamWaitValue32(s, word_device, ++seq, CU_STREAM_WAIT_VALUE_GEQ));
      if (mode == "bracket" || mode == "gate") CHECK(cuEventRecord(before, s));
      launch();
      if (mode != "none") CHECK(cuEventRecord(after, s));
      if (mode == "gate") __atomic_store_n(word, seq, __ATOMIC_RELEASE);
      if (i % 256 == 255) cudaStreamSynchronize(stream);
      Spin(host_us);
    }
    cudaStreamSynchronize(stream);
    const double per_iteration_us = (NowUs() - t0) / iterations;
    double bracket_us = 0;
    if (mode == "bracket" || mode == "gate") {
      for (int i = 0; i < iterations; ++i) {
        CHECK(cuEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
        bracket_us += ms * 1000.0;
      }
      bracket_us /= iterations;
    }
    std::printf("{\"mode\":\"%s\",\"host_us_per_iteration\":%.3f,\"bracket_us\":%.3f}\n",
                mode.c_str(), per_iteration_us, bracket_us);
    std::fflush(stdout);
  }
  return 0;
}
