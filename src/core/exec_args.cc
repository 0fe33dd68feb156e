#include "tessera/exec_args.h"

#include <sys/wait.h>
#include <unistd.h>

#include <deque>
#include <fstream>

namespace tessera {

ExecArgs::ExecArgs(std::vector<std::string> argv, const std::vector<std::pair<std::string, std::string>>& env)
    : args_(std::move(argv)) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : env) replaced = replaced || key == name;
    if (!replaced) env_.push_back(entry);
  }
  for (const auto& [key, value] : env) env_.push_back(key + "=" + value);
  for (std::string& arg : args_) argv_.push_back(arg.data());
  argv_.push_back(nullptr);
  for (std::string& entry : env_) envp_.push_back(entry.data());
  envp_.push_back(nullptr);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

std::string TailOfFile(const std::string& path, std::size_t lines) {
  if (path.empty()) return {};
  std::ifstream in(path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (const std::string& l : tail) out += l + "\n";
  return out;
}

}  // namespace tessera
