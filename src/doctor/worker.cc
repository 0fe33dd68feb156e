#include "doctor/worker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <istream>
#include <ostream>
#include <poll.h>
#include <thread>
#include <unistd.h>

#include <cuda.h>

#include "doctor/kernels.h"

namespace tessera::doctor {
namespace {

using Clock = std::chrono::steady_clock;

// No worker outlives this, whatever its parent does.
constexpr auto kDeadline = std::chrono::seconds(30);

// The driver entry points a worker uses, typed by cuda.h.
#define TESSERA_WORKER_CUDA(X) \
  X(cuInit)                    \
  X(cuDeviceGet)               \
  X(cuDeviceGetName)           \
  X(cuDeviceGetUuid_v2)        \
  X(cuDeviceTotalMem_v2)       \
  X(cuDeviceGetAttribute)      \
  X(cuDriverGetVersion)        \
  X(cuDevicePrimaryCtxRetain)  \
  X(cuCtxSetCurrent)           \
  X(cuCtxSynchronize)          \
  X(cuMemAlloc_v2)             \
  X(cuMemFree_v2)              \
  X(cuMemsetD8_v2)             \
  X(cuMemcpyDtoH_v2)           \
  X(cuMemGetInfo_v2)           \
  X(cuModuleLoadData)          \
  X(cuModuleGetFunction)       \
  X(cuLaunchKernel)

struct Cuda {
#define TESSERA_WORKER_FIELD(name) decltype(&::name) name = nullptr;
  TESSERA_WORKER_CUDA(TESSERA_WORKER_FIELD)
#undef TESSERA_WORKER_FIELD
  CUdevice device = 0;
  CUmodule module = nullptr;
  int sms = 0;
};

std::string Resolve(Cuda& c) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::string("dlopen libcuda.so.1: ") + dlerror();
#define TESSERA_WORKER_RESOLVE(name)                               \
  c.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name)); \
  if (c.name == nullptr) return "libcuda.so.1 lacks " #name;
  TESSERA_WORKER_CUDA(TESSERA_WORKER_RESOLVE)
#undef TESSERA_WORKER_RESOLVE
  return "";
}

// Driver, device 0 (the parent set CUDA_VISIBLE_DEVICES), its primary context, the kernels.
std::string Open(Cuda& c) {
  if (std::string e = Resolve(c); !e.empty()) return e;
  CUresult r = c.cuInit(0);
  if (r == CUDA_SUCCESS) r = c.cuDeviceGet(&c.device, 0);
  CUcontext ctx = nullptr;
  if (r == CUDA_SUCCESS) r = c.cuDevicePrimaryCtxRetain(&ctx, c.device);
  if (r == CUDA_SUCCESS) r = c.cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) return "context: CUresult " + std::to_string(r);
  c.cuDeviceGetAttribute(&c.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c.device);
  if (c.sms <= 0) c.sms = 1;
  r = c.cuModuleLoadData(&c.module, kKernelsPtx);
  if (r != CUDA_SUCCESS) return "loading the kernels: CUresult " + std::to_string(r);
  return "";
}

CUfunction Kernel(const Cuda& c, const char* name) {
  CUfunction f = nullptr;
  c.cuModuleGetFunction(&f, c.module, name);
  return f;
}

CUresult Launch(const Cuda& c, CUfunction f, unsigned int blocks, unsigned int threads,
                void** params) {
  return c.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
}

std::uint64_t Number(const std::vector<std::string>& args, std::size_t i, std::uint64_t fallback) {
  return i < args.size() ? std::strtoull(args[i].c_str(), nullptr, 10) : fallback;
}

// Reads commands until stdin closes or the deadline passes; answers each with `answer`.
template <typename Answer>
void ServeCommands(std::istream& in, Answer answer) {
  std::string line;
  const auto end = Clock::now() + kDeadline;
  while (Clock::now() < end && std::getline(in, line)) answer(line);
}

