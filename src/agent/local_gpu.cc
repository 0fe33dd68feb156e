#include "agent/local_gpu.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <poll.h>
#include <signal.h>
#include <string>
#include <string_view>
#include <unistd.h>

#include <cuda.h>
#include <nvml.h>

#include "tessera/limits.h"
#include "tessera/quantity.h"
#include "tessera/subprocess.h"

namespace tessera::agent {
namespace {

// What the probe child reports through the pipe (fixed layout, one write).
struct ProbeReply {
  int status;  // CUresult, or -1 when the selector matched no device
  int index;
  std::uint64_t memory_bytes;
  char uuid[64];
  char name[128];
  int count;
};

template <typename Fn>
Fn Sym(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// The CUDA driver's entry points the probes call, from `library` (loaded in the probe's child;
// all null when it cannot be loaded).
struct CudaDriver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGetCount) count = nullptr;
  decltype(&cuDeviceGet) get = nullptr;
  decltype(&cuDeviceGetUuid_v2) uuid = nullptr;
  decltype(&cuDeviceGetName) name = nullptr;
  decltype(&cuDeviceTotalMem_v2) total = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuStreamCreate) stream_create = nullptr;
};

CudaDriver LoadCudaDriver(const std::string& library) {
  CudaDriver d;
  void* cuda = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return d;
  d.init = Sym<decltype(&cuInit)>(cuda, "cuInit");
  d.count = Sym<decltype(&cuDeviceGetCount)>(cuda, "cuDeviceGetCount");
  d.get = Sym<decltype(&cuDeviceGet)>(cuda, "cuDeviceGet");
  d.uuid = Sym<decltype(&cuDeviceGetUuid_v2)>(cuda, "cuDeviceGetUuid_v2");
  d.name = Sym<decltype(&cuDeviceGetName)>(cuda, "cuDeviceGetName");
  d.total = Sym<decltype(&cuDeviceTotalMem_v2)>(cuda, "cuDeviceTotalMem_v2");
  d.attribute = Sym<decltype(&cuDeviceGetAttribute)>(cuda, "cuDeviceGetAttribute");
  d.retain = Sym<decltype(&cuDevicePrimaryCtxRetain)>(cuda, "cuDevicePrimaryCtxRetain");
  d.set_current = Sym<decltype(&cuCtxSetCurrent)>(cuda, "cuCtxSetCurrent");
  d.stream_create = Sym<decltype(&cuStreamCreate)>(cuda, "cuStreamCreate");
  return d;
}

// Streams the probe creates to measure the driver's per-stream device memory (it takes 2 MiB
// chunks, so one stream alone says little; PyTorch's stream pools create 128).
constexpr int kProbeStreams = 128;

// How long ProbeSmCounts' child may take (cuInit of every GPU) before it is killed.
constexpr int kSmProbeTimeoutMs = 20'000;

