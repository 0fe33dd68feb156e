// Symbol resolution: glibc's own dlsym, and the first intercepted call's resolution of the real
// driver functions (every row of cuda_hooks.def) from libcuda.so.1.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <dlfcn.h>
#include <sched.h>
#include <string>

#include "tessera/log.h"

#include "hook/hook_table.h"
#include "hook/process_state.h"

namespace tessera::hook {

std::atomic<bool> g_initialized{false};

namespace {
std::atomic<bool> g_init_claimed{false};  // a thread is publishing the real functions
thread_local bool t_initializing = false;
}  // namespace

void ForgetUnfinishedInitialization() {
  if (!g_initialized.load(std::memory_order_acquire)) g_init_claimed.store(false);
}

DlsymFn RealDlsym() {
  static const DlsymFn fn = [] {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

void InitializeSlow() {
  if (t_initializing) return;  // re-entered from the driver while resolving: use what we have
  auto& claimed = g_init_claimed;
  t_initializing = true;
  ConfigureOnce();
  State& s = S();
  // No lock is held across dlopen/dlsym (they take the loader lock; a library constructor
  // holding it may be the caller): every thread may resolve, one publishes.
  const std::uint64_t start = MonotonicNs();
  void* resolved[kCudaHookCount] = {};
  const DlsymFn real_dlsym = RealDlsym();
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr || real_dlsym == nullptr) {
    TESSERA_LOG(kError, kHook, "cannot load libcuda.so.1: %s", dlerror());
  } else {
    for (std::size_t i = 0; i < kCudaHookCount; ++i) {
      resolved[i] = real_dlsym(handle, std::string(kCudaHooks[i].symbol).c_str());
    }
  }
  if (!claimed.exchange(true, std::memory_order_acq_rel)) {
    for (std::size_t i = 0; i < kCudaHookCount; ++i) g_real_cuda[i] = resolved[i];
    IndexRealFunctions();
    s.initialize_ns = MonotonicNs() - start;
    g_initialized.store(true, std::memory_order_release);
  } else {
    while (!g_initialized.load(std::memory_order_acquire)) sched_yield();
  }
  t_initializing = false;
}

}  // namespace tessera::hook
