// bracket_control: what a gated probe's bracket holds beyond its kernel when another context
// takes turns on the GPU (issue #21: two launch-bound processes of one container are charged
// 1.3-1.7x their kernels, their held probes ~0.5 us longer than one process's alone).
//
// Each of --procs processes (forked before any CUDA call: separate contexts, time-sliced) runs
// a launch-bound loop: a small kernel, then --host-us of host work. About every --every-us one
// bracket is taken on the loop's stream behind a gate (cuStreamWaitValue32 on a pinned word,
// written once the bracket is queued, as the preload library's probes are), one variant at random:
//   probe   start event, the timed kernel, end event (what tessera's held probe times)
//   empty   start event, end event (a control with nothing between)
//   null    start event, an empty kernel, end event (a control with a launch of its own)
//   warm    an empty kernel, start event, the timed kernel, end event (the context's compute
//           state made current before the bracket starts)
// For the variants with the timed kernel, the kernel also times itself on the SMs
// (%globaltimer: its first block's start to its last block's end). Prints one JSON line per
// process and variant: the bracket's span and, where timed, the kernel's own span and the
// bracket less the kernel (all in us: mean, p10, p50, p90).
// Build: nvcc -O2 -std=c++17 -arch=sm_90 bracket_control.cu -lcuda
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "host_clock.h"  // beside this file

__global__ void small_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
}

__global__ void null_kernel() {}

__device__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__global__ void timed_kernel(float* x, int n, unsigned long long* first, unsigned long long* last) {
  const unsigned long long start = GlobalTimer();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMin(first, start);
    atomicMax(last, GlobalTimer());
  }
}

namespace {

constexpr int kN = 4096, kThreads = 256, kBlocks = kN / kThreads;
constexpr int kMaxBrackets = 200000;
const char* const kVariants[] = {"probe", "empty", "null", "warm"};
constexpr int kVariantCount = 4;

#define CHECK(call)                                                                \
  do {                                                                             \
    auto e_ = (call);                                                              \
    if (e_ != 0) {                                                                 \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #call, int(e_), __LINE__); \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

struct Pending {
  int variant;
  cudaEvent_t start, end;
  int slot;  // -1: no timed kernel
};

struct Summary {
  double mean = 0, p10 = 0, p50 = 0, p90 = 0;
  size_t n = 0;
};

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  s.p10 = v[v.size() / 10];
  s.p50 = v[v.size() / 2];
  s.p90 = v[v.size() * 9 / 10];
  return s;
}

std::string Json(const Summary& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "{\"n\":%zu,\"mean\":%.3f,\"p10\":%.3f,\"p50\":%.3f,\"p90\":%.3f}",
                s.n, s.mean, s.p10, s.p50, s.p90);
  return buf;
}

int Child(int index, int procs, double seconds, double host_us, double every_us) {
  CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* x;
  CHECK(cudaMalloc(&x, kN * sizeof(float)));
  CHECK(cudaMemset(x, 0, kN * sizeof(float)));
  unsigned long long *first, *last;
  CHECK(cudaMalloc(&first, kMaxBrackets * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&last, kMaxBrackets * sizeof(unsigned long long)));
  CHECK(cudaMemset(first, 0xff, kMaxBrackets * sizeof(unsigned long long)));
  CHECK(cudaMemset(last, 0, kMaxBrackets * sizeof(unsigned long long)));
  volatile unsigned int* gate;
  CHECK(cuMemHostAlloc((void**)&gate, sizeof(unsigned int), CU_MEMHOSTALLOC_DEVICEMAP));
  *gate = 0;
  CUdeviceptr gate_dev;
  CHECK(cuMemHostGetDevicePointer(&gate_dev, (void*)gate, 0));
  unsigned int gate_value = 0;
  std::vector<cudaEvent_t> spare;
  auto event = [&]() {
    cudaEvent_t e;
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
    } else {
      CHECK(cudaEventCreate(&e));
    }
    return e;
  };
  // Warm up: modules loaded, clocks up.
  for (int i = 0; i < 2000; ++i) {
    small_kernel<<<kBlocks, kThreads, 0, stream>>>(x, kN);
    null_kernel<<<1, 32, 0, stream>>>();
  }
  CHECK(cudaStreamSynchronize(stream));

