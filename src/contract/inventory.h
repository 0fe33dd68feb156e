// A Node object as the scheduler sees it: the node agent's GPU inventory annotation
// (`tessera.dev/gpu-inventory`, schema tessera.dev/inventory/v1, docs/design/0002 §5), the
// per-GPU cordon annotation and spec.unschedulable, as a placement::Node.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

#include "contract/inventory_schema.h"
#include "placement/cluster.h"

namespace tessera::contract {

// GPUs marked `managed: false` are left out (another device plugin owns them). Unhealthy GPUs
// and GPUs listed in `tessera.dev/gpu-cordon` are kept but never placed on. A node without the
// annotation is kNotFound; a malformed annotation is kInvalidArgument naming the field.
StatusOr<placement::Node> ParseNodeInventory(const nlohmann::json& node);

// Whether two parses of a node differ only in what Cluster can change in place (health,
// cordons): same GPUs with the same UUIDs, models and memory, in the same order.
bool SameHardware(const placement::Node& a, const placement::Node& b);

}  // namespace tessera::contract
