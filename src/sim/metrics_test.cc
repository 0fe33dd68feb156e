#include "sim/metrics.h"

#include <vector>

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(Metrics, PairwiseSumFollowsNumpyBlocking) {
  // 0.1 x 10: numpy's blocked order gives 1.0 exactly where a plain loop gives 0.9999999999999999.
  const std::vector<double> v(10, 0.1);
  double plain = 0;
  for (const double x : v) plain += x;
  EXPECT_NE(plain, 1.0);
  const double r = ((0.1 + 0.1) + (0.1 + 0.1)) + ((0.1 + 0.1) + (0.1 + 0.1));
  EXPECT_EQ(PairwiseSum(v), (r + 0.1) + 0.1);
  // Above 128 elements the array is split at a multiple of 8.
  std::vector<double> big(300);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = 0.01 * static_cast<double>(i % 7);
  EXPECT_EQ(PairwiseSum(big),
            PairwiseSum(std::span(big).subspan(0, 144)) + PairwiseSum(std::span(big).subspan(144)));
}

TEST(Metrics, NumpyRoundIsHalfEvenAfterScaling) {
  EXPECT_EQ(NumpyRound2(51.945), 51.94);  // spec §6.2's example
  EXPECT_EQ(NumpyRound2(0.125), 0.12);
  EXPECT_EQ(NumpyRound2(0.135), 0.14);
}

TEST(Metrics, PythonRoundRoundsTheExactBinaryValue) {
  EXPECT_EQ(PythonRound(2.675, 2), 2.67);  // 2.675 is stored as 2.67499999...
  EXPECT_EQ(PythonRound(0.5, 0), 0.0);
  EXPECT_EQ(PythonRound(1.5, 0), 2.0);
  EXPECT_EQ(PythonRound(2.5, 0), 2.0);
}

TEST(Metrics, DiscretiseUsesNeighboursForEmptyColumns) {
  // 100 GPUs: 1000 milli is 1 % of capacity. Arrivals at 0 %, 2 %, 2 %.
  std::vector<EventRecord> events = {
      {0, 0, 0, 100000}, {2000, 2000, 0, 98000}, {2000, 1000, 0, 99000}};
  const Curve c = Discretise(events, 100, 3);
  ASSERT_EQ(c.alloc.size(), 4U);
  EXPECT_EQ(*c.alloc[0], 0.0);
  EXPECT_EQ(*c.alloc[1], NumpyRound2((0.0 + 2.0 + 1.0) / 3));  // columns 0 and 2
  EXPECT_EQ(*c.alloc[2], 1.5);
  EXPECT_EQ(*c.alloc[3], 1.5);  // only column 2 is a neighbour
}

TEST(Metrics, EmptyNeighbourhoodLeavesTheCellEmpty) {
  std::vector<EventRecord> events = {{0, 0, 0, 1000}};
  const Curve c = Discretise(events, 1, 5);
  EXPECT_TRUE(c.alloc[0].has_value());
  EXPECT_TRUE(c.alloc[1].has_value());
  EXPECT_FALSE(c.alloc[2].has_value());
}

}  // namespace
}  // namespace tessera::sim
