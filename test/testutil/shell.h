// Runs a shell command line as a test's process under test: its exit code, stdout and stderr.
// For tests that run a tessera binary the way a user or a kubelet would.
#pragma once

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tessera::testutil {

struct ShellResult {
  int exit_code = -1;  // -1: killed by a signal, or it could not be run
  std::string out;
  std::string err;
};

inline ShellResult RunShell(const std::string& command) {
  // One stderr file per call and process: ctest runs test cases in parallel processes.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "/shell_stderr." + std::to_string(getpid()) +
                               "." + std::to_string(++calls);
  ShellResult run;
  FILE* pipe = popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  run.err = text.str();
  std::remove(err_path.c_str());
  return run;
}

}  // namespace tessera::testutil
