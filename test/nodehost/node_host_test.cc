// tessera-node-host against the fake driver and NVML: tessera-node prepares each container's slot
// from a signed decision through its device plugin, the container starts with what Allocate and
// the CDI spec hand a runtime in a cgroup named after its pod, and the preload library caps it;
// a forged decision gets no slot; a process of the pod outside the library is flagged by the
// drift check through that cgroup. The same tool runs on the GPU host (test/gpu/node_governor.py).
// Needs root (cgroups, a mount namespace), as tessera-node does.
#include "nodehost/node_host.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/names.h"

#include "nodehost/container_standin.h"
#include "testutil/shell.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::nodehost {
namespace {

using nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class NodeHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (cgroups and a mount namespace)";
  }

  // Runs `scenario` with one fake GPU; the report, or null when the run failed (then logged).
  // `stdin_open`: tessera-node-host's stdin is a pipe that never ends (not the test's own).
  json Run(const json& scenario, const std::string& env = "", bool stdin_open = false) {
    const std::string file = dir_.path() + "/scenario.json";
    std::ofstream(file) << scenario.dump();
    const std::string fifo = dir_.path() + "/stdin";
    const std::string open_stdin =
        stdin_open ? "mkfifo " + fifo + " && exec 3<>" + fifo + " 0<&3 && " : std::string();
    const auto run = testutil::RunShell(
        open_stdin +
        "env LD_LIBRARY_PATH=" TESSERA_FAKE_DIR " TESSERA_FAKE_GPUS=1 TESSERA_FAKE_STATE=" +
        dir_.path() + "/fake-state " + env + " " TESSERA_NODE_HOST " run --scenario " + file +
        " --node-binary " TESSERA_NODE_BINARY " --hook-library " TESSERA_HOOK_LIBRARY " --dir " +
        dir_.path() + "/run -- --cleanup-interval-s 1");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    json report = json::parse(run.out, nullptr, false);
    EXPECT_TRUE(report.is_object()) << run.out << run.err;
    return report.is_object() ? report : json();
  }

  static json Container(const json& report, const std::string& pod, const std::string& name) {
    for (const json& p : report["pods"]) {
      if (p["pod"] != pod) continue;
      for (const json& c : p["containers"]) {
        if (c["name"] == name) return c;
      }
    }
    return json();
  }

  static std::string PodUid(const json& report, const std::string& pod) {
    for (const json& p : report["pods"]) {
      if (p["pod"] == pod) return p["uid"];
    }
    return "";
  }

  static std::vector<json> EventsOf(const json& report, std::string_view reason) {
    std::vector<json> out;
    for (const json& e : report["events"]) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

  testutil::TempDir dir_;
};

TEST_F(NodeHostTest, TheSlotsLimitsReachTheContainerAndItsMemoryIsCapped) {
  const json report = Run({{"node", "n1"},
                           {"pods",
                            {{{"name", "capped"},
                              {"namespace", "ml"},
                              {"containers",
                               {{{"name", "main"},
                                 {"memory", "1Gi"},
                                 {"cores", 30},
                                 {"env", {{"LD_LIBRARY_PATH", TESSERA_FAKE_DIR}}},
                                 {"command",
                                  {"sh", "-c",
                                   "cat /etc/tessera/limits; cat /proc/self/cgroup; "
                                   "echo region=$TESSERA_REGION_FILE; " TESSERA_HOOK_CLIENT
                                   " dlopen alloc plain 134217728"}}}}}}}}});
  ASSERT_TRUE(report.is_object());
  const json c = Container(report, "ml/capped", "main");
  ASSERT_TRUE(c.is_object()) << report.dump(1);
  EXPECT_EQ(c.value("exitCode", -1), 0) << c.dump();
  EXPECT_EQ(c.value("slot", ""), "slot-0000");
  const std::string log = Slurp(c["log"]);
  const std::string uid = PodUid(report, "ml/capped");
  // tessera-node's limits file, at the container path kubelet's mount gives it.
  EXPECT_NE(log.find("pod " + uid + " ml/capped main"), std::string::npos) << log;
  EXPECT_NE(log.find("memory=1073741824 cores=30"), std::string::npos) << log;
  // The cgroup names the pod, as kubelet's cgroupfs driver does.
  EXPECT_NE(log.find("/pod" + uid + "/main"), std::string::npos) << log;
  EXPECT_NE(log.find(std::string("region=") + std::string(names::kPathRegionFile)),
            std::string::npos)
      << log;
  // The preload library came through the mounted /etc/ld.so.preload and capped the client.
  EXPECT_NE(log.find("allocated=1073741824"), std::string::npos) << log;
  EXPECT_NE(log.find("last_result=2"), std::string::npos) << log;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(report["nodeExit"], "exit code 0") << Slurp(report["nodeLog"]);
  EXPECT_TRUE(report["unhandledRequests"].empty()) << report["unhandledRequests"].dump();
}

TEST_F(NodeHostTest, AForgedDecisionGetsNoSlotAndTheRefusalIsAnEvent) {
  const json report =
      Run({{"pods",
            {{{"name", "forged"},
              {"forgeSignature", true},
              {"containers", {{{"name", "main"}, {"memory", "1Gi"}, {"command", {"true"}}}}}}}}});
  ASSERT_TRUE(report.is_object());
  const json c = Container(report, "default/forged", "main");
  ASSERT_TRUE(c.is_object()) << report.dump(1);
  EXPECT_NE(c.value("error", "").find("does not verify"), std::string::npos) << c.dump();
  EXPECT_FALSE(c.contains("exit")) << "a refused container must not start";
  const auto events = EventsOf(report, names::kEventDecisionRejected);
  ASSERT_EQ(events.size(), 1u) << report["events"].dump(1);
  EXPECT_EQ(events[0]["involvedObject"]["name"], "forged");
}

