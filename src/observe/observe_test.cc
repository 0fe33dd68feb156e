#include "observe/observe.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tessera/names.h"
#include "tessera/prometheus.h"
#include "tessera/region.h"

#include "testutil/old_region.h"
#include "testutil/temp_dir.h"

namespace tessera::observe {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

double ValueOf(const std::vector<prom::Sample>& samples, const std::string& name,
               const std::map<std::string, std::string>& match = {}) {
  for (const prom::Sample& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      all &= it != s.labels.end() && it->second == v;
    }
    if (all) return s.value;
  }
  ADD_FAILURE() << "no sample " << name;
  return -1;
}

TEST(Exposition, WritesOnlyListedFamiliesOnceEachWithEscapedLabels) {
  prom::Exposition out;
  out.Add(names::kMetricGpuHealthy, {{"UUID", "GPU-a"}}, 1);
  out.Add("tessera_not_a_metric", {}, 1);
  out.Add(names::kMetricNodeInfo, {{"Hostname", "n\"1\\\n"}}, 1);
  out.Add(names::kMetricGpuHealthy, {{"UUID", "GPU-b"}}, 0);
  EXPECT_EQ(out.unknown(), 1);
  const std::string text = out.Text();
  EXPECT_EQ(text.find("tessera_not_a_metric"), std::string::npos);
  // node_info comes first (list order), HELP/TYPE once per family.
  EXPECT_LT(text.find("tessera_node_info"), text.find("tessera_gpu_healthy"));
  std::size_t helps = 0;
  for (std::size_t at = text.find("# TYPE tessera_gpu_healthy gauge"); at != std::string::npos;
       at = text.find("# TYPE tessera_gpu_healthy", at + 1)) {
    ++helps;
  }
  EXPECT_EQ(helps, 1u);
  EXPECT_NE(text.find(R"(Hostname="n\"1\\\n")"), std::string::npos) << text;
  auto samples = prom::ParseExposition(text);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].labels.at("Hostname"), "n\"1\\\n");
}

TEST(Exposition, HistogramBucketsAreCumulative) {
  prom::Histogram h;
  h.Observe(0.0002);
  h.Observe(0.003);
  h.Observe(0.003);
  h.Observe(10);  // above every bound: only +Inf
  prom::Exposition out;
  out.Add(names::kMetricSchedulerRequestSeconds, {{"verb", "filter"}}, h);
  out.Add(names::kMetricSchedulerRequestSeconds, {{"verb", "bind"}}, 1.0);  // not a histogram value
  EXPECT_EQ(out.unknown(), 1);
  auto samples = prom::ParseExposition(out.Text());
  ASSERT_TRUE(samples.ok());
  const std::string b = "tessera_scheduler_request_seconds_bucket";
  EXPECT_EQ(ValueOf(*samples, b, {{"le", "0.0001"}}), 0);
  EXPECT_EQ(ValueOf(*samples, b, {{"le", "0.00025"}}), 1);
  EXPECT_EQ(ValueOf(*samples, b, {{"le", "0.005"}}), 3);
  EXPECT_EQ(ValueOf(*samples, b, {{"le", "2.5"}}), 3);
  EXPECT_EQ(ValueOf(*samples, b, {{"le", "+Inf"}}), 4);
  EXPECT_EQ(ValueOf(*samples, "tessera_scheduler_request_seconds_count"), 4);
  EXPECT_NEAR(ValueOf(*samples, "tessera_scheduler_request_seconds_sum"), 10.0062, 1e-9);
}

TEST(Exposition, ParseErrorsNameTheLine) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"ok 1\n{x=\"1\"} 2\n", "line 2: no metric name"},
           {"a{x=1} 2\n", "line 1: a label is not key=\"value\""},
           {"a{x=\"1} 2\n", "line 1: unterminated label value"},
           {"# c\na 1x\n", "line 2: value \"1x\" is not a number"},
           {"a\n", "line 1: value \"\" is not a number"}}) {
    auto parsed = prom::ParseExposition(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find(want), std::string::npos) << parsed.status().message();
  }
  EXPECT_EQ(prom::FormatValue(0.25), "0.25");
  EXPECT_EQ(prom::FormatValue(3), "3");
}