// Whether stdin has closed (or has input) within `ms` milliseconds.
bool StdinReadyWithin(int ms) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  return poll(&p, 1, ms) > 0;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int Hold(Cuda& c, std::uint64_t bytes, std::istream& in, std::ostream& out) {
  CUdeviceptr p = 0;
  const CUresult r = c.cuMemAlloc_v2(&p, bytes);
  out << "hold=" << r << "\nready=1" << std::endl;
  std::vector<CUdeviceptr> grown;
  ServeCommands(in, [&](const std::string& line) {
    if (line.rfind("grow ", 0) == 0) {
      CUdeviceptr q = 0;
      const CUresult g = c.cuMemAlloc_v2(&q, std::strtoull(line.c_str() + 5, nullptr, 10));
      if (g == CUDA_SUCCESS) grown.push_back(q);
      out << "grow=" << g << std::endl;
    } else if (line == "alive") {
      CUresult a = Launch(c, Kernel(c, "tessera_probe"), 1, 32, nullptr);
      if (a == CUDA_SUCCESS) a = c.cuCtxSynchronize();
      out << "alive=" << a << std::endl;
    }
  });
  return 0;
}

int Hog(Cuda& c, std::uint64_t chunk, std::istream& in, std::ostream& out) {
  std::uint64_t total = 0;
  CUresult r = CUDA_SUCCESS;
  std::size_t device_total = 0;
  c.cuDeviceTotalMem_v2(&device_total, c.device);
  while (total < device_total) {
    CUdeviceptr p = 0;
    if ((r = c.cuMemAlloc_v2(&p, chunk)) != CUDA_SUCCESS) break;
    total += chunk;
  }
  out << "hogged=" << total << "\nlast=" << r << "\nready=1" << std::endl;
  ServeCommands(in, [](const std::string&) {});
  return 0;
}

int Fill(Cuda& c, std::uint64_t bytes, std::istream& in, std::ostream& out) {
  CUdeviceptr p = 0;
  CUresult r = c.cuMemAlloc_v2(&p, bytes);
  if (r == CUDA_SUCCESS) r = c.cuMemsetD8_v2(p, kPatternByte, bytes);
  if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
  out << "fill=" << r << "\nready=1" << std::endl;
  ServeCommands(in, [](const std::string&) {});
  return 0;
}

int Scan(Cuda& c, std::uint64_t bytes, std::ostream& out) {
  constexpr std::uint64_t kChunk = 64ULL << 20;
  std::vector<std::uint8_t> host(kChunk);
  std::uint64_t matches = 0, scanned = 0;
  std::vector<CUdeviceptr> held;
  for (std::uint64_t done = 0; done < bytes; done += kChunk) {
    CUdeviceptr p = 0;
    if (c.cuMemAlloc_v2(&p, kChunk) != CUDA_SUCCESS) break;
    held.push_back(p);
    if (c.cuMemcpyDtoH_v2(host.data(), p, kChunk) != CUDA_SUCCESS) break;
    matches += CountPatternWords(host.data(), host.size(), kPatternByte);
    scanned += kChunk;
  }
  for (CUdeviceptr p : held) c.cuMemFree_v2(p);
  out << "matches=" << matches << "\nscanned=" << scanned << std::endl;
  return 0;
}

int Probe(Cuda& c, std::uint64_t count, std::ostream& out) {
  const CUfunction f = Kernel(c, "tessera_probe");
  std::vector<double> us;
  CUresult r = CUDA_SUCCESS;
  for (std::uint64_t i = 0; i < count + 20 && r == CUDA_SUCCESS; ++i) {
    const auto t0 = Clock::now();
    r = Launch(c, f, 1, 32, nullptr);
    if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 20) us.push_back(elapsed);  // the first launches warm up
  }
  out << "probe=" << r << "\np50_us=" << Percentile(us, 0.5) << "\np99_us=" << Percentile(us, 0.99)
      << std::endl;
  return 0;
}

int Spin(Cuda& c, std::ostream& out) {
  const CUfunction f = Kernel(c, "tessera_spin");
  std::uint64_t ns = 200'000'000;  // 200 ms kernels, back to back
  void* params[] = {&ns};
  const auto blocks = static_cast<unsigned int>(c.sms * 2);
  CUresult r = Launch(c, f, blocks, 1024, params);
  out << "spin=" << r << "\nready=1" << std::endl;
  const auto end = Clock::now() + kDeadline;
  while (r == CUDA_SUCCESS && Clock::now() < end) {
    r = Launch(c, f, blocks, 1024, params);  // queued behind the running one
    if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
    if (StdinReadyWithin(0)) break;  // closed (or told): stop after this kernel
  }
  return 0;
}

int Fault(Cuda& c, std::ostream& out) {
  CUresult r = Launch(c, Kernel(c, "tessera_fault"), 1, 1, nullptr);
  if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
  out << "fault=" << r << std::endl;
  return 0;
}

