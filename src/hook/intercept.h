// Intercept<H>: what each trampoline runs. The primary template passes the call through to the
// real driver; hooks with policy kEnforce have an explicit specialisation in memory_hooks.cc
// (declared here for every kEnforce row, so a missing one fails at link time); launches
// (kGovern) are defined below.
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
#define TESSERA_DECLARE_kGovern(sym, params)
#define TESSERA_DECLARE_kEnforce(sym, params) \
  template <>                                 \
  CUresult Intercept<CudaHook::sym> params;
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  TESSERA_DECLARE_##policy(sym, params)
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
#undef TESSERA_DECLARE_kPassThrough
#undef TESSERA_DECLARE_kGovern
#undef TESSERA_DECLARE_kEnforce

// The launches (policy kGovern): while nothing is governed, one load and a tail call of the real
// function, inlined into the trampolines (hook_cost_test counts the instructions); otherwise
// Governed_<symbol> (launch_hooks.cc), which has the same parameters.
#define TESSERA_FAST_kPassThrough(sym, params, args)
#define TESSERA_FAST_kEnforce(sym, params, args)
#define TESSERA_FAST_kGovern(sym, params, args)                             \
  CUresult Governed_##sym params;                                           \
  template <>                                                               \
  inline CUresult Intercept<CudaHook::sym> params {                         \
    EnsureInitialized();                                                    \
    const auto real = Real<CudaHook::sym>();                                \
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;                       \
    if (__builtin_expect(GovernedRegion() == nullptr, 1)) return real args; \
    return Governed_##sym args;                                             \
  }
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  TESSERA_FAST_##policy(sym, params, args)
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
#undef TESSERA_FAST_kPassThrough
#undef TESSERA_FAST_kEnforce
#undef TESSERA_FAST_kGovern

}  // namespace tessera::hook
