#include "agent/drift_actions.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tessera/file.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

#include "agent/agent_testing.h"
#include "agent/fake_drift_api.h"
#include "testutil/temp_dir.h"

namespace tessera::agent {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
const std::string kGpu = "GPU-00000000";
const std::string kOtherGpu = "GPU-00000001";

// NVML's processes per GPU; a GPU absent from `processes` does not answer. Its utilization
// samples: `utilization` (none: idle), or an error for the GPUs in `no_utilization`.
class FakeNvml : public FakeGpuSource {
 public:
  FakeNvml() : FakeGpuSource({}) {}
  StatusOr<std::vector<GpuProcess>> Processes(const std::string& uuid) override {
    auto it = processes.find(uuid);
    if (it == processes.end()) return UnavailableError("NVML: no answer for " + uuid);
    return it->second;
  }
  StatusOr<std::vector<UtilizationSample>> ProcessUtilization(const std::string& uuid,
                                                              std::uint64_t since_us) override {
    if (no_utilization.count(uuid) != 0) return FailedPreconditionError("not supported on " + uuid);
    std::vector<UtilizationSample> out;
    for (const UtilizationSample& s : utilization[uuid]) {
      if (s.timestamp_us > since_us) out.push_back(s);
    }
    return out;
  }
  std::map<std::string, std::vector<GpuProcess>> processes;
  std::map<std::string, std::vector<UtilizationSample>> utilization;
  std::set<std::string> no_utilization;
};

// One container of pod team/job (uid "uid-1") on kGpu with a cap; its processes are the PIDs
// whose cgroup names the pod. Its region does not exist: the region accounts 0 bytes.
WatchedContainer Container(std::uint64_t cap, const std::string& id = "slot-0") {
  WatchedContainer c;
  c.id = id;
  c.limits.pod = "team/job";
  c.limits.pod_uid = "uid-1";
  c.limits.container = "main";
  DeviceLimits d;
  d.uuid = kGpu;
  d.memory_bytes = cap;
  c.limits.devices.push_back(d);
  c.region_path = "/nonexistent/tessera-drift-test/region";
  return c;
}

class DriftActionsTest : public ::testing::Test {
 protected:
  DriftActions& Make() {
    DriftDeps d;
    d.gpus = &nvml_;
    d.managed = [this] { return managed_; };
    d.containers = [this] { return containers_; };
    d.cgroup_of = [this](unsigned int pid) {
      return tenants_.count(pid) != 0 ? "/kubepods/burstable/poduid-1/abc" : "/system.slice/x";
    };
    d.own_process = [this](unsigned int pid) { return own_.count(pid) != 0; };
    d.now = [this] { return now_; };
    d.ns_pid_of = [](unsigned int pid) { return pid; };  // one PID namespace
    d.maps_library = maps_library_;
    d.wall_us = [this] { return wall_us_; };
    if (with_metrics_) {
      d.sample = [this](const std::map<std::string, std::uint64_t>& nvml_by_key,
                        std::uint64_t now_ns) {
        sampled_.push_back(nvml_by_key);
        sampled_at_.push_back(now_ns);
        return rows_;
      };
      d.set_counts = [this](const observe::NodeCounts& counts) { counts_.push_back(counts); };
    }
    d.api = &api_;
    d.on_drift = [this](const StatusOr<k8s::Json>& pod) {
      on_drift_pod_ok_.push_back(pod.ok());
      return action_;
    };
    d.kill = [this](unsigned int pid) { killed_.push_back(pid); };
    drift_.emplace(std::move(d));
    return *drift_;
  }

  // The container's processes on kGpu holding `bytes` in all.
  void Holds(std::uint64_t bytes, std::vector<unsigned int> pids = {101}) {
    std::vector<GpuProcess>& list = nvml_.processes[kGpu];
    list.clear();
    for (std::size_t i = 0; i < pids.size(); ++i) {
      tenants_.insert(pids[i]);
      list.push_back({pids[i], i == 0 ? bytes - (pids.size() - 1) * kMiB : kMiB});
    }
  }

