#include "sim/scale.h"

#include <charconv>
#include <unordered_set>

namespace tessera::sim {
namespace {

Status CheckScale(int k) {
  if (k < 1 || k > kMaxScale) {
    return InvalidArgumentError("--scale: " + std::to_string(k) + " is not an integer 1.." +
                                std::to_string(kMaxScale));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int> ParseScale(std::string_view text) {
  int k = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || k < 1 ||
      k > kMaxScale) {
    return InvalidArgumentError("--scale: \"" + std::string(text) + "\": want an integer 1.." +
                                std::to_string(kMaxScale) +
                                " (the node list copied K times, the pod list with it)");
  }
  return k;
}

std::string CopySuffix(int copy, int k) {
  if (copy == 0) return "";
  const std::string digits = std::to_string(copy);
  const std::size_t width = std::to_string(k - 1).size();
  return "-c" + std::string(width > digits.size() ? width - digits.size() : 0, '0') + digits;
}

StatusOr<std::vector<placement::Node>> ScaleNodes(const std::vector<placement::Node>& nodes,
                                                  int k) {
  TESSERA_RETURN_IF_ERROR(CheckScale(k));
  std::vector<placement::Node> out;
  out.reserve(nodes.size() * static_cast<std::size_t>(k));
  std::unordered_set<std::string> names;
  names.reserve(nodes.size() * static_cast<std::size_t>(k));
  for (int copy = 0; copy < k; ++copy) {
    const std::string suffix = CopySuffix(copy, k);
    for (const placement::Node& n : nodes) {
      placement::Node c = n;
      c.name += suffix;
      if (copy > 0) {
        for (placement::Gpu& g : c.gpus) {
          // "<node>-gpuN" (the trace loader's UUIDs) becomes "<copy's name>-gpuN".
          if (g.uuid.starts_with(n.name)) {
            g.uuid = c.name + g.uuid.substr(n.name.size());
          } else {
            g.uuid += suffix;
          }
        }
      }
      if (!names.insert(c.name).second) {
        return InvalidArgumentError("--scale " + std::to_string(k) + ": node \"" + c.name +
                                    "\" (copy " + std::to_string(copy) +
                                    ") is already a node of the list");
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

StatusOr<std::vector<TracePod>> ScalePods(const std::vector<TracePod>& pods, int k) {
  TESSERA_RETURN_IF_ERROR(CheckScale(k));
  std::vector<TracePod> out;
  out.reserve(pods.size() * static_cast<std::size_t>(k));
  std::unordered_set<std::string> names;
  names.reserve(pods.size() * static_cast<std::size_t>(k));
  for (int copy = 0; copy < k; ++copy) {
    const std::string suffix = CopySuffix(copy, k);
    for (const TracePod& p : pods) {
      TracePod c = p;
      c.name += suffix;
      if (!names.insert(c.name).second) {
        return InvalidArgumentError("--scale " + std::to_string(k) + ": pod \"" + c.name +
                                    "\" (copy " + std::to_string(copy) +
                                    ") is already a pod of the list");
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace tessera::sim
