#include "agent/nvml.h"

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "tessera/nvml_api.h"

#include "testutil/temp_dir.h"

namespace tessera::agent {
namespace {

TEST(Xid, CriticalListIsHardwareFaults) {
  for (std::uint64_t xid : {48u, 62u, 63u, 64u, 74u, 79u, 92u, 94u, 95u, 119u, 120u}) {
    EXPECT_TRUE(IsCriticalXid(xid)) << xid;
  }
  // Application errors: a bad kernel, a page fault, a stopped or preempted context.
  for (std::uint64_t xid : {13u, 31u, 43u, 45u, 68u, 109u, 999u, 0u}) {
    EXPECT_FALSE(IsCriticalXid(xid)) << xid;
  }
}

TEST(Xid, ClassifiesEvents) {
  EXPECT_EQ(ClassifyEvent(nvmlEventTypeXidCriticalError, 79), "XID 79");
  EXPECT_EQ(ClassifyEvent(nvmlEventTypeXidCriticalError, 13), std::nullopt);
  EXPECT_EQ(ClassifyEvent(nvmlEventTypeDoubleBitEccError, 0), "ECC double-bit");
  EXPECT_EQ(ClassifyEvent(nvmlEventTypeSingleBitEccError, 0), std::nullopt);
  EXPECT_EQ(ClassifyEvent(nvmlEventTypeClock, 0), std::nullopt);
}

TEST(NvmlGpuSource, MissingLibraryIsUnavailable) {
  StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(source.status().message().find("dlopen /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << source.status().message();
}

// Per-process utilization through the real loader path, against the fake libnvidia-ml with
// scripted driver samples (TESSERA_FAKE_NVML_UTIL_FILE): per process that ran after `since`, its
// mean since then (as the H200's driver answers), none as an empty list
// (NVML_ERROR_NOT_FOUND), a source that cannot be read as an error naming the call.
// A GPU's device node is /dev/nvidia<minor number>, which need not be NVML's index (PCI order):
// the facts carry both, from the driver.
TEST(NvmlGpuSource, ReadsEachGpusMinorNumberApartFromItsIndex) {
  setenv("TESSERA_FAKE_MINOR_OFFSET", "3", 1);
  auto source = NvmlGpuSource::Open(std::string(TESSERA_FAKE_NVML_DIR) + "/libnvidia-ml.so.1");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  auto gpus = (*source)->Discover();
  unsetenv("TESSERA_FAKE_MINOR_OFFSET");
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_GE(gpus->size(), 2u);
  for (const GpuFacts& g : *gpus) EXPECT_EQ(g.minor, g.index + 3) << g.uuid;
}

TEST(NvmlGpuSource, ReadsProcessUtilizationSinceATimestamp) {
  testutil::TempDir dir;
  const std::string samples = dir.path() + "/utilization";
  std::ofstream(samples) << "# gpu pid timestamp_us sm_percent\n"
                            "0 101 1000 30\n0 102 1000 60\n0 101 2000 40\n1 103 1500 90\n";
  struct Env {  // set for this test only, whatever it asserts
    explicit Env(const std::string& value) {
      setenv("TESSERA_FAKE_NVML_UTIL_FILE", value.c_str(), 1);
    }
    ~Env() { unsetenv("TESSERA_FAKE_NVML_UTIL_FILE"); }
  } env(samples);
  auto source = NvmlGpuSource::Open(std::string(TESSERA_FAKE_NVML_DIR) + "/libnvidia-ml.so.1");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  auto gpus = (*source)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_GE(gpus->size(), 2u);
  const std::string gpu0 = (*gpus)[0].uuid;
  auto all = (*source)->ProcessUtilization(gpu0, 0);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  // Each process's mean over the stamps since: 102 ran at 1000 only.
  EXPECT_EQ(*all, (std::vector<UtilizationSample>{{101, 2000, 35}, {102, 2000, 30}}));
  auto later = (*source)->ProcessUtilization(gpu0, 1000);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(*later, (std::vector<UtilizationSample>{{101, 2000, 40}}));
  auto none = (*source)->ProcessUtilization(gpu0, 2000);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  {  // more samples than the first buffer holds: it grows
    std::ofstream many(samples);
    for (int i = 1; i <= 100; ++i) many << "0 " << 200 + i << " 5000 10\n";
  }
  auto grown = (*source)->ProcessUtilization(gpu0, 0);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(grown->size(), 100u);
  std::ofstream(samples) << "0 101 not-a-number 30\n";
  auto broken = (*source)->ProcessUtilization(gpu0, 0);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("nvmlDeviceGetProcessUtilization(" + gpu0 + ")"),
            std::string::npos)
      << broken.status().message();
}

}  // namespace
}  // namespace tessera::agent
