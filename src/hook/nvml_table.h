// Tables generated from nvml_hooks.def (see hook_table.h for the CUDA counterpart).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tessera/nvml_api.h"

#include "hook/hook_table.h"

namespace tessera::hook {

enum class NvmlHook : std::uint16_t {
#define TESSERA_NVML_HOOK(sym, policy, params, args) sym,
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
  kCount
};
inline constexpr std::size_t kNvmlHookCount = static_cast<std::size_t>(NvmlHook::kCount);

struct NvmlHookRow {
  std::string_view symbol;
  Policy policy;
};
inline constexpr NvmlHookRow kNvmlHooks[] = {
#define TESSERA_NVML_HOOK(sym, policy, params, args) {#sym, Policy::policy},
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
};

template <NvmlHook H>
struct NvmlFn;
#define TESSERA_NVML_HOOK(sym, policy, params, args) \
  template <>                                        \
  struct NvmlFn<NvmlHook::sym> {                     \
    using Fn = decltype(&::sym);                     \
  };
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK

#define TESSERA_NVML_HOOK(sym, policy, params, args) \
  static_assert(std::is_same_v<decltype(&::sym), nvmlReturn_t(*) params>, #sym);
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK

extern void* g_real_nvml[kNvmlHookCount];
extern void* const kNvmlTrampolines[kNvmlHookCount];

template <NvmlHook H>
inline typename NvmlFn<H>::Fn RealNvml() {
  return reinterpret_cast<typename NvmlFn<H>::Fn>(g_real_nvml[static_cast<std::size_t>(H)]);
}

NvmlHook FindNvmlHookByName(std::string_view name);

}  // namespace tessera::hook
