#include "webhook/admission.h"

#include "contract/decision.h"
#include "k8s/object.h"

namespace tessera::webhook {

using nlohmann::json;

using k8s::StringAt;

namespace {

json Envelope(json response) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"response", std::move(response)}};
}

}  // namespace

StatusOr<AdmissionRequest> ParseAdmissionReview(const json& review) {
  if (!review.is_object()) return InvalidArgumentError("AdmissionReview: expected a JSON object");
  if (StringAt(review, "apiVersion") != "admission.k8s.io/v1") {
    return InvalidArgumentError("AdmissionReview.apiVersion: expected admission.k8s.io/v1");
  }
  auto req = review.find("request");
  if (req == review.end() || !req->is_object()) {
    return InvalidArgumentError("AdmissionReview.request: missing");
  }
  AdmissionRequest out;
  out.uid = StringAt(*req, "uid");
  if (out.uid.empty()) return InvalidArgumentError("AdmissionReview.request.uid: missing");
  if (auto kind = req->find("kind"); kind != req->end()) out.kind = StringAt(*kind, "kind");
  if (auto res = req->find("resource"); res != req->end())
    out.resource = StringAt(*res, "resource");
  out.sub_resource = StringAt(*req, "subResource");
  out.operation = StringAt(*req, "operation");
  if (out.operation.empty())
    return InvalidArgumentError("AdmissionReview.request.operation: missing");
  out.namespace_name = StringAt(*req, "namespace");
  out.name = StringAt(*req, "name");
  if (auto user = req->find("userInfo"); user != req->end() && user->is_object()) {
    out.username = StringAt(*user, "username");
    if (auto groups = user->find("groups"); groups != user->end() && groups->is_array()) {
      for (const json& g : *groups) {
        if (g.is_string()) out.groups.push_back(g.get<std::string>());
      }
    }
  }
  if (auto o = req->find("object"); o != req->end()) out.object = *o;
  if (auto o = req->find("oldObject"); o != req->end()) out.old_object = *o;
  if (auto d = req->find("dryRun"); d != req->end() && d->is_boolean())
    out.dry_run = d->get<bool>();
  return out;
}

json AllowResponse(const std::string& uid, const std::optional<json>& patch,
                   const std::vector<std::string>& warnings) {
  json response = {{"uid", uid}, {"allowed", true}};
  if (patch && !patch->empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = contract::Base64Encode(patch->dump());
  }
  if (!warnings.empty()) response["warnings"] = warnings;
  return Envelope(std::move(response));
}

json DenyResponse(const std::string& uid, int code, const std::string& message) {
  return Envelope(
      {{"uid", uid}, {"allowed", false}, {"status", {{"code", code}, {"message", message}}}});
}

std::string JsonPointerEscape(const std::string& segment) {
  std::string out;
  for (char c : segment) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace tessera::webhook
