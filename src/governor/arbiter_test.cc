#include "governor/arbiter.h"

#include <gtest/gtest.h>

namespace tessera::governor {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

Tenant Share(std::uint32_t percent, ComputeMode mode = ComputeMode::kHard,
             PriorityClass priority = PriorityClass::kNormal) {
  return Tenant{percent, mode, priority};
}

TEST(Arbiter, AloneWithoutAHardShareRunsFree) {
  Arbiter a;
  a.Join(1, Share(0));
  a.Observe(1, {0, 5 * kMs, 0});
  a.Decide(5 * kMs);
  EXPECT_FALSE(a.Governing());
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kFree);
  a.Join(2, Share(30, ComputeMode::kWorkConserving));
  a.Decide(6 * kMs);
  EXPECT_TRUE(a.Governing());
}

TEST(Arbiter, HardShareIsHeldOnceItsBucketIsSpent) {
  Arbiter a;
  a.Join(1, Share(10));
  std::uint64_t busy = 0;
  a.Observe(1, {busy, 1, 0});
  a.Decide(1);
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kOpen);
  busy += 10 * kMs;  // a 10 % share's bucket holds 5 ms
  a.Observe(1, {busy, 2 * kMs, 0});
  a.Decide(2 * kMs);
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kHeldShare);
  a.Observe(1, {busy, 2 * kMs, 60 * kMs});
  a.Decide(60 * kMs);  // 58 ms x 10 % refilled 5.8 ms: the 5 ms debt is paid
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kOpen);
}

TEST(Arbiter, LatencyCriticalWorkHoldsLowerClasses) {
  Arbiter a;
  a.Join(1, Share(0, ComputeMode::kHard, PriorityClass::kLatencyCritical));
  a.Join(2, Share(0, ComputeMode::kHard, PriorityClass::kBestEffort));
  a.Join(3, Share(0, ComputeMode::kHard, PriorityClass::kNormal));
  a.Observe(1, {0, 10 * kMs, 0});
  a.Observe(2, {0, 10 * kMs, 0});
  a.Observe(3, {0, 10 * kMs, 0});
  a.Decide(10 * kMs);
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kOpen);
  EXPECT_EQ(a.VerdictFor(2).gate, shm::Gate::kHeldPriority);
  EXPECT_EQ(a.VerdictFor(3).gate, shm::Gate::kHeldPriority);
  EXPECT_LT(a.VerdictFor(2).depth_us, a.VerdictFor(1).depth_us);  // kept shallow
  // The latency-critical container goes idle: the others get the GPU back, one at a time.
  a.Observe(2, {0, 10 * kMs, 13 * kMs});
  a.Observe(3, {0, 10 * kMs, 13 * kMs});
  a.Decide(13 * kMs);
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kOpen);  // idle: its next launch must not wait
  const int open = (a.VerdictFor(2).gate == shm::Gate::kOpen) + (a.VerdictFor(3).gate == shm::Gate::kOpen);
  EXPECT_EQ(open, 1);  // the two others take turns
}

}  // namespace
}  // namespace tessera::governor