// Runs in the child: load the driver, find the device, create its primary context, report, and
// keep the context alive until the parent has measured it; on 's', create kProbeStreams streams,
// answer one byte and wait again, so the parent can measure them too.
[[noreturn]] void ProbeChild(const std::string& selector, const std::string& cuda_library,
                             int reply_fd, int go_fd) {
  ProbeReply reply{};
  reply.status = CUDA_ERROR_NOT_FOUND;
  const CudaDriver d = LoadCudaDriver(cuda_library);
  if (d.init && d.count && d.get && d.uuid && d.name && d.total && d.retain && d.set_current &&
      (reply.status = d.init(0)) == CUDA_SUCCESS &&
      (reply.status = d.count(&reply.count)) == CUDA_SUCCESS) {
    reply.status = -1;
    for (int i = 0; i < reply.count; ++i) {
      CUdevice dev = 0;
      CUuuid uuid{};
      if (d.get(&dev, i) != CUDA_SUCCESS || d.uuid(&uuid, dev) != CUDA_SUCCESS) continue;
      const std::string id = FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
      const bool match = selector.empty()                 ? i == 0
                         : selector.rfind("GPU-", 0) == 0 ? id == selector
                                                          : std::to_string(i) == selector;
      if (!match) continue;
      reply.index = i;
      std::strncpy(reply.uuid, id.c_str(), sizeof(reply.uuid) - 1);
      d.name(reply.name, sizeof(reply.name) - 1, dev);
      std::size_t total = 0;
      d.total(&total, dev);
      reply.memory_bytes = total;
      CUcontext ctx = nullptr;
      reply.status = d.retain(&ctx, dev);
      if (reply.status == CUDA_SUCCESS) reply.status = d.set_current(ctx);
      break;
    }
  }
  if (write(reply_fd, &reply, sizeof(reply)) != sizeof(reply)) _exit(1);
  char go = 0;
  while (read(go_fd, &go, 1) < 0 && errno == EINTR) {
  }
  if (go == 's') {
    char created = 0;
    for (int i = 0; d.stream_create != nullptr && i < kProbeStreams; ++i) {
      CUstream stream = nullptr;
      if (d.stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) break;
      created = 1;
    }
    if (write(reply_fd, &created, 1) != 1) _exit(1);
    while (read(go_fd, &go, 1) < 0 && errno == EINTR) {
    }
  }
  _exit(0);
}

// Device memory NVML says process `pid` uses on `uuid`.
bool MeasureWithNvml(const std::string& nvml_library, const std::string& uuid, pid_t pid,
                     std::uint64_t* bytes) {
  void* nvml = dlopen(nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return false;
  auto init = Sym<decltype(&nvmlInit_v2)>(nvml, "nvmlInit_v2");
  auto by_uuid = Sym<decltype(&nvmlDeviceGetHandleByUUID)>(nvml, "nvmlDeviceGetHandleByUUID");
  auto procs = Sym<decltype(&nvmlDeviceGetComputeRunningProcesses_v3)>(
      nvml, "nvmlDeviceGetComputeRunningProcesses_v3");
  auto shutdown = Sym<decltype(&nvmlShutdown)>(nvml, "nvmlShutdown");
  bool found = false;
  nvmlDevice_t device{};
  if (init && by_uuid && procs && init() == NVML_SUCCESS) {
    if (by_uuid(uuid.c_str(), &device) == NVML_SUCCESS) {
      nvmlProcessInfo_t infos[256];
      unsigned int count = 256;
      if (procs(device, &count, infos) == NVML_SUCCESS) {
        for (unsigned int i = 0; i < count; ++i) {
          // NVML_VALUE_NOT_AVAILABLE (all ones) when it cannot say: treat as not measured.
          if (static_cast<pid_t>(infos[i].pid) == pid &&
              infos[i].usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
            *bytes = infos[i].usedGpuMemory;
            found = true;
          }
        }
      }
    }
    if (shutdown) shutdown();
  }
  return found;
}

}  // namespace

std::string CudaLibraryIn(const std::string& dir) {
  const std::string path = dir + "/libcuda.so.1";
  return !dir.empty() && access(path.c_str(), R_OK) == 0 ? path : "libcuda.so.1";
}

