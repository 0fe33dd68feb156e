// admission.k8s.io/v1 AdmissionReview, the part tessera reads and writes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::webhook {

struct AdmissionRequest {
  std::string uid;           // request.uid: echoed in the response
  std::string kind;          // request.kind.kind: "Pod", "Binding"
  std::string resource;      // request.resource.resource: "pods"
  std::string sub_resource;  // request.subResource: "", "binding", "status", ...
  std::string operation;     // CREATE, UPDATE, DELETE, CONNECT
  std::string namespace_name;
  std::string name;
  std::string username;  // request.userInfo.username
  std::vector<std::string> groups;
  nlohmann::json object;      // null when absent (DELETE)
  nlohmann::json old_object;  // null when absent (CREATE)
  bool dry_run = false;
};

// Reads an AdmissionReview body. Errors name the missing field.
StatusOr<AdmissionRequest> ParseAdmissionReview(const nlohmann::json& review);

// The AdmissionReview answer. A denial carries HTTP-style `code` (403 for policy, 400 for bad
// input) and `message`, which kubectl prints as
//   Error from server (Forbidden): admission webhook "..." denied the request: <message>.
// `patch`: a JSON Patch (RFC 6902) array; sent base64-encoded with patchType JSONPatch.
nlohmann::json AllowResponse(const std::string& uid,
                             const std::optional<nlohmann::json>& patch = std::nullopt,
                             const std::vector<std::string>& warnings = {});
nlohmann::json DenyResponse(const std::string& uid, int code, const std::string& message);

// RFC 6901 escaping of one path segment ("tessera.dev/gpu" -> "tessera.dev~1gpu").
std::string JsonPointerEscape(const std::string& segment);

}  // namespace tessera::webhook
