// Instruction budgets of the hot hook paths, counted by callgrind (deterministic: no timing).
// Each entry point is called N and 2N times with and without the preload library; the
// per-call difference of the differences is what the hook adds. The budgets keep regressions
// out of the fast paths (a pass-through launch is a few loads and a branch; an accounted
// allocation takes the region lock and updates the allocation table).
#include <cstdlib>
#include <regex>
#include <stdio.h>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "testutil/temp_dir.h"

namespace tessera {
namespace {

std::string Shell(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  pclose(pipe);
  return out;
}

class HookCostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Shell("command -v valgrind").empty()) GTEST_SKIP() << "valgrind is not installed";
  }
  // Instructions collected by callgrind for `program MODE n`.
  double Instructions(const std::string& mode, long n, bool preload) {
    std::string env = "LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR) +
                      " TESSERA_LIMITS_FILE=" + dir_.path() + "/none";
    if (preload) {
      env += " LD_PRELOAD=" + std::string(TESSERA_HOOK_LIBRARY) + " CUDA_DEVICE_MEMORY_LIMIT=8g" +
             " TESSERA_REGION_FILE=" + dir_.path() + "/region";
    }
    const std::string out = Shell(
        "env " + env + " valgrind --tool=callgrind --callgrind-out-file=" + dir_.path() +
        "/cg.out " + TESSERA_HOOK_COST_PROGRAM + " " + mode + " " + std::to_string(n) + " 2>&1");
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("Collected : ([0-9]+)"))) {
      ADD_FAILURE() << out;
      return 0;
    }
    return std::stod(m[1]);
  }
  double PerCall(const std::string& mode, bool preload) {
    constexpr long kN = 20000;
    return (Instructions(mode, 2 * kN, preload) - Instructions(mode, kN, preload)) / kN;
  }
  // The same for launches governed under `tessera run --gpu-cores 90` (a share that does not
  // bind): the launching thread's instructions alone (callgrind's first thread), since the
  // watcher's depend on how long the run takes.
  double GovernedInstructions(long n) {
    const std::string out_file = dir_.path() + "/cg-governed-" + std::to_string(n);
    Shell("env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR) +
          " TESSERA_FAKE_GPU_MEMORY=17179869184 " + TESSERA_CLI +
          " run --gpu-memory 1Gi --gpu-cores 90 --context-bytes 0 --arbiter-dir " + dir_.path() +
          " -- valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=" + out_file +
          " " + TESSERA_HOOK_COST_PROGRAM + " launch " + std::to_string(n) + " 2>&1");
    const std::string summary = Shell("grep -m1 '^summary:' " + out_file + "-01");
    std::smatch m;
    if (!std::regex_search(summary, m, std::regex("summary: ([0-9]+)"))) {
      ADD_FAILURE() << "no callgrind summary for the launching thread: " << summary;
      return 0;
    }
    return std::stod(m[1]);
  }
  testutil::TempDir dir_;
};

TEST_F(HookCostTest, LaunchPassThroughStaysCheap) {
  const double native = PerCall("launch", false);
  const double hooked = PerCall("launch", true);
  RecordProperty("launch_native_instructions", std::to_string(native));
  RecordProperty("launch_hooked_instructions", std::to_string(hooked));
  std::printf("cuLaunchKernel: %.1f instructions native, %.1f through the hook (+%.1f)\n", native,
              hooked, hooked - native);
  // measured +45 (gcc 12, -O2): +37 passing through, +8 for the compute governor's "is anything
  // governed?" test (one load and a branch per device: the H200 A/B run shows no cost beyond
  // noise).
  EXPECT_LE(hooked - native, 55.0);
}

// A governed launch where the share does not bind: the launch path's share of a launch-bound
// loop (on the H200 a launch takes ~4.6 us and this path cost ~12 % of the loop when it took
// ~1,100 instructions; TryContinue's short path and its ~770 are what this keeps).
TEST_F(HookCostTest, GovernedLaunchTakesTheShortPath) {
  constexpr long kN = 20000;
  const double native = PerCall("launch", false);
  const double governed = (GovernedInstructions(2 * kN) - GovernedInstructions(kN)) / kN;
  RecordProperty("launch_governed_instructions", std::to_string(governed));
  std::printf("cuLaunchKernel governed: %.1f instructions (+%.1f over native)\n", governed,
              governed - native);
  EXPECT_GT(governed - native, 100.0);  // it was governed at all
  // measured +770 (gcc 12, -O2); +1,060-1,130 before the short path
  EXPECT_LE(governed - native, 900.0);
}

TEST_F(HookCostTest, AccountedAllocationStaysCheap) {
  const double native = PerCall("alloc", false);
  const double hooked = PerCall("alloc", true);
  std::printf("cuMemAlloc+cuMemFree: %.1f instructions native, %.1f through the hook (+%.1f)\n",
              native, hooked, hooked - native);
  EXPECT_LE(hooked - native, 2000.0);  // measured +1296 (gcc 12, -O2)
}

}  // namespace
}  // namespace tessera
