// Intercept<H>: what each trampoline runs. The primary template passes the call through to the
// real driver; hooks with policy kEnforce have an explicit specialisation in memory_hooks.cc
// (declared here for every kEnforce row, so a missing one fails at link time).
#pragma once

#include "hook/hook_table.h"
#include "hook/state.h"

namespace tessera::hook {

template <CudaHook H, typename... Args>
inline CUresult Intercept(Args... args) {
  EnsureInitialized();
  const auto real = Real<H>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return real(args...);
}

#define TESSERA_DECLARE_kPassThrough(sym, params)
#define TESSERA_DECLARE_kEnforce(sym, params) \
  template <>                                 \
  CUresult Intercept<CudaHook::sym> params;
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  TESSERA_DECLARE_##policy(sym, params)
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
#undef TESSERA_DECLARE_kPassThrough
#undef TESSERA_DECLARE_kEnforce

}  // namespace tessera::hook
