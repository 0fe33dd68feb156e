#include "agent/publisher.h"

#include "tessera/names.h"
#include "tessera/quantity.h"

#include "k8s/object.h"
#include "k8s/paths.h"

namespace tessera::agent {
namespace {

using k8s::Json;

using k8s::Find;

std::string StringChild(const Json* object, std::string_view key) {
  return object == nullptr ? std::string() : k8s::StringAt(*object, key);
}

// Whether the Node's resource list holds `quantity` for `name` (compared as quantities: the API
// server writes 34359738368 back as 32Gi).
bool SameQuantity(const Json* list, const std::string& name, const std::string& quantity) {
  const std::string have = StringChild(list, name);
  if (have.empty()) return false;
  StatusOr<std::uint64_t> a = ParseQuantity(have);
  StatusOr<std::uint64_t> b = ParseQuantity(quantity);
  return a.ok() && b.ok() && *a == *b;
}

}  // namespace

StatusOr<std::int64_t> Publisher::ExistingGeneration() {
  TESSERA_ASSIGN_OR_RETURN(Json node, client_.Get(k8s::NodePath(node_name_)));
  const Json* meta = Find(node, "metadata");
  const std::string text = StringChild(meta != nullptr ? Find(*meta, "annotations") : nullptr,
                                       names::kAnnotationInventory);
  if (text.empty()) return std::int64_t{0};
  const Json inventory = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const Json* generation = inventory.is_object() ? Find(inventory, "generation") : nullptr;
  if (generation == nullptr || !generation->is_number_integer()) return std::int64_t{0};
  return generation->get<std::int64_t>();
}

StatusOr<PublishResult> Publisher::Publish(const Inventory& inventory) {
  const std::string path = k8s::NodePath(node_name_);
  TESSERA_ASSIGN_OR_RETURN(Json node, client_.Get(path));
  PublishResult result;

  const std::string annotation = ToJson(inventory);
  const Json* meta = Find(node, "metadata");
  const Json* annotations = meta != nullptr ? Find(*meta, "annotations") : nullptr;
  const Json* labels = meta != nullptr ? Find(*meta, "labels") : nullptr;
  Json meta_patch = Json::object();
  if (StringChild(annotations, names::kAnnotationInventory) != annotation) {
    meta_patch["metadata"]["annotations"][std::string(names::kAnnotationInventory)] = annotation;
  }
  if (StringChild(labels, names::kLabelGpuNode) != "true") {
    meta_patch["metadata"]["labels"][std::string(names::kLabelGpuNode)] = "true";
  }
  const char* allocation_path = advertise_none_ ? "dra" : "device-plugin";
  if (StringChild(labels, names::kLabelAllocationPath) != allocation_path) {
    meta_patch["metadata"]["labels"][std::string(names::kLabelAllocationPath)] = allocation_path;
  }
  if (!meta_patch.empty()) {
    TESSERA_RETURN_IF_ERROR(client_.Patch(path, meta_patch, k8s::PatchType::kMerge).status());
    result.patched_metadata = true;
  }

  const auto quantities = ResourceQuantities(SumResources(inventory.content));
  const Json* status = Find(node, "status");
  const Json* capacity = status != nullptr ? Find(*status, "capacity") : nullptr;
  const Json* allocatable = status != nullptr ? Find(*status, "allocatable") : nullptr;
  bool same = true;
  Json resources = Json::object();
  for (auto [name, quantity] : quantities) {
    if (kubelet_owned_.count(name) != 0) continue;
    if (advertise_none_) quantity = "0";
    same =
        same && SameQuantity(capacity, name, quantity) && SameQuantity(allocatable, name, quantity);
    resources[name] = quantity;
  }
  if (!same) {
    const Json status_patch = {{"status", {{"capacity", resources}, {"allocatable", resources}}}};
    TESSERA_RETURN_IF_ERROR(
        client_.Patch(k8s::NodeStatusPath(node_name_), status_patch, k8s::PatchType::kMerge)
            .status());
    result.patched_status = true;
  }
  return result;
}

}  // namespace tessera::agent