std::map<std::string, std::uint32_t> ProbeSmCounts(const std::string& cuda_library) {
  std::map<std::string, std::uint32_t> out;
  int fds[2];
  if (pipe(fds) != 0) return out;
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return out;
  }
  if (child == 0) {
    close(fds[0]);
    std::string lines;
    const CudaDriver d = LoadCudaDriver(cuda_library);
    int n = 0;
    if (d.init != nullptr && d.count != nullptr && d.get != nullptr && d.uuid != nullptr &&
        d.attribute != nullptr && d.init(0) == CUDA_SUCCESS && d.count(&n) == CUDA_SUCCESS) {
      for (int i = 0; i < n; ++i) {
        CUdevice device = 0;
        CUuuid id{};
        int sms = 0;
        if (d.get(&device, i) != CUDA_SUCCESS || d.uuid(&id, device) != CUDA_SUCCESS ||
            d.attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) != CUDA_SUCCESS ||
            sms <= 0) {
          continue;
        }
        lines += FormatGpuUuid(reinterpret_cast<const unsigned char*>(id.bytes)) + " " +
                 std::to_string(sms) + "\n";
      }
    }
    std::size_t done = 0;
    while (done < lines.size()) {
      const ssize_t put = write(fds[1], lines.data() + done, lines.size() - done);
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) _exit(1);
      done += static_cast<std::size_t>(put);
    }
    _exit(0);
  }
  close(fds[1]);
  // A wedged GPU can hang cuInit: the child gets kSmProbeTimeoutMs, then is killed (no counts).
  std::string text;
  char buffer[4096];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kSmProbeTimeoutMs);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready == 0) {
      timed_out = true;
      break;
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const ssize_t got = read(fds[0], buffer, sizeof(buffer));
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  if (timed_out) {
    kill(child, SIGKILL);
    text.clear();
  }
  (void)Wait(child);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    const std::size_t space = line.find(' ');
    std::uint32_t sms = 0;
    if (space == std::string_view::npos ||
        std::from_chars(line.data() + space + 1, line.data() + line.size(), sms).ec !=
            std::errc() ||
        sms == 0) {
      continue;
    }
    out[std::string(line.substr(0, space))] = sms;
  }
  return out;
}

StatusOr<LocalGpu> ProbeLocalGpu(const std::string& selector, bool measure_context,
                                 const DriverLibraries& libraries) {
  int reply_pipe[2], go_pipe[2];
  if (pipe(reply_pipe) != 0 || pipe(go_pipe) != 0) return UnavailableError("pipe failed");
  // One of the two fork()s without an exec (ProbeSmCounts is the other; not tessera::Spawn): the
  // probe is a function of this binary,
  // and CUDA must be initialised in a child that then exits, never in this process.
  const pid_t child = fork();
  if (child < 0) return UnavailableError("fork failed");
  if (child == 0) {
    close(reply_pipe[0]);
    close(go_pipe[1]);
    ProbeChild(selector, libraries.cuda, reply_pipe[1], go_pipe[0]);
  }
  close(reply_pipe[1]);
  close(go_pipe[0]);
  ProbeReply reply{};
  const ssize_t n = read(reply_pipe[0], &reply, sizeof(reply));
  LocalGpu gpu;
  if (n == sizeof(reply) && reply.status == CUDA_SUCCESS && measure_context) {
    gpu.context_measured = MeasureWithNvml(libraries.nvml, reply.uuid, child, &gpu.context_bytes);
    char created = 0;
    std::uint64_t with_streams = 0;
    if (gpu.context_measured && write(go_pipe[1], "s", 1) == 1 &&
        read(reply_pipe[0], &created, 1) == 1 && created == 1 &&
        MeasureWithNvml(libraries.nvml, reply.uuid, child, &with_streams) &&
        with_streams > gpu.context_bytes) {
      gpu.stream_bytes = (with_streams - gpu.context_bytes + kProbeStreams - 1) / kProbeStreams;
    }
  }
  close(go_pipe[1]);  // let the probe exit
  close(reply_pipe[0]);
  (void)Wait(child);
  if (n != sizeof(reply)) return UnavailableError("the GPU probe died (is libcuda.so.1 loadable?)");
  if (reply.status == -1) {
    return InvalidArgumentError("--gpu: \"" + QuoteForMessage(selector) +
                                "\" matches none of the " + std::to_string(reply.count) +
                                " CUDA devices; accepted: a CUDA index (0.." +
                                std::to_string(reply.count - 1) + ") or a GPU UUID (GPU-…)");
  }
  if (reply.status != CUDA_SUCCESS) {
    return UnavailableError("CUDA driver error " + std::to_string(reply.status) +
                            " while probing the GPU (is there a GPU and a driver?)");
  }
  gpu.index = reply.index;
  gpu.uuid = reply.uuid;
  gpu.name = reply.name;
  gpu.memory_bytes = reply.memory_bytes;
  return gpu;
}

}  // namespace tessera::agent
