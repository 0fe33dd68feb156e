// The allocation tables (state.h RecordAllocation / TakeAllocation): what a free returns. Runs
// with tessera inactive (no limits in the test process), so no region is touched.
#include <cstdint>

#include <gtest/gtest.h>

#include "hook/state.h"

namespace tessera::hook {
namespace {

class AllocationTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ResetForTest(); }
  void TearDown() override { ResetForTest(); }
};

TEST_F(AllocationTableTest, TakeReturnsWhatWasRecordedOnce) {
  RecordAllocation(0x1000, 2, 4096);
  int device = -1;
  std::uint64_t bytes = 0;
  ASSERT_TRUE(TakeAllocation(0x1000, &device, &bytes));
  EXPECT_EQ(device, 2);
  EXPECT_EQ(bytes, 4096u);
  EXPECT_FALSE(TakeAllocation(0x1000, &device, &bytes));
  EXPECT_FALSE(TakeAllocation(0x2000, &device, &bytes));
}

TEST_F(AllocationTableTest, PointersHandlesAndStreamsAreKeptApart) {
  RecordAllocation(0x1000, 0, 100, Table::kPointers);
  RecordAllocation(0x1000, 1, 200, Table::kHandles);
  int device = -1;
  std::uint64_t bytes = 0;
  EXPECT_FALSE(TakeAllocation(0x1000, &device, &bytes, Table::kStreams));
  ASSERT_TRUE(TakeAllocation(0x1000, &device, &bytes, Table::kHandles));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(bytes, 200u);
  EXPECT_FALSE(TakeAllocation(0x1000, &device, &bytes, Table::kHandles));
  ASSERT_TRUE(TakeAllocation(0x1000, &device, &bytes, Table::kPointers));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(bytes, 100u);
}

TEST_F(AllocationTableTest, ARecordedKeyReusedByTheDriverIsReplaced) {
  RecordAllocation(0x3000, 0, 100, Table::kStreams);
  RecordAllocation(0x3000, 1, 300, Table::kStreams);
  int device = -1;
  std::uint64_t bytes = 0;
  ASSERT_TRUE(TakeAllocation(0x3000, &device, &bytes, Table::kStreams));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(bytes, 300u);
  EXPECT_FALSE(TakeAllocation(0x3000, &device, &bytes, Table::kStreams));
}

TEST_F(AllocationTableTest, ResetForgetsEveryTable) {
  RecordAllocation(0x10, 0, 1, Table::kPointers);
  RecordAllocation(0x10, 0, 1, Table::kHandles);
  RecordAllocation(0x10, 0, 1, Table::kStreams);
  ResetForTest();
  int device = -1;
  std::uint64_t bytes = 0;
  EXPECT_FALSE(TakeAllocation(0x10, &device, &bytes, Table::kPointers));
  EXPECT_FALSE(TakeAllocation(0x10, &device, &bytes, Table::kHandles));
  EXPECT_FALSE(TakeAllocation(0x10, &device, &bytes, Table::kStreams));
}

}  // namespace
}  // namespace tessera::hook
