#include "k8s/rate_limiter.h"

#include <gtest/gtest.h>

#include "k8s/backoff.h"

namespace tessera::k8s {
namespace {

using Clock = TokenBucket::Clock;
using std::chrono::milliseconds;

// Time is injected: t0 is an arbitrary point, nothing sleeps.
const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
const Clock::time_point kNever = Clock::time_point::max();

TEST(TokenBucket, BurstThenQps) {
  TokenBucket bucket(/*qps=*/10, /*burst=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(t0, kNever), t0) << i;
  // Empty: the next tokens arrive every 100 ms, each reserved by one caller.
  EXPECT_EQ(bucket.Reserve(t0, kNever), t0 + milliseconds(100));
  EXPECT_EQ(bucket.Reserve(t0, kNever), t0 + milliseconds(200));
  EXPECT_NEAR(bucket.TokensAt(t0), -2.0, 1e-9);
  // 500 ms later the two reservations are paid and 3 more tokens have come (burst caps at 3).
  EXPECT_NEAR(bucket.TokensAt(t0 + milliseconds(500)), 3.0, 1e-9);
  EXPECT_NEAR(bucket.TokensAt(t0 + milliseconds(5000)), 3.0, 1e-9);
}

TEST(TokenBucket, RefillsWithElapsedTime) {
  TokenBucket bucket(/*qps=*/100, /*burst=*/1);
  EXPECT_EQ(bucket.Reserve(t0, kNever), t0);
  EXPECT_EQ(bucket.Reserve(t0 + milliseconds(4), kNever), t0 + milliseconds(10));
  EXPECT_EQ(bucket.Reserve(t0 + milliseconds(30), kNever), t0 + milliseconds(30));
}

TEST(TokenBucket, DeadlineRefusesWithoutTakingAToken) {
  TokenBucket bucket(/*qps=*/1, /*burst=*/1);
  EXPECT_EQ(bucket.Reserve(t0, kNever), t0);
  EXPECT_EQ(bucket.Reserve(t0, t0 + milliseconds(999)), std::nullopt);
  EXPECT_NEAR(bucket.TokensAt(t0), 0.0, 1e-9);  // the refused call took nothing
  EXPECT_EQ(bucket.Reserve(t0, t0 + milliseconds(1000)), t0 + milliseconds(1000));
}

TEST(TokenBucket, TimeGoingBackwardsIsIgnoredAndZeroQpsIsUnlimited) {
  TokenBucket bucket(/*qps=*/10, /*burst=*/1);
  EXPECT_EQ(bucket.Reserve(t0, kNever), t0);
  EXPECT_EQ(bucket.Reserve(t0 - milliseconds(50), kNever), t0 + milliseconds(100));
  TokenBucket unlimited(/*qps=*/0, /*burst=*/0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(unlimited.Reserve(t0, t0), t0);
}

TEST(Backoff, DoublesWithJitterUpToTheCapAndResets) {
  Backoff backoff(milliseconds(200), milliseconds(1000), /*seed=*/7);
  const milliseconds ceilings[] = {milliseconds(200), milliseconds(400), milliseconds(800),
                                   milliseconds(1000), milliseconds(1000)};
  for (milliseconds ceiling : ceilings) {
    const milliseconds d = backoff.Next();
    EXPECT_GE(d, ceiling / 2);
    EXPECT_LE(d, ceiling);
  }
  backoff.Reset();
  EXPECT_LE(backoff.Next(), milliseconds(200));
}

}  // namespace
}  // namespace tessera::k8s
