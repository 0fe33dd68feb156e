// tessera-scheduler's first step on its own: configuration is checked before anything starts
// (no API server, no listener), and each bad flag is named.
#include "scheduler/daemon.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "contract/decision.h"
#include "testutil/temp_dir.h"

namespace tessera::scheduler {
namespace {

class SchedulerConfigurationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = dir_.path() + "/key.pem";
    std::ofstream(key_) << *contract::GenerateSigningKeyPem();
    options_.signing_key_file = key_;
  }
  Status Validate() { return SchedulerProcess(options_).ValidateConfiguration(); }

  testutil::TempDir dir_;
  std::string key_;
  SchedulerOptions options_;
};

TEST_F(SchedulerConfigurationTest, GoodConfigurationPasses) {
  const Status st = Validate();
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST_F(SchedulerConfigurationTest, BadListenAddressNamesTheFlag) {
  options_.listen = "localhost";
  const Status st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--listen"), std::string::npos) << st.message();
}

TEST_F(SchedulerConfigurationTest, PlacementPoliciesTheSchedulerCannotRunAreRefused) {
  options_.placement = "fgd";
  Status st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--placement fgd"), std::string::npos) << st.message();
  options_.placement = "no-such-policy";
  st = Validate();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--placement"), std::string::npos) << st.message();
}

TEST_F(SchedulerConfigurationTest, SigningKeyIsRequiredAndMustBeARegularFileWithAKey) {
  options_.signing_key_file = "";
  EXPECT_NE(Validate().message().find("--signing-key: required"), std::string::npos);
  options_.signing_key_file = dir_.path() + "/missing.pem";
  Status st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);  // exit 3, as every missing input
  EXPECT_NE(st.message().find("missing.pem"), std::string::npos) << st.message();
  options_.signing_key_file = dir_.path();  // a directory is not an empty key
  st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);  // exit 4
  EXPECT_NE(st.message().find("is a directory"), std::string::npos) << st.message();
  const std::string junk = dir_.path() + "/junk.pem";
  std::ofstream(junk) << "not a key";
  options_.signing_key_file = junk;
  st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_NE(st.message().find("--signing-key"), std::string::npos) << st.message();
}

TEST_F(SchedulerConfigurationTest, PolicyFileIsCheckedIncludingWhatTheSchedulerCannotHonour) {
  const std::string policy = dir_.path() + "/policy.yaml";
  std::ofstream(policy) << "version: v1\ntierAssignment:\n  defaultTier: team\n"
                           "  honorNamespaceLabel: true\n";
  options_.policy_file = policy;
  Status st = Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("honorNamespaceLabel"), std::string::npos) << st.message();
  options_.policy_file = dir_.path() + "/missing.yaml";
  st = Validate();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--policy"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::scheduler
