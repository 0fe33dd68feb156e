#include "cli/run_cmd.h"

#include <gtest/gtest.h>

#include "tessera/quantity.h"

#include "testutil/status_matchers.h"

namespace tessera::cli {
namespace {

TEST(RunArgs, ParsesTheCommandVerbatim) {
  auto o =
      ParseRunArgs({"--gpu-memory", "4Gi", "--gpu", "1", "--", "python3", "-c", "--gpu-memory"});
  ASSERT_OK(o);
  EXPECT_EQ(o->gpu_memory_bytes, 4 * kGiB);
  EXPECT_EQ(o->gpus, std::vector<std::string>{"1"});
  EXPECT_TRUE(o->measure_context);
  ASSERT_EQ(o->command.size(), 3u);
  EXPECT_EQ(o->command[2], "--gpu-memory");
}

// --flag=value as well as --flag value, as everywhere else; what follows -- is the command's.
TEST(RunArgs, TakesFlagEqualsValue) {
  auto o = ParseRunArgs({"--gpu-memory=4Gi", "--gpu-cores=30", "--priority=best-effort",
                         "--fail-closed", "--", "x", "--gpu-memory=1"});
  ASSERT_OK(o);
  EXPECT_EQ(o->gpu_memory_bytes, 4 * kGiB);
  EXPECT_EQ(o->gpu_cores, 30u);
  EXPECT_EQ(o->priority, PriorityClass::kBestEffort);
  EXPECT_TRUE(o->fail_closed);
  EXPECT_EQ(o->command, (std::vector<std::string>{"x", "--gpu-memory=1"}));
}

TEST(RunArgs, SeveralGpus) {
  auto o = ParseRunArgs({"--gpu-memory", "1Gi", "--gpu", "0,GPU-abc", "--", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->gpus, (std::vector<std::string>{"0", "GPU-abc"}));
  EXPECT_FALSE(ParseRunArgs({"--gpu-memory", "1Gi", "--gpu", "0,,1", "--", "x"}).ok());
  EXPECT_FALSE(ParseRunArgs({"--gpu-memory", "1Gi", "--gpu", "1,1", "--", "x"}).ok());
}

TEST(RunArgs, ContextBytes) {
  auto o = ParseRunArgs({"--gpu-memory", "2Gi", "--context-bytes", "512Mi", "--", "x"});
  ASSERT_OK(o);
  EXPECT_FALSE(o->measure_context);
  EXPECT_EQ(o->context_bytes, 512 * kMiB);
}

TEST(RunArgs, ComputeSharePriorityAndMode) {
  auto o = ParseRunArgs({"--gpu-cores", "30", "--compute", "work-conserving", "--priority",
                         "best-effort", "--mode", "mps", "--", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->gpu_memory_bytes, 0u);  // no memory cap asked
  EXPECT_EQ(o->gpu_cores, 30u);
  EXPECT_EQ(o->compute, ComputeMode::kWorkConserving);
  EXPECT_EQ(o->priority, PriorityClass::kBestEffort);
  EXPECT_EQ(o->mode, SharingMode::kMps);
  auto windowed = ParseRunArgs({"--gpu-cores", "30", "--compute-window", "1000", "--", "x"});
  ASSERT_OK(windowed);
  EXPECT_EQ(windowed->compute_window_ms, 1000u);
  auto defaults = ParseRunArgs({"--gpu-cores", "100", "--", "x"});
  ASSERT_OK(defaults);
  EXPECT_EQ(defaults->compute, ComputeMode::kHard);
  EXPECT_EQ(defaults->priority, PriorityClass::kNormal);
  EXPECT_EQ(defaults->mode, SharingMode::kShared);
}

TEST(RunArgs, TheLatencyCriticalReserveUnderMps) {
  auto o = ParseRunArgs(
      {"--mode", "mps", "--priority", "best-effort", "--mps-lc-reserve", "35", "--", "x"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->spatial.lc_reserve_percent, 35u);
  auto shared_low = ParseRunArgs({"--gpu-cores", "5", "--", "x"});  // a time share: no floor
  ASSERT_TRUE(shared_low.ok());
}

TEST(RunArgs, BadInputNamesTheFlag) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--", "x"}, "nothing to enforce: give --gpu-memory, --gpu-cores, --priority or --mode"},
      {{"--gpu-cores", "0", "--", "x"},
       "--gpu-cores: \"0\" is not a whole percent of one GPU, 1-100"},
      {{"--gpu-cores", "101", "--", "x"}, "--gpu-cores: \"101\" is not a whole percent"},
      {{"--gpu-cores", "30%", "--", "x"}, "--gpu-cores: \"30%\""},
      {{"--gpu-cores", "30", "--compute", "soft", "--", "x"}, "--compute"},
      {{"--gpu-cores", "30", "--compute", "soft", "--", "x"}, "hard, work-conserving"},
      {{"--gpu-cores", "30", "--compute-window", "5", "--", "x"},
       "--compute-window: \"5\" is not a whole number of ms, 10-60000"},
      {{"--gpu-cores", "30", "--compute-window", "1s", "--", "x"}, "--compute-window: \"1s\""},
      {{"--gpu-memory", "1Gi", "--compute-window", "1000", "--", "x"},
       "--compute-window: applies to a hard share (--gpu-cores N --compute hard)"},
      {{"--gpu-cores", "30", "--compute", "work-conserving", "--compute-window", "1000", "--", "x"},
       "--compute-window: applies to a hard share"},
      {{"--priority", "urgent", "--", "x"}, "--priority"},
      {{"--priority", "urgent", "--", "x"}, "latency-critical, normal, best-effort"},
      {{"--mode", "exclusive", "--", "x"}, "--mode: tessera run runs shared or mps"},
      {{"--mode", "mps", "--gpu", "0,1", "--", "x"}, "--mode mps: one GPU per run"},
      {{"--mode", "mps", "--gpu-cores", "5", "--", "x"},
       "--gpu-cores: 5 under mode mps is an SM limit below the floor of 10 %; accepted: 10-100, "
       "or mode shared"},
      {{"--mode", "mps", "--mps-lc-reserve", "95", "--", "x"},
       "--mps-lc-reserve: \"95\" is not a whole percent of the SMs, 0-90"},
      {{"--mode", "mps", "--mps-lc-reserve", "x", "--", "x"}, "--mps-lc-reserve: \"x\""},
      {{"--gpu-memory", "4Gi"}, "no command after --"},
      {{"--gpu-memory", "4 Gi", "--", "x"}, "--gpu-memory: \"4 Gi\" contains whitespace"},
      {{"--gpu-memory", "0", "--", "x"}, "--gpu-memory: must be more than 0"},
      {{"--gpu-memory"}, "--gpu-memory needs a value"},
      {{"--gpu-memory", "--", "true"}, "--gpu-memory needs a value before --"},
      {{"--gpu-memory=1Gi", "--keep=yes", "--", "x"}, "--keep takes no value"},
      {{"--gpu-cores=0", "--", "x"}, "--gpu-cores: \"0\" is not a whole percent"},
      {{"--gpu-memory", "1Gi", "--colour", "--", "x"}, "unknown argument \"--colour\""},
      {{"--gpu-memory", "1Gi", "--context-bytes", "lots", "--", "x"},
       "--context-bytes (auto or a quantity)"},
  };
  for (const auto& [args, want] : cases) {
    auto o = ParseRunArgs(args);
    ASSERT_FALSE(o.ok());
    EXPECT_NE(o.status().message().find(want), std::string::npos) << o.status().message();
  }
}

}  // namespace
}  // namespace tessera::cli
