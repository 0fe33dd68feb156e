// The node inventory's schema version (`tessera.dev/gpu-inventory`, docs/design/0002 §5): the one
// constant its writer (tessera-node, src/agent/inventory.cc) and its reader (tessera-scheduler,
// contract/inventory.h) share. Dependency-free: the GPU host builds the writer.
#pragma once

#include <string_view>

namespace tessera::contract {

inline constexpr std::string_view kInventoryApiVersion = "tessera.dev/inventory/v1";

}  // namespace tessera::contract
