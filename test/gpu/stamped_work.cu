// stamped_work: GPU workloads whose kernels stamp their own start and end on the SMs
// (%globaltimer), so that the busy fraction b of a solo run is measured independently of the
// governor (issue #21: under a share s the delivered rate must be min(1, s / b) of solo), and
// whose rate a host does not move by a quarter from run to run as an interpreter's does.
//
//   stamped_work SHAPE [--seconds S] [--warmup W] [--host-us H] [--kernel-us K] [--stamps FILE]
//                [--trace cupti]
//     launchbound  one-block kernels launched back to back (runtime API), H us of host work after
//                  each, a synchronize every 256; unit = one kernel
//     graphs       a CUDA graph of 32 one-block kernels, replayed, a synchronize after each
//                  replay, then H (default 300) us of host work; unit = one replay
//     streams      4 streams, a K (default 20) us kernel on each per round, a device
//                  synchronize every 16 rounds, then H (default 100) us of host work;
//                  unit = one round
// Each kernel is one block: thread 0 reads the clock at entry and after the block's work (and
// its spin, K us), and stores both in the next slot of a device array (atomic index), so that a
// graph's replays stamp fresh slots too. The run's first W (default 1) seconds are left out of
// both the rate and b.
//
// Prints one JSON line: {"shape","source","units_per_s","b","busy_ms","window_ms","intervals",
// "lost","odd","b_stamps"}: b is the union of the kernels' intervals over the window from the
// first kept kernel's start to the last one's end (each instant counted once however many streams
// run then); b_stamps is b by the stamps also where b is by CUPTI.
// --stamps FILE also writes the kept intervals (pairs of little-endian uint64 ns) for a driver
// that merges several processes' intervals into one union.
//
// --trace cupti (built with -DSTAMPED_CUPTI and CUPTI's headers and library): the intervals are
// CUPTI's kernel activity records instead (its own timebase; the kernels' stamps still run), the
// witness Nsight shows: a kernel's span there includes its dispatch and completion on the GPU,
// which a clock read inside the kernel does not see. Tracing slows the launches a little, so a
// driver takes busy time per unit from a traced run and the rate from an untraced one.
// Build: nvcc -O2 -std=c++17 -arch=sm_90 stamped_work.cu -o stamped_work
//   (CUPTI: add -DSTAMPED_CUPTI -I CUPTI_INCLUDE -L CUPTI_LIB -lcupti)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#ifdef STAMPED_CUPTI
#include <cupti.h>
#include <mutex>
#endif

namespace {

using Intervals = std::vector<std::pair<unsigned long long, unsigned long long>>;

#ifdef STAMPED_CUPTI
// The kernel records' start and end: at the same offsets in every CUpti_ActivityKernel version
// since the fourth (kind, four bytes of configuration, two cache enums, then start and end).
constexpr std::size_t kRecordStart = 16, kRecordEnd = 24;
std::mutex g_trace_mu;
Intervals g_trace;
unsigned long long g_trace_odd = 0;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  const std::lock_guard<std::mutex> lock(g_trace_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    unsigned long long start = 0, end = 0;
    std::memcpy(&start, reinterpret_cast<const char*>(record) + kRecordStart, sizeof(start));
    std::memcpy(&end, reinterpret_cast<const char*>(record) + kRecordEnd, sizeof(end));
    if (start == 0 || end < start || end - start > 1000000000ull) {  // 0: no timestamp
      ++g_trace_odd;
      continue;
    }
    g_trace.emplace_back(start, end);
  }
  std::free(buffer);
}

bool StartTrace() {
  return cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) == CUPTI_SUCCESS &&
         cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS;
}

Intervals StopTrace() {
  cuptiActivityFlushAll(1);
  const std::lock_guard<std::mutex> lock(g_trace_mu);
  return std::move(g_trace);
}
#endif

constexpr unsigned kSlots = 1u << 22;  // 4 M kernels' stamps (64 MiB): more are counted as lost

