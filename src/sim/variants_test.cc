#include "sim/variants.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/file.h"

#include "sim/sim_command.h"
#include "sim/trace.h"
#include "sim/workload.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::sim {
namespace {

constexpr const char* kData = TESSERA_TRACE_DATA;
constexpr std::int64_t kCapacity = 6212 * 1000;

const std::vector<TracePod>& DefaultPods() {
  static const auto* pods = [] {
    auto loaded = LoadPodCsv(std::string(kData) + "/openb_pod_list_default.csv");
    return new std::vector<TracePod>(loaded.ok() ? std::move(loaded).value()
                                                 : std::vector<TracePod>{});
  }();
  return *pods;
}

VariantSpec Spec(VariantFamily family, double share) {
  VariantSpec s;
  s.name = "v";
  s.family = family;
  s.base = "default";
  s.share = share;
  s.seed = 7;
  return s;
}

// Share of the GPU milli asked by multi-GPU pods among pods [from, to) of the list, by
// cumulative GPU milli.
double ShareBetween(const std::vector<TracePod>& pods, double from, double to) {
  double total = 0;
  for (const TracePod& p : pods) total += static_cast<double>(p.total_milli());
  double at = 0, all = 0, multi = 0;
  for (const TracePod& p : pods) {
    const double t = at / total;
    at += static_cast<double>(p.total_milli());
    if (t < from || t >= to) continue;
    all += static_cast<double>(p.total_milli());
    if (p.num_gpu >= 2) multi += static_cast<double>(p.total_milli());
  }
  return multi / all;
}

TEST(Variants, TheCommittedRecipeParsesAndHoldsOutHalfOfEachFamily) {
  const std::string path = std::string(kData) + "/../../placement-variants/recipe.txt";
  auto text = ReadFile(path);
  ASSERT_OK(text);
  auto specs = ParseRecipe(*text, path);
  ASSERT_OK(specs);
  std::map<VariantFamily, std::pair<int, int>> sets;  // tuning, held-out
  for (const VariantSpec& s : *specs) (s.held_out ? sets[s.family].second : sets[s.family].first)++;
  ASSERT_EQ(sets.size(), 3U);
  for (const auto& [family, counts] : sets) {
    EXPECT_EQ(counts.first, counts.second) << Name(family);
    EXPECT_GE(counts.first, 2) << Name(family);
  }
}

TEST(Variants, SameSpecSameBytesOtherSeedOtherList) {
  ASSERT_FALSE(DefaultPods().empty());
  for (const VariantFamily f :
       {VariantFamily::kResample, VariantFamily::kSkew, VariantFamily::kShift}) {
    VariantSpec spec = Spec(f, 0.4);
    spec.tilt = 1;
    spec.to = 0.6;
    spec.total = 1.5;
    auto a = MakeVariant(spec, DefaultPods(), kCapacity);
    auto b = MakeVariant(spec, DefaultPods(), kCapacity);
    ASSERT_OK(a);
    ASSERT_OK(b);
    EXPECT_EQ(PodCsv(*a), PodCsv(*b)) << Name(f);
    spec.seed = 8;
    auto c = MakeVariant(spec, DefaultPods(), kCapacity);
    ASSERT_OK(c);
    EXPECT_NE(PodCsv(*a), PodCsv(*c)) << Name(f);
  }
}

TEST(Variants, ResampleBringsTheAskedMultiGpuShare) {
  for (const double share : {0.0, 0.3, 0.4, 0.5, 0.6}) {
    auto pods = MakeVariant(Spec(VariantFamily::kResample, share), DefaultPods(), kCapacity);
    ASSERT_OK(pods);
    EXPECT_NEAR(MultiGpuShare(*pods), share, 0.002) << share;
    // As many single-GPU and CPU-only pods as the base list.
    std::size_t singles = 0;
    for (const TracePod& p : *pods) singles += p.num_gpu <= 1 ? 1 : 0;
    EXPECT_EQ(singles, 8152U - 75U);
  }
}

TEST(Variants, SkewTiltsTheMultiGpuPodsTowardsTheirGpuCount) {
  auto mean_count = [](double tilt) {
    VariantSpec spec = Spec(VariantFamily::kSkew, 0.4);
    spec.tilt = tilt;
    auto pods = MakeVariant(spec, DefaultPods(), kCapacity);
    EXPECT_OK(pods);
    EXPECT_NEAR(MultiGpuShare(*pods), 0.4, 0.002);
    double sum = 0, n = 0;
    for (const TracePod& p : *pods) {
      if (p.num_gpu >= 2) sum += p.num_gpu, ++n;
    }
    return sum / n;
  };
  const double small = mean_count(-2), flat = mean_count(0), big = mean_count(2);
  EXPECT_LT(small, flat);
  EXPECT_LT(flat, big);
  EXPECT_GT(big, 7.0);
  EXPECT_LT(small, 3.5);  // uniform: 5.0
}

TEST(Variants, ShiftMovesTheShareAlongTheListInNameOrder) {
  VariantSpec spec = Spec(VariantFamily::kShift, 0.1);
  spec.to = 0.6;
  spec.total = 1.5;
  auto pods = MakeVariant(spec, DefaultPods(), kCapacity);
  ASSERT_OK(pods);
  double total = 0;
  for (const TracePod& p : *pods) total += static_cast<double>(p.total_milli());
  EXPECT_NEAR(total / kCapacity, 1.5, 0.01);
  // The linear share's mean over the quarter: 0.1 + 0.5 x (0.125, 0.875).
  EXPECT_NEAR(ShareBetween(*pods, 0, 0.25), 0.1625, 0.01);
  EXPECT_NEAR(ShareBetween(*pods, 0.75, 1), 0.5375, 0.01);
  EXPECT_NEAR(MultiGpuShare(*pods), 0.35, 0.01);
  for (std::size_t i = 1; i < pods->size(); ++i) {
    ASSERT_LT((*pods)[i - 1].name, (*pods)[i].name);
  }
}

TEST(Variants, PodCsvReadsBackAsTheSamePods) {
  auto pods = MakeVariant(Spec(VariantFamily::kResample, 0.5), DefaultPods(), kCapacity);
  ASSERT_OK(pods);
  auto back = ParsePodCsv(PodCsv(*pods), "variant.csv");
  ASSERT_OK(back);
  ASSERT_EQ(back->size(), pods->size());
  for (std::size_t i = 0; i < pods->size(); ++i) {
    EXPECT_EQ((*back)[i].name, (*pods)[i].name);
    EXPECT_EQ((*back)[i].total_milli(), (*pods)[i].total_milli());
    EXPECT_EQ((*back)[i].cpu_milli, (*pods)[i].cpu_milli);
    EXPECT_EQ((*back)[i].spec_key, (*pods)[i].spec_key);
  }
}

TEST(Variants, RecipeErrorsNameTheLineAndTheField) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"a resample base=default share=0.3 seed=1\n", "r.txt:1: set: missing"},
      {"# c\n\na resample base=default share=1.3 seed=1 set=tuning\n", "r.txt:3: share: \"1.3\""},
      {"a resample base=default share=x seed=1 set=tuning\n", "share: \"x\" is not a number"},
      {"a sideways base=default share=0.3 seed=1 set=tuning\n", "family: \"sideways\"; accepted"},
      {"a resample base=default share=0.3 seed=-1 set=tuning\n", "seed: \"-1\""},
      {"a resample base=default share=0.3 seed=1 set=later\n", "set: \"later\"; accepted"},
      {"a resample base=default share=0.3 tilt=1 seed=1 set=tuning\n", "\"tilt\": not a field"},
      {"A resample base=default share=0.3 seed=1 set=tuning\n", "name: \"A\""},
      {"a shift base=default share=0.3 seed=1 set=tuning\n", "to: missing"},
      {"a resample base=default share 0.3 seed=1 set=tuning\n", "\"share\": want KEY=VALUE"},
      {"a resample base=default share=0.3 seed=1 set=tuning\n"
       "a resample base=default share=0.3 seed=1 set=tuning\n",
       "r.txt:2: name: \"a\" is used twice"},
      {"# nothing\n", "no variant"},
  };
  for (const Case& c : cases) {
    auto specs = ParseRecipe(c.text, "r.txt");
    ASSERT_FALSE(specs.ok()) << c.text;
    EXPECT_EQ(specs.status().code(), StatusCode::kInvalidInput) << c.text;
    EXPECT_NE(specs.status().message().find(c.want), std::string::npos) << specs.status().message();
  }
}

