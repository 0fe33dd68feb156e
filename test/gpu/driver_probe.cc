// Raw CUDA driver API workloads for the GPU acceptance run (linked against libcuda, so under
// the preload library its calls reach our exported trampolines).
//   fill CHUNK_MIB      allocate until refused, report, hold until stdin closes
//   alloc-bench N BYTES p50/p99 of cuMemAlloc and cuMemFree
//   first-call          time of the first CUDA calls of the process (cuInit .. first alloc)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <time.h>
#include <unistd.h>
#include <vector>

#include <cuda.h>

namespace {

double NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

#define CHECK(call)                                               \
  do {                                                            \
    CUresult r_ = (call);                                         \
    if (r_ != CUDA_SUCCESS) {                                     \
      std::printf("{\"error\":\"%s\",\"code\":%d}\n", #call, r_); \
      return 1;                                                   \
    }                                                             \
  } while (0)

int Context() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return 0;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const double start = NowNs();
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  if (mode == "first-call") {
    if (Context() != 0) return 1;
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 1 << 20));
    std::printf("{\"first_call_ms\":%.3f}\n", (NowNs() - start) / 1e6);
    return 0;
  }
  if (Context() != 0) return 1;
  if (mode == "fill") {
    const std::size_t chunk = std::strtoull(argv[2], nullptr, 10) << 20;
    std::size_t allocated = 0;
    CUresult last = CUDA_SUCCESS;
    for (;;) {
      CUdeviceptr p;
      last = cuMemAlloc(&p, chunk);
      if (last != CUDA_SUCCESS) break;
      allocated += chunk;
    }
    std::size_t free_bytes = 0, total = 0;
    cuMemGetInfo(&free_bytes, &total);
    std::printf("{\"allocated\":%zu,\"last_error\":%d,\"free\":%zu,\"total\":%zu,\"pid\":%d}\n",
                allocated, last, free_bytes, total, getpid());
    std::printf("HOLDING\n");
    std::fflush(stdout);
    char line[16];
    while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    }
    return 0;
  }
  if (mode == "alloc-bench") {
    const int n = std::atoi(argv[2]);
    const std::size_t bytes = std::strtoull(argv[3], nullptr, 10);
    std::vector<double> alloc_ns, free_ns;
    for (int i = 0; i < n + 200; ++i) {
      CUdeviceptr p;
      const double t0 = NowNs();
      CHECK(cuMemAlloc(&p, bytes));
      const double t1 = NowNs();
      CHECK(cuMemFree(p));
      const double t2 = NowNs();
      if (i >= 200) {  // warm-up first
        alloc_ns.push_back(t1 - t0);
        free_ns.push_back(t2 - t1);
      }
    }
    std::printf(
        "{\"alloc_p50_ns\":%.0f,\"alloc_p99_ns\":%.0f,\"free_p50_ns\":%.0f,\"free_p99_ns\":%.0f}\n",
        Percentile(alloc_ns, 0.5), Percentile(alloc_ns, 0.99), Percentile(free_ns, 0.5),
        Percentile(free_ns, 0.99));
    return 0;
  }
  return 2;
}
