#include "agent/compute_drift.h"

#include <algorithm>
#include <functional>

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

constexpr const char* kGpu = "GPU-0";
constexpr std::uint64_t kSecond = 1'000'000;
constexpr std::uint64_t kPeriod = 166'667;  // NVML's sampling period, about

ComputeTenant Tenant(std::string key, std::uint32_t share, ComputeMode mode,
                     std::set<unsigned int> pids, std::set<unsigned int> ungoverned = {}) {
  ComputeTenant t;
  t.key = std::move(key);
  t.uuid = kGpu;
  t.share_percent = share;
  t.mode = mode;
  t.pids = std::move(pids);
  t.ungoverned = std::move(ungoverned);
  return t;
}

// The scripted GPU: each process's SM percentage as a function of time; samples every kPeriod
// (a process with 0 % has no sample, as NVML leaves out processes that did not run), read once a
// second (`tessera drift --watch-compute`) or at another pass interval (tessera-node: 5 s).
struct Script {
  std::map<unsigned int, std::function<unsigned int(std::uint64_t at_us)>> percent;
  std::vector<ComputeTenant> tenants;
  // The tenants' held time (ns) as a function of time, by key.
  std::map<std::string, std::function<std::uint64_t(std::uint64_t at_us)>> waited;
};

struct Flag {
  std::uint64_t at_us;
  ComputeFinding finding;
};

std::vector<Flag> Replay(ComputeDrift& drift, Script& script, std::uint64_t from_us,
                         std::uint64_t to_us, std::uint64_t every_us = kSecond) {
  std::vector<Flag> flags;
  std::uint64_t sampled_to = from_us;
  drift.Evaluate(from_us + 1, script.tenants, {});  // the first evaluation: samples count from it
  for (std::uint64_t now = from_us + every_us; now <= to_us; now += every_us) {
    std::vector<UtilizationSample> samples;
    for (std::uint64_t t = sampled_to + kPeriod; t <= now; t += kPeriod) {
      for (const auto& [pid, f] : script.percent) {
        if (const unsigned int p = f(t); p > 0) samples.push_back({pid, t, p});
      }
      sampled_to = t;
    }
    for (ComputeTenant& t : script.tenants) {
      const auto w = script.waited.find(t.key);
      t.waited_ns = w == script.waited.end() ? 0 : w->second(now);
    }
    for (ComputeFinding& f : drift.Evaluate(now, script.tenants, {{kGpu, samples}}))
      flags.push_back({now, std::move(f)});
  }
  return flags;
}

// A tenant under a 30 % hard share whose gate was rewritten (it runs whenever it likes) is
// flagged within 10 s of starting to cheat, once for the episode; honest again for a window, a
// second episode is flagged again.
TEST(ComputeDrift, ARewrittenGateUnderAHardShareIsFlaggedWithinTenSecondsOncePerEpisode) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  const std::uint64_t cheat = 20 * kSecond, honest = 60 * kSecond, again = 90 * kSecond;
  s.percent[100] = [&](std::uint64_t t) {
    const bool cheating = (t > cheat && t <= honest) || t > again;
    return cheating ? 100U : (t / kPeriod) % 10 < 3 ? 100U : 0U;  // 30 % honest
  };
  const std::vector<Flag> flags = Replay(drift, s, 0, 120 * kSecond);
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_EQ(flags[0].finding.kind, ComputeFinding::Kind::kOverHardShare);
  EXPECT_GT(flags[0].at_us, cheat);
  EXPECT_LE(flags[0].at_us, cheat + 10 * kSecond);
  EXPECT_NEAR(flags[0].finding.allowed, 0.30, 1e-9);
  EXPECT_EQ(flags[0].finding.pids, std::vector<unsigned int>{100});
  EXPECT_NE(flags[0].finding.Describe().find("hard share of 30 %"), std::string::npos);
  EXPECT_GT(flags[1].at_us, again);
  EXPECT_LE(flags[1].at_us, again + 10 * kSecond);
}

