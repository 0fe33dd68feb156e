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
  const int open =
      (a.VerdictFor(2).gate == shm::Gate::kOpen) + (a.VerdictFor(3).gate == shm::Gate::kOpen);
  EXPECT_EQ(open, 1);  // the two others take turns
}

// A turn holder whose measured time stops growing (a fault, a kernel that never ends) keeps
// wanting the GPU; the others still get it once the turn's wall time is up.
TEST(Arbiter, ATurnHolderWhoseTimeStopsGrowingLosesTheTurn) {
  Arbiter a;
  a.Join(1, Share(50, ComputeMode::kWorkConserving));
  a.Join(2, Share(50, ComputeMode::kWorkConserving));
  int held_ticks = 0;
  for (std::uint64_t now = kMs; now <= 200 * kMs; now += kMs / 5) {
    a.Observe(1, {0, now, 0});  // wants the GPU, never measures a nanosecond of work
    a.Observe(2, {0, 0, now});  // waits at its gate
    a.Decide(now);
    held_ticks += a.VerdictFor(2).gate != shm::Gate::kOpen;
  }
  EXPECT_LT(held_ticks, 1000);  // 1,000 ticks = the whole 200 ms
  EXPECT_EQ(a.VerdictFor(2).gate == shm::Gate::kOpen || a.VerdictFor(1).gate == shm::Gate::kOpen,
            true);
}

// A best-effort work-conserving share that borrowed alone is not starved for it afterwards.
TEST(Arbiter, BorrowingLeavesNoDebt) {
  Arbiter a;
  a.Join(1, Share(30, ComputeMode::kWorkConserving, PriorityClass::kBestEffort));
  std::uint64_t busy = 0, now = 0;
  for (int i = 0; i < 10'000; ++i) {  // 10 s alone at 100 %
    now += kMs;
    busy += kMs;
    a.Observe(1, {busy, now, 0});
    a.Decide(now);
  }
  a.Join(2, Share(0));  // normal work arrives: best-effort now gets its 30 %, no more
  int open = 0;
  std::uint64_t normal_busy = 0;
  for (int i = 0; i < 1000; ++i) {  // the next second: whoever is open runs
    now += kMs;
    if (a.VerdictFor(1).gate == shm::Gate::kOpen) busy += kMs;
    if (a.VerdictFor(2).gate == shm::Gate::kOpen) normal_busy += kMs;
    a.Observe(1, {busy, now, now});
    a.Observe(2, {normal_busy, now, 0});
    a.Decide(now);
    open += a.VerdictFor(1).gate == shm::Gate::kOpen;
  }
  EXPECT_GT(open, 200);  // about its share (30 %), not zero while a 7 s "debt" is repaid
  EXPECT_LT(open, 400);
}

// Spatial priority: an MPS client whose SM limit leaves the LC reserve is neither held nor made
// shallow while a latency-critical container runs; one without (time-sliced, or an MPS client
// that does not yield) is held, and keeps one launch in flight while an LC one is present.
TEST(Arbiter, ClientsThatLeaveTheLcItsSmsAreNotHeldForPriority) {
  Arbiter a;
  Tenant lc = Share(0, ComputeMode::kHard, PriorityClass::kLatencyCritical);
  lc.spatial = true;
  Tenant yielding = Share(0, ComputeMode::kHard, PriorityClass::kBestEffort);
  yielding.spatial = true;
  yielding.yields_sms = true;
  Tenant sliced = Share(0, ComputeMode::kHard, PriorityClass::kBestEffort);
  a.Join(1, lc);
  a.Join(2, yielding);
  a.Join(3, sliced);
  for (int id : {1, 2, 3}) a.Observe(id, {0, 10 * kMs, 0});
  a.Decide(10 * kMs);
  EXPECT_EQ(a.VerdictFor(1).gate, shm::Gate::kOpen);
  EXPECT_EQ(a.VerdictFor(2).gate, shm::Gate::kOpen);
  EXPECT_EQ(a.VerdictFor(2).depth_us, ArbiterOptions{}.spatial_depth_us);
  EXPECT_EQ(a.VerdictFor(3).gate, shm::Gate::kHeldPriority);
  EXPECT_EQ(a.VerdictFor(3).depth_us, shm::kDepthOneLaunchUs);
}

}  // namespace
}  // namespace tessera::governor
