// tessera-node --print-inventory as a process, against the fake libnvidia-ml.so.1 (loaded by
// dlopen through LD_LIBRARY_PATH, as on a node): GPUs, SM count, NUMA, MIG, an injected XID,
// and the exit codes for bad flags and a missing NVML.
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/names.h"

#include "contract/inventory.h"
#include "testutil/bad_inputs.h"
#include "testutil/shell.h"

namespace tessera::agent {
namespace {

using Result = testutil::ShellResult;

Result RunNode(const std::string& env, const std::string& args) {
  return testutil::RunShell("env LD_LIBRARY_PATH=" TESSERA_FAKE_NVML_DIR " " + env + " " +
                            TESSERA_NODE_BINARY " " + args);
}

nlohmann::json Parse(const Result& run) {
  EXPECT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json j = nlohmann::json::parse(run.out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << run.out << run.err;
  return j;
}

// A driver outside the loader's search path (the GPU Operator's /run/nvidia/driver): NVML by
// --nvml-library, and CUDA (SM counts NVML does not give, the context probe) from
// --driver-lib-dir, not by name.
TEST(NodeIntegration, LoadsTheCudaDriverFromTheDriverFolder) {
  const Result run = testutil::RunShell(
      "env -u LD_LIBRARY_PATH TESSERA_FAKE_GPUS=1 "
      "TESSERA_FAKE_CUDA_SM_COUNT=108 " TESSERA_NODE_BINARY
      " --print-inventory --node-name fake-node --nvml-library " TESSERA_FAKE_NVML_DIR
      "/libnvidia-ml.so.1 --driver-lib-dir " TESSERA_FAKE_NVML_DIR);
  const nlohmann::json j = Parse(run);
  ASSERT_EQ(j["gpus"].size(), 1u) << run.err;
  EXPECT_EQ(j["gpus"][0]["smCount"], 108) << run.err;
}

TEST(NodeIntegration, PrintsTheFakeGpus) {
  const Result run = RunNode(
      "TESSERA_FAKE_GPUS=3 TESSERA_FAKE_GPU_MEMORY=17179869184 "
      "TESSERA_FAKE_SM_COUNT=132 TESSERA_FAKE_NUMA_NODE=1",
      "--print-inventory --node-name fake-node --gpus 0,GPU-face0000-0000-0000-0000-000000000002");
  const nlohmann::json j = Parse(run);
  ASSERT_EQ(j["gpus"].size(), 3u);
  EXPECT_EQ(j["node"], "fake-node");
  EXPECT_EQ(j["generation"], 1);
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& g = j["gpus"][i];
    EXPECT_EQ(g["index"], i);
    EXPECT_EQ(g["uuid"], "GPU-face0000-0000-0000-0000-00000000000" + std::to_string(i));
    EXPECT_EQ(g["model"], "Tessera Fake GPU " + std::to_string(i));
    EXPECT_EQ(g["memoryBytes"], 17179869184ULL);
    EXPECT_EQ(g["smCount"], 132);
    EXPECT_EQ(g["numaNode"], 1);
    EXPECT_EQ(g["health"], "healthy");
    EXPECT_EQ(g["mig"]["mode"], "disabled");
  }
  EXPECT_EQ(j["gpus"][0]["managed"], true);
  EXPECT_EQ(j["gpus"][1]["managed"], false);
  EXPECT_EQ(j["gpus"][2]["managed"], true);

  // The scheduler reads it.
  const nlohmann::json node = {
      {"metadata",
       {{"name", "fake-node"},
        {"annotations", {{std::string(names::kAnnotationInventory), run.out}}}}}};
  StatusOr<placement::Node> parsed = contract::ParseNodeInventory(node);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->gpus.size(), 2u);
}

TEST(NodeIntegration, WithoutAttributesSmCountAndNumaAreUnknown) {
  const nlohmann::json j = Parse(RunNode("TESSERA_FAKE_GPUS=1", "--print-inventory --node-name n"));
  ASSERT_EQ(j["gpus"].size(), 1u);
  EXPECT_EQ(j["gpus"][0]["smCount"], 0);
  EXPECT_EQ(j["gpus"][0]["numaNode"], -1);
}

TEST(NodeIntegration, CriticalXidAndDoubleBitEccMakeAGpuUnhealthy) {
  // 13 is an application XID and 1:sbe a single-bit ECC error: neither is node health.
  const nlohmann::json j =
      Parse(RunNode("TESSERA_FAKE_GPUS=4 TESSERA_FAKE_XID=0:13,1:79,2:sbe,3:dbe",
                    "--print-inventory --node-name n"));
  ASSERT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][0]["health"], "healthy");
  EXPECT_EQ(j["gpus"][1]["health"], "unhealthy");
  EXPECT_EQ(j["gpus"][1]["healthReason"], "XID 79");
  EXPECT_EQ(j["gpus"][2]["health"], "healthy");
  EXPECT_EQ(j["gpus"][3]["health"], "unhealthy");
  EXPECT_EQ(j["gpus"][3]["healthReason"], "ECC double-bit");
}

