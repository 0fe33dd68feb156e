// Listen addresses of tessera's HTTP endpoints (flags like --listen, --metrics-listen).
#pragma once

#include <string>
#include <utility>

#include "tessera/status.h"

namespace tessera::k8s {

// "host:port" or "[v6]:port" -> (host, port), port 0-65535. The error names the text and the
// accepted form; callers add the flag (WithContext).
StatusOr<std::pair<std::string, int>> ParseListenAddress(const std::string& text);

}  // namespace tessera::k8s
