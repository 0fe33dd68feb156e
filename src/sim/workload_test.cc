#include "sim/workload.h"

#include <gtest/gtest.h>

#include "sim/go_source.h"
#include "sim/trace.h"
#include "testutil/status_matchers.h"

namespace tessera::sim {
namespace {

constexpr const char* kData = TESSERA_TRACE_DATA;

class DefaultTraceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto pods = LoadPodCsv(std::string(kData) + "/openb_pod_list_default.csv");
    ASSERT_OK(pods);
    pods_ = new std::vector<TracePod>(std::move(pods).value());
  }
  static void TearDownTestSuite() {
    delete pods_;
    pods_ = nullptr;
  }
  static std::vector<TracePod>* pods_;
};
std::vector<TracePod>* DefaultTraceTest::pods_ = nullptr;

struct TuneCase {
  std::int64_t seed;
  std::size_t pods;
  std::size_t clones;
  std::int64_t total;
  std::uint32_t ranks[3];
};

// Spec §2.3 check values for the default trace.
constexpr TuneCase kTuneCases[] = {
    {42, 10866, 2714, 8075080, {601, 815, 450}}, {43, 10793, 2641, 8074900, {1072, 485, 626}},
    {44, 10863, 2711, 8075270, {334, 433, 952}}, {45, 10813, 2661, 8082190, {918, 1103, 586}},
    {46, 10814, 2662, 8075240, {119, 179, 74}},  {47, 10831, 2679, 8074860, {1194, 3, 223}},
    {48, 10805, 2653, 8075340, {976, 548, 916}}, {49, 10835, 2683, 8075140, {370, 796, 175}},
    {50, 10766, 2614, 8075230, {549, 571, 497}}, {51, 10859, 2707, 8074900, {226, 1032, 294}},
};

TEST_F(DefaultTraceTest, TuningMatchesTheSpecTable) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  for (const TuneCase& c : kTuneCases) {
    auto rand = MakeRand(RngKind::kGo, c.seed);
    ASSERT_OK(rand);
    const Workload w = GenerateWorkload(*pods_, 1213, 6212000, **rand);
    EXPECT_EQ(w.arrival.size(), c.pods) << "seed " << c.seed;
    EXPECT_EQ(w.arrival.size() - w.originals, c.clones) << "seed " << c.seed;
    EXPECT_EQ(w.requested_milli, c.total) << "seed " << c.seed;
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(w.ranks[i], c.ranks[i]) << "seed " << c.seed;
  }
}

TEST_F(DefaultTraceTest, SeedFortyTwoOrderMatchesTheSpec) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  auto rand = MakeRand(RngKind::kGo, 42);
  ASSERT_OK(rand);
  const Workload w = GenerateWorkload(*pods_, 1213, 6212000, **rand);
  const char* first[] = {"openb-pod-0255", "openb-pod-1685", "openb-pod-6784", "openb-pod-4463",
                         "openb-pod-0602"};
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(w.pods[w.arrival[static_cast<std::size_t>(i)]].name, first[i]);
  const char* clones[] = {"openb-pod-3888", "openb-pod-5689", "openb-pod-2936"};
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(w.pods[w.arrival[w.originals + i]].name, clones[i]);
  EXPECT_EQ(w.ranks[3], 13U);
  EXPECT_EQ(w.ranks[4], 731U);
}

TEST_F(DefaultTraceTest, TypicalPodsMatchTheSpec) {
  const placement::WorkloadProfile profile = TypicalPods(*pods_);
  ASSERT_EQ(profile.items.size(), 35U);
  EXPECT_EQ(profile.items[0].cpu_milli, 3152);
  EXPECT_EQ(profile.items[0].gpu_milli, 810);
  EXPECT_EQ(profile.items[0].gpu_count, 1U);
  EXPECT_NEAR(profile.items[0].weight, 0.13482, 5e-6);
  EXPECT_EQ(profile.items[1].cpu_milli, 11300);
  EXPECT_NEAR(profile.items[1].weight, 0.11254, 5e-6);
  EXPECT_EQ(profile.items[5].cpu_milli, 12500);
  EXPECT_EQ(profile.items[5].gpu_count, 0U);
  double sum = 0, cpu_only = 0;
  for (const auto& item : profile.items) {
    sum += item.weight;
    if (item.gpu_count == 0) cpu_only += item.weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(cpu_only, 0.1360, 5e-5);
}

TEST(Workload, TunesDownWhenTheTraceExceedsTheTarget) {
  std::vector<TracePod> pods;
  for (int i = 0; i < 40; ++i) {
    TracePod p;
    p.name = "pod-" + std::to_string(100 + i);
    p.cpu_milli = 1000;
    p.num_gpu = 1;
    p.gpu_milli = 1000;
    pods.push_back(p);
  }
  auto rand = MakeRand(RngKind::kStd, 1);
  ASSERT_OK(rand);
  // 40 GPUs requested on a 20-GPU cluster: 130 % is 26 000 milli.
  const Workload w = GenerateWorkload(pods, 3, 20000, **rand);
  EXPECT_EQ(w.arrival.size(), 26U);
  EXPECT_EQ(w.requested_milli, 26000);
  EXPECT_EQ(w.ranks.size(), 3U);
}

}  // namespace
}  // namespace tessera::sim
