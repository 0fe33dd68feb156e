// A CUDA client for the preload library's integration tests. It reaches the driver one of
// three ways (argv[1]):
//   direct   linked against libcuda.so.1 (built as hook_client_direct)
//   dlopen   dlopen("libcuda.so.1") + dlsym, as PyTorch, CuPy and nvidia-smi do
//   runtime  the CUDA runtime's sequence: dlsym of cuGetProcAddress_v2, the self-lookups of
//            "cuGetProcAddress" at 11030 and 12000, then every entry point through the
//            returned pointer, per-thread (_ptsz/_ptds) variants included
// then runs a scenario (argv[2...]) and prints key=value lines for the test to check.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>

#include "tessera/shm_layout.h"

namespace {

struct Api {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuCtxCreate_v2) ctx_create = nullptr;
  decltype(&::cuMemAlloc_v2) alloc = nullptr;
  decltype(&::cuMemAllocPitch_v2) alloc_pitch = nullptr;
  decltype(&::cuMemAllocManaged) alloc_managed = nullptr;
  decltype(&::cuMemFree_v2) free = nullptr;
  decltype(&::cuMemGetInfo_v2) get_info = nullptr;
  decltype(&::cuDeviceTotalMem_v2) total_mem = nullptr;
  decltype(&::cuLaunchKernel) launch = nullptr;
  decltype(&::cuLaunchKernel_ptsz) launch_ptsz = nullptr;
  decltype(&::cuMemcpyHtoD_v2_ptds) memcpy_ptds = nullptr;
  // Every entry point of the list, for the snippet scenario (name -> pointer).
  std::vector<std::pair<std::string, void*>> all;
};

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

template <typename Fn>
void Set(Fn* out, void* p) {
  *out = reinterpret_cast<Fn>(p);
}

#define TESSERA_CLIENT_FIELDS(X)                                           \
  X(init, cuInit, "cuInit", 2000, 0)                                       \
  X(device_get, cuDeviceGet, "cuDeviceGet", 2000, 0)                       \
  X(retain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0) \
  X(set_current, cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0)              \
  X(ctx_create, cuCtxCreate_v2, "cuCtxCreate", 3020, 0)                    \
  X(alloc, cuMemAlloc_v2, "cuMemAlloc", 12000, 0)                          \
  X(alloc_pitch, cuMemAllocPitch_v2, "cuMemAllocPitch", 12000, 0)          \
  X(alloc_managed, cuMemAllocManaged, "cuMemAllocManaged", 12000, 0)       \
  X(free, cuMemFree_v2, "cuMemFree", 12000, 0)                             \
  X(get_info, cuMemGetInfo_v2, "cuMemGetInfo", 12000, 0)                   \
  X(total_mem, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 12000, 0)          \
  X(launch, cuLaunchKernel, "cuLaunchKernel", 12000, 0)                    \
  X(launch_ptsz, cuLaunchKernel_ptsz, "cuLaunchKernel", 12000, 1)          \
  X(memcpy_ptds, cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 12000, 1)

