// `tessera demo` end to end on the real control plane (needs TESSERA_TESTCLUSTER; label e2e):
// the whole story run in-process, every outcome checked from its results and the machine-readable
// summary, the human pages' headings; the tessera binary with --json and with bad flags; Ctrl-C
// in the middle. After each run nothing may be left: no process still running that the demo
// started, no temporary folder.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <signal.h>
#include <sstream>
#include <stdlib.h>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "demo/demo.h"
#include "demo/printer.h"
#include "demo/process.h"
#include "testutil/status_matchers.h"

namespace tessera::demo {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
constexpr std::uint64_t kGiB = 1ULL << 30;

// Each run gets its own $TMPDIR, so that what it leaves behind can be found: files there, or a
// process whose command line names a path there (every child of the demo gets some).
class Sandbox {
 public:
  Sandbox() {
    std::string pattern = (fs::temp_directory_path() / "tessera-demo-e2e-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
    const char* old = std::getenv("TMPDIR");
    if (old != nullptr) old_ = old;
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  ~Sandbox() {
    if (old_) {
      setenv("TMPDIR", old_->c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  const std::string& dir() const { return dir_; }

  std::vector<std::string> Leftovers() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      out.push_back("file " + e.path().string());
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string pid = e.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "cmdline");
      std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmdline.find(dir_) == std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string state;
      std::getline(stat, state);
      if (state.find(") Z ") != std::string::npos) continue;  // a zombie is gone already
      for (char& c : cmdline) c = c == '\0' ? ' ' : c;
      out.push_back("process " + pid + ": " + cmdline);
    }
    return out;
  }

 private:
  std::string dir_;
  std::optional<std::string> old_;
};

DemoOptions Options() {
  DemoOptions o;
  const char* harness = std::getenv("TESSERA_TESTCLUSTER");
  o.testcluster = harness != nullptr ? harness : "";
  o.scheduler = TESSERA_SCHEDULER_BINARY;
  o.node = TESSERA_NODE_BINARY;
  o.fake_nvml_dir = TESSERA_FAKE_NVML_DIR;
  return o;
}

const ScenarioResult* Find(const DemoResult& r, const std::string& id) {
  for (const ScenarioResult& s : r.scenarios) {
    if (s.id == id) return &s;
  }
  return nullptr;
}
std::map<std::string, const PodResult*> ByName(const ScenarioResult& s) {
  std::map<std::string, const PodResult*> out;
  for (const PodResult& p : s.pods) out[p.spec.name] = &p;
  return out;
}
bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
bool HasItem(const std::vector<std::string>& items, const std::string& part) {
  for (const std::string& i : items) {
    if (Has(i, part)) return true;
  }
  return false;
}

TEST(DemoE2E, TheWholeStoryEndsAsToldAndLeavesNothingBehind) {
  ASSERT_NE(std::getenv("TESSERA_TESTCLUSTER"), nullptr)
      << "set TESSERA_TESTCLUSTER (test/e2e/harness/build.sh build/e2e)";
  Sandbox sandbox;
  std::ostringstream human;
  std::ostringstream err;
  DemoResult r;
  const Status st = RunDemo(Options(), &human, err, &r);
  ASSERT_OK(st) << err.str() << "\n" << human.str();
  EXPECT_TRUE(sandbox.Leftovers().empty()) << ::testing::PrintToString(sandbox.Leftovers());
  ASSERT_TRUE(r.completed);
  EXPECT_EQ(r.unexpected(), 0) << human.str();
  ASSERT_EQ(r.scenarios.size(), Scenarios().size());
  EXPECT_EQ(err.str(), "");

  // No GPU is ever booked past its memory or its compute, and the ledger agrees with the
  // signed decisions of the pods on it.
  for (const ScenarioResult& s : r.scenarios) {
    std::map<std::string, std::uint64_t> decided;
    for (const PodResult& p : s.pods) {
      if (p.outcome == Outcome::kPlaced) decided[p.uuid] += p.memory_bytes;
    }
    for (const GpuRow& g : s.gpus) {
      EXPECT_LE(g.memory_used, g.memory_bytes) << s.id << " " << g.node << " gpu" << g.gpu;
      EXPECT_LE(g.cores_used, 100) << s.id;
      EXPECT_EQ(g.memory_used, decided[g.uuid]) << s.id << " " << g.node << " gpu" << g.gpu;
    }
  }

  // The showdown: the four on the T4's one GPU, the fifth refused with its reason.
  const ScenarioResult* showdown = Find(r, "showdown");
  ASSERT_NE(showdown, nullptr);
  auto sd = ByName(*showdown);
  std::set<std::string> gpus;
  for (const char* name : {"inference-1", "inference-2", "training", "preprocessing"}) {
    ASSERT_EQ(sd[name]->outcome, Outcome::kPlaced) << name;
    EXPECT_EQ(sd[name]->node, "t4-000");
    gpus.insert(sd[name]->uuid);
  }
  EXPECT_EQ(gpus.size(), 1U);
  EXPECT_EQ(sd["training"]->memory_bytes, 8 * kGiB);
  EXPECT_EQ(sd["preprocessing"]->memory_bytes, 3000ULL << 20);
  ASSERT_EQ(showdown->gpus.size(), 1U);
  EXPECT_EQ(showdown->gpus[0].memory_used, 12 * kGiB + (3000ULL << 20));
  const PodResult& fifth = *sd["inference-3"];
  EXPECT_EQ(fifth.outcome, Outcome::kUnschedulable);
  EXPECT_TRUE(Has(fifth.reason, "tessera.dev/gpu-memory") || Has(fifth.reason, "tessera:"))
      << fifth.reason;
  EXPECT_TRUE(HasItem(fifth.verdicts, "asks 2.00 GiB")) << ::testing::PrintToString(fifth.verdicts);
  EXPECT_TRUE(Has(sd["training"]->limits_file, "memory=8589934592")) << sd["training"]->limits_file;
  EXPECT_TRUE(Has(sd["training"]->limits_file, "enforcement fail-open"));
  EXPECT_TRUE(HasItem(sd["training"]->enforcement, "cap 8.00 GiB"));
  EXPECT_EQ(sd["training"]->run_command, "tessera run --gpu-memory 8Gi -- python3 train.py");

  // Realtime beside batch: one GPU, the compute share and the priority classes as asked.
  const ScenarioResult* realtime = Find(r, "realtime");
  ASSERT_NE(realtime, nullptr);
  auto rt = ByName(*realtime);
  ASSERT_EQ(rt["batch-processor"]->outcome, Outcome::kPlaced);
  ASSERT_EQ(rt["realtime-inference"]->outcome, Outcome::kPlaced);
  EXPECT_EQ(rt["batch-processor"]->uuid, rt["realtime-inference"]->uuid);
  EXPECT_EQ(rt["realtime-inference"]->cores, 60U);
  EXPECT_EQ(rt["realtime-inference"]->priority, "latency-critical");
  EXPECT_EQ(rt["realtime-inference"]->priority_class, "tessera-latency-critical");
  EXPECT_EQ(rt["batch-processor"]->priority, "best-effort");
  EXPECT_TRUE(HasItem(rt["realtime-inference"]->enforcement, "holds lower classes"));
  EXPECT_TRUE(Has(rt["realtime-inference"]->limits_file, "priority latency-critical"));

  // KAI manifests: adopted, translated, placed on the one GPU.
  const ScenarioResult* kai = Find(r, "kai");
  ASSERT_NE(kai, nullptr);
  auto k = ByName(*kai);
  gpus.clear();
  for (const PodResult& p : kai->pods) {
    ASSERT_EQ(p.outcome, Outcome::kPlaced) << p.spec.name << ": " << p.reason;
    gpus.insert(p.uuid);
    EXPECT_TRUE(HasItem(p.admitted_as, "schedulerName kai-scheduler → default-scheduler"));
    EXPECT_TRUE(HasItem(p.admitted_as, "+ tessera.dev/gpu-slot: 1"));
  }
  EXPECT_EQ(gpus.size(), 1U);
  EXPECT_TRUE(HasItem(k["inference-1"]->admitted_as,
                      "annotation gpu-memory: \"2000\" → tessera.dev/gpu-memory: 2000Mi"))
      << ::testing::PrintToString(k["inference-1"]->admitted_as);
  EXPECT_EQ(k["notebook"]->memory_bytes, 1 * kGiB);  // 0.0625 of 16 GiB

  // Trust: customers never share; regulated whole GPUs only; MPS needs its user.
  const ScenarioResult* trust = Find(r, "trust");
  ASSERT_NE(trust, nullptr);
  auto t = ByName(*trust);
  ASSERT_EQ(t["chatbot"]->outcome, Outcome::kPlaced);
  ASSERT_EQ(t["scoring"]->outcome, Outcome::kPlaced);
  EXPECT_NE(t["chatbot"]->uuid, t["scoring"]->uuid);
  EXPECT_EQ(t["scoring"]->mode, "exclusive");
  EXPECT_EQ(t["scoring"]->memory_bytes, 24 * kGiB);
  EXPECT_TRUE(Has(t["scoring"]->limits_file, "enforcement fail-closed"));
  EXPECT_EQ(t["recsys"]->outcome, Outcome::kUnschedulable);
  EXPECT_TRUE(Has(t["recsys"]->reason, "co-tenancy")) << t["recsys"]->reason;
  EXPECT_EQ(t["scoring-lite"]->outcome, Outcome::kDenied);
  EXPECT_TRUE(Has(t["scoring-lite"]->reason, "tier regulated allows no shared-GPU mode"))
      << t["scoring-lite"]->reason;
  EXPECT_EQ(t["notebook"]->outcome, Outcome::kDenied);
  EXPECT_TRUE(Has(t["notebook"]->reason, "tessera.dev/mps-user")) << t["notebook"]->reason;

  // Quota: the second ask refused with the numbers, the third admitted.
  const ScenarioResult* quota = Find(r, "quota");
  ASSERT_NE(quota, nullptr);
  auto q = ByName(*quota);
  EXPECT_EQ(q["etl"]->outcome, Outcome::kPlaced);
  EXPECT_EQ(q["features"]->outcome, Outcome::kDenied);
  EXPECT_TRUE(Has(q["features"]->reason,
                  "quotas.data-analytics.gpuMemory 8Gi exceeded: in use 6.00 GiB + asked 4.00 GiB"))
      << q["features"]->reason;
  EXPECT_EQ(q["report"]->outcome, Outcome::kPlaced);

  // Packing: everything placed, the whole-GPU job included, nothing stranded.
  const ScenarioResult* packing = Find(r, "packing");
  ASSERT_NE(packing, nullptr);
  for (const PodResult& p : packing->pods) {
    EXPECT_EQ(p.outcome, Outcome::kPlaced) << p.spec.name << ": " << p.reason;
  }
  auto pk = ByName(*packing);
  EXPECT_EQ(pk["finetune"]->mode, "exclusive");
  EXPECT_EQ(StrandedBytes(*packing), 0U);
  EXPECT_LT(GpusUsed(*packing), static_cast<int>(packing->gpus.size()) + 1);

  // The machine-readable summary says the same.
  const json j = json::parse(ResultToJson(r));
  EXPECT_TRUE(j["completed"].get<bool>());
  EXPECT_EQ(j["summary"]["unexpected"], 0);
  EXPECT_EQ(j["summary"]["denied"], 3);
  EXPECT_EQ(j["summary"]["unschedulable"], 2);
  EXPECT_EQ(j["nodes"].size(), 3U);

  // The pages a person reads.
  const std::string text = human.str();
  for (const char* heading :
       {"tessera demo", "Cluster (local processes", "Policy in force", "━━ 1/6  The showdown",
        "━━ 6/6  Packing", "Refused, and why", "GPU ledger afterwards", "Enforcement (",
        "Admitted as", "━━ Summary", "No GPU was booked past its memory"}) {
    EXPECT_TRUE(Has(text, heading)) << heading << "\n" << text;
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(DisplayWidth(line), kLineWidth) << line;
  }
  std::cout << text;  // the sample in docs/demo.md comes from here
}

// The tessera binary: --json alone on stdout, one scenario; bad flags refused before anything
// starts.
TEST(DemoE2E, TheBinaryPrintsJsonAndRefusesBadFlags) {
  ASSERT_NE(std::getenv("TESSERA_TESTCLUSTER"), nullptr);
  Sandbox sandbox;
  const std::string out = sandbox.dir() + ".out";  // beside it: the sandbox must stay empty
  {
    SpawnOptions s;
    s.argv = {TESSERA_BINARY,
              "demo",
              "--json",
              "--only",
              "quota",
              "--scheduler-binary",
              TESSERA_SCHEDULER_BINARY,
              "--node-binary",
              TESSERA_NODE_BINARY,
              "--fake-nvml-dir",
              TESSERA_FAKE_NVML_DIR};
    s.log_path = out;
    auto p = Process::Spawn(s);
    ASSERT_OK(p);
    for (int i = 0; i < 3000 && (*p)->Running(); ++i) std::this_thread::sleep_for(100ms);
    EXPECT_EQ((*p)->Describe(), "exit code 0") << (*p)->LogTail(60);
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const json j = json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_EQ(j["scenarios"].size(), 1U);
    EXPECT_EQ(j["scenarios"][0]["id"], "quota");
    EXPECT_EQ(j["scenarios"][0]["pods"][1]["outcome"], "denied");
    fs::remove(out);
  }
  EXPECT_TRUE(sandbox.Leftovers().empty()) << ::testing::PrintToString(sandbox.Leftovers());

  struct Bad {
    std::vector<std::string> args;
    const char* message;
  };
  const Bad cases[] = {
      {{"--scheduler-binary", "/nonexistent/tessera-scheduler"},
       "--scheduler-binary: \"/nonexistent/tessera-scheduler\" is not an executable file"},
      {{"--fake-nvml-dir", "/nonexistent"},
       "--fake-nvml-dir: \"/nonexistent\" holds no libnvidia-ml.so.1"},
      {{"--only", "showdown,nope"}, "--only: \"nope\" is not a scenario; accepted: showdown,"},
      {{"--only", "showdown,,quota"}, "--only: an empty entry"},
  };
  for (const Bad& c : cases) {
    std::map<std::string, std::string> flags = {{"--scheduler-binary", TESSERA_SCHEDULER_BINARY},
                                                {"--node-binary", TESSERA_NODE_BINARY},
                                                {"--fake-nvml-dir", TESSERA_FAKE_NVML_DIR}};
    for (std::size_t i = 0; i + 1 < c.args.size(); i += 2) flags[c.args[i]] = c.args[i + 1];
    SpawnOptions s;
    s.argv = {TESSERA_BINARY, "demo"};
    for (const auto& [flag, value] : flags) s.argv.insert(s.argv.end(), {flag, value});
    s.log_path = out;
    auto p = Process::Spawn(s);
    ASSERT_OK(p);
    for (int i = 0; i < 300 && (*p)->Running(); ++i) std::this_thread::sleep_for(100ms);
    EXPECT_EQ((*p)->Describe(), "exit code 2") << c.message;
    EXPECT_TRUE(Has((*p)->LogTail(), c.message)) << (*p)->LogTail();
    fs::remove(out);
  }
  EXPECT_TRUE(sandbox.Leftovers().empty()) << ::testing::PrintToString(sandbox.Leftovers());
}

// Ctrl-C while the story runs: exit 130, every process stopped, the folder gone.
TEST(DemoE2E, CtrlCStopsEverythingAndRemovesTheFolder) {
  ASSERT_NE(std::getenv("TESSERA_TESTCLUSTER"), nullptr);
  Sandbox sandbox;
  const std::string out = sandbox.dir() + ".out";
  SpawnOptions s;
  s.argv = {TESSERA_BINARY,       "demo",
            "--scheduler-binary", TESSERA_SCHEDULER_BINARY,
            "--node-binary",      TESSERA_NODE_BINARY,
            "--fake-nvml-dir",    TESSERA_FAKE_NVML_DIR};
  s.log_path = out;
  auto p = Process::Spawn(s);
  ASSERT_OK(p);
  auto printed = [&](const std::string& part) {
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return Has(text, part);
  };
  bool started = false;
  for (int i = 0; i < 3000 && (*p)->Running() && !started; ++i) {
    started = printed("━━ 1/6");
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(started) << (*p)->LogTail(60);
  ASSERT_EQ(kill((*p)->pid(), SIGINT), 0);  // what the terminal sends the demo on Ctrl-C
  for (int i = 0; i < 900 && (*p)->Running(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ((*p)->Describe(), "exit code 130") << (*p)->LogTail(60);
  EXPECT_TRUE(printed("interrupted")) << (*p)->LogTail();
  EXPECT_TRUE(sandbox.Leftovers().empty()) << ::testing::PrintToString(sandbox.Leftovers());
  fs::remove(out);
}

}  // namespace
}  // namespace tessera::demo
