// Child processes: the argv and environment prepared before fork() (after it only
// async-signal-safe calls may run until execve, so nothing may allocate there), and what is said
// of them afterwards.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

class ExecArgs {
 public:
  // `env`: added to this process's environment, replacing variables of the same name.
  ExecArgs(std::vector<std::string> argv, const std::vector<std::pair<std::string, std::string>>& env);
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char* const* argv() { return argv_.data(); }
  char* const* envp() { return envp_.data(); }

 private:
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;  // point into args_ and env_, null-terminated
};

// A child's wait status in words: "exit code 0", "signal 9", "wait status N".
std::string DescribeWaitStatus(int status);

// The last `lines` lines of a text file (a child's log); "" if it cannot be read.
std::string TailOfFile(const std::string& path, std::size_t lines);

}  // namespace tessera