  observe::ContainerRow Row(std::uint64_t oom_denials) {
    observe::ContainerRow row;
    row.id = "slot-0";
    row.ns = "team";
    row.pod = "job";
    row.pod_uid = "uid-1";
    row.container = "main";
    row.uuid = kGpu;
    row.limit_bytes = kGiB;
    row.used_bytes = kGiB - kMiB;
    row.peak_bytes = kGiB;
    row.region_readable = true;
    row.oom_denials = oom_denials;
    return row;
  }

  FakeNvml nvml_;
  FakeApi api_;
  std::vector<std::string> managed_ = {kGpu};
  std::vector<WatchedContainer> containers_ = {Container(2 * kGiB)};
  std::set<unsigned int> tenants_, own_;
  MapsLibrary maps_library_;
  DriftDeps::Clock::time_point now_ = DriftDeps::Clock::time_point{} + std::chrono::hours(1);
  std::uint64_t wall_us_ = 1'000'000'000;
  bool with_metrics_ = true;
  std::vector<observe::ContainerRow> rows_;
  std::vector<std::map<std::string, std::uint64_t>> sampled_;
  std::vector<std::uint64_t> sampled_at_;
  std::vector<observe::NodeCounts> counts_;
  policy::DriftAction action_ = policy::DriftAction::kReport;
  std::vector<bool> on_drift_pod_ok_;
  std::vector<unsigned int> killed_;
  std::optional<DriftActions> drift_;
};

TEST_F(DriftActionsTest, UnderCapAndSmallDriftDoesNothing) {
  DriftActions& drift = Make();
  containers_ = {Container(2 * kGiB)};
  Holds(100 * kMiB);  // under the cap, and drift (its region says 0) under 256 MiB
  const auto nvml = drift.Check();
  EXPECT_EQ(nvml,
            (std::map<std::string, std::uint64_t>{{"slot-0/team/job/main/" + kGpu, 100 * kMiB}}));
  EXPECT_TRUE(api_.events.empty());
  EXPECT_TRUE(api_.gets.empty());
  EXPECT_TRUE(killed_.empty());
  EXPECT_TRUE(api_.evictions.empty());
  const observe::NodeCounts c = drift.counts();
  EXPECT_EQ(c.over_cap + c.unattributed + c.kills + c.evictions, 0u);
}

TEST_F(DriftActionsTest, OverCapIsActedOnOncePerEpisode) {
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  Holds(kGiB + kMiB);  // 1 MiB above the cap
  drift.Check();
  ASSERT_EQ(api_.gets, std::vector<std::string>{"team/job"});
  std::vector<Event> over = api_.Of(names::kEventMemoryOverCap);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].target, "Pod team/job");
  EXPECT_EQ(over[0].message, "container main holds " + FormatBytesHuman(kGiB + kMiB) + " on " +
                                 kGpu + " (NVML), above its cap of " + FormatBytesHuman(kGiB) +
                                 "; its region says " + FormatBytesHuman(0) + "; reported");
  EXPECT_EQ(drift.counts().over_cap, 1u);
  EXPECT_TRUE(killed_.empty());

  // Still above: the same episode, nothing again.
  drift.Check();
  drift.Check();
  EXPECT_EQ(api_.Of(names::kEventMemoryOverCap).size(), 1u);
  EXPECT_EQ(api_.gets.size(), 1u);
  EXPECT_EQ(drift.counts().over_cap, 1u);

  // Back under, then above again: a new episode.
  Holds(kGiB - kMiB);
  drift.Check();
  EXPECT_EQ(api_.Of(names::kEventMemoryOverCap).size(), 1u);
  Holds(kGiB + kMiB);
  drift.Check();
  EXPECT_EQ(api_.Of(names::kEventMemoryOverCap).size(), 2u);
  EXPECT_EQ(api_.gets.size(), 2u);
  EXPECT_EQ(drift.counts().over_cap, 2u);
}

