// What the demo's two modes share: a scenario pod's manifest, and reading answers of the API
// server (simulated nodes: demo.cc; a real node: real_node.cc).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo/demo.h"

namespace tessera::demo {

inline constexpr const char* kContainer = "main";

// The string at `p` in `j`, or "" (absent, or not a string).
std::string Str(const nlohmann::json& j, const nlohmann::json::json_pointer& p);
// `text` split at white space.
std::vector<std::string> Words(const std::string& text);
// The pod as a person would write it for `p` (its tessera.dev limits and annotations), pinned to
// `node` unless that is empty; the image and command are placeholders the caller may replace.
nlohmann::json PodManifest(const PodSpec& p, const std::string& node);
// The message after "denied the request: " (the webhook's own words), else the whole message.
std::string DenialReason(const std::string& message);

}  // namespace tessera::demo