TEST_F(NodeHostTest, AProcessOfThePodOutsideTheLibraryIsFlaggedThroughItsCgroup) {
  // The outside process holds fake GPU memory (so NVML lists it) and writes its own utilization
  // samples: 60 % every 0.2 s for 6 s.
  const std::string util = dir_.path() + "/util";
  std::ofstream(util).close();
  const std::string sneak = std::string(TESSERA_HOOK_CLIENT) +
                            " dlopen hold 1048576 & P=$!; for i in $(seq 30); do echo \"0 $P "
                            "$(date +%s%6N) 60\" >> " +
                            util + "; sleep 0.2; done; kill $P 2>/dev/null; true";
  const json report =
      Run({{"node", "n1"},
           {"pods",
            {{{"name", "mixed"},
              {"containers",
               {{{"name", "main"}, {"memory", "1Gi"}, {"cores", 30}, {"command", {"sleep", "8"}}},
                {{"name", "sneak"},
                 {"outsideLibrary", true},
                 {"env", {{"LD_LIBRARY_PATH", TESSERA_FAKE_DIR}}},
                 {"command", {"sh", "-c", sneak}}}}}}}}},
          "TESSERA_FAKE_NVML_UTIL_FILE=" + util);
  ASSERT_TRUE(report.is_object());
  const auto events = EventsOf(report, names::kEventComputeDrift);
  ASSERT_EQ(events.size(), 1u) << report["events"].dump(1) << Slurp(report["nodeLog"]);
  EXPECT_EQ(events[0]["involvedObject"]["name"], "mixed");
  EXPECT_NE(events[0]["message"].get<std::string>().find("without tessera's library"),
            std::string::npos)
      << events[0].dump();
  EXPECT_NE(Slurp(report["metrics"])
                .find(std::string(names::kMetricNodeComputeDrift) + "{Hostname=\"n1\"} 1"),
            std::string::npos)
      << Slurp(report["metrics"]);
}

// What a run creates on the host (bind targets, cgroups) is gone afterwards, and a container's
// stdin is empty, as under kubelet (a container reading it ends at once).
TEST_F(NodeHostTest, ARunLeavesNothingOnTheHostAndContainersGetNoStdin) {
  const bool had_etc = std::filesystem::exists(names::kPathLimitsFile);
  const json report =
      Run({{"timeoutSeconds", 60},
           {"pods",
            {{{"name", "reader"},
              {"containers",
               {{{"name", "main"},
                 {"memory", "1Gi"},
                 {"command", {"sh", "-c", "read x; echo read=$?; sleep 30 &"}}}}}}}}},
          "", /*stdin_open=*/true);
  ASSERT_TRUE(report.is_object());
  const json c = Container(report, "default/reader", "main");
  ASSERT_TRUE(c.is_object()) << report.dump(1);
  EXPECT_FALSE(c.contains("stoppedAtTimeout")) << c.dump();
  EXPECT_NE(Slurp(c["log"]).find("read=1"), std::string::npos) << Slurp(c["log"]);
  EXPECT_EQ(std::filesystem::exists(names::kPathLimitsFile), had_etc);
  for (const std::string& folder :
       CgroupFolders("tessera-nodehost/pod" + PodUid(report, "default/reader"))) {
    EXPECT_FALSE(std::filesystem::exists(folder)) << folder
                                                  << ": the container's leftover "
                                                     "(sleep 30 &) must be killed with it";
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/tessera-node-host.created"));
}

// SIGTERM ends a run as its timeout does: the containers and tessera-node stopped, the report
// printed, the host cleaned.
TEST_F(NodeHostTest, SigtermStopsTheRunAndCleansUp) {
  const std::string file = dir_.path() + "/scenario.json";
  std::ofstream(file)
      << json({{"pods",
                {{{"name", "long"},
                  {"containers",
                   {{{"name", "main"}, {"memory", "1Gi"}, {"command", {"sleep", "60"}}}}}}}}})
             .dump();
  const auto run = testutil::RunShell(
      "env LD_LIBRARY_PATH=" TESSERA_FAKE_DIR
      " TESSERA_FAKE_GPUS=1 timeout -s TERM 5 " TESSERA_NODE_HOST " run --scenario " +
      file +
      " --node-binary " TESSERA_NODE_BINARY " --hook-library " TESSERA_HOOK_LIBRARY " --dir " +
      dir_.path() + "/run");
  const json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out << run.err;
  EXPECT_TRUE(report["interrupted"].get<bool>());
  const json c = Container(report, "default/long", "main");
  EXPECT_TRUE(c.value("stoppedAtTimeout", false)) << c.dump();
  EXPECT_EQ(report["nodeExit"], "exit code 0") << Slurp(report["nodeLog"]);
  for (const std::string& folder :
       CgroupFolders("tessera-nodehost/pod" + PodUid(report, "default/long"))) {
    EXPECT_FALSE(std::filesystem::exists(folder)) << folder;
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/tessera-node-host.created"));
}

}  // namespace
}  // namespace tessera::nodehost