// A node state folder with one container on two GPUs, usage written through the region API as
// the preload library writes it.
class NodeState : public ::testing::Test {
 protected:
  void SetUp() override {
    slot_ = dir_.path() + "/slots/slot-0003";
    std::filesystem::create_directories(slot_ + "/etc");
    std::filesystem::create_directories(slot_ + "/run");
    std::ofstream(slot_ + "/etc/limits")
        << "version 1\npod 6b1f ml/train-0 trainer\npriority best-effort\ncompute work-conserving\n"
           "device GPU-aaaa memory="
        << 8 * kGiB << " cores=30\ndevice GPU-bbbb memory=" << 2 * kGiB << "\n";
    auto m = shm::Mapping::Create(slot_ + "/run/region",
                                  {{"GPU-aaaa", 8 * kGiB, 30}, {"GPU-bbbb", 2 * kGiB, 0}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mapping_ = std::move(*m);
    shm::Region& r = *mapping_.region();
    auto slot = shm::ClaimSlot(r, 1234, 1);
    ASSERT_TRUE(slot.ok());
    ASSERT_TRUE(shm::Reserve(r, *slot, 0, 6 * kGiB, 8 * kGiB).ok());
    EXPECT_FALSE(shm::Reserve(r, *slot, 0, 3 * kGiB, 8 * kGiB).ok());  // a denial, counted
    shm::Release(r, *slot, 0, 1 * kGiB);
    ASSERT_TRUE(shm::Reserve(r, *slot, 1, 512ULL << 20, 2 * kGiB).ok());
    r.compute[0].busy_ns = 3'000'000'000;
    r.compute[0].throttled_ns = 1'500'000'000;
    r.compute[0].priority_held_ns = 250'000'000;
    r.compute[0].priority_holds = 7;
    r.compute[0].launches = 1000;
    r.compute[0].gate = static_cast<std::uint32_t>(shm::Gate::kHeldPriority);
  }
  testutil::TempDir dir_;
  std::string slot_;
  shm::Mapping mapping_;
};

TEST_F(NodeState, ReadsEveryDeviceOfEveryContainer) {
  auto sources = StateDirContainers(dir_.path());
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].id, "slot-0003");
  auto rows = ReadContainers(sources);
  ASSERT_EQ(rows.size(), 2u);
  const ContainerRow& a = rows[0];
  EXPECT_EQ(a.ns, "ml");
  EXPECT_EQ(a.pod, "train-0");
  EXPECT_EQ(a.container, "trainer");
  EXPECT_EQ(a.uuid, "GPU-aaaa");
  EXPECT_EQ(a.priority, PriorityClass::kBestEffort);
  EXPECT_EQ(a.compute, ComputeMode::kWorkConserving);
  EXPECT_TRUE(a.region_readable);
  EXPECT_EQ(a.limit_bytes, 8 * kGiB);
  EXPECT_EQ(a.used_bytes, 5 * kGiB);
  EXPECT_EQ(a.peak_bytes, 6 * kGiB);
  EXPECT_EQ(a.oom_denials, 1u);
  EXPECT_EQ(a.cores_percent, 30u);
  EXPECT_EQ(a.busy_ns, 3'000'000'000u);
  EXPECT_EQ(a.gate, shm::Gate::kHeldPriority);
  EXPECT_EQ(rows[1].uuid, "GPU-bbbb");
  EXPECT_EQ(rows[1].used_bytes, 512ULL << 20);
  EXPECT_EQ(rows[1].cores_percent, 0u);
}

TEST_F(NodeState, AContainerWithoutARegionIsShownWithUnknownUsage) {
  std::filesystem::remove(slot_ + "/run/region");
  auto rows = ReadContainers(StateDirContainers(dir_.path()));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].region_readable);
  EXPECT_EQ(rows[0].limit_bytes, 8 * kGiB);
  const std::string text = RenderExposition({"n", "v", {}, rows, {}});
  EXPECT_NE(text.find("tessera_container_gpu_memory_limit_bytes"), std::string::npos);
  EXPECT_EQ(text.find("tessera_container_gpu_memory_used_bytes"), std::string::npos);
}

