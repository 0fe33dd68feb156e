#include "agent/compute_drift.h"

#include <algorithm>
#include <functional>

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

constexpr const char* kGpu = "GPU-0";
constexpr std::uint64_t kSecond = 1'000'000;
constexpr std::uint64_t kPeriod = 200'000;  // the driver's sampling period (H200, driver 580)

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

// The scripted GPU: each process's SM percentage as a function of time, sampled by the driver
// every kPeriod; read once a second (`tessera drift --watch-compute`) or at another pass interval
// (tessera-node: 5 s).
struct Script {
  std::map<unsigned int, std::function<unsigned int(std::uint64_t at_us)>> percent;
  std::vector<ComputeTenant> tenants;
  // The tenants' held time (ns) as a function of time, by key.
  std::map<std::string, std::function<std::uint64_t(std::uint64_t at_us)>> waited;
};

// One read of nvmlDeviceGetProcessUtilization(last_seen) at `now`, as the H200's driver answers
// (and the fake libnvidia-ml): per process that ran in a period after `last_seen`, its mean over
// those periods, stamped at the newest.
std::vector<UtilizationSample> Read(const Script& s, std::uint64_t last_seen, std::uint64_t now) {
  const std::uint64_t newest = now / kPeriod * kPeriod;
  std::vector<UtilizationSample> out;
  if (newest <= last_seen) return out;
  for (const auto& [pid, f] : s.percent) {
    std::uint64_t sum = 0, n = 0;
    for (std::uint64_t t = (last_seen / kPeriod + 1) * kPeriod; t <= newest; t += kPeriod, ++n)
      sum += f(t);
    if (sum > 0) out.push_back({pid, newest, static_cast<unsigned int>(sum / n)});
  }
  return out;
}

struct Flag {
  std::uint64_t at_us;
  ComputeFinding finding;
};

std::vector<Flag> Replay(ComputeDrift& drift, Script& script, std::uint64_t from_us,
                         std::uint64_t to_us, std::uint64_t every_us = kSecond) {
  std::vector<Flag> flags;
  drift.Evaluate(from_us + 1, script.tenants, {});  // the first evaluation: samples count from it
  for (std::uint64_t now = from_us + every_us; now <= to_us; now += every_us) {
    for (ComputeTenant& t : script.tenants) {
      const auto w = script.waited.find(t.key);
      t.waited_ns = w == script.waited.end() ? 0 : w->second(now);
    }
    for (ComputeFinding& f :
         drift.Evaluate(now, script.tenants, {{kGpu, Read(script, drift.LastSeen(kGpu), now)}}))
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
      if (windowed) {  // busy the first 300 ms of each second: its part of the period ending at t
        const std::uint64_t begin = t - kPeriod, second = begin / kSecond * kSecond;
        const std::uint64_t busy_to = std::min(t, second + 300'000);
        return static_cast<unsigned int>(busy_to > begin ? (busy_to - begin) * 100 / kPeriod : 0);
      }
      return 30U;
    };
    EXPECT_TRUE(Replay(drift, s, 0, 120 * kSecond).empty()) << "windowed " << windowed;
    EXPECT_NEAR(drift.Used("a"), 0.30, 0.03) << "windowed " << windowed;
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

// The window's edges: a read after no stamp (the first) only sets the stamp; a sample applies to
// the span since the stamp the read asked after (several of one process: since its previous
// one), a stamp delivered again counts once, and a span reaching back past the window counts only
// its part inside.
TEST(ComputeDrift, SamplesCountOnceWithinTheWindow) {
  ComputeDriftOptions options;
  options.window_us = 10 * kSecond;
  ComputeDrift drift(options);
  const std::vector<ComputeTenant> tenants = {Tenant("a", 50, ComputeMode::kHard, {100})};
  drift.Evaluate(kSecond / 2, tenants, {});
  drift.Evaluate(kSecond, tenants, {{kGpu, {{100, kSecond, 100}}}});  // the driver's whole buffer
  EXPECT_EQ(drift.Used("a"), 0);
  EXPECT_EQ(drift.LastSeen(kGpu), kSecond);
  // The same stamp again, and two more of one process out of order: 0.5 s at 100 %, 0.5 s at 50 %.
  drift.Evaluate(2 * kSecond, tenants,
                 {{kGpu, {{100, 2 * kSecond, 50}, {100, kSecond, 100}, {100, 1'500'000, 100}}}});
  EXPECT_NEAR(drift.Used("a"), 750'000 / 1e7, 1e-9);
  EXPECT_EQ(drift.LastSeen(kGpu), 2 * kSecond);
  // At 11.5 s the span (1, 1.5] has left the window; (1.5, 2] is in.
  drift.Evaluate(11'500'000, tenants, {});
  EXPECT_NEAR(drift.Used("a"), 250'000 / 1e7, 1e-9);
  // At 11.75 s half of (1.5, 2] is inside.
  drift.Evaluate(11'750'000, tenants, {});
  EXPECT_NEAR(drift.Used("a"), 125'000 / 1e7, 1e-9);
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

// An agent that restarts reads the driver's whole buffer first (a tenant may have run ungoverned
// meanwhile, its arbiter gone): it is not held against it; what follows counts.
TEST(ComputeDrift, SamplesFromBeforeTheFirstEvaluationDoNotCount) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  EXPECT_TRUE(drift.Evaluate(10 * kSecond, tenants, {{kGpu, {{100, 10 * kSecond, 100}}}}).empty());
  EXPECT_EQ(drift.Used("a"), 0);
  drift.Evaluate(11 * kSecond, tenants, {{kGpu, {{100, 11 * kSecond, 100}}}});
  EXPECT_NEAR(drift.Used("a"), 0.1, 1e-9);
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

// A read that came late (a slow pass, a failed read) covers the whole gap: a 4 s span at 50 % is
// 2 s; one longer than the window counts its part inside, so the use stays right.
TEST(ComputeDrift, ALateReadCoversTheWholeGap) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 50, ComputeMode::kHard, {100})};
  drift.Evaluate(1, tenants, {});
  drift.Evaluate(kSecond, tenants, {{kGpu, {{100, kSecond, 50}}}});
  drift.Evaluate(5 * kSecond, tenants, {{kGpu, {{100, 5 * kSecond, 50}}}});
  EXPECT_NEAR(drift.Used("a"), 0.2, 1e-9);
  EXPECT_TRUE(drift.Evaluate(20 * kSecond, tenants, {{kGpu, {{100, 20 * kSecond, 50}}}}).empty());
  EXPECT_NEAR(drift.Used("a"), 0.5, 1e-9);
}

// A wall clock stepped back (NTP) does not blind the check: the bookkeeping starts again.
TEST(ComputeDrift, AClockSteppedBackStartsAgain) {
  ComputeDrift drift;
  const std::vector<ComputeTenant> tenants = {Tenant("a", 30, ComputeMode::kHard, {100})};
  drift.Evaluate(100 * kSecond, tenants, {{kGpu, {{100, 100 * kSecond, 100}}}});
  EXPECT_EQ(drift.LastSeen(kGpu), 100 * kSecond);
  drift.Evaluate(50 * kSecond, tenants, {});
  EXPECT_EQ(drift.LastSeen(kGpu), 0u);
  std::size_t flags = 0;
  for (std::uint64_t t = 51 * kSecond; t <= 60 * kSecond; t += kSecond)
    flags += drift.Evaluate(t, tenants, {{kGpu, {{100, t, 100}}}}).size();
  EXPECT_EQ(flags, 1u);
}

}  // namespace
}  // namespace tessera::agent
