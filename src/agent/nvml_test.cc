#include "agent/nvml.h"

#include <gtest/gtest.h>

#include "tessera/nvml_api.h"

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

}  // namespace
}  // namespace tessera::agent