bool Load(const char* how, Api* api) {
#ifdef TESSERA_CLIENT_DIRECT
  if (std::strcmp(how, "direct") == 0) {
#define TESSERA_DIRECT(field, sym, base, version, per_thread) \
  Set(&api->field, reinterpret_cast<void*>(&::sym));
    TESSERA_CLIENT_FIELDS(TESSERA_DIRECT)
#undef TESSERA_DIRECT
    return true;
  }
#endif
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("error=dlopen %s\n", dlerror());
    return false;
  }
  if (std::strcmp(how, "dlopen") == 0) {
#define TESSERA_DLSYM(field, sym, base, version, per_thread) Set(&api->field, dlsym(handle, #sym));
    TESSERA_CLIENT_FIELDS(TESSERA_DLSYM)
#undef TESSERA_DLSYM
    return true;
  }
  if (std::strcmp(how, "runtime") == 0) {
    auto first = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
    if (first == nullptr) return false;
    // The runtime asks the driver for cuGetProcAddress itself, at both versions seen on H200.
    void* self_11030 = nullptr;
    void* self_12000 = nullptr;
    CUdriverProcAddressQueryResult status{};
    first("cuGetProcAddress", &self_11030, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    first("cuGetProcAddress", &self_12000, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    void* ours_v1 = dlsym(RTLD_DEFAULT, "cuGetProcAddress");
    void* ours_v2 = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    std::printf("self_lookup_11030_hooked=%d\n",
                self_11030 != nullptr && (self_11030 == ours_v1 || self_11030 == ours_v2));
    std::printf("self_lookup_12000_hooked=%d\n", self_12000 == ours_v2);
    auto gpa = reinterpret_cast<GetProcAddress>(self_12000);
    if (gpa == nullptr) return false;
#define TESSERA_GPA(field, sym, base, version, per_thread)                                        \
  {                                                                                               \
    void* p = nullptr;                                                                            \
    gpa(base, &p, version,                                                                        \
        (per_thread) ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM                              \
                     : CU_GET_PROC_ADDRESS_DEFAULT,                                               \
        &status);                                                                                 \
    Set(&api->field, p);                                                                          \
    std::printf("resolved %s hooked=%d\n", #sym, p != nullptr && p == dlsym(RTLD_DEFAULT, #sym)); \
  }
    TESSERA_CLIENT_FIELDS(TESSERA_GPA)
#undef TESSERA_GPA
    return true;
  }
  std::printf("error=unknown mode %s\n", how);
  return false;
}

CUresult Context(const Api& api, int dev) {
  CUresult r = api.init(0);
  if (r != CUDA_SUCCESS) return r;
  CUdevice d = 0;
  if ((r = api.device_get(&d, dev)) != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  if ((r = api.retain(&ctx, d)) != CUDA_SUCCESS) return r;
  return api.set_current(ctx);
}

void PrintInfo(const Api& api) {
  size_t free_bytes = 0, total = 0;
  const CUresult r = api.get_info(&free_bytes, &total);
  std::printf("info_result=%d free=%zu total=%zu\n", r, free_bytes, total);
  size_t device_total = 0;
  api.total_mem(&device_total, 0);
  std::printf("device_total=%zu\n", device_total);
}

volatile std::sig_atomic_t g_stop = 0;  // SIGTERM while holding (CLIENT_HOLD_SECONDS)

// Allocates `chunk` bytes with `which` until the driver (or tessera) refuses.
std::uint64_t AllocUntilRefused(const Api& api, const char* which, std::uint64_t chunk,
                                CUresult* last) {
  std::uint64_t total = 0;
  for (int i = 0; i < 1000000; ++i) {
    CUdeviceptr p = 0;
    CUresult r;
    if (std::strcmp(which, "pitch") == 0) {
      size_t pitch = 0;
      r = api.alloc_pitch(&p, &pitch, chunk / 64, 64, 4);
      if (r == CUDA_SUCCESS) total += static_cast<std::uint64_t>(pitch) * 64;
    } else if (std::strcmp(which, "managed") == 0) {
      r = api.alloc_managed(&p, chunk, CU_MEM_ATTACH_GLOBAL);
      if (r == CUDA_SUCCESS) total += chunk;
    } else {
      r = api.alloc(&p, chunk);
      if (r == CUDA_SUCCESS) total += chunk;
    }
    if (r != CUDA_SUCCESS) {
      *last = r;
      return total;
    }
  }
  *last = CUDA_SUCCESS;
  return total;
}

int Run(const Api& api, int argc, char** argv) {
  const std::string scenario = argc > 0 ? argv[0] : "";
  const int dev = std::getenv("CLIENT_DEVICE") ? std::atoi(std::getenv("CLIENT_DEVICE")) : 0;
  // fork BYTES: the child (forked before the parent used CUDA: a driver cannot be used in a
  // child of a process that initialised it) allocates in its own slot and dies holding it
  if (scenario == "fork") {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      CUresult cr = Context(api, dev);
      CUdeviceptr q = 0;
      if (cr == CUDA_SUCCESS) cr = api.alloc(&q, std::strtoull(argv[1], nullptr, 10));
      std::printf("child_alloc=%d\n", cr);
      std::fflush(stdout);
      _exit(0);
    }
    waitpid(child, nullptr, 0);
    CUdeviceptr q = 0;
    CUresult cr = Context(api, dev);
    if (cr == CUDA_SUCCESS) cr = api.alloc(&q, std::strtoull(argv[1], nullptr, 10));
    std::printf("parent_alloc_after_child=%d\n", cr);
    return 0;
  }
  CUresult r = Context(api, dev);
  std::printf("context_result=%d\n", r);
  if (r != CUDA_SUCCESS) return 0;
  if (scenario == "alloc") {  // alloc WHICH CHUNK: fill up, report, free all, report again
    const char* which = argc > 1 ? argv[1] : "plain";
    const std::uint64_t chunk = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (4u << 20);
    CUresult last = CUDA_SUCCESS;
    const std::uint64_t total = AllocUntilRefused(api, which, chunk, &last);
    std::printf("allocated=%llu last_result=%d\n", static_cast<unsigned long long>(total), last);
    PrintInfo(api);
    // CLIENT_HOLD_SECONDS: then keeps what it got that long, or until SIGTERM, and exits as a
    // program does (`tessera demo --real-node`: every pod of a story holds its memory until all
    // are judged, as the story's services would; the fake driver's shared usage is given back
    // at a normal exit, not at a kill, and as a container's PID 1 it gets SIGTERM only when it
    // handles it).
    if (const char* hold = std::getenv("CLIENT_HOLD_SECONDS")) {
      std::printf("holding=%s\n", hold);
      std::fflush(stdout);
      std::signal(SIGTERM, [](int) { g_stop = 1; });
      for (unsigned long tenths = std::strtoul(hold, nullptr, 10) * 10; tenths > 0 && !g_stop;
           --tenths) {
        usleep(100'000);
      }
    }
    std::fflush(stdout);
    return 0;
  }
  if (scenario == "free") {  // allocation, free, allocation again: the quota comes back
    CUdeviceptr a = 0, b = 0;
    const std::uint64_t n = std::strtoull(argv[1], nullptr, 10);
    std::printf("first=%d\n", api.alloc(&a, n));
    std::printf("second_before_free=%d\n", api.alloc(&b, n));
    std::printf("free_result=%d\n", api.free(a));
    std::printf("second_after_free=%d\n", api.alloc(&b, n));
    std::printf("free_unknown=%d\n", api.free(0xdead0000));
    PrintInfo(api);
    return 0;
  }
  if (scenario == "hold") {  // hold BYTES: allocate, say so, wait to be killed
    CUdeviceptr p = 0;
    std::printf("hold_result=%d\n", api.alloc(&p, std::strtoull(argv[1], nullptr, 10)));
    std::fflush(stdout);
    pause();
    return 0;
  }
  if (scenario == "tamper") {  // tamper CHUNK: fill the cap, then do what a hostile tenant can:
                               // zero the region's counters (it is writable) and allocate past
                               // the cap; hold it until killed (the node's drift check must see it)
    const std::uint64_t chunk = std::strtoull(argv[1], nullptr, 10);
    CUdeviceptr p = 0;
    int held = 0;
    while (api.alloc(&p, chunk) == CUDA_SUCCESS) ++held;
    const char* path = std::getenv("TESSERA_REGION_FILE");
    const int fd = path != nullptr ? open(path, O_RDWR) : -1;
    void* mem = fd >= 0 ? mmap(nullptr, sizeof(tessera::shm::Region), PROT_READ | PROT_WRITE,
                               MAP_SHARED, fd, 0)
                        : MAP_FAILED;
    if (mem == MAP_FAILED) {
      std::printf("error=cannot map the region\n");
      return 1;
    }
    auto* region = static_cast<tessera::shm::Region*>(mem);
    int extra = 0;
    for (int round = 0; round < held; ++round) {
      for (auto& d : region->devices) d.used_bytes.store(0);
      for (auto& slot : region->slots) {
        for (auto& u : slot.used_bytes) u.store(0);
      }
      if (api.alloc(&p, chunk) == CUDA_SUCCESS) ++extra;
    }
    std::printf("tamper_within=%d tamper_beyond=%d HOLDING\n", held, extra);
    std::fflush(stdout);
    pause();
    return 0;
  }
  if (scenario == "nvml") {  // nvml BYTES: allocate, then look through NVML (as nvidia-smi does)
    CUdeviceptr p = 0;
    std::printf("alloc=%d\n", api.alloc(&p, std::strtoull(argv[1], nullptr, 10)));
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nvml == nullptr) return 1;
    auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(
        dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
    auto info = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(
        dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
    auto info_v2 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
        dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
    nvmlDevice_t device{};
    nvmlMemory_t m{};
    nvmlMemory_v2_t m2{};
    m2.version = nvmlMemory_v2;
    const int index = std::getenv("NVML_INDEX") ? std::atoi(std::getenv("NVML_INDEX")) : 0;
    if (init() != NVML_SUCCESS ||
        by_index(static_cast<unsigned int>(index), &device) != NVML_SUCCESS)
      return 1;
    const nvmlReturn_t r1 = info(device, &m);
    const nvmlReturn_t r2 = info_v2(device, &m2);
    std::printf("nvml_result=%d nvml_total=%llu nvml_used=%llu nvml_free=%llu\n", r1, m.total,
                m.used, m.free);
    std::printf("nvml2_result=%d nvml2_total=%llu nvml2_used=%llu\n", r2, m2.total, m2.used);
    auto procs =
        reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*)>(
            dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
    nvmlProcessInfo_t infos[16];
    unsigned int n = 16;
    const nvmlReturn_t r3 = procs(device, &n, infos);
    bool only_me = true;
    for (unsigned int i = 0; i < n; ++i)
      only_me = only_me && infos[i].pid == static_cast<unsigned int>(getpid());
    std::printf("procs_result=%d procs=%u procs_only_me=%d\n", r3, n, only_me);
    return 0;
  }
  if (scenario == "vmm") {  // vmm CHUNK: cuMemCreate until refused, map one, release all
    auto create = reinterpret_cast<decltype(&cuMemCreate)>(dlsym(RTLD_DEFAULT, "cuMemCreate"));
    auto release = reinterpret_cast<decltype(&cuMemRelease)>(dlsym(RTLD_DEFAULT, "cuMemRelease"));
    auto reserve = reinterpret_cast<decltype(&cuMemAddressReserve)>(
        dlsym(RTLD_DEFAULT, "cuMemAddressReserve"));
    auto map = reinterpret_cast<decltype(&cuMemMap)>(dlsym(RTLD_DEFAULT, "cuMemMap"));
    const std::uint64_t chunk = std::strtoull(argv[1], nullptr, 10);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    std::vector<CUmemGenericAllocationHandle> handles;
    CUresult r = CUDA_SUCCESS;
    for (;;) {
      CUmemGenericAllocationHandle h = 0;
      if ((r = create(&h, chunk, &prop, 0)) != CUDA_SUCCESS) break;
      handles.push_back(h);
    }
    std::printf("vmm_created=%zu vmm_last=%d\n", handles.size(), r);
    CUdeviceptr va = 0;
    if (!handles.empty() && reserve(&va, chunk, 0, 0, 0) == CUDA_SUCCESS) {
      std::printf("vmm_map=%d\n", map(va, chunk, 0, handles[0], 0));
    }
    size_t free_before = 0, total = 0;
    api.get_info(&free_before, &total);
    for (auto h : handles) release(h);
    size_t free_after = 0;
    api.get_info(&free_after, &total);
    std::printf("vmm_free_before=%zu vmm_free_after=%zu\n", free_before, free_after);
    CUmemAllocationProp host{};
    host.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemGenericAllocationHandle hh = 0;
    std::printf("vmm_host=%d\n", create(&hh, chunk * 1000, &host, 0));
    return 0;
  }
  if (scenario == "pool") {  // pool CHUNK: cuMemAllocAsync until refused, free them all, then
                             // a plain allocation must get the pool's freed reserve back
    auto alloc_async =
        reinterpret_cast<decltype(&cuMemAllocAsync)>(dlsym(RTLD_DEFAULT, "cuMemAllocAsync"));
    auto free_async =
        reinterpret_cast<decltype(&cuMemFreeAsync)>(dlsym(RTLD_DEFAULT, "cuMemFreeAsync"));
    auto create =
        reinterpret_cast<decltype(&cuMemPoolCreate)>(dlsym(RTLD_DEFAULT, "cuMemPoolCreate"));
    auto from_pool = reinterpret_cast<decltype(&cuMemAllocFromPoolAsync)>(
        dlsym(RTLD_DEFAULT, "cuMemAllocFromPoolAsync"));
    auto destroy =
        reinterpret_cast<decltype(&cuMemPoolDestroy)>(dlsym(RTLD_DEFAULT, "cuMemPoolDestroy"));
    const std::uint64_t chunk = std::strtoull(argv[1], nullptr, 10);
    std::vector<CUdeviceptr> ptrs;
    CUresult r = CUDA_SUCCESS;
    for (;;) {
      CUdeviceptr p = 0;
      if ((r = alloc_async(&p, chunk, nullptr)) != CUDA_SUCCESS) break;
      ptrs.push_back(p);
    }
    std::printf("pool_allocs=%zu pool_last=%d\n", ptrs.size(), r);
    for (auto p : ptrs) free_async(p, nullptr);
    size_t free_bytes = 0, total = 0;
    api.get_info(&free_bytes, &total);
    std::printf("pool_free_after_frees=%zu\n", free_bytes);  // still reserved by the pool
    CUdeviceptr plain = 0;
    std::printf("plain_after_free=%d\n", api.alloc(&plain, chunk * 2));
    api.free(plain);
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool = nullptr;
    std::printf("pool_create=%d\n", create(&pool, &props));
    CUdeviceptr q = 0;
    std::printf("from_pool=%d\n", from_pool(&q, chunk, pool, nullptr));
    std::printf("pool_destroy=%d\n", destroy(pool));
    api.get_info(&free_bytes, &total);
    std::printf("pool_free_at_end=%zu\n", free_bytes);
    // On a stream being captured, an allocation is a graph memory node: not charged here (the
    // graph is charged when instantiated), and nothing else may touch the driver meanwhile.
    CUdeviceptr node = 0;
    std::printf("captured_alloc=%d\n",
                alloc_async(&node, chunk * 100,
                            reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(0xca97))));
    return 0;
  }
  if (scenario == "graph") {  // graph MIB: graphs with one memory node of MIB each
    auto create = reinterpret_cast<decltype(&cuGraphCreate)>(dlsym(RTLD_DEFAULT, "cuGraphCreate"));
    auto add = reinterpret_cast<decltype(&cuGraphAddMemAllocNode)>(
        dlsym(RTLD_DEFAULT, "cuGraphAddMemAllocNode"));
    auto instantiate = reinterpret_cast<decltype(&cuGraphInstantiateWithFlags)>(
        dlsym(RTLD_DEFAULT, "cuGraphInstantiateWithFlags"));
    auto destroy_exec =
        reinterpret_cast<decltype(&cuGraphExecDestroy)>(dlsym(RTLD_DEFAULT, "cuGraphExecDestroy"));
    auto import = reinterpret_cast<decltype(&cuImportExternalMemory)>(
        dlsym(RTLD_DEFAULT, "cuImportExternalMemory"));
    auto destroy_ext = reinterpret_cast<decltype(&cuDestroyExternalMemory)>(
        dlsym(RTLD_DEFAULT, "cuDestroyExternalMemory"));
    const std::uint64_t bytes = std::strtoull(argv[1], nullptr, 10) << 20;
    auto make = [&](CUgraphExec* exec) {
      CUgraph g = nullptr;
      create(&g, 0);
      CUDA_MEM_ALLOC_NODE_PARAMS params{};
      params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      params.poolProps.location.id = dev;
      params.bytesize = bytes;
      CUgraphNode node = nullptr;
      add(&node, g, nullptr, 0, &params);
      return instantiate(exec, g, 0);
    };
    CUgraphExec first = nullptr, second = nullptr, third = nullptr;
    std::printf("graph_first=%d\n", make(&first));
    std::printf("graph_second=%d\n", make(&second));
    std::printf("graph_destroy=%d\n", destroy_exec(first));
    std::printf("graph_third=%d\n", make(&third));
    destroy_exec(third);
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc{};
    desc.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
    desc.size = bytes;
    CUexternalMemory ext = nullptr, ext2 = nullptr;
    std::printf("ext_first=%d\n", import(&ext, &desc));
    std::printf("ext_second=%d\n", import(&ext2, &desc));
    std::printf("ext_destroy=%d\n", destroy_ext(ext));
    std::printf("ext_third=%d\n", import(&ext2, &desc));
    return 0;
  }
  if (scenario == "array") {  // array: 2D arrays of 1024x1024 float4 (16 MiB) until refused
    auto create =
        reinterpret_cast<decltype(&cuArrayCreate_v2)>(dlsym(RTLD_DEFAULT, "cuArrayCreate_v2"));
    auto destroy =
        reinterpret_cast<decltype(&cuArrayDestroy)>(dlsym(RTLD_DEFAULT, "cuArrayDestroy"));
    CUDA_ARRAY_DESCRIPTOR desc{};
    desc.Width = 1024;
    desc.Height = 1024;
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 4;
    std::vector<CUarray> arrays;
    CUresult r = CUDA_SUCCESS;
    for (;;) {
      CUarray a = nullptr;
      if ((r = create(&a, &desc)) != CUDA_SUCCESS) break;
      arrays.push_back(a);
    }
    std::printf("arrays=%zu array_last=%d\n", arrays.size(), r);
    for (auto a : arrays) destroy(a);
    CUarray again = nullptr;
    std::printf("array_after_destroy=%d\n", create(&again, &desc));
    return 0;
  }
  if (scenario == "spin" || scenario == "spin13" || scenario == "capture") {
    // spin SECONDS KERNEL_US: launch fake "tessera_spin" kernels for a while (the fake driver
    // sleeps 1/20 of the kernel's nanosecond parameter: a kernel of KERNEL_US), a synchronize
    // every 8. spin13: the same, synchronizing as CUDA 13's runtime does (cuCtxSynchronize asked
    // of cuGetProcAddress at 13000: the context's _v2, given none). capture SECONDS KERNEL_US:
    // first 64 of them into a stream capture (graph nodes), then the same on that stream,
    // counting the driver's capture queries meanwhile. A third argument `exit`: the process
    // exits with its last 64 kernels in flight.
    using GetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
    void* driver = dlopen("libcuda.so.1", RTLD_NOW);
    const auto get_function = reinterpret_cast<GetFunction>(dlsym(driver, "cuModuleGetFunction"));
    static CUresult (*sync_v1)(void) = nullptr;
    static CUresult (*sync_v2)(CUcontext) = nullptr;
    static long syncs = 0;
    if (scenario == "spin13") {
      const auto lookup =
          reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(driver, "cuGetProcAddress_v2"));
      void* pfn = nullptr;
      if (lookup != nullptr && lookup("cuCtxSynchronize", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT,
                                      nullptr) == CUDA_SUCCESS) {
        sync_v2 = reinterpret_cast<CUresult (*)(CUcontext)>(pfn);
      }
    } else {
      sync_v1 = reinterpret_cast<CUresult (*)(void)>(dlsym(driver, "cuCtxSynchronize"));
    }
    const auto sync = +[]() -> CUresult {
      ++syncs;
      return sync_v2 != nullptr   ? sync_v2(nullptr)
             : sync_v1 != nullptr ? sync_v1()
                                  : CUDA_ERROR_NOT_FOUND;
    };
    CUfunction spin = nullptr;
    if (get_function == nullptr || (sync_v1 == nullptr && sync_v2 == nullptr) ||
        get_function(&spin, nullptr, "tessera_spin") != CUDA_SUCCESS) {
      std::printf("error=no tessera_spin\n");
      return 1;
    }
    const double seconds = std::atof(argv[1]);
    std::uint64_t param = std::strtoull(argv[2], nullptr, 10) * 1000 * 20;
    void* params[] = {&param};
    CUstream stream = nullptr;
    using Calls = unsigned long long (*)(const char*);
    const auto calls = reinterpret_cast<Calls>(dlsym(driver, "tessera_fake_calls"));
    if (scenario == "capture") {
      const auto create =
          reinterpret_cast<decltype(&cuStreamCreate)>(dlsym(driver, "cuStreamCreate"));
      const auto begin = reinterpret_cast<decltype(&cuStreamBeginCapture_v2)>(
          dlsym(driver, "cuStreamBeginCapture_v2"));
      const auto end =
          reinterpret_cast<decltype(&cuStreamEndCapture)>(dlsym(driver, "cuStreamEndCapture"));
      if (create == nullptr || begin == nullptr || end == nullptr || calls == nullptr ||
          create(&stream, 0) != CUDA_SUCCESS) {
        std::printf("error=no capture\n");
        return 1;
      }
      std::printf("begin_capture=%d\n", begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
      int captured = 0;
      for (int i = 0; i < 64; ++i) {
        if (api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS)
          ++captured;
      }
      CUgraph graph = nullptr;
      std::printf("captured_launches=%d\nend_capture=%d\n", captured, end(stream, &graph));
    }
    const unsigned long long asked = calls != nullptr ? calls("cuStreamIsCapturing") : 0;
    const auto start = std::chrono::steady_clock::now();
    long kernels = 0, sync_errors = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           seconds) {
      if (api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS) break;
      if (++kernels % 8 == 0 && sync() != CUDA_SUCCESS) ++sync_errors;
    }
    if (argc > 3 && std::strcmp(argv[3], "exit") == 0) {
      // ... and then 64 more, exiting with them in flight (nothing waits for them).
      for (int i = 0; i < 64; ++i) {
        if (api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS)
          ++kernels;
      }
    } else if (sync() != CUDA_SUCCESS) {
      ++sync_errors;
    }
    std::printf("kernels=%ld\nsyncs=%ld\nsync_errors=%ld\n", kernels, syncs, sync_errors);
    if (calls != nullptr)
      std::printf("capture_queries=%llu\n", calls("cuStreamIsCapturing") - asked);
    return 0;
  }
  if (scenario == "streams") {  // streams: create (both entry points) until refused or 256,
                                // then destroy them all
    auto create =
        reinterpret_cast<decltype(&cuStreamCreate)>(dlsym(RTLD_DEFAULT, "cuStreamCreate"));
    auto create_prio = reinterpret_cast<decltype(&cuStreamCreateWithPriority)>(
        dlsym(RTLD_DEFAULT, "cuStreamCreateWithPriority"));
    auto destroy =
        reinterpret_cast<decltype(&cuStreamDestroy_v2)>(dlsym(RTLD_DEFAULT, "cuStreamDestroy_v2"));
    std::vector<CUstream> streams;
    CUresult r = CUDA_SUCCESS;
    while (streams.size() < 256) {
      CUstream st = nullptr;
      r = streams.size() % 2 ? create_prio(&st, 0, -1) : create(&st, 0);
      if (r != CUDA_SUCCESS) break;
      streams.push_back(st);
    }
    size_t free_bytes = 0, total = 0;
    api.get_info(&free_bytes, &total);
    std::printf("streams=%zu streams_last=%d streams_free=%zu\n", streams.size(), r, free_bytes);
    for (auto st : streams) destroy(st);
    api.get_info(&free_bytes, &total);
    std::printf("streams_free_after_destroy=%zu\n", free_bytes);
    return 0;
  }
  if (scenario == "launch") {  // per-thread and legacy launches reach the driver
    std::printf("launch=%d\n", api.launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    std::printf("launch_ptsz=%d\n",
                api.launch_ptsz(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    std::printf("memcpy_ptds=%d\n", api.memcpy_ptds(0, nullptr, 0));
    return 0;
  }
  if (scenario == "fork-threads") {  // fork-threads N: fork while another thread allocates
    std::atomic<bool> stop{false};
    std::thread worker([&] {
      while (!stop.load()) {
        CUdeviceptr p = 0;
        if (api.alloc(&p, 1 << 16) == CUDA_SUCCESS) api.free(p);
      }
    });
    int hung = 0;
    const int n = std::atoi(argv[1]);
    for (int i = 0; i < n; ++i) {
      const pid_t child = fork();
      if (child == 0) _exit(0);  // the atfork child handler has run by now
      int status = 0;
      int waited_ms = 0;
      while (waitpid(child, &status, WNOHANG) == 0 && waited_ms < 10000) {
        usleep(1000);
        ++waited_ms;
      }
      if (waited_ms >= 10000) {
        ++hung;
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
      }
    }
    stop = true;
    worker.join();
    std::printf("children_hung=%d\n", hung);
    return 0;
  }
  std::printf("error=unknown scenario %s\n", scenario.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 2 &&
      std::strcmp(argv[1], "dlclose") == 0) {  // the app unloads libcuda and loads it again
    auto open_api = [](void** handle, Api* api) {
      *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (*handle == nullptr) return false;
#define TESSERA_DLSYM2(field, sym, base, version, per_thread) \
  Set(&api->field, dlsym(*handle, #sym));
      TESSERA_CLIENT_FIELDS(TESSERA_DLSYM2)
#undef TESSERA_DLSYM2
      return true;
    };
    void* handle = nullptr;
    Api first, second;
    if (!open_api(&handle, &first) || Context(first, 0) != CUDA_SUCCESS) return 1;
    CUdeviceptr p = 0;
    std::printf("before_dlclose=%d\n", first.alloc(&p, 16u << 20));
    std::printf("dlclose=%d\n", dlclose(handle));
    if (!open_api(&handle, &second)) return 1;
    CUdeviceptr q = 0;
    std::printf("after_reopen_over_cap=%d\n", second.alloc(&q, 64u << 20));
    std::printf("after_reopen_fits=%d\n", second.alloc(&q, 32u << 20));
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "no-driver") == 0) {  // our exports with no driver behind
    auto get_info =
        reinterpret_cast<decltype(&cuMemGetInfo_v2)>(dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2"));
    auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
    size_t f = 0, t = 0;
    CUdeviceptr p = 0;
    std::printf("get_info=%d alloc=%d\n", get_info ? get_info(&f, &t) : -1,
                alloc ? alloc(&p, 1) : -1);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "rtld-next") == 0) {  // rtld-next PLUGIN: no CUDA at all
    void* plugin = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    auto lookup =
        plugin ? reinterpret_cast<void* (*)(const char*)>(dlsym(plugin, "plugin_lookup_next"))
               : nullptr;
    if (lookup == nullptr) return 1;
    std::printf("getpid_found=%d strlen_found=%d\n",
                lookup("getpid") == reinterpret_cast<void*>(&getpid), lookup("strlen") != nullptr);
    std::printf("default_getpid=%d\n",
                dlsym(RTLD_DEFAULT, "getpid") == reinterpret_cast<void*>(&getpid));
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s direct|dlopen|runtime SCENARIO ARGS...\n", argv[0]);
    return 2;
  }
  Api api;
  if (!Load(argv[1], &api)) return 1;
  return Run(api, argc - 2, argv + 2);
}
