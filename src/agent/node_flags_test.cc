#include "agent/node_flags.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/log.h"

namespace tessera::agent {
namespace {

std::optional<int> Parse(std::vector<std::string> args, NodeOptions& options) {
  args.insert(args.begin(), "tessera-node");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseNodeFlags(static_cast<int>(argv.size()), argv.data(), options);
}

TEST(NodeFlagsTest, DefaultsWithoutFlags) {
  NodeOptions o;
  EXPECT_EQ(Parse({}, o), std::nullopt);
  const NodeOptions defaults;
  EXPECT_EQ(o.gpus, defaults.gpus);
  EXPECT_EQ(o.interval_s, 30);
  EXPECT_EQ(o.metrics_listen, "0.0.0.0:9479");
  EXPECT_EQ(o.foreign_gpu_resources, std::vector<std::string>{"nvidia.com/gpu"});
  EXPECT_FALSE(o.print_inventory);
}

TEST(NodeFlagsTest, FlagsFillTheOptions) {
  NodeOptions o;
  EXPECT_EQ(Parse({"--node-name",
                   "n1",
                   "--gpus",
                   "0,2",
                   "--interval-s",
                   "5",
                   "--print-inventory",
                   "--device-plugin-dir",
                   "/dp",
                   "--state-dir",
                   "/st",
                   "--decision-keys",
                   "/k",
                   "--metrics-listen",
                   "",
                   "--cleanup-interval-s",
                   "9",
                   "--foreign-gpu-resource",
                   "a.com/gpu",
                   "--uninstall",
                   "--force",
                   "--hold",
                   "--log-level",
                   "info"},
                  o),
            std::nullopt);
  EXPECT_EQ(o.node_name, "n1");
  EXPECT_EQ(o.gpus, "0,2");
  EXPECT_EQ(o.interval_s, 5);
  EXPECT_TRUE(o.print_inventory);
  EXPECT_EQ(o.device_plugin_dir, "/dp");
  EXPECT_EQ(o.state_dir, "/st");
  EXPECT_EQ(o.decision_keys_dir, "/k");
  EXPECT_EQ(o.metrics_listen, "");
  EXPECT_EQ(o.cleanup_interval_s, 9);
  EXPECT_EQ(o.foreign_gpu_resources, std::vector<std::string>{"a.com/gpu"});
  EXPECT_TRUE(o.uninstall && o.force && o.hold);
}

TEST(NodeFlagsTest, MalformedFlagsExitTwo) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--interval-s", "0"},
                                               {"--cleanup-interval-s", "3601"},
                                               {"--bogus"},
                                               {"--log-level", "loud"}}) {
    NodeOptions o;
    EXPECT_EQ(Parse(args, o), 2) << args[0];
  }
}

TEST(NodeFlagsTest, HelpExitsZero) {
  NodeOptions o;
  EXPECT_EQ(Parse({"--help"}, o), 0);
}

// --version answers like --help: to stdout, exit 0 (tessera and tessera-scheduler do the same).
TEST(NodeFlagsTest, VersionExitsZero) {
  NodeOptions o;
  testing::internal::CaptureStdout();
  EXPECT_EQ(Parse({"--version"}, o), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(out.starts_with("tessera-node ")) << out;
  EXPECT_NE(out.find("(commit "), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::agent
