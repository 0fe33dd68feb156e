#include "k8s/listen.h"

#include <algorithm>
#include <arpa/inet.h>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <netinet/in.h>
#include <random>
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

namespace {

// Binds a loopback TCP socket to `port` (0: the kernel's choice) and closes it: the port bound,
// or -1.
int BindAndRelease(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

}  // namespace

int EphemeralPortFloor() {
  int low = 32768;  // Linux's default range, where /proc cannot be read
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re")) {
    int lo = 0, hi = 0;
    if (std::fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 1024 && lo <= hi) low = lo;
    std::fclose(f);
  }
  return low;
}

int FreeLoopbackPort() {
  // Below the ephemeral range: a port the kernel hands out for port 0 is also the next source
  // port of any outgoing connection on the machine, which took the demo's extender port between
  // this check and tessera-scheduler's bind once in CI (tests run in parallel). Ports from
  // 20,000 up to the range (and below Kubernetes' NodePorts, 30,000) are named only by listeners
  // like this one; the kubelet's and the control plane's own (10,248-10,259) stay clear.
  const int top = std::min(EphemeralPortFloor(), 30'000);
  if (top > 20'000 + 64) {
    std::random_device seed;
    std::mt19937 rng(seed());
    std::uniform_int_distribution<int> pick(20'000, top - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = BindAndRelease(pick(rng));
      if (port > 0) return port;
    }
  }
  return BindAndRelease(0);
}

}  // namespace tessera::k8s
