// The agent's early steps, each on its own (NodeDaemon); the whole process against the fake
// NVML is node_integration_test, against a control plane node_e2e_test.
#include "agent/daemon.h"

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

NodeOptions Options() {
  NodeOptions o;
  o.node_name = "node-a";
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  o.device_plugin_dir = "/nonexistent/device-plugins";
  o.metrics_listen = "";
  return o;
}

TEST(NodeDaemonTest, ValidateFlagsAcceptsGoodFlags) {
  NodeDaemon node(Options());
  EXPECT_TRUE(node.ValidateFlags().ok());

  NodeOptions o = Options();
  o.node_name.clear();
  o.print_inventory = true;  // --print-inventory needs no node name
  o.gpus = "0,2";
  NodeDaemon printing(o);
  EXPECT_TRUE(printing.ValidateFlags().ok());
}

TEST(NodeDaemonTest, ValidateFlagsRefusesBadGpusAndAMissingNodeName) {
  NodeOptions o = Options();
  o.gpus = "0,,1";
  Status st = NodeDaemon(o).ValidateFlags();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("--gpus"), std::string::npos) << st.ToString();
  EXPECT_EQ(ToExitCode(st), 2);

  o = Options();
  o.node_name.clear();
  st = NodeDaemon(o).ValidateFlags();
  EXPECT_EQ(st.message(), "--node-name: required (or --print-inventory)");
  EXPECT_EQ(ToExitCode(st), 2);
}

TEST(NodeDaemonTest, OpenNvmlSaysNvmlIsNotAvailable) {
  NodeDaemon node(Options());
  ASSERT_TRUE(node.ValidateFlags().ok());
  const Status st = node.OpenNvml();
  EXPECT_NE(st.message().find("NVML not available"), std::string::npos) << st.ToString();
  EXPECT_EQ(ToExitCode(st), 5);  // unavailable
}

TEST(NodeDaemonTest, RunStopsAtTheFirstFailedStep) {
  NodeOptions o = Options();
  o.node_name.clear();
  // ValidateFlags fails first: NVML (missing too) is never opened.
  EXPECT_EQ(NodeDaemon(o).Run().message(), "--node-name: required (or --print-inventory)");
  EXPECT_EQ(RunNode(o), 2);
  // Then OpenNvml.
  const Status st = NodeDaemon(Options()).Run();
  EXPECT_NE(st.message().find("NVML not available"), std::string::npos) << st.ToString();
  EXPECT_EQ(RunNode(Options()), 5);
}

TEST(NodeDaemonTest, ConnectApiNamesTheKubeconfig) {
  NodeOptions o = Options();
  o.kubeconfig = "/nonexistent/kubeconfig";
  const Status st = NodeDaemon(o).ConnectApi();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("--kubeconfig", 0), 0u) << st.ToString();
}

// A malformed --metrics-listen is found with the flags, before NVML or the API server is
// touched (Run fails at ValidateFlags: NVML, missing here, would otherwise be the error).
TEST(NodeDaemonTest, AMalformedMetricsAddressIsRefusedWithTheFlags) {
  NodeOptions o = Options();
  o.metrics_listen = "no-port";
  NodeDaemon node(o);
  const Status st = node.Run();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.message().rfind("--metrics-listen", 0), 0u) << st.ToString();
  EXPECT_EQ(node.metrics_port(), 0);
}

TEST(NodeDaemonTest, ARelativeDevRootIsRefusedWithTheFlags) {
  for (const char* root : {"", "run/nvidia/driver"}) {
    NodeOptions o = Options();
    o.dev_root = root;
    const Status st = NodeDaemon(o).Run();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_EQ(st.message(), "--dev-root: \"" + std::string(root) +
                                "\" is not an absolute path (e.g. / or /run/nvidia/driver)");
  }
}

TEST(NodeDaemonTest, StartMetricsServesAndShutdownStops) {
  NodeOptions o = Options();
  o.metrics_listen = "127.0.0.1:0";
  NodeDaemon node(o);
  ASSERT_TRUE(node.StartMetrics().ok());
  EXPECT_GT(node.metrics_port(), 0);
  EXPECT_FALSE(node.plugin_served());  // no device-plugin folder: inventory only
  node.Shutdown();
  EXPECT_EQ(node.metrics_port(), 0);

  // Not served at all.
  NodeDaemon quiet(Options());
  ASSERT_TRUE(quiet.StartMetrics().ok());
  EXPECT_EQ(quiet.metrics_port(), 0);
}

}  // namespace
}  // namespace tessera::agent
