// Exact reproduction of the published curves (spec §8): every column 0..130 of
// analysis_allo_discrete.csv, default trace, for the five deterministic policies, and of
// analysis_frag_discrete.csv for FGD. Data: test/data/alibaba-gpu-v2023/README.md.
#include <cmath>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "sim/expected.h"
#include "sim/go_source.h"
#include "sim/replay.h"
#include "sim/trace.h"
#include "testutil/status_matchers.h"

namespace tessera::sim {
namespace {

using placement::PolicyKind;
constexpr const char* kData = TESSERA_TRACE_DATA;

struct Shared {
  std::optional<SimInput> input;
  std::map<std::tuple<std::string, std::int64_t>, PublishedRow> allo, frag;
};

Shared& Data() {
  static Shared* shared = [] {
    auto* s = new Shared;
    auto nodes = LoadNodeCsv(std::string(kData) + "/openb_node_list_gpu_node.csv");
    auto pods = LoadPodCsv(std::string(kData) + "/openb_pod_list_default.csv");
    if (!nodes.ok() || !pods.ok()) return s;
    auto input =
        MakeSimInput(std::move(nodes).value(), std::move(pods).value(), "openb_pod_list_default");
    if (input.ok()) s->input.emplace(std::move(input).value());
    for (auto [file, map] : {std::pair{"analysis_allo_discrete_default.csv", &s->allo},
                             std::pair{"analysis_frag_discrete_default.csv", &s->frag}}) {
      auto rows = LoadPublishedCsv(std::string(kData) + "/" + file);
      if (!rows.ok()) continue;
      for (PublishedRow& r : *rows) (*map)[{r.sc_policy, r.seed}] = std::move(r);
    }
    return s;
  }();
  return *shared;
}

// Compares every column; returns the number of cells that differ.
int CompareColumns(const std::vector<std::optional<double>>& ours,
                   const std::vector<std::optional<double>>& published, const std::string& what) {
  int bad = 0;
  EXPECT_EQ(ours.size(), published.size()) << what;
  for (std::size_t x = 0; x < std::min(ours.size(), published.size()); ++x) {
    const bool same =
        ours[x].has_value() == published[x].has_value() &&
        (!ours[x].has_value() || std::llround(*ours[x] * 100) == std::llround(*published[x] * 100));
    if (!same && ++bad <= 5) {
      ADD_FAILURE() << what << " column " << x << ": ours "
                    << (ours[x] ? std::to_string(*ours[x]) : "empty") << ", published "
                    << (published[x] ? std::to_string(*published[x]) : "empty");
    }
  }
  return bad;
}

class FidelityTest : public ::testing::TestWithParam<std::tuple<PolicyKind, std::int64_t>> {};

TEST_P(FidelityTest, MatchesThePublishedCurveExactly) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  const auto [policy, seed] = GetParam();
  Shared& data = Data();
  ASSERT_TRUE(data.input.has_value());
  const std::string key(placement::PublishedName(policy));
  ASSERT_TRUE(data.allo.count({key, seed}));
  auto result = RunExperiment(*data.input, policy, seed);
  ASSERT_OK(result);
  const std::string what = key + " seed " + std::to_string(seed);
  EXPECT_EQ(CompareColumns(result->curve.alloc, data.allo[{key, seed}].columns, what + " alloc"),
            0);
  if (policy == PolicyKind::kFgd) {
    ASSERT_TRUE(data.frag.count({key, seed}));
    EXPECT_EQ(CompareColumns(result->curve.frag, data.frag[{key, seed}].columns, what + " frag"),
              0);
  }
}

std::string Name(const ::testing::TestParamInfo<FidelityTest::ParamType>& info) {
  std::string name(placement::Name(std::get<0>(info.param)));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name + "_seed" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Default, FidelityTest,
    ::testing::Combine(::testing::Values(PolicyKind::kDotProduct, PolicyKind::kGpuClustering,
                                         PolicyKind::kGpuPacking, PolicyKind::kBestFit,
                                         PolicyKind::kFgd),
                       ::testing::Range<std::int64_t>(42, 52)),
    Name);

}  // namespace
}  // namespace tessera::sim