TEST_F(NodeState, AContainerOnThePreviousLibraryIsReadWithoutComputeCounters) {
  mapping_ = shm::Mapping();
  ASSERT_TRUE(testutil::DowngradeRegionToLayout1(slot_ + "/run/region"));
  auto rows = ReadContainers(StateDirContainers(dir_.path()));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].region_readable);
  EXPECT_EQ(rows[0].used_bytes, 5 * kGiB);
  EXPECT_EQ(rows[0].oom_denials, 1u);
  EXPECT_FALSE(rows[0].compute_readable);  // layout 1 has no compute counters
  EXPECT_EQ(rows[0].gate, shm::Gate::kFree);
  const std::string text = RenderExposition({"n", "v", {}, rows, {}});
  EXPECT_NE(text.find("tessera_container_gpu_memory_used_bytes"), std::string::npos);
  EXPECT_EQ(text.find("tessera_container_gpu_busy_seconds_total"), std::string::npos);
  auto back = SnapshotFromExposition(text);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->containers[0].compute_readable);
  EXPECT_NE(RenderTop(*back).find("      ? "), std::string::npos) << RenderTop(*back);
}

TEST_F(NodeState, MetricsCarryTheKnownUsageWithDcgmLabels) {
  Snapshot s;
  s.node = "gpu-node-1";
  s.version = "0.9.0";
  s.gpus = {{0, "GPU-aaaa", "NVIDIA H200", 141 * kGiB, true},
            {1, "GPU-bbbb", "NVIDIA H200", 141 * kGiB, false}};
  s.containers = ReadContainers(StateDirContainers(dir_.path()));
  s.containers[0].nvml_bytes = 5 * kGiB + (300ULL << 20);
  s.containers[0].delivered = 0.3;
  s.counts = NodeCounts{2, 1, 0, 1, 0};
  auto samples = prom::ParseExposition(RenderExposition(s));
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  const std::map<std::string, std::string> a = {
      {"Hostname", "gpu-node-1"},   {"gpu", "0"},
      {"UUID", "GPU-aaaa"},         {"device", "nvidia0"},
      {"modelName", "NVIDIA H200"}, {"namespace", "ml"},
      {"pod", "train-0"},           {"container", "trainer"}};
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_memory_limit_bytes", a), 8.0 * kGiB);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_memory_used_bytes", a), 5.0 * kGiB);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_memory_peak_bytes", a), 6.0 * kGiB);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_memory_drift_bytes", a), 300.0 * (1 << 20));
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_oom_denials_total", a), 1);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_compute_share_target_ratio", a), 0.3);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_compute_share_delivered_ratio", a), 0.3);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_busy_seconds_total", a), 3);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_throttled_seconds_total", a), 1.5);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_priority_held_seconds_total", a), 0.25);
  EXPECT_EQ(ValueOf(*samples, "tessera_container_gpu_priority_holds_total", a), 7);
  EXPECT_EQ(
      ValueOf(*samples, "tessera_container_gpu_info",
              {{"UUID", "GPU-aaaa"}, {"priority", "best-effort"}, {"compute", "work-conserving"}}),
      1);
  EXPECT_EQ(ValueOf(*samples, "tessera_gpu_memory_allocated_bytes", {{"UUID", "GPU-aaaa"}}),
            8.0 * kGiB);
  EXPECT_EQ(ValueOf(*samples, "tessera_gpu_compute_allocated_ratio", {{"UUID", "GPU-aaaa"}}), 0.3);
  EXPECT_EQ(ValueOf(*samples, "tessera_gpu_healthy", {{"UUID", "GPU-bbbb"}}), 0);
  EXPECT_EQ(ValueOf(*samples, "tessera_node_drift_over_cap_total", {{"Hostname", "gpu-node-1"}}),
            2);
  EXPECT_EQ(ValueOf(*samples, "tessera_node_drift_evictions_total"), 1);
  // No share target without a share; no NVML figure where the agent has none.
  for (const prom::Sample& x : *samples) {
    if (x.labels.count("UUID") && x.labels.at("UUID") == "GPU-bbbb") {
      EXPECT_NE(x.name, "tessera_container_gpu_compute_share_target_ratio");
      EXPECT_NE(x.name, "tessera_container_gpu_memory_nvml_bytes");
    }
  }
}

