#include "tessera/limits.h"

#include <gtest/gtest.h>

#include "tessera/quantity.h"

#include "testutil/status_matchers.h"

namespace tessera {
namespace {

TEST(LimitsFile, ParsesAndRoundTrips) {
  auto l = ParseLimitsFile(
      "# comment\nversion 1\npod 6b1f ml/train-0 train\nenforcement fail-closed\n"
      "priority latency-critical\nmode shared\ncompute work-conserving\n"
      "device GPU-aaaa memory=8589934592 cores=50 context=536870912 stream=573440\n"
      "device GPU-bbbb memory=1024\n");
  ASSERT_OK(l);
  EXPECT_TRUE(l->fail_closed);
  EXPECT_EQ(l->priority, PriorityClass::kLatencyCritical);
  EXPECT_EQ(l->compute, ComputeMode::kWorkConserving);
  ASSERT_EQ(l->devices.size(), 2u);
  EXPECT_EQ(l->devices[0].memory_bytes, 8 * kGiB);
  EXPECT_EQ(l->devices[0].cores_percent, 50u);
  EXPECT_EQ(l->devices[0].context_bytes, 512 * kMiB);
  EXPECT_EQ(l->devices[0].stream_bytes, 560 * kKiB);
  EXPECT_EQ(l->devices[1].stream_bytes, 0u);
  auto again = ParseLimitsFile(FormatLimitsFile(*l));
  ASSERT_OK(again);
  EXPECT_EQ(FormatLimitsFile(*again), FormatLimitsFile(*l));
  EXPECT_EQ(l->compute_window_ms, 0u);
  auto windowed =
      ParseLimitsFile("version 1\ncompute hard window=1000\ndevice GPU-a memory=1 cores=30\n");
  ASSERT_OK(windowed);
  EXPECT_EQ(windowed->compute, ComputeMode::kHard);
  EXPECT_EQ(windowed->compute_window_ms, 1000u);
  auto windowed_again = ParseLimitsFile(FormatLimitsFile(*windowed));
  ASSERT_OK(windowed_again);
  EXPECT_EQ(windowed_again->compute_window_ms, 1000u);
}

TEST(LimitsFile, RejectsBadFilesNamingTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"device GPU-a memory=1\n", "line 1: the first line must be 'version 1'"},
      {"version 2\n", "line 1: version must be 1"},
      {"version 1\ndevice GPU-a\n", "line 2: device needs UUID and memory=BYTES"},
      {"version 1\ndevice GPU-a cores=5\n", "line 2: device needs memory=BYTES"},
      {"version 1\ndevice GPU-a memory=4Gi\n", "line 2: memory=\"4Gi\" is not a byte count"},
      {"version 1\ndevice GPU-a memory=1 cores=101\n", "cores=\"101\" is not 0-100"},
      {"version 1\ndevice GPU-a memory=1 colour=red\n", "unknown device field \"colour\""},
      {"version 1\ndevice GPU-a memory=1 stream=big\n",
       "line 2: stream=\"big\" is not a byte count"},
      {"version 1\ndevice GPU-a memory=1\ndevice GPU-a memory=2\n",
       "line 3: device GPU-a is listed twice"},
      {"version 1\nlimit 5\n", "line 2: unknown keyword \"limit\""},
      {"version 1\nenforcement strict\n", "enforcement must be fail-open or fail-closed"},
      {"version 1\npriority urgent\n", "\"urgent\" is not a priority class"},
      {"version 1\nmode timeslice\n", "\"timeslice\" is not a sharing mode"},
      {"version 1\ncompute soft\n",
       "line 2: \"soft\" is not a compute mode; accepted: hard, work-conserving"},
      {"version 1\ncompute\n", "line 2: compute needs one of: hard, work-conserving"},
      {"version 1\ncompute hard window=5\n",
       "line 2: \"window=5\": only compute hard takes window=MS, 10-60000 ms"},
      {"version 1\ncompute hard window=1s\n", "\"window=1s\": only compute hard takes window=MS"},
      {"version 1\ncompute hard burst=100\n", "\"burst=100\""},
      {"version 1\ncompute work-conserving window=1000\n", "only compute hard takes window=MS"},
      {"version 1\ncompute hard window=1000 more\n", "(hard may add window=MS)"},
      {"version 1\ndevice GPU-\xc3\xa9 memory=1\n", "non-ASCII"},
      {"version 1\ndevice GPU-a memory=99999999999999999999\n", "is not a byte count"},
  };
  for (const auto& [text, want] : cases) {
    auto l = ParseLimitsFile(text);
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_NE(l.status().message().find(want), std::string::npos) << l.status().message();
    EXPECT_NE(l.status().message().find("accepted"), std::string::npos);
  }
}

TEST(Hami, MemoryUnitsAreHamisNotKubernetes) {
  EXPECT_EQ(*ParseHamiMemory("4096m"), 4 * kGiB);  // pinned: 4096m is 4 GiB
  EXPECT_EQ(*ParseHamiMemory("4g"), 4 * kGiB);
  EXPECT_EQ(*ParseHamiMemory("4G"), 4 * kGiB);
  EXPECT_EQ(*ParseHamiMemory("512k"), 512 * kKiB);
  EXPECT_EQ(*ParseHamiMemory("1000"), 1000u);
  EXPECT_FALSE(ParseHamiMemory("4Gi").ok());
  EXPECT_FALSE(ParseHamiMemory("4 g").ok());
  EXPECT_FALSE(ParseHamiMemory("").ok());
  EXPECT_FALSE(ParseHamiMemory("-1m").ok());
  EXPECT_FALSE(ParseHamiMemory("99999999999999g").ok());
}

TEST(Hami, ReadsTheEnvironmentContract) {
  const char* env[] = {"PATH=/bin",
                       "CUDA_DEVICE_MEMORY_LIMIT=4096m",
                       "CUDA_DEVICE_MEMORY_LIMIT_1=2g",
                       "CUDA_DEVICE_SM_LIMIT=30",
                       "CUDA_DEVICE_MEMORY_LIMIT_X=ignored",
                       nullptr};
  auto h = ParseHamiEnvironment(env);
  ASSERT_OK(h);
  EXPECT_TRUE(h->any());
  EXPECT_EQ(*h->ForIndex(0), 4 * kGiB);
  EXPECT_EQ(*h->ForIndex(1), 2 * kGiB);
  EXPECT_EQ(*h->sm_percent, 30u);
  const char* bad[] = {"CUDA_DEVICE_MEMORY_LIMIT=lots", nullptr};
  auto b = ParseHamiEnvironment(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("CUDA_DEVICE_MEMORY_LIMIT: \"lots\""), std::string::npos);
  const char* none[] = {"HOME=/root", nullptr};
  EXPECT_FALSE(ParseHamiEnvironment(none)->any());
}

}  // namespace
}  // namespace tessera
