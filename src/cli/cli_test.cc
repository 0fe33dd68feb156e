#include "cli/cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "testutil/bad_inputs.h"

namespace tessera::cli {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunCli(std::vector<const char*> args) {
  args.insert(args.begin(), "tessera");
  std::ostringstream out, err;
  const int code = Run(static_cast<int>(args.size()), args.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST(Cli, AdvisesForATier) {
  Result r = RunCli({"advise", "--trust", "regulated", "--gpu", "H200"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1. exclusive"), std::string::npos) << r.out;
}

TEST(Cli, AdvisesAsJson) {
  Result r = RunCli({"advise", "--trust", "team", "--workloads", "inference,training", "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"mode\": \"shared\""), std::string::npos);
}

TEST(Cli, ExplainsAPolicyFile) {
  Result r = RunCli({"advise", "--policy", TESSERA_EXAMPLE_POLICY});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Policy v1: valid."), std::string::npos) << r.out;
}

TEST(Cli, BadInputNamesTheFieldAndExitsNonZero) {
  Result tier = RunCli({"advise", "--trust", "gold"});
  EXPECT_EQ(tier.code, 2);
  EXPECT_NE(tier.err.find("--trust: \"gold\" is not a trust tier; accepted: team, department"),
            std::string::npos)
      << tier.err;
  Result gpu = RunCli({"advise", "--trust", "team", "--gpu", "K80"});
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.err.find("--gpu: \"K80\" is not a known GPU model"), std::string::npos);
  Result missing = RunCli({"advise"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--trust is required"), std::string::npos);
  Result no_file = RunCli({"advise", "--policy", "/nonexistent.yaml"});
  EXPECT_EQ(no_file.code, 3);
  Result unknown = RunCli({"advise", "--colour"});
  EXPECT_EQ(unknown.code, 2);
  Result none = RunCli({});
  EXPECT_EQ(none.code, 2);
}

TEST(Cli, ListsNames) {
  Result r = RunCli({"names"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("resource\ttessera.dev/gpu-memory"), std::string::npos);
}

std::string WriteManifest(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/explain-" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, ExplainsAManifestTheWebhookWouldAdmit) {
  const std::string path = WriteManifest("seed", R"(apiVersion: v1
kind: Pod
metadata:
  name: inference-service
  namespace: ml
  annotations:
    gpu-memory: "2000"
    tessera.dev/priority: latency-critical
spec:
  schedulerName: kai-scheduler
  containers:
    - name: inference
      image: inference:latest
)");
  Result r = RunCli({"explain", "pod", "-f", path.c_str()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ask: 1.95 GiB (compute: best effort) on one shared GPU"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("priority latency-critical (PriorityClass tessera-latency-critical)"),
            std::string::npos)
      << r.out;
  // The seed manifest names no priorityClassName: the mutating webhook sets it, and what it
  // leaves is admitted.
  EXPECT_NE(r.out.find("the mutating webhook would change:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("add /spec/priorityClassName"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("admission: allowed by the policy"), std::string::npos) << r.out;

  // --json: the same findings, one object with stable names (docs/protocol.md).
  Result j = RunCli({"explain", "pod", "-f", path.c_str(), "--json"});
  EXPECT_EQ(j.code, 0) << j.err;
  const nlohmann::json report = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << j.out;
  EXPECT_EQ(report.value("pod", ""), "ml/inference-service");
  EXPECT_EQ(report.value("source", ""), "manifest");
  EXPECT_EQ(report.value("answer", ""), "admitted");
  EXPECT_NE(report.value("ask", "").find("1.95 GiB"), std::string::npos) << j.out;
  EXPECT_EQ(report["admission"].value("allowed", false), true) << j.out;
  ASSERT_TRUE(report["mutations"].is_array()) << j.out;
  EXPECT_NE(report["mutations"].dump().find("\"/spec/priorityClassName\""), std::string::npos)
      << j.out;
}

TEST(Cli, ExplainsWhyAManifestIsDenied) {
  const std::string policy = WriteManifest(
      "policy", "version: v1\ntierAssignment:\n  namespaces:\n    vault: regulated\n");
  const std::string path = WriteManifest("vault", R"(apiVersion: v1
kind: Pod
metadata: {name: frac, namespace: vault}
spec:
  containers:
  - name: c
    resources: {limits: {tessera.dev/gpu-memory: 4Gi}}
)");
  Result r = RunCli({"explain", "pod", "-f", path.c_str(), "--policy", policy.c_str()});
  EXPECT_EQ(r.code, 1) << r.err;  // a denial is the answer "no"
  EXPECT_NE(r.out.find("tier regulated allows no shared-GPU mode"), std::string::npos) << r.out;
  Result j = RunCli({"explain", "pod", "-f", path.c_str(), "--policy", policy.c_str(), "--json"});
  EXPECT_EQ(j.code, 1) << j.err;
  const nlohmann::json report = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << j.out;
  EXPECT_EQ(report.value("answer", ""), "denied") << j.out;
  const std::string why = report.contains("denied") ? report.value("denied", "")
                                                    : report["admission"].value("message", "");
  EXPECT_NE(why.find("tier regulated allows no shared-GPU mode"), std::string::npos) << j.out;
  Result bad = RunCli({"explain", "pod", "nonamespace"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("NAMESPACE/NAME"), std::string::npos);
  Result both = RunCli({"explain", "pod"});
  EXPECT_EQ(both.code, 2);
  Result missing = RunCli({"explain", "pod", "-f", "/nonexistent.yaml"});
  EXPECT_EQ(missing.code, 3);  // not found
}

// --scheduler: a malformed URL is a usage error before anything is asked; a scheduler that does
// not answer is "a service unreachable" (exit 5), with the reason.
TEST(Cli, ExplainTellsABadSchedulerUrlFromAnUnreachableOne) {
  const std::string path = WriteManifest("plain",
                                         "kind: Pod\nmetadata: {name: p, namespace: ml}\n"
                                         "spec: {containers: [{name: c, resources: {limits: "
                                         "{tessera.dev/gpu-memory: 4Gi}}}]}\n");
  Result bad = RunCli({"explain", "pod", "-f", path.c_str(), "--scheduler", "not-a-url"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("\"not-a-url\" is not a URL"), std::string::npos) << bad.err;
  Result down = RunCli({"explain", "pod", "-f", path.c_str(), "--scheduler", "http://127.0.0.1:1"});
  EXPECT_EQ(down.code, 5) << down.err;
  EXPECT_NE(down.err.find("no answer: "), std::string::npos) << down.err;
}

// A bare number where a quantity goes is what kubectl accepts (`tessera.dev/gpu-cores: 30`).
TEST(Cli, ExplainTakesABareNumberForAQuantity) {
  const std::string path = WriteManifest("bare", R"(apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  containers:
  - name: c
    resources: {limits: {tessera.dev/gpu-memory: 4Gi, tessera.dev/gpu-cores: 30}}
)");
  Result r = RunCli({"explain", "pod", "-f", path.c_str()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ask: 4.00 GiB + 30 % compute"), std::string::npos) << r.out;
}

// What is not a pod manifest is refused with the path and what it is, never a crash: an empty
// file, a list, a string, a number, null, invalid YAML, a directory, a device.
TEST(Cli, ExplainRefusesWhatIsNotAPodManifest) {
  const struct {
    std::string path;
    const char* says;
  } cases[] = {
      {WriteManifest("empty", ""), "got an empty document"},
      {WriteManifest("list", "[1, 2, 3]\n"), "got a list"},
      {WriteManifest("string", "\"a pod\"\n"), "got a string"},
      {WriteManifest("number", "42\n"), "got a number"},
      {WriteManifest("null", "null\n"), "got an empty document"},
      {WriteManifest("broken", "kind: Pod\nspec: [unclosed\n"), "not valid YAML (line"},
      {WriteManifest("deployment", "kind: Deployment\nspec: {}\n"),
       "kind: \"Deployment\": expected Pod"},
      {WriteManifest("numeric", "kind: Pod\nmetadata:\n  annotations: {tessera.dev/priority: 5}\n"),
       "metadata.annotations[tessera.dev/priority]: 5 is not a string"},
      {::testing::TempDir(), "it is a directory"},
      {"/dev/zero", "it is a character device"},
  };
  for (const auto& c : cases) {
    Result r = RunCli({"explain", "pod", "-f", c.path.c_str()});
    EXPECT_EQ(r.code, 4) << c.path << ": " << r.err;  // an invalid input
    EXPECT_NE(r.err.find(c.path), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

// Commands whose own parser answers --help: to stdout, exit 0, in the one layout every command
// has (the table's usage first, then its summary; CLI11's option list after), never naming the
// binary's path.
TEST(Cli, CommandsWithTheirOwnParserAnswerHelp) {
  for (const char* command : {"advise", "explain", "demo", "sim"}) {
    Result r = RunCli({command, "--help"});
    EXPECT_EQ(r.code, 0) << command << ": " << r.err;
    EXPECT_EQ(r.out.rfind(std::string(UsageOf(command)) + "\n\n", 0), 0u)
        << command << ": " << r.out;
    EXPECT_EQ(r.out.find("/tessera"), std::string::npos) << r.out;
  }
  Result pod = RunCli({"explain", "pod", "--help"});
  EXPECT_EQ(pod.out.rfind(std::string(UsageOf("explain")), 0), 0u) << pod.out;
}

// Every file a command reads, given each kind of bad input: the command never crashes, exits 3
// for a file that is not there and 4 for one it cannot take (empty, a list at the top, truncated
// YAML, a directory, a device, larger than its bound), and names the file.
TEST(Cli, EveryFileInputRefusesWhatItCannotTake) {
  const std::string dir = ::testing::TempDir() + "/inputs";
  const std::vector<testutil::BadInput> inputs = testutil::BadInputFiles(dir);
  const std::string big = testutil::OversizedFile(dir, (std::size_t{4} << 20) + 1);
  std::ofstream(dir + "/openb_node_list_gpu_node.csv")
      << "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,1,T4\n";
  const std::vector<std::vector<std::string>> commands = {
      {"advise", "--policy", "FILE"},
      {"explain", "pod", "-f", "FILE"},
      {"doctor", "--policy", "FILE"},
      {"top", "--once", "--from", "FILE"},
      {"sim", "--trace", dir, "--pods", "FILE", "--seeds", "1"},
  };
  for (const std::vector<std::string>& command : commands) {
    for (const auto& input : inputs) {
      std::vector<std::string> args = command;
      std::replace(args.begin(), args.end(), std::string("FILE"), input.path);
      std::vector<const char*> argv;
      for (const std::string& a : args) argv.push_back(a.c_str());
      const Result r = RunCli(argv);
      EXPECT_EQ(r.code, input.exit_code) << command[0] << " " << input.path << ": " << r.err;
      EXPECT_NE(r.err.find(std::filesystem::path(input.path).filename().string()),
                std::string::npos)
          << command[0] << " " << input.path << ": " << r.err;
    }
  }
  // Larger than the bound: the policy readers' 4 MiB.
  for (const char* command : {"advise", "doctor"}) {
    const Result r = RunCli({command, "--policy", big.c_str()});
    EXPECT_EQ(r.code, 4) << r.err;
    EXPECT_NE(r.err.find("larger than the limit of 4194304 bytes"), std::string::npos) << r.err;
  }
}

TEST(Cli, InventoryRefusesBadFlags) {
  Result r = RunCli({"inventory", "--gpus", "0,,1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpus"), std::string::npos) << r.err;
  Result unknown = RunCli({"inventory", "--bogus"});
  EXPECT_EQ(unknown.code, 2);
}

// `tessera drift --watch-compute SECONDS`: whole seconds from 1 to a day, refused before anything
// is read (exit 2, the flag and the accepted form named).
TEST(Cli, DriftRefusesABadWatchPeriod) {
  for (const std::vector<const char*>& bad :
       {std::vector<const char*>{"drift", "--watch-compute", "0", "dir"},
        std::vector<const char*>{"drift", "--watch-compute", "ten", "dir"},
        std::vector<const char*>{"drift", "--watch-compute=-1", "dir"},
        std::vector<const char*>{"drift", "--watch-compute", "86401", "dir"},
        std::vector<const char*>{"drift", "dir", "--watch-compute"}}) {
    const Result r = RunCli(bad);
    EXPECT_EQ(r.code, 2) << bad[2];
    EXPECT_NE(r.err.find("--watch-compute: expected whole seconds from 1 to 86400"),
              std::string::npos)
        << r.err;
  }
}

// `tessera drift --hook-library PATH`: a file that exists, refused before anything is read.
TEST(Cli, DriftRefusesAHookLibraryThatIsNotAFile) {
  for (const std::vector<const char*>& bad :
       {std::vector<const char*>{"drift", "--hook-library", "/nonexistent/libtessera-cuda.so", "d"},
        std::vector<const char*>{"drift", "--hook-library", "/", "dir"},
        std::vector<const char*>{"drift", "dir", "--hook-library"}}) {
    const Result r = RunCli(bad);
    EXPECT_EQ(r.code, 2) << bad[2];
    EXPECT_NE(r.err.find("--hook-library: expected the path of an existing file"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace tessera::cli