TEST_F(NodeState, TopReadsTheSameSnapshotBackFromMetrics) {
  Snapshot s;
  s.node = "gpu-node-1";
  s.version = "0.9.0";
  s.gpus = {{0, "GPU-aaaa", "NVIDIA H200", 141 * kGiB, true},
            {1, "GPU-bbbb", "NVIDIA H200", 141 * kGiB, true}};
  s.containers = ReadContainers(StateDirContainers(dir_.path()));
  s.containers[0].delivered = 0.29;
  s.containers[0].nvml_bytes = 5 * kGiB;
  auto back = SnapshotFromExposition(RenderExposition(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node, "gpu-node-1");
  ASSERT_EQ(back->gpus.size(), 2u);
  EXPECT_EQ(back->gpus[0].memory_total, 141 * kGiB);
  ASSERT_EQ(back->containers.size(), 2u);
  const ContainerRow& a = back->containers[0];
  EXPECT_EQ(a.Key(), "/" + s.containers[0].ns + "/" + s.containers[0].pod +
                         "/trainer/GPU-aaaa");  // no slot id
  EXPECT_EQ(a.used_bytes, s.containers[0].used_bytes);
  EXPECT_EQ(a.peak_bytes, s.containers[0].peak_bytes);
  EXPECT_EQ(a.cores_percent, 30u);
  EXPECT_EQ(a.priority, PriorityClass::kBestEffort);
  EXPECT_EQ(a.throttled_ns, s.containers[0].throttled_ns);
  EXPECT_EQ(*a.delivered, 0.29);
  EXPECT_EQ(*a.nvml_bytes, 5 * kGiB);
  EXPECT_FALSE(back->containers[1].nvml_bytes.has_value());
  EXPECT_FALSE(back->counts.has_value());
  // Local and remote render the same screen (the gate is local only: the metrics do not carry it).
  s.containers[0].gate = back->containers[0].gate;
  EXPECT_EQ(RenderTop(*back), RenderTop(s));
  EXPECT_FALSE(SnapshotFromExposition("# nothing\nnode_cpu_seconds_total 4\n").ok());
}

TEST_F(NodeState, TopShowsEachContainerWithinTheWidth) {
  Snapshot s;
  s.node = "gpu-node-1";
  s.gpus = {{0, "GPU-aaaa", "NVIDIA H200", 141 * kGiB, true}};
  s.containers = ReadContainers(StateDirContainers(dir_.path()));
  s.containers[0].pod = "a-pod-name-that-is-much-longer-than-the-column-allows-for-sure";
  s.containers[0].delivered = 0.3;
  const std::string screen = RenderTop(s, 100);
  std::istringstream lines(screen);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(screen.find("GPU 0  NVIDIA H200  GPU-aaaa"), std::string::npos) << screen;
  EXPECT_NE(screen.find("GPU ?  GPU-bbbb"), std::string::npos) << screen;  // not in the GPU list
  EXPECT_NE(screen.find("30%w"), std::string::npos) << screen;
  EXPECT_NE(screen.find("held!"), std::string::npos) << screen;
  EXPECT_NE(screen.find("1.8s"), std::string::npos) << screen;  // throttled + priority-held
  EXPECT_NE(screen.find("8.0G"), std::string::npos) << screen;
}

TEST_F(NodeState, TopPrintsNoTerminalControlAndKeepsToNarrowWidths) {
  Snapshot s;
  s.node = "evil\x1b]0;pwned\x07";
  s.gpus = {{0, "GPU-aaaa", "NVIDIA\x1b[2J H200", 141 * kGiB, true}};
  s.containers = ReadContainers(StateDirContainers(dir_.path()));
  s.containers[0].pod = "p\x1b[31m";
  const std::string screen = RenderTop(s, 60);
  EXPECT_EQ(screen.find('\x1b'), std::string::npos) << screen;
  EXPECT_EQ(screen.find('\x07'), std::string::npos);
  std::istringstream lines(screen);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 60u) << line;
}

