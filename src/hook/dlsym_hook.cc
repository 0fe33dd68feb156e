// dlsym override: PyTorch, CuPy, the CUDA runtime and nvidia-smi resolve the driver with
// dlopen + dlsym, which bypasses the symbols this library exports. Every lookup of a hooked
// cu*/nvml* name that the real dlsym resolves is answered with our trampoline instead.
//
// Every other lookup must behave exactly as glibc's: dlsym(RTLD_NEXT, ...) is resolved
// relative to the *caller* (glibc reads its return address). So on x86-64 the exported dlsym
// is a small assembly stub that asks TesseraDlsymHooked() first and otherwise *jumps* (not
// calls) to the real dlsym, which then sees the original caller. Elsewhere a C++ fallback
// forwards the call (correct for every handle but RTLD_NEXT from a caller other than us).
#include <dlfcn.h>
#include <string_view>

#include "hook/hook_table.h"
#include "hook/nvml_table.h"
#include "hook/state.h"

namespace tessera::hook {
namespace {

void* HookedTrampoline(const char* symbol) {
  if (symbol == nullptr) return nullptr;
  if (symbol[0] == 'c' && symbol[1] == 'u') {
    const CudaHook hook = FindCudaHookByName(symbol);
    if (hook != CudaHook::kCount) return kCudaTrampolines[static_cast<std::size_t>(hook)];
  } else if (symbol[0] == 'n' && symbol[1] == 'v' && symbol[2] == 'm' && symbol[3] == 'l') {
    const NvmlHook hook = FindNvmlHookByName(symbol);
    if (hook != NvmlHook::kCount) return kNvmlTrampolines[static_cast<std::size_t>(hook)];
  }
  return nullptr;
}

}  // namespace
}  // namespace tessera::hook

extern "C" {

// Read by the assembly stub; set by TesseraDlsymHooked before the stub first jumps through it.
__attribute__((visibility("hidden"))) void* tessera_real_dlsym = nullptr;

// Our trampoline if `symbol` is hooked and the real dlsym finds it in `handle`; else null.
__attribute__((visibility("hidden"))) void* TesseraDlsymHooked(void* handle, const char* symbol) {
  using namespace tessera::hook;
  const DlsymFn real = RealDlsym();
  __atomic_store_n(&tessera_real_dlsym, reinterpret_cast<void*>(real), __ATOMIC_RELEASE);
  void* trampoline = HookedTrampoline(symbol);
  if (trampoline == nullptr) {
    // A capture entry point we do not intercept, and the driver has it: captures cannot be
    // counted from now on (launch_hooks.cc).
    if (symbol != nullptr && std::string_view(symbol).starts_with("cuStreamBeginCapture") &&
        real(handle, symbol) != nullptr) {
      CaptureEntryPointHandedOut(symbol, false);
    }
    return nullptr;
  }
  return real(handle, symbol) != nullptr ? trampoline : nullptr;
}

}  // extern "C"

#if defined(__x86_64__)
// dlsym(handle, symbol):
//   save the arguments, ask TesseraDlsymHooked; if it answered, return that; otherwise restore
//   the arguments and the stack exactly as on entry and jump to the real dlsym.
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call TesseraDlsymHooked
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jnz 1f
    jmp *tessera_real_dlsym(%rip)
1:
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
extern "C" TESSERA_EXPORT void* dlsym(void* handle, const char* symbol) {
  if (void* trampoline = TesseraDlsymHooked(handle, symbol)) return trampoline;
  return tessera::hook::RealDlsym()(handle, symbol);
}
#endif
