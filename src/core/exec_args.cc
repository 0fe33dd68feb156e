#include "tessera/exec_args.h"

#include <deque>
#include <sstream>
#include <sys/wait.h>

#include "tessera/file.h"

namespace tessera {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

std::string TailOfFile(const std::string& path, std::size_t lines) {
  if (path.empty()) return {};
  // A log may be large: its last 1 MiB holds far more than the lines wanted.
  std::string text = ReadFile(path, kMaxFileBytes).value_or("");
  if (text.size() > (1u << 20)) text.erase(0, text.size() - (1u << 20));
  std::istringstream in(text);
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
