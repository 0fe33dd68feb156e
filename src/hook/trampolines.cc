// The exported trampolines and the lookup tables, all expanded from cuda_hooks.def.
#include <array>
#include <mutex>

#include "hook/hook_table.h"
#include "hook/intercept.h"
#include "hook/name_table.h"

namespace tessera::hook {

void* g_real_cuda[kCudaHookCount] = {};

namespace {

constexpr std::array<std::string_view, kCudaHookCount> kCudaNames = {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) #sym,
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
};
constexpr auto kCudaNameTable = BuildNameTable<256>(kCudaNames);

// Real entry point -> hook, filled once by IndexRealFunctions before g_initialized is set.
constexpr std::size_t kIdentityTableSize = 256;
struct IdentitySlot {
  void* real;
  std::uint16_t hook;
};
IdentitySlot g_identity[kIdentityTableSize] = {};

std::size_t PointerHash(void* p) {
  auto v = reinterpret_cast<std::uintptr_t>(p);
  v ^= v >> 17;
  v *= 0x9E3779B97F4A7C15ULL;
  return static_cast<std::size_t>(v >> 56) & (kIdentityTableSize - 1);
}

}  // namespace

CudaHook FindCudaHookByName(std::string_view name) {
  return static_cast<CudaHook>(FindName(kCudaNameTable, kCudaNames, name));
}

void IndexRealFunctions() {
  for (auto& slot : g_identity) slot = {nullptr, 0};
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    void* real = g_real_cuda[i];
    if (real == nullptr) continue;
    std::size_t h = PointerHash(real);
    while (g_identity[h].real != nullptr && g_identity[h].real != real) {
      h = (h + 1) & (kIdentityTableSize - 1);
    }
    g_identity[h] = {real, static_cast<std::uint16_t>(i)};
  }
}

void* TrampolineForReal(void* real) {
  if (real == nullptr) return nullptr;
  std::size_t h = PointerHash(real);
  while (g_identity[h].real != nullptr) {
    if (g_identity[h].real == real) return kCudaTrampolines[g_identity[h].hook];
    h = (h + 1) & (kIdentityTableSize - 1);
  }
  return real;
}

}  // namespace tessera::hook

// Exported trampolines. No noexcept: cuda.h declares them without it (the library is built
// -fno-exceptions).
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args)                  \
  extern "C" TESSERA_EXPORT CUresult sym params {                                           \
    if (__builtin_expect(::tessera::hook::g_stats_enabled, 0)) {                            \
      ::tessera::hook::CountCall(static_cast<std::size_t>(::tessera::hook::CudaHook::sym)); \
    }                                                                                       \
    return ::tessera::hook::Intercept<::tessera::hook::CudaHook::sym> args;                 \
  }
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK

namespace tessera::hook {

void* const kCudaTrampolines[kCudaHookCount] = {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args) \
  reinterpret_cast<void*>(&::sym),
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
};

}  // namespace tessera::hook
