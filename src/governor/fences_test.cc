#include "governor/fences.h"

#include <deque>
#include <map>
#include <memory>
#include <random>

#include <gtest/gtest.h>

namespace tessera::governor {
namespace {

// Events as timestamps on a simulated clock: an event holds the moment it completes.
class TimestampEvents : public EventApi {
 public:
  std::uint64_t now = 0;
  void* Create() override {
    events_.push_back(std::make_unique<std::uint64_t>(kNever));
    return events_.back().get();
  }
  void Destroy(void*) override {}
  State Query(void* event) override {
    const std::uint64_t at = *static_cast<std::uint64_t*>(event);
    return at == kNever ? State::kError : at <= now ? State::kDone : State::kPending;
  }
  bool ElapsedNs(void* from, void* to, std::uint64_t* ns) override {
    *ns = *static_cast<std::uint64_t*>(to) - *static_cast<std::uint64_t*>(from);
    return true;
  }

 protected:
  static constexpr std::uint64_t kNever = ~0ULL;

 private:
  std::deque<std::unique_ptr<std::uint64_t>> events_;
};

// One stream of a simulated GPU: work runs in order; an event completes when the work queued
// before it has, at that moment of the simulated clock.
class OneStreamGpu final : public TimestampEvents {
 public:
  void Launch(std::uint64_t ns) { busy_until_ = std::max(busy_until_, now) + ns; }
  bool Record(void* event, void*) override {
    *static_cast<std::uint64_t*>(event) = std::max(busy_until_, now);
    ++records;
    return true;
  }
  int records = 0;
  std::uint64_t busy_until() const { return busy_until_; }

 private:
  std::uint64_t busy_until_ = 0;
};

void* const kStream = reinterpret_cast<void*>(0x10);

// One launch of `ns` (of kind `key`) on the simulated stream, through the tracker.
template <typename Gpu>
void LaunchOn(FenceTracker& t, Gpu& gpu, std::uint64_t ns, std::uint64_t key = 0) {
  ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, key));
  gpu.Launch(ns);
  t.AfterLaunch(kStream, gpu.now);
}

// Learns the kind's estimate of `ns` (its first two launches are probes), polled.
void LearnKind(FenceTracker& t, OneStreamGpu& gpu, std::uint64_t ns) {
  LaunchOn(t, gpu, ns);
  LaunchOn(t, gpu, ns);
  gpu.now += 1'000'000;
  EXPECT_EQ(t.Poll(), 2 * ns);
}

// Fences what is open, lets the GPU finish and takes the rest of the measured time.
template <typename Gpu>
std::uint64_t Drain(FenceTracker& t, Gpu& gpu) {
  t.FenceAll(gpu.now);
  gpu.now += 1'000'000;
  return t.Poll();
}

TEST(FenceTracker, MeasuresBusyTimeNotIdleTime) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu);
  // Two bursts of 50 us kernels with a long idle gap between them, synchronized each time.
  std::uint64_t busy = 0;
  int records_before = 0;
  for (int burst = 0; burst < 2; ++burst) {
    records_before = gpu.records;
    for (int i = 0; i < 40; ++i) LaunchOn(t, gpu, 50'000);
    t.FenceAll(gpu.now);
    gpu.now += 10'000'000;  // everything has finished, then the GPU sat idle
    busy += t.Poll();
  }
  EXPECT_EQ(busy, 2 * 40 * 50'000u);
  EXPECT_FALSE(t.HasWork());
  // Sparse once the estimate is learned: a start event, then a fence per quantum (400 us = 8
  // kernels), not one per launch; a probe (one launch in 32 at random) costs two more.
  EXPECT_LE(gpu.records - records_before, 1 + 10 + 2 * 4);
}

TEST(FenceTracker, InFlightEstimateFollowsTheWorkAndItsAge) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu);
  LaunchOn(t, gpu, 100'000'000);  // a 100 ms kernel
  EXPECT_TRUE(t.Learning());      // no completion yet: one segment at a time
  gpu.now += 30'000'000;
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 30'000'000u);  // at least as old as it is
  gpu.now += 80'000'000;
  EXPECT_EQ(t.Poll(), 100'000'000u);
  EXPECT_FALSE(t.Learning());
  LaunchOn(t, gpu, 100'000'000);
  LaunchOn(t, gpu, 100'000'000);
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 199'000'000u);
  // Waiting for one of these is normal for about its length: the launch path's patience.
  EXPECT_EQ(t.LongestPendingEstimateNs(), 100'000'000u);
}

