// Tables generated from cuda_hooks.def: the hook enum, per-hook traits typed by cuda.h, the
// real-function table, name and identity lookups. Only the hook library and its tests include
// this.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "hook/cuda_api.h"

#define TESSERA_EXPORT __attribute__((visibility("default")))

namespace tessera::hook {

enum class CudaHook : std::uint16_t {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) sym,
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
  kCount
};
inline constexpr std::size_t kCudaHookCount = static_cast<std::size_t>(CudaHook::kCount);

enum class Variant : std::uint8_t { kLegacyStream, kPerThreadStream };
enum class Policy : std::uint8_t { kPassThrough, kEnforce, kGovern };

struct CudaHookRow {
  std::string_view symbol;
  std::string_view base;
  int since;
  Variant variant;
  Policy policy;
};

inline constexpr CudaHookRow kCudaHooks[] = {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  {#sym, base, since, Variant::variant, Policy::policy},
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
};

// Hook<H>::Fn is the vendor prototype of the row's symbol.
template <CudaHook H>
struct Hook;
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  template <>                                                              \
  struct Hook<CudaHook::sym> {                                             \
    using Fn = decltype(&::sym);                                           \
  };
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK

// The row's spelled parameters must match the vendor prototype exactly.
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  static_assert(std::is_same_v<decltype(&::sym), CUresult(*) params>, #sym);
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK

// Real entry points of libcuda, filled once at initialization (null: the driver lacks it).
extern void* g_real_cuda[kCudaHookCount];
// Our exported trampolines, by hook.
extern void* const kCudaTrampolines[kCudaHookCount];

template <CudaHook H>
inline typename Hook<H>::Fn Real() {
  return reinterpret_cast<typename Hook<H>::Fn>(g_real_cuda[static_cast<std::size_t>(H)]);
}

// O(1) lookups (open addressing tables built at compile time / at initialization).
// The hook whose symbol is `name`, or kCount.
CudaHook FindCudaHookByName(std::string_view name);
// Our trampoline for a real libcuda entry point, or `real` itself if we do not hook it.
void* TrampolineForReal(void* real);
// Rebuilds the identity table after g_real_cuda is filled.
void IndexRealFunctions();

}  // namespace tessera::hook
