// The argv and environment of a child process, prepared before fork(): after it only
// async-signal-safe calls may run until execve, so nothing may allocate there.
#pragma once

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

}  // namespace tessera
