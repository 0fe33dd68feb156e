#include "tessera/build_info.h"

#include <cuda.h>

namespace tessera {

BuildInfo GetBuildInfo() {
  return BuildInfo{
      TESSERA_BUILD_VERSION, TESSERA_BUILD_COMMIT,
      std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10),
      TESSERA_BUILD_TYPE};
}

std::string VersionLine(const std::string& binary) {
  const BuildInfo b = GetBuildInfo();
  return binary + " " + b.version + " (commit " + b.commit + ", CUDA headers " + b.cuda_headers +
         ", " + b.build_type + " build)";
}

}  // namespace tessera