TEST_F(DriftActionsTest, KillTierKillsEveryProcessOfTheContainer) {
  action_ = policy::DriftAction::kKill;
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  Holds(kGiB + 2 * kMiB, {101, 102});
  drift.Check();
  drift.Check();  // the same episode: killed once
  EXPECT_EQ(killed_, (std::vector<unsigned int>{101, 102}));
  EXPECT_EQ(drift.counts().kills, 1u);
  const std::vector<Event> over = api_.Of(names::kEventMemoryOverCap);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_NE(over[0].message.find("; its 2 GPU process(es) killed"), std::string::npos)
      << over[0].message;
  EXPECT_TRUE(api_.evictions.empty());
}

TEST_F(DriftActionsTest, EvictTierEvictsThePodAndSaysWhenItFailed) {
  action_ = policy::DriftAction::kEvict;
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  Holds(kGiB + kMiB);
  drift.Check();
  EXPECT_EQ(api_.evictions, std::vector<std::string>{"team/job"});
  EXPECT_EQ(drift.counts().evictions, 1u);
  EXPECT_TRUE(killed_.empty());
  std::vector<Event> over = api_.Of(names::kEventMemoryOverCap);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_NE(over[0].message.find("; the pod evicted"), std::string::npos) << over[0].message;

  api_.evict_result = PermissionDeniedError("evictions are forbidden");
  Holds(kGiB - kMiB);
  drift.Check();
  Holds(kGiB + kMiB);
  drift.Check();
  EXPECT_EQ(drift.counts().evictions, 2u);
  over = api_.Of(names::kEventMemoryOverCap);
  ASSERT_EQ(over.size(), 2u);
  EXPECT_NE(over[1].message.find("; eviction failed: evictions are forbidden"), std::string::npos)
      << over[1].message;
}

TEST_F(DriftActionsTest, PodThatCannotBeReadIsCountedButGetsNoEvent) {
  api_.pod_error = NotFoundError("pods \"job\" not found");
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  Holds(kGiB + kMiB);
  drift.Check();
  EXPECT_EQ(on_drift_pod_ok_, std::vector<bool>{false});  // the tier is decided without it
  EXPECT_TRUE(api_.Of(names::kEventMemoryOverCap).empty());
  EXPECT_EQ(drift.counts().over_cap, 1u);
}

TEST_F(DriftActionsTest, DriftAboveTheThresholdIsReportedOncePerEpisode) {
  DriftActions& drift = Make();
  containers_ = {Container(10 * kGiB)};  // threshold: max(256 MiB, 5% of 10 GiB = 512 MiB)
  Holds(512 * kMiB);                     // not above it
  drift.Check();
  EXPECT_TRUE(api_.events.empty());
  Holds(513 * kMiB);
  drift.Check();
  drift.Check();
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_EQ(api_.events[0].target, "Pod team/job");
  EXPECT_EQ(api_.events[0].reason, names::kEventMemoryDrift);
  EXPECT_NE(api_.events[0].message.find("container main holds " + FormatBytesHuman(513 * kMiB)),
            std::string::npos);
  EXPECT_TRUE(api_.gets.empty());  // the Pod is named from the limits file
  EXPECT_EQ(drift.counts().over_cap, 0u);

  // A small cap: the threshold is 256 MiB.
  containers_ = {Container(kGiB, "slot-1")};
  Holds(256 * kMiB);
  drift.Check();
  EXPECT_EQ(api_.events.size(), 1u);
  Holds(257 * kMiB);
  drift.Check();
  EXPECT_EQ(api_.events.size(), 2u);
}

TEST_F(DriftActionsTest, UnattributedProcessIsToldToTheNodeOnce) {
  DriftActions& drift = Make();
  nvml_.processes[kGpu] = {{555, 300 * kMiB}, {556, 0}, {557, kGiB}};
  own_ = {557};  // the agent's own probe: not a tenant
  drift.Check();
  drift.Check();
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_EQ(api_.events[0].target, "Node");
  EXPECT_EQ(api_.events[0].reason, names::kEventUnattributedProcess);
  EXPECT_EQ(api_.events[0].message, "pid 555 holds " + FormatBytesHuman(300 * kMiB) + " on " +
                                        kGpu + " and belongs to no tessera container");
  EXPECT_EQ(drift.counts().unattributed, 1u);

  // Gone, then back: a new episode.
  nvml_.processes[kGpu] = {};
  drift.Check();
  nvml_.processes[kGpu] = {{555, 300 * kMiB}};
  drift.Check();
  EXPECT_EQ(drift.counts().unattributed, 2u);
}

