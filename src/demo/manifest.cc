#include "demo/manifest.h"

#include <sstream>

#include "tessera/names.h"

namespace tessera::demo {

using json = nlohmann::json;

std::string Str(const json& j, const json::json_pointer& p) {
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : std::string();
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

json PodManifest(const PodSpec& p, const std::string& node) {
  json limits = json::object();
  if (!p.memory.empty()) limits[std::string(names::kResourceGpuMemory)] = p.memory;
  if (p.cores > 0) limits[std::string(names::kResourceGpuCores)] = std::to_string(p.cores);
  if (p.gpus > 0) limits[std::string(names::kResourceGpu)] = std::to_string(p.gpus);
  json annotations = json::object();
  if (!p.priority.empty()) annotations[std::string(names::kAnnotationPriority)] = p.priority;
  if (!p.mode.empty()) annotations[std::string(names::kAnnotationMode)] = p.mode;
  if (!p.kai_memory_mib.empty())
    annotations[std::string(names::kAnnotationKaiGpuMemory)] = p.kai_memory_mib;
  if (!p.kai_fraction.empty())
    annotations[std::string(names::kAnnotationKaiGpuFraction)] = p.kai_fraction;
  json container = {{"name", kContainer}, {"image", "registry.invalid/tessera-demo/workload:1"}};
  if (!p.command.empty()) container["command"] = Words(p.command);
  if (!limits.empty()) container["resources"] = {{"limits", limits}};
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", p.name}, {"namespace", p.ns}}},
      {"spec", {{"terminationGracePeriodSeconds", 0}, {"containers", json::array({container})}}}};
  if (!annotations.empty()) pod["metadata"]["annotations"] = annotations;
  if (!p.kai_memory_mib.empty() || !p.kai_fraction.empty())
    pod["spec"]["schedulerName"] = "kai-scheduler";
  if (!node.empty()) pod["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", node}};
  return pod;
}

std::string DenialReason(const std::string& message) {
  static constexpr std::string_view kMarker = "denied the request: ";
  const std::size_t at = message.find(kMarker);
  return at == std::string::npos ? message : message.substr(at + kMarker.size());
}

}  // namespace tessera::demo