__device__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__global__ void Stamped(float* x, int n, unsigned long long spin_ns, unsigned long long* stamps,
                        unsigned* next) {
  __shared__ unsigned long long start;
  if (threadIdx.x == 0) start = Now();
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = x[i] * 1.0001f + 1e-4f;
  if (spin_ns > 0 && threadIdx.x == 0) {
    while (Now() < start + spin_ns) {
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned slot = atomicAdd(next, 1u);
    if (slot < kSlots) {
      stamps[2 * slot] = start;
      stamps[2 * slot + 1] = Now();
    }
  }
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Spin(double us) {
  if (us <= 0) return;
  const double end = NowS() + us * 1e-6;
  while (NowS() < end) {
  }
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("{\"error\": \"%s: %s\"}\n", what, cudaGetErrorString(e));
  return false;
}

struct Device {
  float* x = nullptr;
  unsigned long long* stamps = nullptr;
  unsigned* next = nullptr;
  static constexpr int kN = 4096;
  bool Init() {
    return Check(cudaMalloc(&x, kN * sizeof(float)), "cudaMalloc") &&
           Check(cudaMemset(x, 0, kN * sizeof(float)), "cudaMemset") &&
           Check(cudaMalloc(&stamps, 2ull * kSlots * sizeof(unsigned long long)), "cudaMalloc") &&
           Check(cudaMalloc(&next, sizeof(unsigned)), "cudaMalloc") &&
           Check(cudaMemset(next, 0, sizeof(unsigned)), "cudaMemset");
  }
  void Launch(cudaStream_t s, unsigned long long spin_ns) {
    Stamped<<<1, 256, 0, s>>>(x, kN, spin_ns, stamps, next);
  }
};

// The host's record of completed units: (time, units done) at each synchronize.
struct Progress {
  double warm_until = 0;
  double t0 = 0;
  long u0 = -1;
  double t1 = 0;
  long u1 = 0;
  void Done(long units) {
    const double t = NowS();
    if (u0 < 0 && t >= warm_until) {
      t0 = t;
      u0 = units;
    }
    t1 = t;
    u1 = units;
  }
  double Rate() const { return u0 >= 0 && t1 > t0 ? static_cast<double>(u1 - u0) / (t1 - t0) : 0; }
};

// The union of the intervals, each instant once; sorts `iv` by start.
unsigned long long UnionNs(Intervals& iv) {
  std::sort(iv.begin(), iv.end());
  unsigned long long busy = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : iv) {
    if (!open || s > cur_end) {
      if (open) busy += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) busy += cur_end - cur_start;
  return busy;
}

// The busy time of the intervals that start after the first one's start plus `warmup` seconds,
// over the window from there to the last end.
struct Window {
  Intervals kept;
  unsigned long long busy_ns = 0;
  double window_ns = 0;
  double B() const { return window_ns > 0 ? static_cast<double>(busy_ns) / window_ns : 0; }
};

Window Busy(const Intervals& all, double warmup) {
  unsigned long long first = ~0ull, last = 0;
  for (const auto& [s, e] : all) {
    first = std::min(first, s);
    last = std::max(last, e);
  }
  const auto from = first + static_cast<unsigned long long>(warmup * 1e9);
  Window w;
  w.kept.reserve(all.size());
  for (const auto& iv : all) {
    if (iv.first >= from) w.kept.push_back(iv);
  }
  w.busy_ns = UnionNs(w.kept);
  w.window_ns = w.kept.empty() ? 0 : static_cast<double>(last - w.kept.front().first);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: stamped_work launchbound|graphs|streams [--seconds S] "
                 "[--warmup W] [--host-us H] [--kernel-us K] [--stamps FILE]\n");
    return 2;
  }
  const std::string shape = argv[1];
  double seconds = 5, warmup = 1, host_us = -1, kernel_us = -1;
  const char* stamps_file = nullptr;
  bool cupti = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--warmup") {
      warmup = std::atof(argv[i + 1]);
    } else if (flag == "--host-us") {
      host_us = std::atof(argv[i + 1]);
    } else if (flag == "--kernel-us") {
      kernel_us = std::atof(argv[i + 1]);
    } else if (flag == "--stamps") {
      stamps_file = argv[i + 1];
    } else if (flag == "--trace") {
      if (std::strcmp(argv[i + 1], "cupti") != 0) {
        std::fprintf(stderr, "stamped_work: --trace takes cupti, not %s\n", argv[i + 1]);
        return 2;
      }
      cupti = true;
    } else {
      std::fprintf(stderr, "stamped_work: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (shape != "launchbound" && shape != "graphs" && shape != "streams") {
    std::fprintf(stderr, "stamped_work: SHAPE must be launchbound, graphs or streams, not %s\n",
                 shape.c_str());
    return 2;
  }
  if (cupti) {
#ifdef STAMPED_CUPTI
    if (!StartTrace()) {
      std::printf("{\"error\": \"CUPTI's activity trace could not be started\"}\n");
      return 1;
    }
#else
    std::fprintf(stderr, "stamped_work: built without CUPTI (-DSTAMPED_CUPTI)\n");
    return 2;
#endif
  }
  Device dev;
  if (!dev.Init()) return 1;
  const double start = NowS();
  Progress progress;
  progress.warm_until = start + warmup;
  long units = 0;
  if (shape == "launchbound") {
    const double h = host_us < 0 ? 0 : host_us;
    while (NowS() < start + seconds) {
      for (int i = 0; i < 256; ++i) {
        dev.Launch(nullptr, 0);
        Spin(h);
      }
      if (!Check(cudaDeviceSynchronize(), "synchronize")) return 1;
      units += 256;
      progress.Done(units);
    }
  } else if (shape == "graphs") {
    const double h = host_us < 0 ? 300 : host_us;
    cudaStream_t s;
    if (!Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) return 1;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    if (!Check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture")) return 1;
    for (int i = 0; i < 32; ++i) dev.Launch(s, 0);
    if (!Check(cudaStreamEndCapture(s, &graph), "end capture") ||
        !Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate")) {
      return 1;
    }
    while (NowS() < start + seconds) {
      if (!Check(cudaGraphLaunch(exec, s), "cudaGraphLaunch") ||
          !Check(cudaStreamSynchronize(s), "synchronize")) {
        return 1;
      }
      ++units;
      progress.Done(units);
      Spin(h);
    }
  } else {
    const double h = host_us < 0 ? 100 : host_us;
    const auto spin_ns = static_cast<unsigned long long>((kernel_us < 0 ? 20 : kernel_us) * 1e3);
    cudaStream_t streams[4];
    for (cudaStream_t& s : streams) {
      if (!Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) {
        return 1;
      }
    }
    while (NowS() < start + seconds) {
      for (int r = 0; r < 16; ++r) {
        for (cudaStream_t s : streams) dev.Launch(s, spin_ns);
      }
      if (!Check(cudaDeviceSynchronize(), "synchronize")) return 1;
      units += 16;
      progress.Done(units);
      Spin(h);
    }
  }
  if (!Check(cudaDeviceSynchronize(), "synchronize")) return 1;
  unsigned made = 0;
  if (!Check(cudaMemcpy(&made, dev.next, sizeof(made), cudaMemcpyDeviceToHost), "cudaMemcpy")) {
    return 1;
  }
  const unsigned kept_slots = std::min(made, kSlots);
  std::vector<unsigned long long> raw(2ull * kept_slots);
  if (kept_slots > 0 && !Check(cudaMemcpy(raw.data(), dev.stamps, raw.size() * sizeof(raw[0]),
                                          cudaMemcpyDeviceToHost),
                               "cudaMemcpy")) {
    return 1;
  }
  Intervals stamps;
  stamps.reserve(kept_slots);
  for (unsigned i = 0; i < kept_slots; ++i) stamps.emplace_back(raw[2 * i], raw[2 * i + 1]);
  Window by_stamps = Busy(stamps, warmup), shown = by_stamps;
  unsigned long long odd = 0;
#ifdef STAMPED_CUPTI
  if (cupti) {
    Intervals trace = StopTrace();
    shown = Busy(trace, warmup);
    odd = g_trace_odd;
  }
#endif
  if (stamps_file != nullptr) {
    if (FILE* f = std::fopen(stamps_file, "wb")) {
      std::fwrite(shown.kept.data(), sizeof(shown.kept[0]), shown.kept.size(), f);
      std::fclose(f);
    }
  }
  std::printf(
      "{\"shape\": \"%s\", \"source\": \"%s\", \"units_per_s\": %.1f, \"b\": %.4f, "
      "\"busy_ms\": %.2f, \"window_ms\": %.2f, \"intervals\": %zu, \"lost\": %u, "
      "\"odd\": %llu, \"b_stamps\": %.4f}\n",
      shape.c_str(), cupti ? "cupti" : "stamps", progress.Rate(), shown.B(),
      static_cast<double>(shown.busy_ns) / 1e6, shown.window_ns / 1e6, shown.kept.size(),
      made - kept_slots, odd, by_stamps.B());
  return 0;
}
