#include "k8s/listen.h"

#include <arpa/inet.h>
#include <charconv>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::k8s {

StatusOr<std::pair<std::string, int>> ParseListenAddress(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  const auto bad = [&text] {
    return InvalidArgumentError(text + ": expected HOST:PORT, e.g. 0.0.0.0:8888 or [::1]:8888");
  };
  if (colon == std::string::npos || colon + 1 == text.size()) return bad();
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data() + colon + 1, end, port);
  if (ec != std::errc() || ptr != end || port < 0 || port > 65535 || host.empty()) return bad();
  return std::make_pair(host, port);
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

}  // namespace tessera::k8s