TEST_F(NodeState, ATruncatedOrForeignRegionIsUnknownNeverACrash) {
  const std::string region = slot_ + "/run/region";
  ASSERT_EQ(truncate(region.c_str(), 4096), 0);  // the tenant truncates it under the agent
  auto rows = ReadContainers(StateDirContainers(dir_.path()));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].region_readable);
  mapping_ = shm::Mapping();
  std::filesystem::remove(region);
  ASSERT_EQ(mkfifo(region.c_str(), 0666), 0);  // or puts a FIFO there: not opened, not waited on
  rows = ReadContainers(StateDirContainers(dir_.path()));
  EXPECT_FALSE(rows[0].region_readable);
}

TEST(ShareMeter, DeliveredIsBusyPerWallSecondOverTheWindow) {
  ShareMeter meter(1'000'000'000);
  std::vector<ContainerRow> rows(1);
  rows[0].region_readable = rows[0].compute_readable = true;
  rows[0].busy_ns = 10'000'000'000;
  meter.Update(rows, 100'000'000'000);
  EXPECT_FALSE(rows[0].delivered.has_value());
  rows[0].busy_ns += 600'000'000;
  meter.Update(rows, 100'500'000'000);  // half a second: too short, nothing yet
  EXPECT_FALSE(rows[0].delivered.has_value());
  rows[0].busy_ns += 400'000'000;
  meter.Update(rows, 102'000'000'000);
  ASSERT_TRUE(rows[0].delivered.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].delivered, 0.5);
  rows[0].busy_ns = 5;  // a re-created region starts over
  meter.Update(rows, 104'000'000'000);
  EXPECT_FALSE(rows[0].delivered.has_value());
}

// The Grafana dashboard only queries families that exist.
TEST(Dashboard, QueriesOnlyListedFamilies) {
  std::ifstream in(TESSERA_DASHBOARD_JSON);
  ASSERT_TRUE(in.good()) << TESSERA_DASHBOARD_JSON;
  std::stringstream text;
  text << in.rdbuf();
  const std::string dashboard = text.str();
  std::set<std::string> known;
  for (const names::MetricInfo& m : names::kAllMetrics) {
    known.insert(std::string(m.name));
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      known.insert(std::string(m.name) + suffix);
  }
  const std::regex family("tessera_[a-z_]+");
  int queries = 0;
  for (auto it = std::sregex_iterator(dashboard.begin(), dashboard.end(), family);
       it != std::sregex_iterator(); ++it) {
    ++queries;
    EXPECT_TRUE(known.count(it->str())) << it->str() << " is not a tessera metric family";
  }
  EXPECT_GE(queries, 10);
  EXPECT_NE(dashboard.find("DCGM_FI_DEV_FB_USED"), std::string::npos);  // joined with dcgm-exporter
}

}  // namespace
}  // namespace tessera::observe