TEST_F(DriftActionsTest, GpuWhoseNvmlDoesNotAnswerIsSkipped) {
  managed_ = {kGpu, kOtherGpu};
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  // kGpu does not answer: its over-cap container is neither measured nor acted on.
  nvml_.processes[kOtherGpu] = {};
  EXPECT_TRUE(drift.Check().empty());
  EXPECT_TRUE(api_.events.empty());
  // An unmanaged GPU is not asked at all.
  managed_ = {kOtherGpu};
  Holds(2 * kGiB);
  EXPECT_TRUE(drift.Check().empty());
  EXPECT_TRUE(api_.events.empty());
}

TEST_F(DriftActionsTest, PassSamplesTheMetricsWithNvmlsFiguresAndTheCounts) {
  api_.dropped = 7;
  DriftActions& drift = Make();
  containers_ = {Container(kGiB)};
  Holds(kGiB + kMiB);
  drift.Pass();
  ASSERT_EQ(sampled_.size(), 1u);
  EXPECT_EQ(sampled_[0],
            (std::map<std::string, std::uint64_t>{{"slot-0/team/job/main/" + kGpu, kGiB + kMiB}}));
  EXPECT_EQ(
      sampled_at_[0],
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now_.time_since_epoch()).count()));
  ASSERT_EQ(counts_.size(), 1u);
  EXPECT_EQ(counts_[0].over_cap, 1u);
  EXPECT_EQ(counts_[0].events_dropped, 7u);
}

TEST_F(DriftActionsTest, NoMetricsNoSampleNoDenialEvents) {
  with_metrics_ = false;
  rows_ = {Row(0)};
  DriftActions& drift = Make();
  drift.Pass();
  rows_ = {Row(5)};
  drift.Pass();
  EXPECT_TRUE(sampled_.empty());
  EXPECT_TRUE(counts_.empty());
  EXPECT_TRUE(api_.events.empty());
}

// A launch the driver refused (too few SMs under an MPS limit, say) is told like a denial: once a
// minute at most, only what rose after the agent started, with the count and the mode.
TEST_F(DriftActionsTest, RefusedLaunchesAreToldAsTheyRise) {
  DriftActions& drift = Make();
  observe::ContainerRow row = Row(0);
  row.compute_readable = true;
  row.mode = SharingMode::kMps;
  row.launch_failures = 4;  // before this agent started: not told
  rows_ = {row};
  drift.Sample({});
  EXPECT_TRUE(api_.events.empty());
  row.launch_failures = 7;
  rows_ = {row};
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_EQ(api_.events[0].reason, names::kEventLaunchFailed);
  EXPECT_EQ(api_.events[0].message,
            "container main: 3 kernel launch(es) on " + std::string(kGpu) +
                " refused by the driver (mode mps: under an MPS SM limit a launch needing more "
                "SMs fails); the application saw the error");
  now_ += std::chrono::seconds(10);
  row.launch_failures = 8;
  rows_ = {row};
  drift.Sample({});
  EXPECT_EQ(api_.events.size(), 1u);  // within the minute: held back
}

// Launches that found the compute governor failed are told as they rise, with what the tier made
// of it: ran ungoverned (fail-open), or waited (fail-closed: the wait so far).
TEST_F(DriftActionsTest, AFailedGovernorIsToldWithWhatTheTierMadeOfIt) {
  DriftActions& drift = Make();
  observe::ContainerRow row = Row(0);
  row.compute_readable = true;
  rows_ = {row};
  drift.Sample({});
  row.governor_failures = 2;
  rows_ = {row};
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_EQ(api_.events[0].reason, names::kEventGovernorFailed);
  EXPECT_NE(api_.events[0].message.find("2 launch(es)"), std::string::npos)
      << api_.events[0].message;
  EXPECT_NE(api_.events[0].message.find("ran ungoverned (fail-open)"), std::string::npos)
      << api_.events[0].message;
  now_ += std::chrono::seconds(61);
  row.governor_failures = 3;
  row.governor_down_ns = 1'500'000'000;
  rows_ = {row};
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 2u);
  EXPECT_NE(api_.events[1].message.find("waited for it (fail-closed, 1500 ms so far)"),
            std::string::npos)
      << api_.events[1].message;
}

