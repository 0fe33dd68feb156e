// The classes of bad input file every tessera command and daemon must refuse (issue #23, and
// docs/protocol.md "Exit codes"), for the table tests that feed them to each file flag.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera::testutil {

struct BadInput {
  std::string path;
  int exit_code;  // what the convention answers: 3 not there, 4 read but not what was asked for
};

// Files written into `dir` (created): one that is not there, an empty one, a list at the top
// level, truncated YAML, the folder itself and a character device. An oversized file is each
// caller's own: its bound differs per input.
inline std::vector<BadInput> BadInputFiles(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  return {
      {dir + "/missing.yaml", 3},
      {write("empty.yaml", ""), 4},
      {write("list.yaml", "[1, 2, 3]\n"), 4},
      {write("truncated.yaml", "a: [unclosed\n"), 4},
      {dir, 4},
      {"/dev/zero", 4},
  };
}

// A file of `bytes` comment characters, past an input's bound.
inline std::string OversizedFile(const std::string& dir, std::size_t bytes) {
  const std::string path = dir + "/big.yaml";
  std::ofstream(path) << std::string(bytes, '#');
  return path;
}

}  // namespace tessera::testutil
