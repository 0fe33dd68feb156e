#include "placement/random.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

namespace tessera::placement {
namespace {

Rand MakeRand(std::uint64_t seed) { return Rand(std::make_unique<SplitMixSource>(seed)); }

TEST(Rand, PermIsAPermutation) {
  Rand rand = MakeRand(3);
  std::vector<int> p = rand.Perm(1000);
  std::sort(p.begin(), p.end());
  std::vector<int> want(1000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(p, want);
}

TEST(Rand, DrawsStayInRange) {
  Rand rand = MakeRand(9);
  for (int n : {1, 2, 3, 7, 8, 1000, 8152, 1 << 30}) {
    for (int i = 0; i < 200; ++i) {
      const int v = rand.Intn(n);
      EXPECT_GE(v, 0);
      EXPECT_LT(v, n);
      const std::int32_t w = rand.Int31nLemire(n);
      EXPECT_GE(w, 0);
      EXPECT_LT(w, n);
    }
  }
}

TEST(Rand, ShuffleKeepsTheElements) {
  Rand rand = MakeRand(5);
  std::vector<int> v(100);
  std::iota(v.begin(), v.end(), 0);
  rand.Shuffle(100, [&](int i, int j) {
    std::swap(v[static_cast<std::size_t>(i)], v[static_cast<std::size_t>(j)]);
  });
  EXPECT_FALSE(std::is_sorted(v.begin(), v.end()));
  std::sort(v.begin(), v.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], i);
}

TEST(Rand, IntnIsRoughlyUniform) {
  Rand rand = MakeRand(11);
  std::vector<int> counts(10);
  for (int i = 0; i < 100000; ++i) ++counts[static_cast<std::size_t>(rand.Intn(10))];
  for (const int c : counts) {
    EXPECT_GT(c, 9000);
    EXPECT_LT(c, 11000);
  }
}

}  // namespace
}  // namespace tessera::placement
