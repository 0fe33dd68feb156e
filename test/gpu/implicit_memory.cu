// Device memory the driver takes implicitly, per object, as NVML reports it for this process:
// streams (found: ~560 KiB each in 2 MiB chunks on H200/580) and events (none). Evidence for
// the stream= charge (docs/benchmarks.md). Build: nvcc -arch=sm_90 implicit_memory.cu -lnvidia-ml
#include <cstdio>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nvml.h>
static long long Phys() {
  nvmlDevice_t d;
  nvmlDeviceGetHandleByIndex_v2(0, &d);
  unsigned n = 64;
  nvmlProcessInfo_t p[64];
  nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p);
  for (unsigned i = 0; i < n; ++i)
    if (p[i].pid == (unsigned)getpid()) return p[i].usedGpuMemory >> 10;
  return 0;
}
int main() {
  nvmlInit_v2();
  cudaFree(0);
  long long base = Phys();
  for (int k = 1; k <= 128; ++k) {
    cudaStream_t s;
    int lo, hi;
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, k % 2 ? lo : hi);
    if (k == 1 || k == 2 || k == 8 || k == 32 || k == 64 || k == 128)
      printf("streams %d: +%lld KiB\n", k, Phys() - base);
  }
  base = Phys();
  for (int k = 1; k <= 1024; ++k) {
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (k == 1 || k == 64 || k == 1024) printf("events %d: +%lld KiB\n", k, Phys() - base);
  }
  base = Phys();
  for (int k = 1; k <= 4; ++k) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    void* p;
    cudaMallocAsync(&p, 512, s);
    cudaStreamSynchronize(s);
    printf("stream+async %d: +%lld KiB\n", k, Phys() - base);
  }
  return 0;
}
