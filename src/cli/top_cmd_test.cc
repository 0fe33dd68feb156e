#include "cli/top_cmd.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/region.h"

#include "observe/observe.h"
#include "testutil/temp_dir.h"

namespace tessera::cli {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

// A node state folder holding one container with 3 GiB in use of its 4 GiB cap.
class TopCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string slot = dir_.path() + "/state/slots/slot-0001";
    std::filesystem::create_directories(slot + "/etc");
    std::filesystem::create_directories(slot + "/run");
    std::filesystem::create_directories(dir_.path() + "/local");
    std::ofstream(slot + "/etc/limits")
        << "version 1\npod u1 team-a/serve-0 server\npriority latency-critical\n"
        << "device GPU-1111 memory=" << 4 * kGiB << " cores=50\n";
    auto m = shm::Mapping::Create(slot + "/run/region", {{"GPU-1111", 4 * kGiB, 50}});
    ASSERT_TRUE(m.ok());
    mapping_ = std::move(*m);
    auto s = shm::ClaimSlot(*mapping_.region(), 1, 1);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(shm::Reserve(*mapping_.region(), *s, 0, 3 * kGiB, 4 * kGiB).ok());
  }

  int Top(std::vector<std::string> args, std::string* out, std::string* err) {
    std::ostringstream o, e;
    int frames = 0;
    TopHooks hooks{[&frames] { return ++frames >= 2; }, [](int) {}};
    const int code = TopCommand(args, o, e, hooks);
    *out = o.str();
    *err = e.str();
    return code;
  }

  testutil::TempDir dir_;
  shm::Mapping mapping_;
};

TEST_F(TopCommandTest, ShowsTheNodesContainersAgainstTheirCaps) {
  std::string out, err;
  ASSERT_EQ(Top({"--once", "--state-dir", dir_.path() + "/state", "--local-dir",
                 dir_.path() + "/local", "--nvml-library", dir_.path() + "/no-nvml.so"},
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("team-a/serve-0"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU ?  GPU-1111"), std::string::npos)
      << out;  // no NVML: the GPU from the container
  EXPECT_NE(out.find("3.0G used, 4.0G capped"), std::string::npos) << out;
  EXPECT_NE(out.find(" LC "), std::string::npos) << out;
  EXPECT_NE(out.find("50%"), std::string::npos) << out;
}

// --json: the same snapshot as one object (docs/protocol.md), once; not with --watch.
TEST_F(TopCommandTest, JsonIsOneSnapshotWithStableNames) {
  std::string out, err;
  ASSERT_EQ(Top({"--json", "--state-dir", dir_.path() + "/state", "--local-dir",
                 dir_.path() + "/local", "--nvml-library", dir_.path() + "/no-nvml.so"},
                &out, &err),
            0)
      << err;
  EXPECT_EQ(out.find("\"containers\":[{\"id\":"), out.find("\"containers\"")) << out;
  EXPECT_NE(out.find("\"namespace\":\"team-a\",\"pod\":\"serve-0\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"priority\":\"latency-critical\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"limitBytes\":4294967296,\"coresPercent\":50"), std::string::npos) << out;
  EXPECT_NE(out.find("\"usedBytes\":3221225472"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one snapshot
  EXPECT_EQ(Top({"--json", "--watch"}, &out, &err), 2);
  EXPECT_NE(err.find("--json and --watch"), std::string::npos) << err;
}

// Not a terminal: one frame and out (as kubectl top), unless --watch: then until stopped.
TEST_F(TopCommandTest, RedrawsUntilStoppedOnlyWhenWatching) {
  for (const bool watch : {false, true}) {
    std::vector<std::string> args = {"--state-dir",    dir_.path() + "/state",
                                     "--local-dir",    dir_.path() + "/local",
                                     "--nvml-library", dir_.path() + "/no-nvml.so"};
    if (watch) args.push_back("--watch");
    std::string out, err;
    ASSERT_EQ(Top(args, &out, &err), 0);
    std::size_t frames = 0;
    for (std::size_t at = out.find("tessera top"); at != std::string::npos;
         at = out.find("tessera top", at + 1))
      ++frames;
    EXPECT_EQ(frames, watch ? 2u : 1u) << out;
  }
  std::string out, err;
  EXPECT_EQ(Top({"--once", "--watch"}, &out, &err), 2);
  EXPECT_NE(err.find("--once and --watch"), std::string::npos) << err;
}

TEST_F(TopCommandTest, ReadsANodesMetrics) {
  observe::Snapshot s;
  s.node = "gpu-node-7";
  s.gpus = {{3, "GPU-1111", "NVIDIA H200", 141 * kGiB, true}};
  s.containers = observe::ReadContainers(observe::StateDirContainers(dir_.path() + "/state"));
  s.containers[0].nvml_bytes = 3 * kGiB + (512ULL << 20);
  s.counts = observe::NodeCounts{1, 0, 0, 0, 0};
  const std::string file = dir_.path() + "/metrics.txt";
  std::ofstream(file) << observe::RenderExposition(s);
  std::string out, err;
  ASSERT_EQ(Top({"--from", file, "--once"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("node gpu-node-7"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU 3  NVIDIA H200  GPU-1111"), std::string::npos) << out;
  EXPECT_NE(out.find("3.5G"), std::string::npos) << out;  // NVML's figure
  EXPECT_NE(out.find("drift: 1 over-cap"), std::string::npos) << out;
}

TEST_F(TopCommandTest, BadInputNamesTheFlag) {
  std::string out, err;
  EXPECT_EQ(Top({"--interval-s", "0"}, &out, &err), 2);
  EXPECT_NE(err.find("--interval-s 0: expected an integer from 1 to 3600"), std::string::npos)
      << err;
  EXPECT_EQ(Top({"--columns", "wide"}, &out, &err), 2);
  EXPECT_NE(err.find("--columns wide"), std::string::npos) << err;
  EXPECT_EQ(Top({"--colour"}, &out, &err), 2);
  EXPECT_NE(err.find("--colour: unknown flag"), std::string::npos) << err;
  EXPECT_EQ(Top({"--from", dir_.path() + "/missing"}, &out, &err), 3);  // not found
  EXPECT_NE(err.find("cannot read"), std::string::npos) << err;
  const std::string junk = dir_.path() + "/junk.txt";
  std::ofstream(junk) << "this is not {metrics\n";
  EXPECT_EQ(Top({"--from", junk}, &out, &err), 4);  // invalid input
  EXPECT_NE(err.find("--from " + junk + ": metrics line 1"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera::cli
