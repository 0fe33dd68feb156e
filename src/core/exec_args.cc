#include "tessera/exec_args.h"

#include <unistd.h>

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

}  // namespace tessera
