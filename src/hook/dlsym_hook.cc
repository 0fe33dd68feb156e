// dlsym override: PyTorch, CuPy, the CUDA runtime and nvidia-smi resolve the driver with
// dlopen + dlsym, which bypasses the symbols this library exports. Every lookup of a hooked
// name that the real dlsym resolves is answered with our trampoline instead.
#include <dlfcn.h>
#include <link.h>

#include "hook/hook_table.h"
#include "hook/nvml_table.h"
#include "hook/state.h"

namespace tessera::hook {
namespace {

// RTLD_NEXT means "after the object that called dlsym". Forwarding it from here would search
// after *this* library instead, so find the caller's object and search the objects after it.
void* NextAfter(void* caller, const char* symbol) {
  Dl_info info{};
  link_map* caller_map = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&caller_map), RTLD_DL_LINKMAP) == 0 ||
      caller_map == nullptr) {
    return RealDlsym()(RTLD_NEXT, symbol);
  }
  Dl_info self{};
  link_map* self_map = nullptr;
  dladdr1(reinterpret_cast<void*>(&NextAfter), &self, reinterpret_cast<void**>(&self_map),
          RTLD_DL_LINKMAP);
  if (caller_map == self_map) return RealDlsym()(RTLD_NEXT, symbol);
  for (link_map* m = caller_map->l_next; m != nullptr; m = m->l_next) {
    void* found = RealDlsym()(m, symbol);
    if (found == nullptr) continue;
    Dl_info where{};
    link_map* found_map = nullptr;
    if (dladdr1(found, &where, reinterpret_cast<void**>(&found_map), RTLD_DL_LINKMAP) != 0 &&
        found_map == caller_map) {
      continue;  // the caller's own definition, reached through a dependency
    }
    return found;
  }
  return nullptr;
}

}  // namespace
}  // namespace tessera::hook

extern "C" TESSERA_EXPORT void* dlsym(void* handle, const char* symbol) {
  using namespace tessera::hook;
  void* found = handle == RTLD_NEXT ? NextAfter(__builtin_return_address(0), symbol)
                                    : RealDlsym()(handle, symbol);
  if (found == nullptr) return found;
  if (symbol[0] == 'c' && symbol[1] == 'u') {
    const CudaHook hook = FindCudaHookByName(symbol);
    if (hook != CudaHook::kCount) return kCudaTrampolines[static_cast<std::size_t>(hook)];
  } else if (symbol[0] == 'n' && symbol[1] == 'v' && symbol[2] == 'm' && symbol[3] == 'l') {
    const NvmlHook hook = FindNvmlHookByName(symbol);
    if (hook != NvmlHook::kCount) return kNvmlTrampolines[static_cast<std::size_t>(hook)];
  }
  return found;
}