TEST(Variants, OrderNameKeepsTheListOrder) {
  auto rand = MakeRand(RngKind::kStd, 42);
  ASSERT_OK(rand);
  std::vector<TracePod> pods(DefaultPods().begin(), DefaultPods().begin() + 100);
  WorkloadOptions options;
  options.shuffle = false;
  const Workload w = GenerateWorkload(pods, 10, 1000, **rand, options);  // tuned down
  for (std::size_t i = 1; i < w.arrival.size(); ++i) ASSERT_LT(w.arrival[i - 1], w.arrival[i]);
}

int RunSim(const std::vector<std::string>& args, std::string* out, std::string* err) {
  std::ostringstream o, e;
  const int code = RunSimCommand(args, o, e);
  *out = o.str();
  *err = e.str();
  return code;
}

TEST(Variants, CommandWritesEachSetsFolderWithTheNodeList) {
  testutil::TempDir dir;
  const std::string recipe = dir.path() + "/recipe.txt";
  std::ofstream(recipe) << "r resample base=default share=0.4 seed=3 set=tuning\n"
                           "s shift base=default share=0.1 to=0.6 total=1.5 seed=4 "
                           "set=held-out\n";
  std::string out, err;
  ASSERT_EQ(
      RunSim({"--trace", kData, "--variants", recipe, "--out", dir.path() + "/v"}, &out, &err), 0)
      << err;
  namespace fs = std::filesystem;
  EXPECT_TRUE(fs::exists(dir.path() + "/v/tuning/openb_pod_list_r.csv"));
  EXPECT_TRUE(fs::exists(dir.path() + "/v/tuning/openb_node_list_gpu_node.csv"));
  EXPECT_TRUE(fs::exists(dir.path() + "/v/held-out-by-name/openb_pod_list_s.csv"));
  EXPECT_NE(out.find("0.400"), std::string::npos) << out;
  // The lists replay (one seed, one cheap policy).
  ASSERT_EQ(RunSim({"--trace", dir.path() + "/v/held-out-by-name", "--pods", "all", "--order",
                    "name", "--policy", "best-fit", "--seeds", "42", "--rng", "std"},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("s "), std::string::npos) << out;
}

TEST(Variants, CommandBadInputExitCodes) {
  testutil::TempDir dir;
  std::string out, err;
  EXPECT_EQ(RunSim({"--trace", kData, "--order", "sideways"}, &out, &err), 2);
  EXPECT_NE(err.find("--order: \"sideways\"; accepted: shuffle, name"), std::string::npos) << err;
  EXPECT_EQ(RunSim({"--trace", kData, "--variants", "r.txt"}, &out, &err), 2);
  EXPECT_NE(err.find("--variants RECIPE and --out DIR go together"), std::string::npos) << err;
  EXPECT_EQ(
      RunSim({"--trace", kData, "--variants", "r.txt", "--out", dir.path(), "--policy", "fgd"},
             &out, &err),
      2);
  EXPECT_EQ(RunSim({"--trace", kData, "--variants", dir.path() + "/none.txt", "--out", dir.path()},
                   &out, &err),
            3);
  const std::string bad = dir.path() + "/bad.txt";
  std::ofstream(bad) << "a resample base=default share=2 seed=1 set=tuning\n";
  EXPECT_EQ(RunSim({"--trace", kData, "--variants", bad, "--out", dir.path()}, &out, &err), 4);
  EXPECT_NE(err.find("bad.txt:1: share: \"2\" is not a number in 0..0.95"), std::string::npos)
      << err;
  const std::string missing = dir.path() + "/missing.txt";
  std::ofstream(missing) << "a resample base=nosuchlist share=0.3 seed=1 set=tuning\n";
  EXPECT_EQ(RunSim({"--trace", kData, "--variants", missing, "--out", dir.path()}, &out, &err), 3);
  EXPECT_NE(err.find("variant \"a\""), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera::sim
