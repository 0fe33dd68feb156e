// API paths of the resources tessera uses, and URL escaping. Names and namespaces are escaped
// as path segments, so a hostile name cannot reach another path.
#pragma once

#include <string>
#include <string_view>

namespace tessera::k8s {

// Percent-encodes everything except the RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~).
std::string QueryEscape(std::string_view value);
// The same for one path segment ('/' becomes %2F).
std::string PathEscape(std::string_view segment);

// `path` + "?key=value" or "&key=value" (value escaped); nothing when value is empty.
void AppendQuery(std::string& path, std::string_view key, std::string_view value);

// Core v1. An empty namespace means all namespaces for the collection paths.
std::string NamespacePath(std::string_view name);  // /api/v1/namespaces/{name}
std::string PodsPath(std::string_view ns);         // /api/v1[/namespaces/{ns}]/pods
std::string PodPath(std::string_view ns, std::string_view name);
std::string PodBindingPath(std::string_view ns, std::string_view name);  // .../pods/{name}/binding
std::string PodStatusPath(std::string_view ns, std::string_view name);   // .../pods/{name}/status
std::string NodesPath();                                                 // /api/v1/nodes
std::string NodePath(std::string_view name);
std::string NodeStatusPath(std::string_view name);
std::string ConfigMapsPath(std::string_view ns);
std::string ConfigMapPath(std::string_view ns, std::string_view name);
std::string EventsPath(std::string_view ns);  // core v1 events
// coordination.k8s.io/v1 leases (leader election, leader.h).
std::string LeasesPath(std::string_view ns);  // /apis/coordination.k8s.io/v1/namespaces/{ns}/leases
std::string LeasePath(std::string_view ns, std::string_view name);
// resource.k8s.io/v1 (Dynamic Resource Allocation).
std::string ResourceSlicesPath();  // /apis/resource.k8s.io/v1/resourceslices
std::string ResourceSlicePath(std::string_view name);
// /apis/resource.k8s.io/v1[/namespaces/{ns}]/resourceclaims
std::string ResourceClaimsPath(std::string_view ns);
std::string ResourceClaimPath(std::string_view ns, std::string_view name);

}  // namespace tessera::k8s
