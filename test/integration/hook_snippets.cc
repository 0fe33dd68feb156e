// One snippet per row of cuda_hooks.def, run under the preload library against the fake driver:
//  - dlsym(libcuda, symbol) must answer our trampoline;
//  - calling it (with zeroed arguments) must reach the fake driver exactly once;
//  - cuGetProcAddress(base, since, variant flags) must answer the trampoline of this very row
//    (the driver resolved the version and per-thread variant; we mapped the pointer).
#include <cstdio>
#include <dlfcn.h>
#include <string>

#include "hook/hook_table.h"
#include "hook/nvml_table.h"

namespace {

using tessera::hook::CudaHook;
using tessera::hook::kCudaHooks;

template <typename R, typename... A>
R CallWithZeros(void* fn) {
  return reinterpret_cast<R (*)(A...)>(fn)(A{}...);
}
template <typename R, typename... A>
R CallWithZerosOf(R (*)(A...), void* fn) {
  return CallWithZeros<R, A...>(fn);
}

using Calls = unsigned long long (*)(const char*);
using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

}  // namespace

int main() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("error=dlopen\n");
    return 1;
  }
  auto calls = reinterpret_cast<Calls>(dlsym(handle, "tessera_fake_calls"));
  auto gpa = reinterpret_cast<Gpa>(dlsym(handle, "cuGetProcAddress_v2"));
  if (calls == nullptr || gpa == nullptr) {
    std::printf("error=fake driver or preload missing\n");
    return 1;
  }
  int failures = 0;
  std::size_t index = 0;
#define TESSERA_CUDA_HOOK(sym, base, since, row_variant, row_policy, params, args) \
  {                                                                                \
    const auto& row = kCudaHooks[index++];                                         \
    void* through_dlsym = dlsym(handle, #sym);                                     \
    void* ours = dlsym(RTLD_DEFAULT, #sym);                                        \
    const unsigned long long before = calls(#sym);                                 \
    CallWithZerosOf(static_cast<decltype(&::sym)>(nullptr), through_dlsym);        \
    const unsigned long long reached = calls(#sym) - before;                       \
    void* resolved = nullptr;                                                      \
    CUdriverProcAddressQueryResult status{};                                       \
    gpa(base, &resolved, since,                                                    \
        row.variant == tessera::hook::Variant::kPerThreadStream                    \
            ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM                        \
            : CU_GET_PROC_ADDRESS_DEFAULT,                                         \
        &status);                                                                  \
    const bool ok = through_dlsym == ours && reached == 1 && resolved == ours;     \
    failures += ok ? 0 : 1;                                                        \
    std::printf("row %s dlsym_hooked=%d reached=%llu gpa_hooked=%d\n", #sym,       \
                through_dlsym == ours, reached, resolved == ours);                 \
  }
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
  // The NVML list: dlsym on a dlopen'ed libnvidia-ml.so.1 answers our trampoline, which
  // reaches the fake NVML exactly once.
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto nvml_calls =
      nvml ? reinterpret_cast<Calls>(dlsym(nvml, "tessera_fake_nvml_calls")) : nullptr;
  if (nvml_calls == nullptr) {
    std::printf("error=fake NVML missing\n");
    return 1;
  }
#define TESSERA_NVML_HOOK(sym, row_policy, params, args)                                        \
  {                                                                                             \
    void* through_dlsym = dlsym(nvml, #sym);                                                    \
    void* ours = dlsym(RTLD_DEFAULT, #sym);                                                     \
    const unsigned long long before = nvml_calls(#sym);                                         \
    CallWithZerosOf(static_cast<decltype(&::sym)>(nullptr), through_dlsym);                     \
    const unsigned long long reached = nvml_calls(#sym) - before;                               \
    const bool ok = through_dlsym == ours && reached == 1;                                      \
    failures += ok ? 0 : 1;                                                                     \
    ++index;                                                                                    \
    std::printf("row %s dlsym_hooked=%d reached=%llu\n", #sym, through_dlsym == ours, reached); \
  }
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
  std::printf("rows=%zu failures=%d\n", index, failures);
  return failures == 0 ? 0 : 1;
}