// An honest hard share raises nothing, smooth or in the bursts of a windowed share (all of
// each second's quota at once), over two minutes.
TEST(ComputeDrift, AnHonestHardShareIsNeverFlagged) {
  for (const bool windowed : {false, true}) {
    ComputeDrift drift;
    Script s;
    s.tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
    s.percent[100] = [windowed](std::uint64_t t) {
      if (windowed) return t % kSecond < 300'000 ? 100U : 0U;
      return 30U;
    };
    EXPECT_TRUE(Replay(drift, s, 0, 120 * kSecond).empty()) << "windowed " << windowed;
    EXPECT_NEAR(drift.Used("a"), 0.30, 0.06) << "windowed " << windowed;
  }
}

// A work-conserving tenant may borrow what nobody asks for: at 100 % beside a tenant that is
// idle (no samples, never held), nothing is flagged.
TEST(ComputeDrift, AWorkConservingTenantBorrowingIdleTimeIsNotFlagged) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 30, ComputeMode::kWorkConserving, {100}),
               Tenant("b", 70, ComputeMode::kWorkConserving, {200})};
  s.percent[100] = [](std::uint64_t) { return 100U; };
  s.percent[200] = [](std::uint64_t) { return 0U; };
  EXPECT_TRUE(Replay(drift, s, 0, 120 * kSecond).empty());
  EXPECT_NEAR(drift.Used("a"), 1.0, 0.02);
}

// ... but taking time another tenant waited for is flagged, naming the tenant that waited.
TEST(ComputeDrift, TakingTimeAnotherTenantWaitedForIsFlagged) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 30, ComputeMode::kWorkConserving, {100}),
               Tenant("b", 70, ComputeMode::kWorkConserving, {200})};
  constexpr std::uint64_t kStart = 30 * kSecond;
  // Until `kStart` both get their share; then a ignores its gate and b waits half of the time.
  s.percent[100] = [](std::uint64_t t) { return t > kStart ? 90U : 30U; };
  s.percent[200] = [](std::uint64_t t) { return t > kStart ? 10U : 70U; };
  s.waited["b"] = [](std::uint64_t t) { return t > kStart ? (t - kStart) * 500 : 0; };
  const std::vector<Flag> flags = Replay(drift, s, 0, 60 * kSecond);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0].finding.kind, ComputeFinding::Kind::kTookFromWaiting);
  EXPECT_EQ(flags[0].finding.key, "a");
  EXPECT_EQ(flags[0].finding.waiting, "b");
  EXPECT_LE(flags[0].at_us, kStart + 10 * kSecond);
}

// A process of the container that holds no slot of its region never went through the library:
// flagged once it used the SMs for 5 % of the window, whatever the container's share. A process
// that barely touches the GPU (a context, a copy) is not.
TEST(ComputeDrift, AProcessOutsideTheLibraryIsFlagged) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 0, ComputeMode::kHard, {100, 200, 300}, {200, 300})};
  constexpr std::uint64_t kStart = 30 * kSecond;
  s.percent[100] = [](std::uint64_t) { return 50U; };  // governed
  s.percent[200] = [](std::uint64_t t) { return t > kStart ? 60U : 0U; };
  s.percent[300] = [](std::uint64_t t) { return t % (10 * kSecond) < kPeriod ? 10U : 0U; };
  const std::vector<Flag> flags = Replay(drift, s, 0, 60 * kSecond);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0].finding.kind, ComputeFinding::Kind::kUngoverned);
  EXPECT_GT(flags[0].at_us, kStart);  // not for the blips of 300
  EXPECT_LE(flags[0].at_us, kStart + 10 * kSecond);
  const std::vector<unsigned int>& pids = flags[0].finding.pids;
  EXPECT_NE(std::find(pids.begin(), pids.end(), 200u), pids.end());
  EXPECT_EQ(std::find(pids.begin(), pids.end(), 100u), pids.end());  // governed
}

