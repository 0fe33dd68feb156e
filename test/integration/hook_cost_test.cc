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

TEST_F(HookCostTest, AccountedAllocationStaysCheap) {
  const double native = PerCall("alloc", false);
  const double hooked = PerCall("alloc", true);
  std::printf("cuMemAlloc+cuMemFree: %.1f instructions native, %.1f through the hook (+%.1f)\n",
              native, hooked, hooked - native);
  EXPECT_LE(hooked - native, 2000.0);  // measured +1296 (gcc 12, -O2)
}

}  // namespace
}  // namespace tessera
