// The demo's printer and tables on known inputs (no cluster), and the scenario table itself.
#include "demo/printer.h"

#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "demo/demo.h"
#include "policy/policy.h"
#include "testutil/status_matchers.h"

namespace tessera::demo {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kMiB = 1ULL << 20;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void ExpectNarrow(const std::string& text) {
  for (const std::string& line : Lines(text)) {
    EXPECT_LE(DisplayWidth(line), kLineWidth) << line;
    EXPECT_TRUE(line.empty() || line.back() != ' ') << "trailing space: [" << line << "]";
  }
}

TEST(Printer, DisplayWidthCountsColumnsNotBytes) {
  EXPECT_EQ(DisplayWidth(""), 0U);
  EXPECT_EQ(DisplayWidth("abc"), 3U);
  EXPECT_EQ(DisplayWidth("█░→"), 3U);
  EXPECT_EQ(DisplayWidth("调度器"), 6U);  // East Asian wide
  EXPECT_EQ(DisplayWidth("µs"), 2U);
}

TEST(Printer, WrapBreaksAtSpacesAndCutsLongWords) {
  EXPECT_EQ(Wrap("one two three four", 9), (std::vector<std::string>{"one two", "three", "four"}));
  EXPECT_EQ(Wrap("abcdefghij", 4), (std::vector<std::string>{"abcd", "efgh", "ij"}));
  EXPECT_EQ(Wrap("", 10), (std::vector<std::string>{""}));
  EXPECT_EQ(Wrap("  spaced   out  ", 20), (std::vector<std::string>{"spaced out"}));
}

TEST(Printer, ParagraphIndentsContinuationLines) {
  EXPECT_EQ(Paragraph("  why", 8, "alpha beta gamma delta", 20),
            "  why   alpha beta\n"
            "        gamma delta\n");
  EXPECT_EQ(Paragraph("", 4, "x", 20), "    x\n");
}

TEST(Printer, BarsShowUseInProportion) {
  EXPECT_EQ(Bar(0, 16 * kGiB, 8), "[░░░░░░░░]");
  EXPECT_EQ(Bar(8 * kGiB, 16 * kGiB, 8), "[████░░░░]");
  EXPECT_EQ(Bar(16 * kGiB, 16 * kGiB, 8), "[████████]");
  EXPECT_EQ(Bar(1, 16 * kGiB, 8), "[█░░░░░░░]");              // anything used shows
  EXPECT_EQ(Bar(16 * kGiB - 1, 16 * kGiB, 8), "[███████░]");  // not full is not shown full
  EXPECT_EQ(Bar(17 * kGiB, 16 * kGiB, 4), "[████]!");         // over-committed
  EXPECT_EQ(Bar(0, 0, 3), "[███]");                           // nothing to give
  EXPECT_EQ(Bar(1, 2, 0), "[]");
}

TEST(Printer, GiBHasTwoDecimals) {
  EXPECT_EQ(GiB(0), "0.00 GiB");
  EXPECT_EQ(GiB(12 * kGiB + 3000 * kMiB), "14.93 GiB");
  EXPECT_EQ(GiB(141 * kGiB), "141.00 GiB");
}

TEST(Printer, RuleFillsTheLine) {
  const std::string rule = Rule("1/6  The showdown");
  EXPECT_EQ(DisplayWidth(rule), kLineWidth);
  EXPECT_EQ(rule.rfind("━━ 1/6  The showdown ━", 0), 0U);
}

TEST(Printer, TableAlignsColumnsAndWrapsNarrowOnes) {
  Table t({{"gpu"}, {"used", Table::Align::kRight}, {"pods", Table::Align::kLeft, 12}});
  t.Add({"t4-000 gpu0", "14.93 GiB", "inference-1, training"});
  t.Add({"a10-000 gpu1", "0.00 GiB"});
  EXPECT_EQ(t.Render(2),
            "  gpu                used  pods\n"
            "  t4-000 gpu0   14.93 GiB  inference-1,\n"
            "                           training\n"
            "  a10-000 gpu1   0.00 GiB\n");
  Table bars({{"a"}, {"b"}});
  bars.Add({"█░", "x"});
  bars.Add({"███", "y"});
  EXPECT_EQ(bars.Render(0), "a    b\n█░   x\n███  y\n");  // widths in columns, not bytes
}

TEST(Printer, AskTextReadsLikeTheManifest) {
  PodSpec p;
  p.memory = "4Gi";
  EXPECT_EQ(AskText(p), "4Gi");
  p.cores = 60;
  EXPECT_EQ(AskText(p), "4Gi + 60%");
  PodSpec whole;
  whole.gpus = 1;
  EXPECT_EQ(AskText(whole), "1 whole GPU");
  PodSpec kai;
  kai.kai_memory_mib = "2000";
  EXPECT_EQ(AskText(kai), "gpu-memory 2000 (KAI)");
  PodSpec fraction;
  fraction.kai_fraction = "0.0625";
  EXPECT_EQ(AskText(fraction), "gpu-fraction 0.0625 (KAI)");
}

// The showdown as it ends: four placed on the T4, the fifth waiting.
ScenarioResult Showdown() {
  ScenarioResult r;
  r.id = "showdown";
  r.title = "The showdown";
  const Scenario& s = Scenarios().front();
  std::uint64_t used = 0;
  for (const PodSpec& spec : s.pods) {
    PodResult p;
    p.spec = spec;
    p.tier = "team";
    p.outcome = spec.expect;
    p.as_expected = true;
    if (spec.expect == Outcome::kPlaced) {
      p.node = "t4-000";
      p.gpu = 0;
      p.uuid = "GPU-face0000-0000-0000-0000-000000000000";
      p.memory_bytes = spec.memory == "3000Mi" ? 3000 * kMiB : std::stoull(spec.memory) * kGiB;
      used += p.memory_bytes;
      p.mode = "shared";
      p.priority = "normal";
      p.enforcement = {"memory cap " + GiB(p.memory_bytes) +
                           ": an allocation past it fails with "
                           "CUDA_ERROR_OUT_OF_MEMORY in " +
                           spec.name +
                           " alone; cudaMemGetInfo and "
                           "NVML report " +
                           GiB(p.memory_bytes) + " total",
                       "compute: no share reserved"};
      p.tier_rules = {"team: fail-open: if tessera's own machinery fails, GPU calls pass through"};
      p.run_command = "tessera run --gpu-memory " + spec.memory + " -- " + spec.command;
      p.limits_file = "# tessera limits v1\nversion 1\nmode shared\n";
    } else {
      p.reason =
          "0/3 nodes are available: 1 Insufficient tessera.dev/gpu-memory, 2 node(s) "
          "didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
          "available: 3 Preemption is not helpful for scheduling.";
      p.verdicts = {"t4-000 gpu0: memory: 1.07 GiB free, asks 2.00 GiB"};
    }
    r.pods.push_back(p);
  }
  r.gpus = {{"t4-000",
             0,
             "GPU-face0000-0000-0000-0000-000000000000",
             16 * kGiB,
             used,
             0,
             {"inference-1", "inference-2", "training", "preprocessing"}}};
  r.seconds = 2.5;
  return r;
}

TEST(Printer, ScenarioPageHasItsSectionsAndStaysNarrow) {
  const ScenarioResult r = Showdown();
  const std::string page = RenderScenario(Scenarios().front(), r, 1, 6, /*gpu_present=*/false);
  for (const char* heading :
       {"━━ 1/6  The showdown", "Refused, and why", "GPU ledger afterwards",
        "Enforcement (no GPU here)", "/etc/tessera/limits of training",
        "    $ tessera run --gpu-memory 8Gi -- python3 train.py", "team tier",
        "CUDA_ERROR_OUT_OF_MEMORY in that pod alone", "kube-scheduler: 0/3 nodes are available",
        "tessera, per GPU: t4-000 gpu0: memory: 1.07 GiB free, asks 2.00 GiB", "14.93 / 16.00 GiB",
        "inference-3"}) {
    EXPECT_NE(page.find(heading), std::string::npos) << heading << "\n" << page;
  }
  EXPECT_EQ(page.find("(!)"), std::string::npos) << page;  // everything as expected
  ExpectNarrow(page);
}

TEST(Printer, UnexpectedOutcomesAreMarked) {
  ScenarioResult r = Showdown();
  r.pods.back().as_expected = false;
  const std::string page = RenderScenario(Scenarios().front(), r, 1, 6, false);
  EXPECT_NE(page.find("waits (!)"), std::string::npos) << page;
  EXPECT_NE(page.find("(!) the demo expected unschedulable"), std::string::npos) << page;
}

TEST(Printer, StrandedIsFreeMemoryNoAskOfTheScenarioFits) {
  const ScenarioResult r = Showdown();
  // 16 GiB - 14.93 GiB = 1.07 GiB free, smaller than the smallest ask (2 GiB).
  EXPECT_EQ(StrandedBytes(r), 16 * kGiB - (12 * kGiB + 3000 * kMiB));
  EXPECT_EQ(GpusUsed(r), 1);
  ScenarioResult roomy = r;
  roomy.gpus[0].memory_bytes = 24 * kGiB;  // 9 GiB free: the 2Gi asks fit
  EXPECT_EQ(StrandedBytes(roomy), 0U);
  ScenarioResult idle = r;
  idle.gpus.push_back({"t4-000", 1, "GPU-x", 16 * kGiB, 0, 0, {}});
  EXPECT_EQ(StrandedBytes(idle), StrandedBytes(r));  // an idle GPU strands nothing
  EXPECT_EQ(GpusUsed(idle), 1);
}

TEST(Printer, SummaryCountsAndFlagsOvercommit) {
  DemoResult result;
  result.scenarios.push_back(Showdown());
  std::string summary = RenderSummary(result);
  EXPECT_NE(summary.find("━━ Summary"), std::string::npos);
  EXPECT_NE(summary.find("No GPU was booked past its memory"), std::string::npos) << summary;
  EXPECT_NE(summary.find("1 of 1"), std::string::npos) << summary;
  EXPECT_NE(summary.find("5/5"), std::string::npos) << summary;
  ExpectNarrow(summary);
  result.scenarios[0].gpus[0].memory_used = 17 * kGiB;
  summary = RenderSummary(result);
  EXPECT_NE(summary.find("over-committed: showdown: t4-000 gpu0"), std::string::npos) << summary;
}

TEST(Printer, ClusterAndPolicyPagesStayNarrow) {
  DemoResult result;
  for (const SimNode& n : SimulatedNodes()) {
    NodeResult nr;
    nr.spec = n;
    nr.uuids.assign(static_cast<std::size_t>(n.gpus), "GPU-x");
    result.nodes.push_back(nr);
  }
  result.policy = {{"team",
                    "shared,mps,mig,exclusive",
                    "any",
                    "fail-open",
                    "report",
                    {"*", "engineering", "marketing"}},
                   {"customer",
                    "exclusive,mig,shared",
                    "same-namespace",
                    "fail-closed",
                    "evict",
                    {"acme-corp", "globex"}}};
  result.quotas = {"data-analytics: GPU memory 8Gi"};
  result.priorities = {"latency-critical → PriorityClass tessera-latency-critical (1000000)"};
  result.placement = "best-fit";
  const std::string page = RenderBanner() + RenderCluster(result) + RenderPolicy(result);
  for (const char* text :
       {"t4-000", "the seeds' Tesla T4", "16.00 GiB", "same-namespace", "*, engineering,", "quota",
        "data-analytics: GPU memory 8Gi", "latency-critical → PriorityClass"}) {
    EXPECT_NE(page.find(text), std::string::npos) << text << "\n" << page;
  }
  ExpectNarrow(page);
}

TEST(Printer, JsonCarriesOutcomesReasonsAndLedgers) {
  DemoResult result;
  result.scenarios.push_back(Showdown());
  result.completed = true;
  const nlohmann::json j = nlohmann::json::parse(ResultToJson(result));
  ASSERT_EQ(j["scenarios"].size(), 1U);
  const auto& pods = j["scenarios"][0]["pods"];
  ASSERT_EQ(pods.size(), 5U);
  EXPECT_EQ(pods[2]["name"], "training");
  EXPECT_EQ(pods[2]["outcome"], "placed");
  EXPECT_EQ(pods[2]["memoryBytes"], 8 * kGiB);
  EXPECT_EQ(pods[4]["outcome"], "unschedulable");
  EXPECT_NE(pods[4]["reason"].get<std::string>().find("Insufficient"), std::string::npos);
  EXPECT_EQ(j["scenarios"][0]["gpus"][0]["memoryUsed"], 12 * kGiB + 3000 * kMiB);
  EXPECT_EQ(j["summary"]["placed"], 4);
  EXPECT_EQ(j["summary"]["unschedulable"], 1);
  EXPECT_EQ(j["summary"]["unexpected"], 0);
  EXPECT_TRUE(j["completed"].get<bool>());
}

TEST(Scenarios, TheTableIsConsistent) {
  std::set<std::string> ids;
  std::set<std::string> nodes;
  for (const SimNode& n : SimulatedNodes()) {
    EXPECT_EQ(n.name.substr(n.name.size() - 4), "-000") << n.name;  // simnodes' naming
    nodes.insert(n.name);
  }
  std::set<Outcome> outcomes;
  for (const Scenario& s : Scenarios()) {
    EXPECT_TRUE(ids.insert(s.id).second) << s.id;
    EXPECT_TRUE(s.node.empty() || nodes.contains(s.node)) << s.id;
    std::set<std::string> pods;
    for (const PodSpec& p : s.pods) {
      EXPECT_TRUE(pods.insert(p.ns + "/" + p.name).second) << p.name;
      outcomes.insert(p.expect);
    }
    EXPECT_TRUE(s.show_limits_of.empty() || pods.size() > 0);
    for (const std::string& line : s.story) EXPECT_LE(DisplayWidth(line) + 2, kLineWidth) << line;
    for (const std::string& line : s.moral) EXPECT_LE(DisplayWidth(line) + 4, kLineWidth) << line;
  }
  EXPECT_EQ(outcomes.size(), 3U);  // placements, denials and refusals all appear
  for (const char* id : {"showdown", "realtime", "kai", "trust", "quota", "packing"}) {
    EXPECT_TRUE(ids.contains(id)) << id;
  }
  auto policy = policy::ParsePolicy(DemoPolicyYaml());
  ASSERT_OK(policy);
  EXPECT_TRUE(policy->warnings.empty());
  for (const auto& row : kPriorityClasses) {
    bool created = false;
    for (const auto& [name, value] : DemoPriorityClasses()) {
      created = created || name == policy->KubernetesPriorityClass(row.value);
    }
    EXPECT_TRUE(created) << row.name;
  }
}

TEST(Options, BadPathsNameTheFlagAndTheAcceptedForm) {
  DemoOptions o;
  o.testcluster = "/nonexistent/tessera-testcluster";
  Status st = ValidateOptions(o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      st.message().find("--testcluster: \"/nonexistent/tessera-testcluster\" is not an executable"),
      std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("test/e2e/harness/build.sh"), std::string::npos) << st.message();
  o.testcluster = "/bin/sh";
  o.scheduler = "/bin/sh";
  o.node = "";
  st = ValidateOptions(o);
  EXPECT_NE(st.message().find("--node-binary: not given"), std::string::npos) << st.message();
  o.node = "/bin/sh";
  o.fake_nvml_dir = "/nonexistent";
  st = ValidateOptions(o);
  EXPECT_NE(st.message().find("--fake-nvml-dir: \"/nonexistent\" holds no libnvidia-ml.so.1"),
            std::string::npos)
      << st.message();
}

TEST(Options, DefaultsComeFromTheBinarysFolder) {
  DemoOptions o;
  o.scheduler = "/given";
  FillDefaults(o, "/opt/build/dev/cmd/tessera");
  EXPECT_EQ(o.scheduler, "/given");  // what a flag says stays
  EXPECT_EQ(o.node, "/opt/build/dev/cmd/tessera-node/tessera-node");
  EXPECT_EQ(o.fake_nvml_dir, "/opt/build/dev/test/fakes/lib");
}

}  // namespace
}  // namespace tessera::demo
