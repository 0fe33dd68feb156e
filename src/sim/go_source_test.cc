#include "sim/go_source.h"

#include <memory>

#include <gtest/gtest.h>

#include "placement/random.h"

namespace tessera::sim {
namespace {

using placement::Rand;

TEST(GoSource, SeedFortyTwoMatchesGo) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  GoSource source(42);
  EXPECT_EQ(source.Int63(), 3440579354231278675);
  EXPECT_EQ(source.Int63(), 608747136543856411);
  EXPECT_EQ(source.Int63(), 5571782338101878760);
}

TEST(GoSource, IntnAfterOneDiscardMatchesGo) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  Rand rand(std::make_unique<GoSource>(42));
  (void)rand.Int63();
  EXPECT_EQ(rand.Intn(8152), 4315);
  EXPECT_EQ(rand.Intn(8152), 4996);
  EXPECT_EQ(rand.Intn(8152), 1382);
}

TEST(GoSource, SeedsAreReducedModuloTwoToTheThirtyOneMinusOne) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  GoSource a(5);
  GoSource b(5 + 0x7fffffffLL);
  GoSource zero(0);
  GoSource special(89482311);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(a.Int63(), b.Int63());
    EXPECT_EQ(zero.Int63(), special.Int63());
  }
}

TEST(GoSource, OutputsAreNonNegative63Bit) {
  GoSource source(7);
  for (int i = 0; i < 10000; ++i) EXPECT_GE(source.Int63(), 0);
}

}  // namespace
}  // namespace tessera::sim
