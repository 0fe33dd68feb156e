// What was built: every binary's --version (and `tessera version --json`) says it the same way.
#pragma once

#include <string>

namespace tessera {

struct BuildInfo {
  std::string version;       // VERSION
  std::string commit;        // git commit at configure time ("unknown" outside a checkout)
  std::string cuda_headers;  // the CUDA headers' version (cuda.h's CUDA_VERSION), "13.0"
  std::string build_type;    // CMAKE_BUILD_TYPE
};

BuildInfo GetBuildInfo();

// "NAME 0.1.0 (commit 0123abcd, CUDA headers 13.0, Release build)"
std::string VersionLine(const std::string& binary);

}  // namespace tessera