  std::mt19937_64 rng(1234 + index);
  std::deque<Pending> pending;
  std::vector<double> spans[kVariantCount], kernel_spans[kVariantCount], beyond[kVariantCount];
  std::vector<std::pair<int, double>> timed;  // (slot, bracket span) of the timed variants
  std::vector<int> timed_variant;
  int slots = 0;
  long launches = 0;
  const double start_us = NowUs();
  double next_bracket = start_us + every_us;
  auto drain = [&](bool wait) {
    while (!pending.empty()) {
      Pending& p = pending.front();
      if (wait)
        CHECK(cudaEventSynchronize(p.end));
      else if (cudaEventQuery(p.end) != cudaSuccess)
        break;
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, p.start, p.end));
      spans[p.variant].push_back(ms * 1000.0);
      if (p.slot >= 0) {
        timed.emplace_back(p.slot, ms * 1000.0);
        timed_variant.push_back(p.variant);
      }
      spare.push_back(p.start);
      spare.push_back(p.end);
      pending.pop_front();
    }
  };
  while (NowUs() - start_us < seconds * 1e6) {
    if (NowUs() >= next_bracket && slots < kMaxBrackets) {
      next_bracket += every_us;
      const int variant = static_cast<int>(rng() % kVariantCount);
      Pending p{variant, event(), event(), -1};
      CHECK(cuStreamWaitValue32(reinterpret_cast<CUstream>(stream), gate_dev, ++gate_value,
                                CU_STREAM_WAIT_VALUE_GEQ));
      if (variant == 3) null_kernel<<<1, 32, 0, stream>>>();
      CHECK(cudaEventRecord(p.start, stream));
      if (variant == 0 || variant == 3) {
        p.slot = slots++;
        timed_kernel<<<kBlocks, kThreads, 0, stream>>>(x, kN, first + p.slot, last + p.slot);
      } else if (variant == 2) {
        null_kernel<<<1, 32, 0, stream>>>();
      }
      CHECK(cudaEventRecord(p.end, stream));
      __atomic_store_n(const_cast<unsigned int*>(gate), gate_value, __ATOMIC_RELEASE);
      pending.push_back(p);
      ++launches;
    } else {
      small_kernel<<<kBlocks, kThreads, 0, stream>>>(x, kN);
      ++launches;
    }
    drain(false);
    Spin(host_us);
  }
  drain(true);
  CHECK(cudaStreamSynchronize(stream));
  const double wall_s = (NowUs() - start_us) / 1e6;
  std::vector<unsigned long long> f(slots), l(slots);
  if (slots > 0) {
    CHECK(cudaMemcpy(f.data(), first, slots * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(l.data(), last, slots * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  }
  for (size_t i = 0; i < timed.size(); ++i) {
    const int slot = timed[i].first;
    if (l[slot] <= f[slot]) continue;
    const double kernel_us = (l[slot] - f[slot]) / 1000.0;
    kernel_spans[timed_variant[i]].push_back(kernel_us);
    beyond[timed_variant[i]].push_back(timed[i].second - kernel_us);
  }
  for (int v = 0; v < kVariantCount; ++v) {
    std::printf(
        "{\"procs\":%d,\"proc\":%d,\"host_us\":%.1f,\"launches_per_s\":%.0f,"
        "\"variant\":\"%s\",\"bracket_us\":%s,\"kernel_us\":%s,\"beyond_us\":%s}\n",
        procs, index, host_us, launches / wall_s, kVariants[v], Json(Summarize(spans[v])).c_str(),
        Json(Summarize(kernel_spans[v])).c_str(), Json(Summarize(beyond[v])).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 1;
  double seconds = 5, host_us = 8, every_us = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (flag == "--procs")
      procs = static_cast<int>(value);
    else if (flag == "--seconds")
      seconds = value;
    else if (flag == "--host-us")
      host_us = value;
    else if (flag == "--every-us")
      every_us = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<pid_t> children;
  for (int i = 0; i < procs; ++i) {
    const pid_t pid = fork();
    if (pid == 0) std::exit(Child(i, procs, seconds, host_us, every_us));
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