int Burn(Cuda& c, std::uint64_t ms, std::ostream& out) {
  const CUfunction f = Kernel(c, "tessera_burn");
  CUdeviceptr sink = 0;
  unsigned int iters = 1u << 14;
  void* params[] = {&sink, &iters};
  const auto blocks = static_cast<unsigned int>(c.sms * 16);
  CUresult r = Launch(c, f, blocks, 256, params);  // warm-up
  if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
  std::uint64_t kernels = 0;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::milliseconds(ms);
  while (r == CUDA_SUCCESS && Clock::now() < until) {
    for (int i = 0; i < 8 && r == CUDA_SUCCESS; ++i) r = Launch(c, f, blocks, 256, params);
    if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
    kernels += 8;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  out << "burn=" << r << "\nrate=" << (s > 0 ? static_cast<double>(kernels) / s : 0) << std::endl;
  return 0;
}

int Quota(Cuda& c, std::ostream& out) {
  std::size_t free_bytes = 0, total = 0, device_total = 0;
  const CUresult r = c.cuMemGetInfo_v2(&free_bytes, &total);
  c.cuDeviceTotalMem_v2(&device_total, c.device);
  out << "quota=" << r << "\ntotal=" << total << "\nfree=" << free_bytes
      << "\ndevice_total=" << device_total << std::endl;
  return 0;
}

int Scrub(Cuda& c, std::uint64_t bytes, std::ostream& out) {
  CUdeviceptr p = 0;
  CUresult r = c.cuMemAlloc_v2(&p, bytes);
  double best = 0;
  for (int i = 0; i < 5 && r == CUDA_SUCCESS; ++i) {
    const auto t0 = Clock::now();
    r = c.cuMemsetD8_v2(p, 0, bytes);
    if (r == CUDA_SUCCESS) r = c.cuCtxSynchronize();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i == 0 || ms < best) best = ms;
  }
  out << "scrub=" << r << "\nms_per_gib="
      << (bytes > 0 ? best * static_cast<double>(1ULL << 30) / static_cast<double>(bytes) : 0)
      << std::endl;
  return 0;
}

int Info(Cuda& c, std::ostream& out) {
  char name[128] = {};
  c.cuDeviceGetName(name, sizeof(name) - 1, c.device);
  CUuuid uuid{};
  c.cuDeviceGetUuid_v2(&uuid, c.device);
  std::size_t total = 0;
  c.cuDeviceTotalMem_v2(&total, c.device);
  int version = 0;
  c.cuDriverGetVersion(&version);
  static const char* kHex = "0123456789abcdef";
  std::string id = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) id += '-';
    const auto b = static_cast<unsigned char>(uuid.bytes[i]);
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  out << "name=" << name << "\nuuid=" << id << "\ntotal=" << total << "\nsms=" << c.sms
      << "\ncuda=" << version << std::endl;
  return 0;
}

}  // namespace

std::uint64_t CountPatternWords(const std::uint8_t* data, std::size_t bytes, std::uint8_t byte) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
    n += data[i] == byte && data[i + 1] == byte && data[i + 2] == byte && data[i + 3] == byte;
  }
  return n;
}

int RunWorker(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  if (args.empty()) {
    out << "error=no role" << std::endl;
    return 2;
  }
  Cuda c;
  if (std::string e = Open(c); !e.empty()) {
    out << "error=" << e << std::endl;
    return 1;
  }
  const std::string& role = args[0];
  if (role == "info") return Info(c, out);
  if (role == "hold") return Hold(c, Number(args, 1, 64ULL << 20), in, out);
  if (role == "hog") return Hog(c, Number(args, 1, 1ULL << 30), in, out);
  if (role == "fill") return Fill(c, Number(args, 1, 1ULL << 30), in, out);
  if (role == "scan") return Scan(c, Number(args, 1, 1ULL << 30), out);
  if (role == "probe") return Probe(c, Number(args, 1, 200), out);
  if (role == "spin") return Spin(c, out);
  if (role == "fault") return Fault(c, out);
  if (role == "burn") return Burn(c, Number(args, 1, 1000), out);
  if (role == "quota") return Quota(c, out);
  if (role == "scrub") return Scrub(c, Number(args, 1, 1ULL << 30), out);
  out << "error=unknown role " << role << std::endl;
  return 2;
}

}  // namespace tessera::doctor