// The window's edges: a sample delivered twice (the same stamp again) counts once, samples out
// of order are sorted, a process's first sample counts at most one sampling period, and a sample
// as old as the window has left it.
TEST(ComputeDrift, SamplesCountOnceWithinTheWindow) {
  ComputeDriftOptions options;
  options.window_us = 10 * kSecond;
  options.max_sample_period_us = 200'000;
  ComputeDrift drift(options);
  const std::vector<ComputeTenant> tenants = {Tenant("a", 50, ComputeMode::kHard, {100})};
  // First sample at 1 s: counts 200 ms (not the second since the start).
  drift.Evaluate(kSecond, tenants, {{kGpu, {{100, kSecond, 100}}}});
  EXPECT_NEAR(drift.Used("a"), 0.02, 1e-9);
  // The same again, and two more out of order: 100 ms each at 100 % and 50 %.
  drift.Evaluate(2 * kSecond, tenants,
                 {{kGpu, {{100, 1'200'000, 50}, {100, kSecond, 100}, {100, 1'100'000, 100}}}});
  EXPECT_NEAR(drift.Used("a"), (200'000 + 100'000 + 50'000) / 1e7, 1e-9);
  EXPECT_EQ(drift.LastSeen(kGpu), 1'200'000u);
  // At 11 s the sample stamped 1 s is as old as the window: out; the others are still in.
  drift.Evaluate(11 * kSecond, tenants, {});
  EXPECT_NEAR(drift.Used("a"), 150'000 / 1e7, 1e-9);
  drift.Evaluate(12 * kSecond, tenants, {});
  EXPECT_EQ(drift.Used("a"), 0);
}

// A GPU whose samples cannot be read is reported once per episode; the others are still checked.
TEST(ComputeDrift, AGpuWithoutSamplesIsReportedOncePerEpisode) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  const std::map<std::string, std::string> broken = {{"GPU-1", "NVML error 999"}};
  auto first = drift.Evaluate(kSecond, tenants, {}, broken);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].kind, ComputeFinding::Kind::kNoSamples);
  EXPECT_EQ(first[0].uuid, "GPU-1");
  EXPECT_NE(first[0].Describe().find("NVML error 999"), std::string::npos);
  EXPECT_TRUE(drift.Evaluate(2 * kSecond, tenants, {}, broken).empty());
  EXPECT_TRUE(drift.Evaluate(3 * kSecond, tenants, {}).empty());            // readable again
  EXPECT_TRUE(drift.Evaluate(4 * kSecond, tenants, {}, broken).empty());    // within a window
  EXPECT_EQ(drift.Evaluate(20 * kSecond, tenants, {}, broken).size(), 1u);  // a new episode
}

// The node agent's pass runs every 5 s, not every second: the rewritten gate is still flagged
// within 10 s.
TEST(ComputeDrift, ARewrittenGateIsFlaggedAtTheAgentsCadence) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  const std::uint64_t cheat = 20 * kSecond;
  s.percent[100] = [&](std::uint64_t t) { return t > cheat ? 100U : 30U; };
  const std::vector<Flag> flags = Replay(drift, s, 0, 60 * kSecond, 5 * kSecond);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_LE(flags[0].at_us, cheat + 10 * kSecond);
}

// An agent that restarts reads seconds of samples NVML kept from before (a tenant may have run
// ungoverned meanwhile, its arbiter gone): they are not held against it.
TEST(ComputeDrift, SamplesFromBeforeTheFirstEvaluationDoNotCount) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  std::vector<UtilizationSample> before;
  for (std::uint64_t t = kPeriod; t <= 10 * kSecond; t += kPeriod) before.push_back({100, t, 100});
  EXPECT_TRUE(drift.Evaluate(10 * kSecond, tenants, {{kGpu, before}}).empty());
  EXPECT_LT(drift.Used("a"), 0.05);
}

