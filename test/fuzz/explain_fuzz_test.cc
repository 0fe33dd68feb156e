// Fuzzes `tessera explain pod -f FILE` end to end with arbitrary file contents: no manifest may
// crash it or throw out of it (the YAML reader, the pod-ask parser, the mutating and validating
// webhooks run locally), and it answers with one of its exit codes: 0 admitted or no GPU asked,
// 1 denied, 4 not a pod manifest (an invalid input).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unistd.h>

#include "cli/cli.h"

namespace {

const std::string& ManifestPath() {
  static const std::string* path = [] {
    char name[] = "/tmp/tessera-explain-fuzz-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) std::abort();
    close(fd);
    return new std::string(name);
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = ManifestPath();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  const char* argv[] = {"tessera", "explain", "pod", "-f", path.c_str()};
  std::ostringstream out, err;
  const int code = tessera::cli::Run(5, argv, out, err);
  if (code != 0 && code != 1 && code != 4) std::abort();
  if (code == 4 && err.str().find(path) == std::string::npos) std::abort();  // names the file
  return 0;
}
