#include "k8s/paths.h"

namespace tessera::k8s {
namespace {

bool Unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string Namespaced(std::string_view ns, std::string_view resource) {
  std::string path = "/api/v1";
  if (!ns.empty()) {
    path += "/namespaces/";
    path += PathEscape(ns);
  }
  path += '/';
  path += resource;
  return path;
}

std::string Named(std::string collection, std::string_view name) {
  collection += '/';
  collection += PathEscape(name);
  return collection;
}

}  // namespace

std::string QueryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (Unreserved(c)) {
      out += c;
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

std::string PathEscape(std::string_view segment) { return QueryEscape(segment); }

void AppendQuery(std::string& path, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  path += path.find('?') == std::string::npos ? '?' : '&';
  path += key;
  path += '=';
  path += QueryEscape(value);
}

std::string NamespacePath(std::string_view name) { return Named("/api/v1/namespaces", name); }
std::string PodsPath(std::string_view ns) { return Namespaced(ns, "pods"); }
std::string PodPath(std::string_view ns, std::string_view name) {
  return Named(PodsPath(ns), name);
}
std::string PodBindingPath(std::string_view ns, std::string_view name) {
  return PodPath(ns, name) + "/binding";
}
std::string PodStatusPath(std::string_view ns, std::string_view name) {
  return PodPath(ns, name) + "/status";
}
std::string NodesPath() { return "/api/v1/nodes"; }
std::string NodePath(std::string_view name) { return Named(NodesPath(), name); }
std::string NodeStatusPath(std::string_view name) { return NodePath(name) + "/status"; }
std::string ConfigMapsPath(std::string_view ns) { return Namespaced(ns, "configmaps"); }
std::string ConfigMapPath(std::string_view ns, std::string_view name) {
  return Named(ConfigMapsPath(ns), name);
}
std::string EventsPath(std::string_view ns) { return Namespaced(ns, "events"); }
std::string LeasesPath(std::string_view ns) {
  return "/apis/coordination.k8s.io/v1/namespaces/" + PathEscape(ns) + "/leases";
}
std::string LeasePath(std::string_view ns, std::string_view name) {
  return Named(LeasesPath(ns), name);
}

std::string ResourceSlicesPath() { return "/apis/resource.k8s.io/v1/resourceslices"; }
std::string ResourceSlicePath(std::string_view name) { return Named(ResourceSlicesPath(), name); }
std::string ResourceClaimsPath(std::string_view ns) {
  return ns.empty() ? "/apis/resource.k8s.io/v1/resourceclaims"
                    : "/apis/resource.k8s.io/v1/namespaces/" + PathEscape(ns) + "/resourceclaims";
}
std::string ResourceClaimPath(std::string_view ns, std::string_view name) {
  return Named(ResourceClaimsPath(ns), name);
}

}  // namespace tessera::k8s
