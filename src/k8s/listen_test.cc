#include "k8s/listen.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdint>
#include <netinet/in.h>
#include <set>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

TEST(ListenAddress, ParsesHostAndPortOrSaysTheAcceptedForm) {
  auto v4 = ParseListenAddress("0.0.0.0:8888");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->first, "0.0.0.0");
  EXPECT_EQ(v4->second, 8888);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, "::1");
  EXPECT_EQ(v6->second, 0);
  for (const char* bad : {"8888", "host:", ":8888", "host:65536", "host:-1", "host:80x"}) {
    const auto r = ParseListenAddress(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("expected HOST:PORT"), std::string::npos) << bad;
  }
}

// A port for a listener named before it starts lies below the ephemeral range, which the kernel
// also hands out as connections' source ports, and can be bound.
TEST(FreeLoopbackPort, LiesBelowTheEphemeralRangeAndCanBeBound) {
  const int floor = EphemeralPortFloor();
  ASSERT_GT(floor, 1024);
  std::set<int> seen;
  for (int i = 0; i < 20; ++i) {
    const int port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    if (floor > 20'064) {
      EXPECT_LT(port, std::min(floor, 30'000));
      EXPECT_GE(port, 20'000);
    }
    seen.insert(port);
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    close(fd);
  }
  EXPECT_GT(seen.size(), 10u);  // chosen at random, not the same port each time
}

// A port someone holds is never handed out.
TEST(FreeLoopbackPort, NeverAPortInUse) {
  std::set<int> held_ports;
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    const int port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    EXPECT_EQ(held_ports.count(port), 0u) << port;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(fd, 1), 0);
    held_ports.insert(port);
    fds.push_back(fd);
  }
  for (const int fd : fds) close(fd);
}

}  // namespace
}  // namespace tessera::k8s