TEST_F(DriftActionsTest, DenialsAreToldAtMostOnceAMinuteFromWhenTheAgentStarted) {
  DriftActions& drift = Make();
  rows_ = {Row(3)};  // refused before this agent started: not told
  drift.Sample({});
  EXPECT_TRUE(api_.events.empty());

  rows_ = {Row(5)};
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_EQ(api_.events[0].target, "Pod team/job");
  EXPECT_EQ(api_.events[0].reason, names::kEventGpuMemoryDenied);
  EXPECT_EQ(api_.events[0].message,
            "container main: 2 allocation(s) refused at its cap of " + FormatBytesHuman(kGiB) +
                " on " + kGpu + " (in use " + FormatBytesHuman(kGiB - kMiB) + ", peak " +
                FormatBytesHuman(kGiB) + "); the application saw out-of-memory");

  // More within the minute: held back, then told together.
  now_ += std::chrono::seconds(59);
  rows_ = {Row(9)};
  drift.Sample({});
  EXPECT_EQ(api_.events.size(), 1u);
  now_ += std::chrono::seconds(1);
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 2u);
  EXPECT_NE(api_.events[1].message.find("container main: 4 allocation(s) refused"),
            std::string::npos)
      << api_.events[1].message;

  // No new denials: nothing.
  now_ += std::chrono::minutes(5);
  drift.Sample({});
  EXPECT_EQ(api_.events.size(), 2u);
}

TEST_F(DriftActionsTest, ContainerAfterTheFirstSampleIsToldEveryDenial) {
  DriftActions& drift = Make();
  drift.Sample({});
  observe::ContainerRow unreadable = Row(4);
  unreadable.region_readable = false;
  rows_ = {unreadable};  // its counters are unknown: nothing
  drift.Sample({});
  EXPECT_TRUE(api_.events.empty());
  rows_ = {Row(4)};
  drift.Sample({});
  ASSERT_EQ(api_.events.size(), 1u);
  EXPECT_NE(api_.events[0].message.find("container main: 4 allocation(s) refused"),
            std::string::npos)
      << api_.events[0].message;
}

TEST(ProcParentOfTest, ReadsTheParentFromProc) {
  EXPECT_EQ(ProcParentOf(static_cast<unsigned int>(getpid())),
            static_cast<unsigned int>(getppid()));
  EXPECT_FALSE(IsOwnChild(static_cast<unsigned int>(getpid())));
  EXPECT_EQ(ProcParentOf(0x7ffffff0u), 0u);  // no such process
}

}  // namespace
}  // namespace tessera::agent

namespace tessera::agent {
namespace {

// NVML's utilization samples of `pid` on kGpu at `percent`, every 100 ms over (from, to].
void Runs(FakeNvml& nvml, unsigned int pid, unsigned int percent, std::uint64_t from_us,
          std::uint64_t to_us) {
  for (std::uint64_t t = from_us + 100'000; t <= to_us; t += 100'000)
    nvml.utilization[kGpu].push_back({pid, t, percent});
}

// A process of the container that holds no slot of its region runs on the SMs: it never went
// through the library. Once it has used them for 5 % of the window, the container's compute drift
// is acted on as its tier says (kill: that process), told to its Pod and counted, once for the
// episode. The same process with the region unreadable is no evidence: nothing is flagged.
TEST_F(DriftActionsTest, AProcessOutsideTheLibraryIsComputeDriftActedOnOnce) {
  testutil::TempDir dir;
  containers_[0].region_path = dir.path() + "/region";
  DriftActions& drift = Make();
  action_ = policy::DriftAction::kKill;
  Holds(100 * kMiB, {101});
  for (int second = 1; second <= 10; ++second) {  // no region yet: nothing to judge by
    Runs(nvml_, 101, 100, wall_us_, wall_us_ + 1'000'000);
    wall_us_ += 1'000'000;
    drift.Check();
  }
  EXPECT_TRUE(api_.Of(names::kEventComputeDrift).empty());
  ASSERT_TRUE(shm::Mapping::Create(containers_[0].region_path, {{kGpu, 2 * kGiB, 0}}).ok());
  for (int second = 1; second <= 10; ++second) {
    Runs(nvml_, 101, 100, wall_us_, wall_us_ + 1'000'000);
    wall_us_ += 1'000'000;
    drift.Check();
  }
  const std::vector<Event> told = api_.Of(names::kEventComputeDrift);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].target, "Pod team/job");
  EXPECT_NE(told[0].message.find("container main: process(es) 101 ran on the SMs of " + kGpu),
            std::string::npos)
      << told[0].message;
  EXPECT_NE(told[0].message.find("its 1 GPU process(es) killed"), std::string::npos)
      << told[0].message;
  EXPECT_EQ(killed_, std::vector<unsigned int>{101});
  EXPECT_EQ(drift.counts().compute_drift, 1u);
}