TEST(FenceTracker, IdleOpenWorkIsFencedOnlyWhereAllowed) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000});  // never fences on its own
  LaunchOn(t, gpu, 10'000);  // learn the kind's 10 us (its first two launches are probes)
  LaunchOn(t, gpu, 10'000);
  gpu.now += 1'000'000;
  EXPECT_EQ(t.Poll(), 20'000u);
  LaunchOn(t, gpu, 10'000);
  gpu.now += 5'000'000;
  t.FenceIdle(gpu.now, 1'000'000, [](void*) { return false; });
  EXPECT_FALSE(t.HasFenced());
  t.FenceIdle(gpu.now, 1'000'000, [](void*) { return true; });
  EXPECT_TRUE(t.HasFenced());
  // Fenced late, after an idle gap: the gap is not counted.
  gpu.now += 1'000'000;
  EXPECT_EQ(t.Poll(), 10'000u);
}

// A segment holds no more estimated work than the depth the launch went under, when that is
// below the quantum: a class held to a small depth (beside a latency-critical tenant) keeps it.
TEST(FenceTracker, ASegmentEndsAtTheDepthWhenThatIsBelowTheQuantum) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 0, 1});  // no quantum, no random probes
  LearnKind(t, gpu, 30'000);
  constexpr std::uint64_t kDepthNs = 100'000;
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(t.HasFenced()) << "fenced after " << i << " launches of 30 us";
    ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, 0));
    gpu.Launch(30'000);
    t.AfterLaunch(kStream, gpu.now, kDepthNs);
  }
  EXPECT_TRUE(t.HasFenced());  // 120 us >= the depth's 100 us
  EXPECT_EQ(Drain(t, gpu), 120'000u);
}

// A synchronize that returned says its work completed before the watcher's poll does: the next
// launches' depth stops counting it (four streams that synchronize every half millisecond waited
// for the poll at every batch on the H200), while the poll still charges it in full.
TEST(FenceTracker, AWaitThatReturnedTakesItsWorkOutOfTheDepth) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 0, 1});  // no quantum, no random probes
  LearnKind(t, gpu, 100'000);
  for (int i = 0; i < 10; ++i) LaunchOn(t, gpu, 100'000);
  t.Fence(kStream, gpu.now);
  const std::uint64_t ticket = t.Ticket();
  gpu.now += 2'000'000;  // the synchronize waited for the 1 ms of work
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 1'000'000u);
  EXPECT_TRUE(t.OverDepth(500'000, gpu.now));
  t.Completed(kStream, ticket);
  EXPECT_EQ(t.InFlightEstimateNs(gpu.now), 0u);
  EXPECT_FALSE(t.OverDepth(500'000, gpu.now));
  EXPECT_FALSE(t.OverDepth(shm::kDepthOneLaunchUs * 1000ULL, gpu.now));  // one launch's depth
  EXPECT_TRUE(t.HasFenced());                                            // not polled yet
  // Work fenced after the ticket (another thread's, say) is still in flight.
  for (int i = 0; i < 3; ++i) LaunchOn(t, gpu, 100'000);
  t.Fence(kStream, gpu.now);
  t.Completed(kStream, ticket);
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 300'000u);
  EXPECT_LT(t.InFlightEstimateNs(gpu.now), 1'000'000u);
  gpu.now += 1'000'000;
  EXPECT_EQ(t.Poll(), 1'300'000u);  // charged in full all the same
  EXPECT_FALSE(t.HasFenced());
  EXPECT_EQ(t.InFlightEstimateNs(gpu.now), 0u);
}

// A stream whose first segment a returned wait showed complete learns its estimate at the poll,
// but its launches no longer wait for that poll meanwhile.
TEST(FenceTracker, AStreamLearningItsEstimateStopsWaitingOnceAWaitReturned) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu);
  LaunchOn(t, gpu, 100'000);  // a probe: fenced at once, no estimate until it is polled
  EXPECT_TRUE(t.Learning());
  EXPECT_TRUE(t.OverDepth(2'000'000, gpu.now));
  const std::uint64_t ticket = t.Ticket();
  gpu.now += 1'000'000;
  t.Completed(kStream, ticket);
  EXPECT_FALSE(t.Learning());
  EXPECT_FALSE(t.OverDepth(2'000'000, gpu.now));
  EXPECT_EQ(t.Poll(), 100'000u);
}

// One stream's wait says nothing of another's; a context's wait covers every stream but a key
// several of the GPU's streams share (a wait from one thread covers its own per-thread stream).
TEST(FenceTracker, AStreamsWaitLeavesTheOtherStreamsInFlight) {
  void* const other = reinterpret_cast<void*>(0x20);
  void* const shared = reinterpret_cast<void*>(0x30);
  OneStreamGpu gpu;
  FenceOptions options{1'000'000'000, 1000, 0, 1};
  options.shared_key = shared;
  FenceTracker t(&gpu, options);
  LearnKind(t, gpu, 100'000);
  for (void* stream : {kStream, other, shared}) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(t.BeforeLaunch(stream, gpu.now, 0));
      gpu.Launch(100'000);
      t.AfterLaunch(stream, gpu.now);
    }
  }
  t.FenceAll(gpu.now);
  const std::uint64_t ticket = t.Ticket();
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 1'200'000u);
  t.Completed(kStream, ticket);
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 800'000u);
  EXPECT_LT(t.InFlightEstimateNs(gpu.now), 1'200'000u);
  t.CompletedAll(ticket);
  EXPECT_GE(t.InFlightEstimateNs(gpu.now), 400'000u);  // the shared key's
  EXPECT_LT(t.InFlightEstimateNs(gpu.now), 800'000u);
  EXPECT_TRUE(t.HasPending());
}

// A launch-bound segment's charge lies where its launches were submitted: 4 us kernels submitted
// every 10 us are laid at 0-4, 10-14 and 20-24 us of the window, not packed at its end.
TEST(LayCharge, PutsEachLaunchWhereItWasSubmitted) {
  const std::vector<Submission> subs = {{0, 4'000}, {10'000, 4'000}, {20'000, 4'000}};
  std::vector<double> scratch;
  std::vector<Span> out;
  LayCharge(1'000'000, subs, 1'000'000, 1'030'000, 12'000, 0, &scratch, &out);
  ASSERT_EQ(out.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].begin_ns, 1'000'000 + 10'000 * i) << i;
    EXPECT_EQ(out[i].end_ns, 1'004'000 + 10'000 * i) << i;
  }
  // Launches queued faster than they run follow each other; the window's end bounds the last.
  out.clear();
  LayCharge(0, {{0, 5'000}, {1'000, 5'000}, {2'000, 5'000}}, 0, 12'000, 12'000, 0, &scratch, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].begin_ns, 0u);
  EXPECT_EQ(out[0].end_ns, 12'000u);
}

// Whatever the submissions (before the window, after it, out of order, unknown estimates), the
// pieces are sorted, disjoint, inside the window, and sum to the charge (to a nanosecond a
// launch) when it fits.
TEST(LayCharge, PiecesAreSortedDisjointInsideTheWindowAndSumToTheCharge) {
  std::uint64_t rng = 12345;
  const auto next = [&rng](std::uint64_t bound) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return bound == 0 ? 0 : rng % bound;
  };
  std::vector<double> scratch;
  for (int trial = 0; trial < 2'000; ++trial) {
    const std::uint64_t first = 1'000'000 + next(200'000);
    const std::uint64_t begin = 1'000'000 + next(100'000);
    const std::uint64_t end = begin + 1 + next(400'000);
    std::vector<Submission> subs(1 + next(600));
    for (Submission& sub : subs) {
      sub.after_first_ns = static_cast<std::uint32_t>(next(500'000));
      sub.estimate_ns = static_cast<std::uint32_t>(next(3) == 0 ? 0 : 1 + next(20'000));
    }
    const std::uint64_t charge = 1 + next(end - begin);
    std::vector<Span> out = {{0, 1}};  // appended to, never touched
    LayCharge(first, subs, begin, end, charge, static_cast<double>(next(10'000)), &scratch, &out);
    ASSERT_EQ(out[0].end_ns, 1u);
    std::uint64_t total = 0;
    for (std::size_t i = 1; i < out.size(); ++i) {
      ASSERT_LT(out[i].begin_ns, out[i].end_ns) << trial;
      ASSERT_GE(out[i].begin_ns, begin) << trial;
      ASSERT_LE(out[i].end_ns, end) << trial;
      if (i > 1) {
        ASSERT_LT(out[i - 1].end_ns, out[i].begin_ns) << trial << ": overlap or touch";
      }
      total += out[i].end_ns - out[i].begin_ns;
    }
    EXPECT_LE(total, charge + subs.size()) << trial;  // a nanosecond of rounding a piece
    EXPECT_GE(total + 2 * subs.size(), charge) << trial;
  }
}

// An open segment on a stream that may not be recorded into (a capture began) is dropped, not
// fenced: nothing of ours goes into the application's graph.
TEST(FenceTracker, WorkOnAStreamThatMayNotBeRecordedIntoIsDropped) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000});
  LaunchOn(t, gpu, 10'000);  // learn the estimate (the first two launches are probes)
  LaunchOn(t, gpu, 10'000);
  gpu.now += 1'000'000;
  t.Poll();
  LaunchOn(t, gpu, 10'000);  // open, not fenced
  const int records = gpu.records;
  t.FenceAll(gpu.now, [](void*) { return false; });
  EXPECT_EQ(gpu.records, records);
  EXPECT_FALSE(t.HasWork());
}

// A launch-bound loop: 5 us kernels launched every 20 us, so the GPU idles 75 % of the time
// between them. A segment's span counts those gaps; its charge is its launches' probed times.
TEST(FenceTracker, ALaunchBoundLoopIsChargedItsKernelsNotItsGaps) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{200'000, 64, 32, 42});
  std::uint64_t busy = 0;
  for (int i = 0; i < 20'000; ++i) {
    LaunchOn(t, gpu, 5'000);
    gpu.now += 20'000;
    if (i % 500 == 499) t.FenceAll(gpu.now);
    busy += t.Poll();
  }
  busy += Drain(t, gpu);
  EXPECT_NEAR(static_cast<double>(busy), 20'000 * 5'000.0, 0.01 * 20'000 * 5'000.0);
  EXPECT_NEAR(t.KindEstimateNs(0), 5'000.0, 1.0);
  // Sparse: far fewer events than launches.
  EXPECT_LT(gpu.records, 20'000 / 4);
}

// Kinds are probed separately: a loop alternating a 2 us and a 40 us kernel with host gaps is
// charged each at its own time.
TEST(FenceTracker, KindsAreEstimatedSeparately) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu);
  std::uint64_t busy = 0;
  for (int i = 0; i < 10'000; ++i) {
    const bool big = i % 2 == 1;
    LaunchOn(t, gpu, big ? 40'000 : 2'000, big ? 2 : 1);
    gpu.now += 60'000;
    busy += t.Poll();
  }
  busy += Drain(t, gpu);
  EXPECT_NEAR(t.KindEstimateNs(1), 2'000.0, 1.0);
  EXPECT_NEAR(t.KindEstimateNs(2), 40'000.0, 1.0);
  EXPECT_NEAR(static_cast<double>(busy), 5'000 * 42'000.0, 0.01 * 5'000 * 42'000.0);
}

// With an epoch, charges are placed on the host clock where the work ran (the simulated GPU's
// clock is the host's here): a burst of work that ended at 1.3 ms is a span ending there.
TEST(FenceTracker, AnEpochPlacesTheBusyTimeOnTheHostClock) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu);
  void* const epoch_stream = reinterpret_cast<void*>(0x20);
  gpu.now = 1'000'000;
  ASSERT_TRUE(t.Calibrate(epoch_stream, [&] { return gpu.now; }));
  LaunchOn(t, gpu, 100'000);
  LaunchOn(t, gpu, 200'000);
  gpu.now += 5'000'000;
  Measured m;
  t.Poll(&m);
  ASSERT_EQ(m.spans.size(), 2u);
  EXPECT_EQ(m.unplaced_ns, 0u);
  EXPECT_EQ(m.spans[0].begin_ns, 1'000'000u);
  EXPECT_EQ(m.spans[0].end_ns, 1'100'000u);
  EXPECT_EQ(m.spans[1].begin_ns, 1'100'000u);
  EXPECT_EQ(m.spans[1].end_ns, 1'300'000u);
  // Without one, the same work is measured but not placed.
  FenceTracker unplaced(&gpu);
  ASSERT_TRUE(unplaced.BeforeLaunch(kStream, gpu.now));
  gpu.Launch(50'000);
  unplaced.AfterLaunch(kStream, gpu.now);
  gpu.now += 1'000'000;
  Measured n;
  unplaced.Poll(&n);
  EXPECT_TRUE(n.spans.empty());
  EXPECT_EQ(n.unplaced_ns, 50'000u);
}

TEST(FenceTracker, KindsOfDifferentSizesAreDifferentKinds) {
  int f = 0;
  EXPECT_NE(LaunchKey(&f, 128, 256), LaunchKey(&f, 256, 128));
  EXPECT_NE(LaunchKey(&f, 128, 256), LaunchKey(&f, 129, 256));
  EXPECT_EQ(LaunchKey(&f, 128, 256), LaunchKey(&f, 128, 256));
  EXPECT_NE(GraphKey(&f), LaunchKey(&f, 0, 0));
  EXPECT_NE(GraphKey(nullptr), 0u);
}

// The real driver's shape (H200, PyTorch): a launch call takes `call` of host time and its kernel
// reaches the GPU as the call returns; anything submitted (a kernel, an event) is picked up by
// the GPU `pickup` later, so an event just recorded on an idle stream is still pending for that
// long. A probe's start event therefore runs ahead of its launch, unless the stream is held at a
// gate until the launch and its fence are queued (Hold / Release).
// `event_ns`: what recording an event costs the stream (the GPU's timestamp write and what it
// waits for); `setup_ns`: a launch's setup on the GPU before its kernel runs. A gated bracket of
// a kernel of `ns` is then ns + setup + event, an empty one event (the H200 showed both).
class LatencyGpu final : public TimestampEvents {
 public:
  LatencyGpu(std::uint64_t call, std::uint64_t pickup, bool gate, std::uint64_t event_ns = 0,
             std::uint64_t setup_ns = 0)
      : call_(call), pickup_(pickup), gate_(gate), event_ns_(event_ns), setup_ns_(setup_ns) {}
  void Launch(std::uint64_t ns) {
    now += call_;
    ns += extra_ns;
    if (held_) {
      queue_.push_back({setup_ns_ + ns, nullptr});
      return;
    }
    busy_until_ = std::max(busy_until_, now + pickup_) + setup_ns_ + ns;
  }
  bool Record(void* event, void*) override {
    auto* at = static_cast<std::uint64_t*>(event);
    if (held_) {
      *at = kNever - 1;  // pending until released
      queue_.push_back({0, at});
    } else {
      busy_until_ = std::max(busy_until_, now + pickup_) + event_ns_;
      *at = busy_until_;
    }
    return true;
  }
  bool Hold(void*) override {
    if (gate_) {
      held_ = true;
      ++holds;
      max_backlog_at_hold =
          std::max(max_backlog_at_hold, busy_until_ > now ? busy_until_ - now : 0);
    }
    return gate_;
  }
  bool CanHold() override { return gate_; }
  // Controls: an empty kernel of `control_ns` (plus the setup every launch costs).
  bool LaunchControl(void*) override {
    if (!controls) return false;
    Launch(control_ns);
    ++control_launches;
    return true;
  }
  std::uint64_t busy_until() const { return busy_until_; }
  bool controls = false;
  std::uint64_t control_ns = 0;
  std::uint64_t extra_ns = 0;  // added to every launch now (waiting for SMs, another context)
  int control_launches = 0;
  int holds = 0;
  std::uint64_t max_backlog_at_hold = 0;  // the GPU's work queued ahead of a Hold, at most
  bool watchdog = false;                  // every gate found opened already at Release
  bool Release() override {               // what queued behind the gate runs back to back from here
    held_ = false;
    std::uint64_t t = std::max(busy_until_, now + pickup_);
    for (const auto& [ns, event] : queue_) {
      if (event != nullptr) {
        t += event_ns_;
        *event = t;
      } else {
        t += ns;
      }
    }
    busy_until_ = t;
    queue_.clear();
    return !watchdog;
  }

 private:
  std::uint64_t call_, pickup_;
  bool gate_;
  std::uint64_t event_ns_, setup_ns_;
  bool held_ = false;
  std::uint64_t busy_until_ = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t*>> queue_;
};

// 2 us kernels every ~24 us, each launch call 4 us with 1 us of pickup: the H200's launch-bound
// PyTorch loop, slowed down. Probes land in the middle of open segments, so each closes a fence
// that is still pending only because the GPU has not reached it yet: taking that for a busy
// stream charged the loop three times its work (what the H200 showed). Behind a gate the probes
// measure the kernels; without one the launch's host time is taken off their spans.
TEST(FenceTracker, ProbesMeasureTheKernelNotItsSubmission) {
  for (const bool gate : {true, false}) {
    LatencyGpu gpu(4'000, 1'000, gate);
    FenceTracker t(&gpu, FenceOptions{200'000, 64, 32, 7});
    std::uint64_t busy = 0;
    for (int i = 0; i < 20'000; ++i) {
      LaunchOn(t, gpu, 2'000, 1);
      gpu.now += 20'000;
      if (i % 256 == 255) t.FenceAll(gpu.now);  // a synchronize
      busy += t.Poll();
    }
    busy += Drain(t, gpu);
    const double truth = 20'000 * 2'000.0;
    EXPECT_NEAR(t.KindEstimateNs(1), 2'000.0, gate ? 1.0 : 200.0) << "gate " << gate;
    EXPECT_EQ(t.stats().probes_held > 0, gate);
    EXPECT_NEAR(static_cast<double>(busy), truth, 0.05 * truth) << "gate " << gate;
  }
}

// A stream with many launches in flight (512: half the H200's queue) is not held for a probe: the
// launch would wait for room in the stream's queue, which a held stream never drains (a CuPy loop
// on a stream of its own blocked 5 ms that way on the H200). Behind that much work the probe's
// start event is still pending when its launch is submitted, so it measures the kernel all the
// same.
TEST(FenceTracker, AStreamWithManyLaunchesInFlightIsNotHeld) {
  LatencyGpu gpu(4'000, 1'000, /*gate=*/true);
  FenceTracker t(&gpu, FenceOptions{200'000, 64, 4, 5, /*min_probe_gap_ns=*/100'000});
  std::uint64_t busy = 0;
  for (int i = 0; i < 4'000; ++i) {  // 100 us kernels launched every 4 us: the queue grows
    LaunchOn(t, gpu, 100'000, 1);
    busy += t.Poll();
  }
  t.FenceAll(gpu.now);
  for (int i = 0; i < 100; ++i) {  // 400 ms of work queued: poll until it has run
    gpu.now += 10'000'000;
    busy += t.Poll();
  }
  EXPECT_GT(gpu.holds, 0);  // while the queue was short
  EXPECT_LT(gpu.max_backlog_at_hold, 513 * 100'000u);
  EXPECT_GT(gpu.max_backlog_at_hold, 64 * 100'000u);  // (held behind more than the old bound)
  EXPECT_NEAR(t.KindEstimateNs(1), 100'000.0, 1'000.0);
  const double truth = 4'000 * 100'000.0;
  EXPECT_NEAR(static_cast<double>(busy), truth, 0.05 * truth);
}

// The polled count of launches in flight lags the GPU by a watcher poll: a launch-bound loop
// may fence thousands of launches between two polls although each has run by the next launch. Its
// probes are held all the same (the newest fences are asked): an unheld probe of a stream that
// has just gone idle may, beside another context, hold that context's turn.
TEST(FenceTracker, AProbeIsHeldWhenItsFencedLaunchesRanThoughNotYetPolled) {
  LatencyGpu gpu(4'000, 1'000, /*gate=*/true);
  FenceTracker t(&gpu, FenceOptions{50'000, 512, 8, 11, /*min_probe_gap_ns=*/0});
  std::uint64_t busy = 0;
  for (int i = 0; i < 20'000; ++i) {
    LaunchOn(t, gpu, 2'000, 1);
    gpu.now += 3'000;
    if (i % 1'000 == 0) busy += t.Poll();  // the watcher, far behind
  }
  busy += Drain(t, gpu);
  const FenceTracker::Stats& st = t.stats();
  // Past the kind's first probes (no estimate yet: never held), every probe was held, about half
  // of them only because the fences were asked (those taken past 512 launches since a poll).
  ASSERT_GT(st.probes_exact, 1'000u);
  EXPECT_GE(st.probes_held + 2, st.probes_exact + st.probes_inexact);
  EXPECT_GT(st.idle_by_query, st.probes_exact / 4);
  EXPECT_NEAR(t.KindEstimateNs(1), 2'000.0, 1.0);
  const double truth = 20'000 * 2'000.0;
  EXPECT_NEAR(static_cast<double>(busy), truth, 0.05 * truth);
}

// Launches not yet fenced count too: a second stream's open segment of 520 launches queued behind
// a long kernel keeps a probe of the first stream from being held.
TEST(FenceTracker, OpenLaunchesOfOtherStreamsCountAgainstAHold) {
  LatencyGpu gpu(1'000, 1'000, /*gate=*/true);
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 0, 3});  // probes: a kind's first two
  void* const other = reinterpret_cast<void*>(0x30);
  // A kind's second probe is held once its first has completed, on an idle device ...
  LaunchOn(t, gpu, 2'000, 5);
  gpu.now += 1'000'000;
  t.Poll();
  int holds = gpu.holds;
  LaunchOn(t, gpu, 2'000, 5);
  EXPECT_EQ(gpu.holds, holds + 1);
  // ... but not with 520 launches open (not yet fenced) on another stream behind long kernels.
  const auto launch_other = [&] {
    ASSERT_TRUE(t.BeforeLaunch(other, gpu.now, 2));
    gpu.Launch(100'000);
    t.AfterLaunch(other, gpu.now);
  };
  LaunchOn(t, gpu, 2'000, 6);
  launch_other();  // the other kind's two probes, completed: its estimate is known
  launch_other();
  gpu.now += 1'000'000;
  t.Poll();
  for (int i = 0; i < 520; ++i) launch_other();  // one open segment (52 ms, below the quantum)
  holds = gpu.holds;
  LaunchOn(t, gpu, 2'000, 6);
  EXPECT_EQ(gpu.holds, holds);
}

// Events that complete when recorded unless told otherwise (pend_next: the next record never
// completes), and a gate that is always there: which fences have run is the test's to say.
class ScriptedGpu final : public TimestampEvents {
 public:
  void Launch(std::uint64_t) {}
  bool Record(void* event, void*) override {
    *static_cast<std::uint64_t*>(event) = pend_next ? kNever - 1 : now;
    pend_next = false;
    return true;
  }
  bool CanHold() override { return true; }
  bool Hold(void*) override {
    ++holds;
    return true;
  }
  bool pend_next = false;
  int holds = 0;
};

// Segments of one stream complete in order, so a completed fence says the older ones have run:
// not so for a key several streams share (every thread's per-thread default stream), where an
// older segment may still be queued on another thread's stream.
TEST(FenceTracker, AKeyOfSeveralStreamsCountsEverySegmentItFenced) {
  for (const bool unordered : {false, true}) {
    ScriptedGpu gpu;
    FenceOptions options{1'000'000'000, 300, 0, 3};  // probes: a kind's first two
    if (unordered) options.shared_key = kStream;
    FenceTracker t(&gpu, options);
    LaunchOn(t, gpu, 0, 1);  // kinds 1 and 3 learn their estimates
    LaunchOn(t, gpu, 0, 1);
    LaunchOn(t, gpu, 0, 3);
    t.Poll();
    for (int i = 0; i < 600; ++i) {  // two segments of 300; the older one's fence never runs
      gpu.pend_next = i == 299;
      LaunchOn(t, gpu, 0, 1);
    }
    const int holds = gpu.holds;
    LaunchOn(t, gpu, 0, 3);  // kind 3's second probe
    EXPECT_EQ(gpu.holds, unordered ? holds : holds + 1) << "unordered " << unordered;
  }
}

// A held probe whose gate the watchdog opened (a launch blocked behind it) may have timed the
// stall: it is charged as a plain segment and feeds no estimate.
TEST(FenceTracker, AProbeWhoseGateWasOpenedByTheWatchdogTimesNothing) {
  LatencyGpu gpu(4'000, 1'000, /*gate=*/true);
  gpu.watchdog = true;
  FenceTracker t(&gpu, FenceOptions{200'000, 64, 4, 5, /*min_probe_gap_ns=*/0});
  for (int i = 0; i < 2'000; ++i) {
    LaunchOn(t, gpu, 2'000, 1);
    gpu.now += 20'000;
    t.Poll();
  }
  Drain(t, gpu);
  ASSERT_GT(gpu.holds, 100);
  EXPECT_EQ(t.stats().holds_broken, static_cast<std::uint64_t>(gpu.holds));
  EXPECT_EQ(t.stats().probes_held, 0u);
}

TEST(FenceTracker, TheEmptyBracketIsTheLeastOfItsTimingsThatDidNotWait) {
  EXPECT_EQ(EmptyBracketNs(std::vector<std::uint64_t>{}, 1'250), 1'250u);
  EXPECT_EQ(EmptyBracketNs(std::vector<std::uint64_t>{0, 0}, 1'250), 1'250u);
  // Five of eight stretched behind other work (the median would be 70 us).
  EXPECT_EQ(EmptyBracketNs(
                std::vector<std::uint64_t>{70'000, 1'300, 0, 69'000, 1'450, 71'000, 1'400, 70'500},
                1'250),
            1'300u);
  // All of them stretched (a flooded GPU): none is the bracket's cost.
  EXPECT_EQ(EmptyBracketNs(std::vector<std::uint64_t>{79'000, 78'000, 80'000, 10'001}, 1'250),
            1'250u);
  EXPECT_EQ(EmptyBracketNs(std::vector<std::uint64_t>{kMaxEmptyBracketNs}, 1'250),
            kMaxEmptyBracketNs);
}

// `launches` launches of 1 us kernels (kind 1), 4 us of host time apart, a synchronize every 256:
// the busy time measured.
std::uint64_t LoopOfMicrosecondKernels(FenceTracker& t, LatencyGpu& gpu, int launches) {
  std::uint64_t busy = 0;
  for (int i = 0; i < launches; ++i) {
    LaunchOn(t, gpu, 1'000, 1);
    gpu.now += 4'000;
    if (i % 256 == 255) t.FenceAll(gpu.now);
    busy += t.Poll();
  }
  return busy + Drain(t, gpu);
}

// A gated probe's span also holds its events' own cost and its launch's setup on the GPU (on the
// H200 2.3 us beyond a kernel's CUPTI record, whatever the kernel): the offset set from them is
// taken off every probe, so that a loop of 1 us kernels is charged 1 us a kernel, not 3.3.
TEST(FenceTracker, TheProbeOffsetIsTakenOffEveryProbe) {
  for (const std::uint64_t offset : {std::uint64_t{2'300}, std::uint64_t{0}}) {
    LatencyGpu gpu(4'000, 1'000, /*gate=*/true, /*event_ns=*/1'250, /*setup_ns=*/1'050);
    FenceTracker t(&gpu, FenceOptions{200'000, 64, 32, 9, /*min_probe_gap_ns=*/4'000'000});
    t.SetProbeOffsetNs(offset);
    const std::uint64_t busy = LoopOfMicrosecondKernels(t, gpu, 20'000);
    const double truth = 20'000 * 1'000.0;
    if (offset != 0) {
      EXPECT_NEAR(t.KindEstimateNs(1), 1'000.0, 1.0);
      EXPECT_NEAR(static_cast<double>(busy), truth, 0.05 * truth);
    } else {  // what the first gated probes did on the H200: several times the kernel
      EXPECT_NEAR(t.KindEstimateNs(1), 3'300.0, 1.0);
      EXPECT_GT(static_cast<double>(busy), 3 * truth);
    }
  }
}

// Another context on the GPU makes every launch's bracket longer, kernel or not (on the H200 ~0.5
// us beside other launch-bound contexts: a fixed offset charged two launch-bound processes 1.3-1.7x
// their kernels). Controls, our empty kernel bracketed in a probe's place, meet the same: their
// mean less the empty kernel's own time is taken off each probe instead, and the loop is charged
// its kernels. Without controls the fixed offset leaves the stretch in every probe.
TEST(FenceTracker, ControlsTakeOffWhatEveryLaunchMeetsBesideItsKernel) {
  for (const bool controls : {true, false}) {
    // events 1.25 us, a launch's setup 1.05 us and 0.6 us more from another context.
    LatencyGpu gpu(4'000, 1'000, /*gate=*/true, /*event_ns=*/1'250, /*setup_ns=*/1'650);
    gpu.controls = controls;
    gpu.control_ns = 300;
    FenceTracker t(&gpu, FenceOptions{200'000, 64, 32, 9, /*min_probe_gap_ns=*/2'000'000});
    t.SetProbeOffsetNs(2'300);  // what one context alone would need taken off
    t.SetControlKernelNs(300);
    const std::uint64_t busy = LoopOfMicrosecondKernels(t, gpu, 40'000);
    const double truth = 40'000 * 1'000.0;
    if (controls) {
      EXPECT_GT(t.stats().controls, 5u);
      EXPECT_EQ(t.stats().controls, static_cast<std::uint64_t>(gpu.control_launches));
      EXPECT_EQ(t.KindOffsetNs(1), 2'900u);  // 1.25 + 1.65 + 0.3 - 0.3
      EXPECT_NEAR(t.KindEstimateNs(1), 1'000.0, 1.0);
      EXPECT_NEAR(static_cast<double>(busy), truth, 0.05 * truth);
      // A control charges nothing and takes a probe's place: fewer probes than without.
      EXPECT_GT(t.stats().probes_exact, 0u);
    } else {
      EXPECT_EQ(t.stats().controls, 0u);
      EXPECT_EQ(t.KindOffsetNs(1), 2'300u);
      EXPECT_NEAR(t.KindEstimateNs(1), 1'600.0, 1.0);
      EXPECT_GT(static_cast<double>(busy), 1.5 * truth);
    }
  }
}

// A control is timed only behind an intact gate and below kMaxControlNs: one whose gate the
// watchdog opened may hold the stall, and leaving one out can only raise the charge. Until a
// control is timed, the offset set by the caller stands.
TEST(FenceTracker, AControlWhoseGateWasOpenedTimesNothing) {
  LatencyGpu gpu(4'000, 1'000, /*gate=*/true, /*event_ns=*/1'250, /*setup_ns=*/1'050);
  gpu.controls = true;
  gpu.watchdog = true;
  FenceTracker t(&gpu, FenceOptions{200'000, 64, 4, 11, /*min_probe_gap_ns=*/100'000});
  t.SetProbeOffsetNs(2'300);
  LoopOfMicrosecondKernels(t, gpu, 5'000);
  EXPECT_GT(gpu.control_launches, 0);
  EXPECT_EQ(t.stats().controls, 0u);
  EXPECT_EQ(t.stats().controls_left_out, static_cast<std::uint64_t>(gpu.control_launches));
  EXPECT_EQ(t.KindOffsetNs(1), 2'300u);
}

// Each kind's offset comes from the controls taken in place of its own probes. A tenant that
// launches one kind (a decoy) while its own SM-filling kernels make every launch wait 40 us, and
// another on a quiet GPU, stretches only the decoy's controls: pooled into one offset they would
// take ~20 us off every probe and charge the quiet kind nothing. Per kind, both are charged their
// kernels.
TEST(FenceTracker, AKindsOffsetComesFromItsOwnControls) {
  LatencyGpu gpu(4'000, 1'000, /*gate=*/true, /*event_ns=*/1'250, /*setup_ns=*/1'050);
  gpu.controls = true;
  gpu.control_ns = 300;
  FenceTracker t(&gpu, FenceOptions{200'000, 64, 8, 13, /*min_probe_gap_ns=*/100'000});
  t.SetProbeOffsetNs(2'300);
  t.SetControlKernelNs(300);
  for (int i = 0; i < 40'000; ++i) {
    gpu.extra_ns = 40'000;  // the decoy waits for SMs (and so does a control in its place)
    LaunchOn(t, gpu, 1'000, 2);
    gpu.extra_ns = 0;
    gpu.now += 50'000;
    LaunchOn(t, gpu, 1'000, 1);
    gpu.now += 50'000;
    if (i % 64 == 63) t.FenceAll(gpu.now);
    t.Poll();
  }
  Drain(t, gpu);
  EXPECT_GT(t.stats().controls, 100u);
  EXPECT_EQ(t.KindOffsetNs(1), 2'300u);
  EXPECT_NEAR(static_cast<double>(t.KindOffsetNs(2)), 42'300.0, 1.0);
  EXPECT_NEAR(t.KindEstimateNs(1), 1'000.0, 1.0);
  EXPECT_NEAR(t.KindEstimateNs(2), 1'000.0, 1.0);
}

// Probes are rare in time as well as in launches: a loop of 100,000 launches over 0.6 s makes
// at most one probe per min_probe_gap_ns (a probe costs a few driver calls).
TEST(FenceTracker, ProbesAreAtMostOnePerGapPerStream) {
  OneStreamGpu gpu;
  FenceOptions options{200'000, 64, 4, 3};
  ASSERT_EQ(options.min_probe_gap_ns, 10'000'000u);  // the default
  FenceTracker t(&gpu, options);
  for (int i = 0; i < 100'000; ++i) {  // 600 ms of launches: 60 gaps of 10 ms
    LaunchOn(t, gpu, 1'000, 1);
    gpu.now += 6'000;
    if (i % 256 == 255) t.FenceAll(gpu.now);
    t.Poll();
  }
  Drain(t, gpu);
  const FenceTracker::Stats& s = t.stats();
  EXPECT_LE(s.probes_exact + s.probes_inexact, 60u + 2u);
  EXPECT_GE(s.probes_exact + s.probes_inexact, 30u);  // still plenty to estimate from
  EXPECT_NEAR(t.KindEstimateNs(1), 1'000.0, 1.0);
}

// A probe on a stream still busy with earlier work needs no gate: its start event is pending
// when the launch returns, so the launch runs right behind it.
TEST(FenceTracker, AProbeBehindRunningWorkIsExactWithoutAGate) {
  LatencyGpu gpu(4'000, 1'000, false);
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 1, 3});  // every launch a probe
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, 1));
    gpu.Launch(100'000);  // 100 us kernels queued faster than they run
    t.AfterLaunch(kStream, gpu.now);
  }
  gpu.now += 10'000'000;
  EXPECT_EQ(Drain(t, gpu), 50 * 100'000u);
  EXPECT_NEAR(t.KindEstimateNs(1), 100'000.0, 1.0);
  // Its exact probes timed 100 us: counted from 64 to 128 us.
  EXPECT_GT(t.stats().probes_exact, 0u);
  EXPECT_EQ(t.stats().exact_timings[8], t.stats().probes_exact);
  // ... each listed among the long ones, none held (a stream with work running is not).
  ASSERT_GT(t.stats().long_count, 0u);
  EXPECT_EQ(t.stats().long_probes[0].timing_ns, 100'000u);
  EXPECT_FALSE(t.stats().long_probes[0].held);
  EXPECT_EQ(t.stats().probes_held, 0u);
}

// A segment the GPU reached only after its last launch was submitted (the host was ahead) is
// charged its span even where the probes saw its kind run faster (they ran with the GPU to
// themselves; in the segment a neighbour's kernels were time-sliced in).
TEST(FenceTracker, ADenseSegmentIsChargedItsSpan) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 0, 1});  // no random probes
  void* const epoch_stream = reinterpret_cast<void*>(0x20);
  ASSERT_TRUE(t.Calibrate(epoch_stream, [&] { return gpu.now; }));
  LaunchOn(t, gpu, 100'000);  // the two first probes: 100 us each
  LaunchOn(t, gpu, 100'000);
  gpu.now += 1'000'000;
  t.Poll();
  // Now a busy stream: a long kernel ahead, then ten launches queued behind it that run at
  // 200 us each (slowed by a neighbour), all submitted before the GPU reaches them.
  ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, 2));
  gpu.Launch(5'000'000);
  t.AfterLaunch(kStream, gpu.now);
  t.FenceAll(gpu.now);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, 0));
    gpu.Launch(200'000);
    t.AfterLaunch(kStream, gpu.now);
  }
  t.FenceAll(gpu.now);
  gpu.now += 100'000'000;
  EXPECT_EQ(t.Poll(), 5'000'000u + 10 * 200'000u);
}

// The watcher polls in three steps so that launches need not wait for its driver calls: work
// launched and fenced between BeginPoll and EndPoll is neither lost nor counted twice, and a
// segment found pending waits for the next poll with everything behind it.
TEST(FenceTracker, APollSplitAroundConcurrentLaunchesCountsEverythingOnce) {
  OneStreamGpu gpu;
  FenceTracker t(&gpu, FenceOptions{1'000'000'000, 1000, 0, 1});  // no random probes
  LaunchOn(t, gpu, 10'000, 1);                                    // the two first probes
  LaunchOn(t, gpu, 10'000, 1);
  FenceTracker::PollBatch batch;
  t.BeginPoll(&batch);
  EXPECT_EQ(batch.items.size(), 2u);
  LaunchOn(t, gpu, 10'000, 1);  // meanwhile, on the launch path: a third, fenced
  t.FenceAll(gpu.now);
  gpu.now += 15'000;  // the first probe has completed, the second has not
  FenceTracker::QueryBatch(&gpu, &batch);
  Measured m;
  t.EndPoll(batch, &m);
  EXPECT_EQ(m.total_ns(), 10'000u);
  EXPECT_TRUE(t.HasFenced());
  gpu.now += 1'000'000;
  EXPECT_EQ(t.Poll(), 20'000u);
  EXPECT_FALSE(t.HasFenced());
}

// A segment the driver cannot time (a failed elapsed-time query) is unmeasured, but it must not
// leave the stream learning: every later launch would wait for the depth.
class UntimedGpu final : public EventApi {
 public:
  void* Create() override { return &dummy_; }
  void Destroy(void*) override {}
  bool Record(void*, void*) override { return true; }
  State Query(void*) override { return State::kDone; }
  bool ElapsedNs(void*, void*, std::uint64_t*) override { return false; }

 private:
  int dummy_ = 0;
};

TEST(FenceTracker, AnUntimedSegmentEndsTheLearningAllTheSame) {
  UntimedGpu gpu;
  FenceTracker t(&gpu);
  ASSERT_TRUE(t.BeforeLaunch(kStream, 0, 1));
  t.AfterLaunch(kStream, 0);  // a probe: fenced at once
  EXPECT_TRUE(t.Learning());
  EXPECT_EQ(t.Poll(), 0u);
  EXPECT_EQ(t.errors(), 1u);
  EXPECT_FALSE(t.Learning());
  EXPECT_FALSE(t.OverDepth(2'000'000, 0));
}

// The short path (TryContinue, ContinuedLaunch) decides nothing the usual one would not. Two
// trackers on two identical simulated GPUs see the same random program (two streams, three
// kinds of kernel, host gaps, synchronizes, polls, fences of one stream, idle fences); one takes
// the short path wherever it is offered, the other never does (the hook's depth wait included:
// fence, let time pass, poll). They must fence, probe, wait and charge alike, and the short
// path must carry most launches.
TEST(FenceTracker, TheShortPathDecidesWhatTheUsualOneWould) {
  struct Side {
    explicit Side(FenceOptions o) : t(&gpu, o) {}
    OneStreamGpu gpu;
    FenceTracker t;
    std::uint64_t charged = 0;
  };
  // Probes no sooner than 100 us apart on a stream, so that many of them are drawn.
  const FenceOptions options{400'000, 512, 32, 0x9e3779b97f4a7c15ULL, 100'000};
  Side usual(options), fast(options);
  // A third stream appears late: its first segments are in flight before it has an estimate
  // (Learning), while the first stream's short path is armed.
  void* const streams[] = {kStream, reinterpret_cast<void*>(0x20), reinterpret_cast<void*>(0x30)};
  // From step 8,000 to 16,000 four streams take turns, launch by launch (each its own lane).
  void* const turns[] = {kStream, reinterpret_cast<void*>(0x20), reinterpret_cast<void*>(0x40),
                         reinterpret_cast<void*>(0x50)};
  const std::uint64_t keys[] = {11, 22, 33};
  const std::uint64_t kernel_ns[] = {3'000, 20'000, 250'000};
  constexpr std::uint64_t kDepthNs = 1'500'000;
  std::mt19937_64 rng(21);
  int launches = 0, continued = 0, turn_launches = 0, turns_continued = 0;
  // A kernel's time varies by up to 10 % from launch to launch, so that probes move the
  // estimates the short path must not keep.
  const auto launch = [&](Side& side, bool try_short, void* stream, int kind, std::uint64_t ns) {
    FenceTracker& t = side.t;
    if (try_short && t.TryContinue(stream, keys[kind], side.gpu.now, kDepthNs)) {
      side.gpu.Launch(ns);
      t.ContinuedLaunch(side.gpu.now, kDepthNs);
      ++continued;
      return;
    }
    while (t.OverDepth(kDepthNs, side.gpu.now)) {  // the hook's depth wait
      t.FenceAll(side.gpu.now);
      side.gpu.now += 50'000;
      side.charged += t.Poll();
    }
    ASSERT_TRUE(t.BeforeLaunch(stream, side.gpu.now, keys[kind]));
    side.gpu.Launch(ns);
    t.AfterLaunch(stream, side.gpu.now, kDepthNs);
  };
  for (int step = 0; step < 30'000; ++step) {
    const std::uint64_t r = rng() % 1000;
    const std::uint64_t gap = rng() % 4'000;
    const bool taking_turns = step >= 8'000 && step < 16'000;
    void* const stream = taking_turns ? turns[step % 4]
                                      : streams[step >= 20'000 && rng() % 500 == 0 ? 2
                                                : rng() % 10 == 0                  ? 1
                                                                                   : 0];
    const int continued_before = continued;
    const int kind = static_cast<int>(rng() % 20 == 0 ? 1 + rng() % 2 : 0);
    const std::uint64_t ns = kernel_ns[kind] + rng() % (kernel_ns[kind] / 10);
    for (Side* side : {&usual, &fast}) {
      side->gpu.now += gap;
      FenceTracker& t = side->t;
      if (r < 940) {
        launch(*side, side == &fast, stream, kind, ns);
        if (stream == streams[2]) t.Fence(stream, side->gpu.now);  // in flight, not learned
      } else if (r < 960) {
        side->charged += t.Poll();
      } else if (r < 975) {  // a synchronize of the context
        t.FenceAll(side->gpu.now);
        const std::uint64_t ticket = t.Ticket();
        side->gpu.now = std::max(side->gpu.now, side->gpu.busy_until());
        t.CompletedAll(ticket);
      } else if (r < 985) {
        t.Fence(stream, side->gpu.now);
      } else {
        t.FenceIdle(side->gpu.now, 200'000, FenceTracker::AlwaysRecord);
      }
    }
    if (r < 940) ++launches;
    if (r < 940 && taking_turns) {
      ++turn_launches;
      turns_continued += continued - continued_before;
    }
    ASSERT_EQ(usual.gpu.now, fast.gpu.now) << "step " << step;  // the same depth waits
    ASSERT_EQ(usual.gpu.records, fast.gpu.records) << "step " << step;
    ASSERT_EQ(usual.charged, fast.charged) << "step " << step;
    ASSERT_EQ(usual.t.InFlightEstimateNs(usual.gpu.now), fast.t.InFlightEstimateNs(fast.gpu.now))
        << "step " << step;
  }
  for (Side* side : {&usual, &fast}) side->charged += Drain(side->t, side->gpu);
  EXPECT_EQ(usual.charged, fast.charged);
  const FenceTracker::Stats& a = usual.t.stats();
  const FenceTracker::Stats& b = fast.t.stats();
  EXPECT_EQ(a.segments, b.segments);
  EXPECT_EQ(a.probes_exact + a.probes_inexact, b.probes_exact + b.probes_inexact);
  EXPECT_GT(a.probes_exact + a.probes_inexact, 20u);  // draws were made on the short path too
  EXPECT_EQ(a.span_ns, b.span_ns);
  EXPECT_EQ(a.estimate_launches, b.estimate_launches);
  EXPECT_GT(continued, launches / 2) << continued << " of " << launches;
  EXPECT_GT(turns_continued, turn_launches / 2) << turns_continued << " of " << turn_launches;
}

// ---- The short path against the usual one, wider: held probes and controls (LatencyGpu with a
// gate), launches that fail, the watcher's poll split around a launch, one stream's waits,
// segments dropped on a stream that may not record, epochs, offsets, depths down to one launch.

struct RSide {
  RSide(FenceOptions o, bool gate) : gpu(1'000, 2'000, gate, 500, 300), t(&gpu, o) {
    gpu.controls = true;
    gpu.control_ns = 400;
  }
  LatencyGpu gpu;
  FenceTracker t;
  std::uint64_t charged = 0;
  int probes = 0;
};
bool NoRecord(void*) { return false; }

struct RStats {
  int violations = 0, continued = 0, launches = 0, first_diff = -1;
  std::string what;
};

RStats RunFuzz(std::uint64_t seed, bool gate, int steps) {
  RStats st;
  const FenceOptions options{400'000, 512, 8, 0x9e3779b97f4a7c15ULL ^ seed, 50'000};
  RSide usual(options, gate), fast(options, gate);
  std::mt19937_64 rng(seed);
  const std::uint64_t depths[] = {1'500'000, 300'000, 120'000, 2'000, 1'000};
  std::uint64_t depth = depths[0];
  auto launch = [&](RSide& side, bool try_short, void* stream, std::uint64_t key, std::uint64_t ns,
                    bool fail) {
    FenceTracker& t = side.t;
    if (try_short && t.TryContinue(stream, key, side.gpu.now, depth)) {
      if (t.OverDepth(depth, side.gpu.now)) ++st.violations;
      ++st.continued;
      if (!fail) {
        side.gpu.Launch(ns);
        t.ContinuedLaunch(side.gpu.now, depth);
      } else {
        t.Fence(stream, side.gpu.now);
      }
      return;
    }
    int waited = 0;
    while (t.OverDepth(depth, side.gpu.now) && waited++ < 100) {
      t.FenceAll(side.gpu.now);
      side.gpu.now += 20'000;
      side.charged += t.Poll();
    }
    const bool m = t.BeforeLaunch(stream, side.gpu.now, key);
    if (m && t.LaunchIsProbe(stream)) ++side.probes;
    if (!fail) side.gpu.Launch(ns);
    if (m) {
      if (!fail)
        t.AfterLaunch(stream, side.gpu.now, depth);
      else
        t.Fence(stream, side.gpu.now);
    }
  };
  for (int step = 0; step < steps; ++step) {
    const std::uint64_t r = rng() % 1000;
    const std::uint64_t gap = rng() % 5'000;
    void* const stream = reinterpret_cast<void*>(0x10 * (1 + (rng() % 10 < 7 ? 0 : rng() % 6)));
    const std::uint64_t key = 100 + (rng() % 10 < 8 ? 0 : rng() % 4);
    const std::uint64_t ns = 1'000 + (key - 100) * 7'000 + rng() % 1'500;
    const bool fail = rng() % 200 == 0;
    if (rng() % 300 == 0) depth = depths[rng() % 5];
    const std::uint64_t offset = rng() % 50 == 0 ? rng() % 3'000 : ~0ULL;
    void* const other = reinterpret_cast<void*>(0x10 * (1 + rng() % 6));
    for (RSide* side : {&usual, &fast}) {
      const bool f = side == &fast;
      side->gpu.now += gap;
      FenceTracker& t = side->t;
      if (offset != ~0ULL) t.SetProbeOffsetNs(offset);
      if (r < 900) {
        launch(*side, f, stream, key, ns, fail);
      } else if (r < 930) {  // the watcher's poll, a launch in its window
        FenceTracker::PollBatch batch;
        t.BeginPoll(&batch);
        launch(*side, f, stream, key, ns, false);
        FenceTracker::QueryBatch(&side->gpu, &batch);
        Measured m;
        t.EndPoll(batch, &m);
        side->charged += m.total_ns();
      } else if (r < 945) {  // a context synchronize
        t.FenceAll(side->gpu.now);
        const std::uint64_t ticket = t.Ticket();
        side->gpu.now = std::max(side->gpu.now, side->gpu.busy_until());
        t.CompletedAll(ticket);
      } else if (r < 960) {  // a stream synchronize
        t.Fence(stream, side->gpu.now);
        const std::uint64_t ticket = t.Ticket();
        side->gpu.now = std::max(side->gpu.now, side->gpu.busy_until());
        t.Completed(stream, ticket);
      } else if (r < 970) {
        t.Fence(other, side->gpu.now, NoRecord);  // captured: dropped
      } else if (r < 985) {
        t.FenceIdle(side->gpu.now, 100'000, FenceTracker::AlwaysRecord);
      } else if (r < 990) {
        std::uint64_t* clock = &side->gpu.now;
        t.Calibrate(reinterpret_cast<void*>(0x999), [clock] { return *clock += 500; });
      } else {
        side->gpu.now += 500'000;
      }
    }
    if (r < 900) ++st.launches;
    auto diff = [&](const char* w) {
      if (st.first_diff < 0) {
        st.first_diff = step;
        st.what = w;
      }
    };
    if (usual.gpu.now != fast.gpu.now)
      diff("now");
    else if (usual.charged != fast.charged)
      diff("charged");
    else if (usual.probes != fast.probes)
      diff("probes");
    else if (usual.gpu.control_launches != fast.gpu.control_launches)
      diff("controls");
    else if (usual.t.InFlightEstimateNs(usual.gpu.now) != fast.t.InFlightEstimateNs(fast.gpu.now))
      diff("inflight");
    else if (usual.t.stats().segments != fast.t.stats().segments)
      diff("segments");
    if (st.first_diff >= 0) break;
  }
  return st;
}

TEST(FenceTracker, TheShortPathHoldsBesideHoldsControlsFailuresAndSplitPolls) {
  int total_viol = 0, diffs = 0;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    for (bool gate : {false, true}) {
      RStats st = RunFuzz(seed, gate, 6'000);
      total_viol += st.violations;
      if (st.first_diff >= 0) {
        ++diffs;
        if (diffs < 10)
          printf("seed %llu gate %d: diverged at step %d (%s); continued %d of %d\n",
                 static_cast<unsigned long long>(seed), gate, st.first_diff, st.what.c_str(),
                 st.continued, st.launches);
      }
      if (seed == 1)
        printf("seed 1 gate %d: continued %d of %d launches\n", gate, st.continued, st.launches);
    }
  }
  printf("violations (TryContinue true while OverDepth) %d, diverging runs %d\n", total_viol,
         diffs);
  EXPECT_EQ(total_viol, 0);
  EXPECT_EQ(diffs, 0);
}

// The bound starts from InFlightEstimateNs, which truncates its sum, and adds fractional
// estimates: it must not fall below what OverDepth sees (found in review).
TEST(FenceTracker, TheShortPathsDepthBoundRoundsUp) {
  OneStreamGpu gpu;
  FenceOptions o;
  o.probe_period = 0;  // no draws: only the two first probes of the kind
  FenceTracker t(&gpu, o);
  void* const s2 = reinterpret_cast<void*>(0x20);
  const std::uint64_t key = 7;
  constexpr std::uint64_t kDepth = 8'007'000;  // 8,007 us
  for (std::uint64_t ns : {1'000u, 1'007u}) {
    ASSERT_TRUE(t.BeforeLaunch(s2, gpu.now, key));
    gpu.Launch(ns);
    t.AfterLaunch(s2, gpu.now, kDepth);
    gpu.now += 1'000'000;
    t.Poll();
  }
  ASSERT_DOUBLE_EQ(t.KindEstimateNs(key), 1000.875);
  for (int i = 0; i < 7992; ++i) {
    ASSERT_TRUE(t.BeforeLaunch(s2, gpu.now, key));
    gpu.Launch(1'000);
    t.AfterLaunch(s2, gpu.now, kDepth);
  }
  t.Fence(s2, gpu.now);
  ASSERT_TRUE(t.BeforeLaunch(kStream, gpu.now, key));  // the lane's first launch (usual path)
  gpu.Launch(1'000);
  t.AfterLaunch(kStream, gpu.now, kDepth);
  EXPECT_EQ(t.InFlightEstimateNs(gpu.now), 7'999'993u);  // 7,993 x 1,000.875 = 7,999,993.875
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(t.TryContinue(kStream, key, gpu.now, kDepth)) << i;
    gpu.Launch(1'000);
    t.ContinuedLaunch(gpu.now, kDepth);
  }
  // 8,000 launches: 8,007,000 ns in flight, the depth reached: the usual path would wait now.
  EXPECT_EQ(t.InFlightEstimateNs(gpu.now), 8'007'000u);
  EXPECT_TRUE(t.OverDepth(kDepth, gpu.now));
  const bool shortcut = t.TryContinue(kStream, key, gpu.now, kDepth);
  EXPECT_FALSE(shortcut) << "the short path continues past the depth OverDepth enforces";
}

// Thread A's TryContinue meets a probe's draw and falls to the usual path; the gate closes before
// its BeforeLaunch, A waits at the gate without the mutex, and thread B launches meanwhile. The
// usual path would have drawn for B first, then for A: the draw must be left to whoever draws
// next (found in review).
TEST(FenceTracker, AProbesDrawIsLeftForWhoeverDrawsNext) {
  FenceOptions o;
  o.probe_period = 4;
  o.min_probe_gap_ns = 0;
  struct Side {
    explicit Side(FenceOptions opt) : t(&gpu, opt) {}
    OneStreamGpu gpu;
    FenceTracker t;
    std::vector<int> probed;  // the launches that were probes, by number
  };
  Side usual(o), fast(o);
  void* const a = kStream;
  void* const b = reinterpret_cast<void*>(0x20);
  constexpr std::uint64_t kDepth = 100'000'000;
  int n = 0;
  const auto hook = [&](Side& side, bool try_short, void* stream, int id) {
    if (try_short && side.t.TryContinue(stream, 5, side.gpu.now, kDepth)) {
      side.gpu.Launch(1'000);
      side.t.ContinuedLaunch(side.gpu.now, kDepth);
      return;
    }
    ASSERT_TRUE(side.t.BeforeLaunch(stream, side.gpu.now, 5));
    if (side.t.LaunchIsProbe(stream)) side.probed.push_back(id);
    side.gpu.Launch(1'000);
    side.t.AfterLaunch(stream, side.gpu.now, kDepth);
  };
  int interleaved = 0;
  for (int step = 0; step < 400; ++step) {
    for (Side* side : {&usual, &fast}) side->gpu.now += 1'000;
    const int id_a = n++, id_b = n++;
    // fast: A tries the short path first; where it falls back, B gets the mutex before A's
    // BeforeLaunch (A waits at the gate that closed).
    if (fast.t.TryContinue(a, 5, fast.gpu.now, kDepth)) {
      fast.gpu.Launch(1'000);
      fast.t.ContinuedLaunch(fast.gpu.now, kDepth);
      hook(fast, true, b, id_b);
      hook(usual, false, a, id_a);
      hook(usual, false, b, id_b);
    } else {
      ++interleaved;
      hook(fast, true, b, id_b);
      hook(fast, true, a, id_a);
      hook(usual, false, b, id_b);
      hook(usual, false, a, id_a);
    }
    if (step % 50 == 49) {
      for (Side* side : {&usual, &fast}) {
        side->t.FenceAll(side->gpu.now);
        side->gpu.now += 10'000'000;
        side->t.Poll();
      }
    }
  }
  printf("interleaved %d; probes usual %zu fast %zu\n", interleaved, usual.probed.size(),
         fast.probed.size());
  EXPECT_EQ(usual.probed, fast.probed);
}

}  // namespace
}  // namespace tessera::governor
