// compute_workload: a GPU workload that measures its own completed work, for the compute-share
// runs (compute_shares.sh). It trusts nothing but the host clock: it keeps about 20 ms of work
// queued, waits on the oldest of a ring of events and counts that work done at the moment the
// wait returns. Completed units against time are read at window boundaries by linear
// interpolation, after a 0.5 s warm-up.
//
//   compute_workload gemm|tiny|long|graph --seconds S [--window W] [--calibration NS,FIXED_NS]
//     gemm   bf16 8192^3 cublasGemmEx (~1.5 ms on an H200); unit = one GEMM
//     tiny   spin kernels of 10, 20, 30, 40, 50 us in turn; unit = one kernel
//     long   100 ms spin kernels; unit = one kernel
//     graph  a CUDA graph of 20 spin kernels of 20 us, replayed; unit = one replay
//   Prints {"kind","window","units","seconds","rate","end"} per window of W s (default 3; end is
//   the window's end in Unix seconds) and a final {"kind","total_units","seconds","rate"}.
//   Spin kernels are one block per SM; their length is calibrated at start with CUDA events
//   (ns per loop iteration + fixed cost, printed in the final line); --calibration reuses a solo
//   run's numbers, so that a throttled run's units are the same work as the solo run's.
//
//   compute_workload launch [--launches N]
//     N (default 200000) asynchronous launches of an empty kernel, then one synchronize;
//     prints {"kind":"launch","launches":N,"ns_per_launch":...}
//
//   compute_workload enqueue [--batches B] [--batch K] [--path both|runtime|driver]
//     the host's enqueue cost alone: B (default 2000) batches of K (default 32) empty-kernel
//     launches on the legacy stream, only each batch's enqueue timed (steady clock), then an
//     untimed synchronize, so the queue never fills and no GPU time is counted; 200 batches of
//     warm-up first. Runtime (<<<>>>) and driver (cuLaunchKernel on the same kernel) batches
//     alternate. Prints {"kind":"enqueue","batches":B,"batch":K,"runtime_median_ns":...,
//     "runtime_p10_ns":...,"runtime_p90_ns":...,"driver_median_ns":...,...}: ns per launch,
//     quantiles over the batches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    const auto status_ = (call);                                                 \
    if (static_cast<int>(status_) != 0) {                                        \
      std::fprintf(stderr, "compute_workload: %s failed: %d (line %d)\n", #call, \
                   static_cast<int>(status_), __LINE__);                         \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

namespace {

constexpr double kWarmupS = 0.5;
constexpr int kThreads = 128;
constexpr int kGemmN = 8192;

struct Calibration {
  double ns_per_iter = 0;
  double fixed_ns = 0;
  long long Iterations(double ns) const {
    return std::max(1LL, static_cast<long long>((ns - fixed_ns) / ns_per_iter));
  }
};

__global__ void Spin(float* sink, long long iters) {
  float x = threadIdx.x * 1e-3f;
  for (long long i = 0; i < iters; ++i) x = fmaf(x, 0.9999f, 1e-4f);
  if (x == -1.0f) sink[0] = x;  // never true; keeps the loop
}

__global__ void Empty() {}

__global__ void FillRandom(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((h & 0xffffu) / 65536.0f - 0.5f);
  }
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Gpu {
  cudaStream_t stream = nullptr;
  int sms = 0;
  float* sink = nullptr;
  void SpinKernel(long long iters) const { Spin<<<sms, kThreads, 0, stream>>>(sink, iters); }
};

// The fastest of 7 timed runs of a spin kernel, in ns.
double TimeSpinNs(const Gpu& gpu, long long iters) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int i = 0; i < 7; ++i) {
    CHECK(cudaEventRecord(start, gpu.stream));
    gpu.SpinKernel(iters);
    CHECK(cudaEventRecord(stop, gpu.stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return best_ms * 1e6;
}

// Kernel time = fixed + iters * ns_per_iter, fitted through two lengths (~0.3 ms and ~1 ms).
Calibration Calibrate(const Gpu& gpu) {
  constexpr long long kShort = 1LL << 17, kLong = 1LL << 19;
  TimeSpinNs(gpu, kShort);  // warm-up: module load, clocks
  const double t_short = TimeSpinNs(gpu, kShort), t_long = TimeSpinNs(gpu, kLong);
  Calibration c;
  c.ns_per_iter = (t_long - t_short) / static_cast<double>(kLong - kShort);
  c.fixed_ns = std::max(0.0, t_short - c.ns_per_iter * kShort);
  return c;
}

// Enqueues batches of units, `depth` batches in flight; prints the windows and the total.
void Measure(const std::string& kind, double seconds, double window, int units_per_batch, int depth,
             const Gpu& gpu, const std::function<void()>& enqueue_batch,
             const std::string& extra_json) {
  std::vector<cudaEvent_t> ring(depth);
  for (auto& e : ring) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const double start = Now(), unix_start = UnixNow(), t0 = start + kWarmupS;
  std::vector<double> bounds{t0};
  for (int k = 1; bounds.back() < t0 + seconds - 1e-9; ++k) {
    bounds.push_back(t0 + std::min(k * window, seconds));
  }
  std::vector<double> units_at;  // cumulative completed units at each bound
  double prev_t = start, prev_u = 0;
  long long issued = 0, completed = 0;
  while (units_at.size() < bounds.size()) {
    if (issued - completed < depth) {
      enqueue_batch();
      CHECK(cudaEventRecord(ring[issued % depth], gpu.stream));
      ++issued;
      continue;
    }
    CHECK(cudaEventSynchronize(ring[completed % depth]));
    const double t = Now(), u = static_cast<double>(++completed * units_per_batch);
    for (size_t k = units_at.size(); k < bounds.size() && t >= bounds[k]; ++k) {
      units_at.push_back(prev_u + (u - prev_u) * (bounds[k] - prev_t) / (t - prev_t));
      if (k == 0) continue;
      const double n = units_at[k] - units_at[k - 1], s = bounds[k] - bounds[k - 1];
      std::printf(
          "{\"kind\":\"%s\",\"window\":%zu,\"units\":%.3f,\"seconds\":%.4f,\"rate\":%.4f,"
          "\"end\":%.3f}\n",
          kind.c_str(), k - 1, n, s, n / s, unix_start + bounds[k] - start);
      std::fflush(stdout);
    }
    prev_t = t;
    prev_u = u;
  }
  CHECK(cudaStreamSynchronize(gpu.stream));
  CHECK(cudaGetLastError());
  const double total = units_at.back() - units_at.front();
  std::printf("{\"kind\":\"%s\",\"total_units\":%.3f,\"seconds\":%.4f,\"rate\":%.4f%s}\n",
              kind.c_str(), total, seconds, total / seconds, extra_json.c_str());
  for (auto& e : ring) CHECK(cudaEventDestroy(e));
}

int Usage() {
  std::fprintf(stderr,
               "usage: compute_workload gemm|tiny|long|graph --seconds S [--window W] "
               "[--calibration NS_PER_ITER,FIXED_NS]\n"
               "       compute_workload launch [--launches N]\n"
               "       compute_workload enqueue [--batches B] [--batch K] "
               "[--path both|runtime|driver]\n");
  return 2;
}

int Launch(long long n) {
  for (int i = 0; i < 5000; ++i) Empty<<<1, 1>>>();
  CHECK(cudaDeviceSynchronize());
  const double t = Now();
  for (long long i = 0; i < n; ++i) Empty<<<1, 1>>>();
  CHECK(cudaDeviceSynchronize());
  const double ns = (Now() - t) * 1e9 / static_cast<double>(n);
  CHECK(cudaGetLastError());
  std::printf("{\"kind\":\"launch\",\"launches\":%lld,\"ns_per_launch\":%.2f}\n", n, ns);
  return 0;
}

// Enqueues one batch (k calls of launch) and returns its ns per launch; the synchronize after it
// is not timed.
template <typename F>
double BatchNs(int k, const F& launch) {
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < k; ++i) launch();
  const auto end = std::chrono::steady_clock::now();
  CHECK(cudaStreamSynchronize(nullptr));
  return std::chrono::duration<double, std::nano>(end - t).count() / k;
}

double Quantile(std::vector<double> v, double q) {  // linear between order statistics
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  return i + 1 < v.size() ? v[i] + (v[i + 1] - v[i]) * (pos - static_cast<double>(i)) : v[i];
}

int Enqueue(long long batches, int batch, const std::string& path) {
  constexpr long long kWarmupBatches = 200;
  const bool runtime = path != "driver", driver = path != "runtime";
  Empty<<<1, 1>>>();  // loads the module (lazy loading) and makes the primary context current
  CHECK(cudaStreamSynchronize(nullptr));
  cudaFunction_t f = nullptr;  // the same CUfunc_st* as the driver's CUfunction
  CHECK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(Empty)));
  const auto runtime_launch = [] { Empty<<<1, 1>>>(); };
  const auto driver_launch = [f] {
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  };
  std::vector<double> runtime_ns, driver_ns;
  const auto time_batch = [batch](long long b, const auto& launch, std::vector<double>& out) {
    const double ns = BatchNs(batch, launch);
    if (b >= 0) out.push_back(ns);  // b < 0: warm-up
  };
  for (long long b = -kWarmupBatches; b < batches; ++b) {
    const bool runtime_first = b % 2 == 0;  // alternate which path goes first
    if (runtime && runtime_first) time_batch(b, runtime_launch, runtime_ns);
    if (driver) time_batch(b, driver_launch, driver_ns);
    if (runtime && !runtime_first) time_batch(b, runtime_launch, runtime_ns);
  }
  CHECK(cudaGetLastError());
  std::string json = "{\"kind\":\"enqueue\",\"batches\":" + std::to_string(batches) +
                     ",\"batch\":" + std::to_string(batch);
  const auto add = [&json](const char* name, const std::vector<double>& ns) {
    if (ns.empty()) return;
    char buf[160];
    std::snprintf(buf, sizeof(buf), ",\"%s_median_ns\":%.2f,\"%s_p10_ns\":%.2f,\"%s_p90_ns\":%.2f",
                  name, Quantile(ns, 0.5), name, Quantile(ns, 0.1), name, Quantile(ns, 0.9));
    json += buf;
  };
  add("runtime", runtime_ns);
  add("driver", driver_ns);
  std::printf("%s}\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2 != 0) return Usage();  // KIND, then flag-value pairs
  const std::string kind = argv[1];
  double seconds = 0, window = 3;
  long long launches = 200000, batches = 2000;
  int batch_size = 32;
  std::string path = "both";
  Calibration calibration;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--window") {
      window = std::atof(argv[i + 1]);
    } else if (flag == "--launches") {
      launches = std::atoll(argv[i + 1]);
    } else if (flag == "--batches") {
      batches = std::atoll(argv[i + 1]);
    } else if (flag == "--batch") {
      batch_size = std::atoi(argv[i + 1]);
    } else if (flag == "--path") {
      path = argv[i + 1];
    } else if (flag == "--calibration") {
      if (std::sscanf(argv[i + 1], "%lf,%lf", &calibration.ns_per_iter, &calibration.fixed_ns) !=
          2) {
        return Usage();
      }
    } else {
      return Usage();
    }
  }
  if (kind == "launch") return launches > 0 ? Launch(launches) : Usage();
  if (kind == "enqueue") {
    const bool known = path == "both" || path == "runtime" || path == "driver";
    return batches > 0 && batch_size > 0 && known ? Enqueue(batches, batch_size, path) : Usage();
  }
  if (seconds <= 0 || window <= 0) return Usage();

  Gpu gpu;
  CHECK(cudaDeviceGetAttribute(&gpu.sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&gpu.sink, sizeof(float)));

  if (kind == "gemm") {
    const size_t elems = size_t{kGemmN} * kGemmN;
    __nv_bfloat16 *a, *b, *c;
    CHECK(cudaMalloc(&a, elems * sizeof(*a)));
    CHECK(cudaMalloc(&b, elems * sizeof(*b)));
    CHECK(cudaMalloc(&c, elems * sizeof(*c)));
    FillRandom<<<1024, 256, 0, gpu.stream>>>(a, elems, 1);
    FillRandom<<<1024, 256, 0, gpu.stream>>>(b, elems, 2);
    CHECK(cudaGetLastError());
    cublasHandle_t handle;
    CHECK(cublasCreate(&handle));
    CHECK(cublasSetStream(handle, gpu.stream));
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm = [&] {
      CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kGemmN, kGemmN, kGemmN, &alpha, a,
                         CUDA_R_16BF, kGemmN, b, CUDA_R_16BF, kGemmN, &beta, c, CUDA_R_16BF, kGemmN,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    gemm();  // warm-up: heuristics, workspace
    CHECK(cudaStreamSynchronize(gpu.stream));
    Measure(kind, seconds, window, 1, 12, gpu, gemm, "");
    CHECK(cublasDestroy(handle));
    return 0;
  }

  if (kind != "tiny" && kind != "long" && kind != "graph") return Usage();
  if (calibration.ns_per_iter <= 0) calibration = Calibrate(gpu);
  char extra[96];
  std::snprintf(extra, sizeof(extra), ",\"ns_per_iter\":%.6f,\"fixed_ns\":%.1f",
                calibration.ns_per_iter, calibration.fixed_ns);

  if (kind == "tiny") {
    std::vector<long long> iters;
    for (int us = 10; us <= 50; us += 10) iters.push_back(calibration.Iterations(us * 1e3));
    auto batch = [&] {  // 50 kernels, 1.5 ms
      for (int i = 0; i < 50; ++i) gpu.SpinKernel(iters[i % iters.size()]);
    };
    Measure(kind, seconds, window, 50, 12, gpu, batch, extra);
  } else if (kind == "long") {
    const long long iters = calibration.Iterations(100e6);
    Measure(
        kind, seconds, window, 1, 2, gpu, [&] { gpu.SpinKernel(iters); }, extra);
  } else {
    const long long iters = calibration.Iterations(20e3);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(gpu.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 20; ++i) gpu.SpinKernel(iters);
    CHECK(cudaStreamEndCapture(gpu.stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, gpu.stream));  // warm-up: upload
    CHECK(cudaStreamSynchronize(gpu.stream));
    auto batch = [&] {  // 4 replays, 1.6 ms
      for (int i = 0; i < 4; ++i) CHECK(cudaGraphLaunch(exec, gpu.stream));
    };
    Measure(kind, seconds, window, 4, 12, gpu, batch, extra);
  }
  return 0;
}