// What a container waited for others, from its region: a hard share held at its own cap did not
// wait for anyone (only its priority holds count); a work-conserving share's turns did.
TEST(CheckDrift, WaitingCountsHoldsForOthersNotAHardSharesOwnCap) {
  testutil::TempDir dir;
  WatchedContainer c = Container(2 * kGiB);
  c.region_path = dir.path() + "/region";
  auto region = shm::Mapping::Create(c.region_path, {{kGpu, 2 * kGiB, 0}});
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  region->region()->compute[0].throttled_ns = 5'000'000'000;
  region->region()->compute[0].priority_held_ns = 1'000'000'000;
  const std::map<std::string, std::vector<GpuProcess>> processes = {{kGpu, {}}};
  const auto no_cgroup = [](unsigned int) { return std::string(); };
  c.limits.compute = ComputeMode::kHard;
  DriftReport hard = CheckDrift({c}, processes, no_cgroup);
  ASSERT_EQ(hard.containers.size(), 1u);
  EXPECT_EQ(hard.containers[0].waited_ns, 1'000'000'000u);
  c.limits.compute = ComputeMode::kWorkConserving;
  DriftReport conserving = CheckDrift({c}, processes, no_cgroup);
  ASSERT_EQ(conserving.containers.size(), 1u);
  EXPECT_EQ(conserving.containers[0].waited_ns, 6'000'000'000u);
}

// A process that exec'd a program without the preload keeps its PID, and the live slot its first
// image claimed: it no longer maps the library, and that is what tells. The same process still
// mapping it is governed; one whose maps cannot be read is no evidence.
TEST_F(DriftActionsTest, AProcessThatExecdWithoutTheLibraryKeepsItsSlotAndIsStillFlagged) {
  for (const std::optional<bool> maps :
       {std::optional<bool>(false), std::optional<bool>(true), std::optional<bool>()}) {
    testutil::TempDir dir;
    containers_[0].region_path = dir.path() + "/region";
    auto region = shm::Mapping::Create(containers_[0].region_path, {{kGpu, 2 * kGiB, 0}});
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    ASSERT_TRUE(shm::ClaimSlot(*region->region(), 101, 1).ok());
    api_.events.clear();
    nvml_.utilization.clear();
    maps_library_ = [maps](unsigned int) { return maps; };
    DriftActions& drift = Make();
    Holds(100 * kMiB, {101});
    for (int second = 1; second <= 10; ++second) {
      Runs(nvml_, 101, 100, wall_us_, wall_us_ + 1'000'000);
      wall_us_ += 1'000'000;
      drift.Check();
    }
    const std::vector<Event> told = api_.Of(names::kEventComputeDrift);
    if (maps == false) {
      ASSERT_EQ(told.size(), 1u);
      EXPECT_NE(told[0].message.find("without tessera's library"), std::string::npos)
          << told[0].message;
    } else {
      EXPECT_TRUE(told.empty()) << (maps ? "maps the library" : "maps unreadable");
    }
  }
}

// The library in /proc/PID/maps: by device and inode, or by its path (also replaced under a
// running process: " (deleted)"); a file of the same name elsewhere is not it.
TEST(MapsLibraryFile, MatchesTheFileByDeviceAndInodeOrByItsPath) {
  LibraryFile file;
  file.major = 0x103;
  file.minor = 0x2;
  file.inode = 4242;
  file.paths = {"/opt/tessera/lib/libtessera-cuda.so", "/usr/local/lib/tessera/libtessera-cuda.so"};
  const std::string other =
      "7f00-7f10 r-xp 00000000 103:02 17 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f20-7f30 rw-p 00000000 00:00 0 \n"
      "7f40-7f50 r-xp 00000000 00:2a 99 /tmp/libtessera-cuda.so\n";
  EXPECT_FALSE(MapsLibraryFile(other, file));
  EXPECT_TRUE(
      MapsLibraryFile(other + "7f60-7f70 r-xp 00000000 103:02 4242 /elsewhere/x.so\n", file));
  EXPECT_FALSE(
      MapsLibraryFile(other + "7f60-7f70 r-xp 00000000 103:03 4242 /elsewhere/x.so\n", file));
  EXPECT_TRUE(MapsLibraryFile(
      other + "7f60-7f70 r-xp 00000000 00:31 7 /usr/local/lib/tessera/libtessera-cuda.so\n", file));
  EXPECT_TRUE(MapsLibraryFile(
      other + "7f60-7f70 r-xp 00000000 00:31 7 /opt/tessera/lib/libtessera-cuda.so (deleted)",
      file));
  EXPECT_FALSE(MapsLibraryFile("", file));
  EXPECT_FALSE(MapsLibraryFile("garbage\n\n", file));
}

// Against this process: a shared library it maps is found by its file, a file it does not map is
// not, and a process that is gone cannot be told.
TEST(ProcMapsLibrary, TellsWhatThisProcessMaps) {
  const StatusOr<std::string> maps = ReadFile("/proc/self/maps", 64u << 20);
  ASSERT_TRUE(maps.ok());
  std::string mapped;  // a shared object this test maps
  std::istringstream lines(*maps);
  for (std::string line; std::getline(lines, line) && mapped.empty();) {
    const std::size_t slash = line.find('/');
    if (slash != std::string::npos && line.find(".so") != std::string::npos)
      mapped = line.substr(slash);
  }
  ASSERT_FALSE(mapped.empty());
  const auto self = static_cast<unsigned int>(getpid());
  EXPECT_EQ(ProcMapsLibrary(mapped)(self), std::optional<bool>(true)) << mapped;
  testutil::TempDir dir;
  const std::string unmapped = dir.path() + "/libtessera-cuda.so";
  std::ofstream(unmapped) << "not a library";
  EXPECT_EQ(ProcMapsLibrary(unmapped)(self), std::optional<bool>(false));
  EXPECT_EQ(ProcMapsLibrary(mapped)(4'000'000'000U), std::nullopt);
}

// The PID a process has in its own namespace: this test's own (one namespace) is its PID; a
// process that is gone is 0.
TEST(ProcNsPidOf, IsThePidInTheProcesssOwnNamespace) {
  EXPECT_EQ(ProcNsPidOf(static_cast<unsigned int>(getpid())), static_cast<unsigned int>(getpid()));
  EXPECT_EQ(ProcNsPidOf(4'000'000'000U), 0u);
}

// A GPU whose per-process utilization cannot be read is told to the Node once per episode; its
// memory is still checked.
TEST_F(DriftActionsTest, AGpuWithoutUtilizationIsToldToTheNodeOnce) {
  DriftActions& drift = Make();
  nvml_.no_utilization = {kGpu};
  Holds(100 * kMiB);
  drift.Check();
  drift.Check();
  const std::vector<Event> told = api_.Of(names::kEventComputeUnchecked);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].target, "Node");
  EXPECT_NE(told[0].message.find("not supported on " + kGpu), std::string::npos) << told[0].message;
  EXPECT_EQ(drift.counts().compute_drift, 0u);
}

}  // namespace
}  // namespace tessera::agent
