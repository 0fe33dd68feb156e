#include "governor/mps.h"

#include <gtest/gtest.h>

#include <algorithm>

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
  EXPECT_NE(other.message().find("run as user 0, this one as user 1000"), std::string::npos) << other.message();
  EXPECT_NE(other.message().find("tessera.dev/mps-user"), std::string::npos);
}

TEST(Mps, AMissingControlProgramIsNamed) {
  auto joined = LocalMps::Join("/nonexistent-tessera-dir", "GPU-x", "no-such-mps-control-program");
  ASSERT_FALSE(joined.ok());
  EXPECT_NE(joined.status().message().find("no-such-mps-control-program not found"), std::string::npos);
}

}  // namespace
}  // namespace tessera::governor
