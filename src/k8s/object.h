// Reading fields of API objects (nlohmann::json) without exceptions: a missing field, a null
// and a field of the wrong type all read as "absent". The one set of field accessors: the
// contracts, the extender, the webhooks and the node agent read objects a tenant wrote through
// them (test/architecture checks that no second copy appears).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::k8s {

// object[key] if object is an object holding a non-null key, else nullptr.
inline const nlohmann::json* Find(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// object[key] as a string, "" if absent or not a string.
inline std::string StringAt(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* v = Find(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// object[key] as an integer, `absent` if absent or not an integer.
inline std::int64_t IntAt(const nlohmann::json& object, std::string_view key,
                          std::int64_t absent = 0) {
  const nlohmann::json* v = Find(object, key);
  return v != nullptr && v->is_number_integer() ? v->get<std::int64_t>() : absent;
}

// metadata[key] as a string (name, namespace, uid), "" if absent or not a string.
inline std::string MetadataAt(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* metadata = Find(object, "metadata");
  return metadata != nullptr ? StringAt(*metadata, key) : std::string();
}

// metadata.annotations[key] if it is a string.
inline std::optional<std::string> AnnotationOf(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* meta = Find(object, "metadata");
  const nlohmann::json* annotations = meta != nullptr ? Find(*meta, "annotations") : nullptr;
  const nlohmann::json* v = annotations != nullptr ? Find(*annotations, key) : nullptr;
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

// Whether metadata.annotations holds `key` with any non-null value.
inline bool HasAnnotation(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* meta = Find(object, "metadata");
  const nlohmann::json* annotations = meta != nullptr ? Find(*meta, "annotations") : nullptr;
  return annotations != nullptr && Find(*annotations, key) != nullptr;
}

}  // namespace tessera::k8s
