#include "governor/mps.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tessera::governor {
namespace {

bool Has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

TEST(Mps, ClientEnvironmentCarriesTheAllocation) {
  const auto env = MpsClientEnvironment("/p", "/l", 4ULL << 30, 30, PriorityClass::kBestEffort);
  EXPECT_TRUE(Has(env, "CUDA_MPS_PIPE_DIRECTORY=/p"));
  EXPECT_TRUE(Has(env, "CUDA_MPS_LOG_DIRECTORY=/l"));
  EXPECT_TRUE(Has(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M"));
  EXPECT_TRUE(Has(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"));
  EXPECT_TRUE(Has(env, "CUDA_MPS_CLIENT_PRIORITY=1"));
  const auto lc = MpsClientEnvironment("/p", "/l", 0, 100, PriorityClass::kLatencyCritical);
  EXPECT_TRUE(Has(lc, "CUDA_MPS_CLIENT_PRIORITY=0"));
  for (const std::string& e : lc) {
    EXPECT_EQ(e.rfind("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=", 0), std::string::npos) << e;
    EXPECT_EQ(e.rfind("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=", 0), std::string::npos) << e;
  }
}

TEST(Mps, ASecondUserIDIsRefusedWhileAnotherIsLive) {
  EXPECT_TRUE(CheckMpsUser(1000, {}).ok());
  EXPECT_TRUE(CheckMpsUser(1000, {1000, 1000}).ok());
  const Status other = CheckMpsUser(1000, {1000, 0});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.message().find("run as user 0, this one as user 1000"), std::string::npos)
      << other.message();
  EXPECT_NE(other.message().find("tessera.dev/mps-user"), std::string::npos);
}

TEST(Mps, AMissingControlProgramIsNamed) {
  auto joined = LocalMps::Join("/nonexistent-tessera-dir", "GPU-x", "no-such-mps-control-program");
  ASSERT_FALSE(joined.ok());
  EXPECT_NE(joined.status().message().find("no-such-mps-control-program not found"),
            std::string::npos);
}

// A socket of `type` bound at `path`, listening unless it is a datagram socket; its fd.
int BoundSocket(const std::string& path, int type) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const int fd = socket(AF_UNIX, type, 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      (type != SOCK_DGRAM && listen(fd, 4) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

// The daemon's `control` socket is a SOCK_SEQPACKET one (on the H200, driver 580, a SOCK_STREAM
// connect failed with EPROTOTYPE and every `tessera run --mode mps` timed out): a listener of any
// type answers, a leftover socket file does not.
TEST(Mps, TheDaemonAnswersOnAControlSocketOfAnyType) {
  char tmpl[] = "/tmp/tessera-mps-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string control = dir + "/control";
  EXPECT_FALSE(DaemonAnswers(dir));  // nothing there
  for (const int type : {SOCK_SEQPACKET, SOCK_STREAM, SOCK_DGRAM}) {
    const int fd = BoundSocket(control, type);
    ASSERT_GE(fd, 0) << type;
    EXPECT_TRUE(DaemonAnswers(dir)) << "socket type " << type;
    close(fd);
    EXPECT_FALSE(DaemonAnswers(dir)) << "leftover file of socket type " << type;  // the daemon died
    std::filesystem::remove(control);
  }
  std::ofstream(control) << "";
  EXPECT_TRUE(DaemonAnswers(dir));  // not a socket: its existence is all there is to go by
  std::filesystem::remove_all(dir);
}

// Spatial priority: what each class's context may use of the SMs.
TEST(Mps, BestEffortLeavesTheLatencyCriticalReserve) {
  const SpatialPolicy p;  // reserve 20, floor 10
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kBestEffort, p, 0), 80u);
  EXPECT_EQ(ActiveThreadPercent(50, PriorityClass::kBestEffort, p, 0), 50u);   // its share binds
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kBestEffort, p, 35), 65u);   // LC asks more
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kBestEffort, p, 100), 10u);  // the floor
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kLatencyCritical, p, 0), 100u);
  EXPECT_EQ(ActiveThreadPercent(30, PriorityClass::kLatencyCritical, p, 30), 100u);
  EXPECT_EQ(ActiveThreadPercent(30, PriorityClass::kNormal, p, 50), 30u);  // its share, as before
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kNormal, p, 50), 100u);
  SpatialPolicy yields = p;
  yields.normal_yields = true;
  EXPECT_EQ(ActiveThreadPercent(0, PriorityClass::kNormal, yields, 50), 50u);
  EXPECT_TRUE(YieldsSms(PriorityClass::kBestEffort, p));
  EXPECT_FALSE(YieldsSms(PriorityClass::kNormal, p));
  EXPECT_TRUE(YieldsSms(PriorityClass::kNormal, yields));
  EXPECT_FALSE(YieldsSms(PriorityClass::kLatencyCritical, yields));
}

TEST(Mps, AnSmLimitBelowTheFloorIsRefusedWithTheField) {
  EXPECT_TRUE(CheckSmFloor(0, "--gpu-cores").ok());
  EXPECT_TRUE(CheckSmFloor(10, "--gpu-cores").ok());
  const Status s = CheckSmFloor(9, "--gpu-cores");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "--gpu-cores: 9 under mode mps is an SM limit below the floor of 10 %; accepted: "
            "10-100, or mode shared");
}

}  // namespace
}  // namespace tessera::governor