// Two processes of one container sampled at the same stamp: time-sliced, they add up to at most
// the period; under MPS they may run at once, and the larger counts (not their sum).
TEST(ComputeDrift, ProcessesOfOneContainerAtOneStampCountOnce) {
  for (const bool mps : {false, true}) {
    ComputeDrift drift;
    ComputeTenant t = Tenant("a", 30, ComputeMode::kHard, {100, 200});
    t.spatial = mps;
    Script s;
    s.tenants = {t};
    s.percent[100] = [mps](std::uint64_t) { return mps ? 30U : 60U; };
    s.percent[200] = [mps](std::uint64_t) { return mps ? 30U : 60U; };
    const std::vector<Flag> flags = Replay(drift, s, 0, 30 * kSecond);
    if (mps) {
      EXPECT_TRUE(flags.empty()) << "two overlapping 30 % processes under MPS are 30 %";
      EXPECT_NEAR(drift.Used("a"), 0.30, 0.03);
    } else {
      EXPECT_NEAR(drift.Used("a"), 1.0, 0.02);  // 60 + 60, at most the whole period
    }
  }
}

// Taking from a waiting tenant rests on the waiting tenant's own counters: reported, not acted
// on.
TEST(ComputeDrift, TakingFromAWaitingTenantIsNotEnforceable) {
  ComputeDrift drift;
  Script s;
  s.tenants = {Tenant("a", 30, ComputeMode::kWorkConserving, {100}),
               Tenant("b", 70, ComputeMode::kWorkConserving, {200})};
  s.percent[100] = [](std::uint64_t) { return 90U; };
  s.percent[200] = [](std::uint64_t) { return 10U; };
  s.waited["b"] = [](std::uint64_t t) { return t * 500; };
  const std::vector<Flag> flags = Replay(drift, s, 0, 30 * kSecond);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_FALSE(flags[0].finding.enforceable);
}

// One odd pair of samples close together does not shrink the sampling period for good: the
// median of the recent gaps holds, and the tenant's use stays right.
TEST(ComputeDrift, OneShortGapDoesNotChangeThePeriod) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 50, ComputeMode::kHard, {100})};
  std::vector<UtilizationSample> samples;
  for (std::uint64_t t = 100'000; t <= 5 * kSecond; t += 100'000) samples.push_back({100, t, 50});
  samples.push_back({100, 5 * kSecond + 15'000, 50});  // an odd one 15 ms later
  drift.Evaluate(50'000, tenants, {});  // the first evaluation: samples count from here
  drift.Evaluate(5'100'000, tenants, {{kGpu, samples}});
  for (std::uint64_t t = 5'200'000; t <= 10 * kSecond; t += 100'000) {
    drift.Evaluate(t, tenants, {{kGpu, {{100, t, 50}}}});
  }
  EXPECT_NEAR(drift.Used("a"), 0.50, 0.03);
}

// A wall clock stepped back (NTP) does not blind the check: the bookkeeping starts again.
TEST(ComputeDrift, AClockSteppedBackStartsAgain) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  drift.Evaluate(100 * kSecond, tenants, {{kGpu, {{100, 100 * kSecond, 100}}}});
  EXPECT_EQ(drift.LastSeen(kGpu), 100 * kSecond);
  drift.Evaluate(50 * kSecond, tenants, {});
  EXPECT_EQ(drift.LastSeen(kGpu), 0u);
  std::vector<UtilizationSample> samples;
  for (std::uint64_t t = 50 * kSecond + kPeriod; t <= 62 * kSecond; t += kPeriod)
    samples.push_back({100, t, 100});
  EXPECT_EQ(drift.Evaluate(62 * kSecond, tenants, {{kGpu, samples}}).size(), 1u);
}

}  // namespace
}  // namespace tessera::agent