TEST(NodeIntegration, ListsMigInstances) {
  const nlohmann::json j =
      Parse(RunNode("TESSERA_FAKE_GPUS=2 TESSERA_FAKE_SM_COUNT=128 TESSERA_FAKE_MIG=1:3",
                    "--print-inventory --node-name n"));
  EXPECT_EQ(j["gpus"][0]["mig"]["mode"], "disabled");
  const nlohmann::json& mig = j["gpus"][1]["mig"];
  EXPECT_EQ(mig["mode"], "enabled");
  ASSERT_EQ(mig["instances"].size(), 3u);
  EXPECT_EQ(mig["instances"][2]["uuid"], "MIG-face0000-0000-0000-0001-000000000002");
  EXPECT_EQ(mig["instances"][2]["profile"], "1g.2gb");
  EXPECT_EQ(mig["instances"][2]["memoryBytes"], 2147483648ULL);
  EXPECT_EQ(mig["instances"][2]["smCount"], 16);
}

TEST(NodeIntegration, BadFlagsExitTwoNamingTheFlag) {
  struct Case {
    const char* args;
    const char* names;
  };
  for (const Case& c :
       {Case{"--print-inventory --gpus 0,,1", "--gpus"},
        Case{"--print-inventory --gpus 7", "--gpus"},
        Case{"--print-inventory --interval-s 0", "--interval-s"},
        Case{"--print-inventory --bogus", "--bogus"}, Case{"--gpus all", "--node-name"}}) {
    const Result run = RunNode("TESSERA_FAKE_GPUS=2", c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << ": " << run.err;
    EXPECT_NE(run.err.find(c.names), std::string::npos) << c.args << ": " << run.err;
    EXPECT_EQ(run.out, "") << c.args;
  }
}

// Every file tessera-node reads, in each class of bad input: a missing one exits 3, one it
// cannot take exits 4, and the message names the flag and the path (issue #23). All of it before
// the API server is asked (there is none here) and before anything is served.
TEST(NodeIntegration, EveryFileInputRefusesWhatItCannotTake) {
  const std::string dir = ::testing::TempDir() + "/node-inputs-" + std::to_string(getpid());
  const std::vector<testutil::BadInput> bad = testutil::BadInputFiles(dir);
  const std::string big = testutil::OversizedFile(dir, (std::size_t{16} << 20) + 1);
  std::filesystem::create_directories(dir + "/keys-junk");
  std::ofstream(dir + "/keys-junk/default.pem") << "not a key\n";
  struct Case {
    std::string flag, path;
    int code;
  };
  std::vector<Case> cases = {
      {"--decision-keys", dir + "/no-such-folder", 3},
      {"--decision-keys", dir + "/empty.yaml", 4},  // a file, not a folder
      {"--decision-keys", dir + "/keys-junk", 4},
  };
  for (const std::string flag : {"--policy", "--kubeconfig"}) {
    for (const testutil::BadInput& b : bad) cases.push_back({flag, b.path, b.exit_code});
    cases.push_back({flag, big, 4});
  }
  for (const Case& c : cases) {
    const Result run =
        RunNode("TESSERA_FAKE_GPUS=1", "--node-name n --metrics-listen '' --device-plugin-dir " +
                                           dir + "/no-plugins --state-dir " + dir + "/state " +
                                           c.flag + " " + c.path);
    EXPECT_EQ(run.exit_code, c.code) << c.flag << " " << c.path << ": " << run.err;
    EXPECT_NE(run.err.find(c.flag), std::string::npos)
        << c.flag << " " << c.path << ": " << run.err;
    EXPECT_NE(run.err.find(c.path), std::string::npos)
        << c.flag << " " << c.path << ": " << run.err;
  }
}

TEST(NodeIntegration, NoNvmlExitsFiveSayingSo) {
  const Result run = RunNode("", "--print-inventory --nvml-library /nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(run.exit_code, 5) << run.err;  // unavailable
  EXPECT_NE(run.err.find("NVML not available"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace tessera::agent
