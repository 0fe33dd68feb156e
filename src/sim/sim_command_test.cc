#include "sim/sim_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/go_source.h"
#include "testutil/temp_dir.h"

namespace tessera::sim {
namespace {

constexpr const char* kData = TESSERA_TRACE_DATA;

int RunSim(const std::vector<std::string>& args, std::string* out, std::string* err) {
  std::ostringstream o, e;
  const int code = RunSimCommand(args, o, e);
  *out = o.str();
  *err = e.str();
  return code;
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(SimCommand, JsonHasOneObjectPerRunWithTheFullCurve) {
  if (!GoSourceAvailable()) GTEST_SKIP() << "built without Go's math/rand table";
  std::string out, err;
  ASSERT_EQ(RunSim({"--trace", kData, "--policy", "best-fit,fgd", "--seeds", "42..43", "--json"},
                   &out, &err),
            0)
      << err;
  const auto runs = nlohmann::json::parse(out);
  ASSERT_EQ(runs.size(), 4U);
  EXPECT_EQ(runs[0]["policy"], "best-fit");
  EXPECT_EQ(runs[0]["seed"], 42);
  EXPECT_DOUBLE_EQ(runs[0]["gpu_alloc_ratio"].get<double>(), 93.13);  // spec §8.2
  EXPECT_DOUBLE_EQ(runs[3]["gpu_alloc_ratio"].get<double>(), 95.32);
  EXPECT_EQ(runs[2]["failed_pods"], 2532);  // spec §6.3, FGD seed 42
  EXPECT_EQ(runs[0]["curve"]["alloc"].size(), 131U);
  EXPECT_TRUE(runs[0].contains("unallocated_gpus"));
  EXPECT_TRUE(runs[0].contains("seconds"));
}

TEST(SimCommand, TableAndPlot) {
  testutil::TempDir dir;
  const std::string svg = dir.path() + "/alloc.svg";
  std::string out, err;
  ASSERT_EQ(RunSim({"--trace", kData, "--policy", "gpu-packing", "--seeds", "42", "--rng", "std",
                    "--plot", svg},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("gpu-packing"), std::string::npos);
  EXPECT_NE(out.find("alloc@130%"), std::string::npos);
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("<polyline"), std::string::npos);
}

// --pods all: every list in the folder, one summary row each, tessera against each baseline with
// the paired wins; --plot writes one chart per list. The per-list figures are the single runs'.
TEST(SimCommand, AllListsInTheFolderMakeOneSummary) {
  testutil::TempDir dir;
  std::filesystem::copy(std::string(kData) + "/openb_node_list_gpu_node.csv", dir.path());
  std::filesystem::copy(std::string(kData) + "/openb_pod_list_default.csv", dir.path());
  {
    std::ifstream in(std::string(kData) + "/openb_pod_list_default.csv");
    std::ofstream small(dir.path() + "/openb_pod_list_small.csv");
    std::string line;
    for (int i = 0; i < 500 && std::getline(in, line); ++i) small << line << "\n";
  }
  std::string out, err;
  const std::vector<std::string> common = {"--trace", dir.path(), "--policy", "best-fit,tessera",
                                           "--seeds", "42..43",   "--rng",    "std"};
  std::vector<std::string> all = common;
  all.insert(all.end(), {"--pods", "all", "--plot", dir.path() + "/alloc.svg"});
  ASSERT_EQ(RunSim(all, &out, &err), 0) << err;
  EXPECT_NE(out.find("vs best-fit"), std::string::npos) << out;
  const std::size_t row = out.find("\nsmall ");
  ASSERT_NE(row, std::string::npos) << out;
  EXPECT_NE(out.find("\ndefault "), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/alloc-openb_pod_list_small.svg"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/alloc-openb_pod_list_default.svg"));
  // The row's best-fit mean is the single run's.
  std::vector<std::string> one = common;
  one.insert(one.end(), {"--pods", "small", "--json"});
  std::string single;
  ASSERT_EQ(RunSim(one, &single, &err), 0) << err;
  const auto runs = nlohmann::json::parse(single);
  double best_fit = 0;
  for (const auto& r : runs) {
    if (r["policy"] == "best-fit") best_fit += r["gpu_alloc_ratio"].get<double>() / 2;
  }
  char cell[32];
  std::snprintf(cell, sizeof(cell), "%.2f", best_fit);
  const std::string line = out.substr(row + 1, out.find('\n', row + 1) - row - 1);
  EXPECT_NE(line.find(cell), std::string::npos) << line << " vs " << cell;
}

// A list that is not there is named where it is published (exit 3); a name that is no list of
// the trace says which lists there are.
TEST(SimCommand, AMissingListIsNamedWhereItIsPublished) {
  std::string out, err;
  EXPECT_EQ(RunSim({"--trace", kData, "--pods", "multigpu40"}, &out, &err), 3);
  EXPECT_NE(
      err.find("alibaba/clusterdata, cluster-trace-gpu-v2023/csv/openb_pod_list_multigpu40.csv"),
      std::string::npos)
      << err;
  err.clear();
  EXPECT_EQ(RunSim({"--trace", kData, "--pods", "nosuch"}, &out, &err), 3);
  EXPECT_NE(err.find("the trace's lists are cpu0, "), std::string::npos) << err;
  testutil::TempDir empty;
  err.clear();
  EXPECT_EQ(RunSim({"--trace", empty.path(), "--pods", "all"}, &out, &err), 3);
  EXPECT_NE(err.find("openb_node_list_gpu_node.csv"), std::string::npos) << err;
}

TEST(SimCommand, BadInputFailsClearly) {
  testutil::TempDir dir;
  std::string out, err;
  EXPECT_EQ(RunSim({}, &out, &err), 2);
  EXPECT_NE(err.find("--trace"), std::string::npos);
  EXPECT_EQ(RunSim({"--trace", kData, "--policy", "worst-fit"}, &out, &err), 2);
  EXPECT_EQ(RunSim({"--trace", kData, "--seeds", "9..3"}, &out, &err), 2);
  EXPECT_EQ(RunSim({"--trace", kData, "--plot", "x.png"}, &out, &err), 2);
  err.clear();
  EXPECT_EQ(RunSim({"--trace", kData, "--seeds", "0..1000000000"}, &out, &err), 2);
  EXPECT_NE(err.find("1000000001 seeds; at most 100000"), std::string::npos) << err;
  err.clear();  // refused before the replay, not after it
  EXPECT_EQ(RunSim({"--trace", kData, "--plot", "/nonexistent/x.svg"}, &out, &err), 2);
  EXPECT_NE(err.find("cannot write into \"/nonexistent\""), std::string::npos) << err;

  Write(dir.path() + "/openb_node_list_gpu_node.csv", "sn,cpu_milli,memory_mib,gpu,model\n");
  Write(dir.path() + "/pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,500\n");
  EXPECT_NE(RunSim({"--trace", dir.path(), "--pods", "pods.csv"}, &out, &err), 0);
  EXPECT_NE(err.find("empty cluster"), std::string::npos);

  Write(dir.path() + "/openb_node_list_gpu_node.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,1,T4\n");
  Write(dir.path() + "/empty.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n");
  EXPECT_NE(RunSim({"--trace", dir.path(), "--pods", "empty.csv"}, &out, &err), 0);
  EXPECT_NE(err.find("empty pod list"), std::string::npos);

  Write(dir.path() + "/bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,x,500\n");
  EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "bad.csv"}, &out, &err), 4);
  EXPECT_NE(err.find("bad.csv:2:"), std::string::npos);
  for (const auto& [row, says] : {std::pair{"p0,-1,1,1,500", "cpu_milli: -1 is negative"},
                                  std::pair{"p0,1,-2,1,500", "memory_mib: -2 is negative"},
                                  std::pair{"p0,1,1,65,500", "num_gpu: 65 is not in 0..64"}}) {
    err.clear();
    Write(dir.path() + "/bad.csv",
          std::string("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n") + row + "\n");
    EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "bad.csv"}, &out, &err), 4);
    EXPECT_NE(err.find(std::string("bad.csv:2: ") + says), std::string::npos) << err;
  }

  EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "missing.csv"}, &out, &err), 3);
}

// --scale K: K times the node list, each pod list with it; a bad K is a usage error naming the
// flag and the accepted form.
TEST(SimCommand, ScaleCopiesTheClusterAndThePods) {
  testutil::TempDir dir;
  Write(dir.path() + "/openb_node_list_gpu_node.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,2,T4\nn1,8000,16384,1,P100\n");
  Write(dir.path() + "/openb_pod_list_tiny.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,100,1,500,\nb,1000,100,1,1000,P100\nc,1000,100,0,0,\nd,2000,100,2,1000,\n");
  std::string out, err;
  ASSERT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--rng", "std", "--json", "--policy",
                    "fgd,tessera", "--seeds", "42", "--scale", "3"},
                   &out, &err),
            0)
      << err;
  const auto runs = nlohmann::json::parse(out);
  ASSERT_EQ(runs.size(), 2U);
  for (const auto& run : runs) {
    EXPECT_EQ(run["scale"], 3);
    EXPECT_EQ(run["nodes"], 6);
    EXPECT_EQ(run["total_gpus"], 9);
    EXPECT_GE(run["pods"].get<int>(), 12);
  }
  ASSERT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--rng", "std", "--policy", "fgd",
                    "--seeds", "42", "--scale=2"},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("4 nodes, 6 GPUs, 8 pods (--scale 2)"), std::string::npos) << out;
  for (const char* bad : {"0", "101", "ten", ""}) {
    err.clear();
    EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--scale", bad}, &out, &err), 2);
    EXPECT_NE(err.find("--scale: \"" + std::string(bad) + "\": want an integer 1..100"),
              std::string::npos)
        << err;
  }
  err.clear();
  EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--scale"}, &out, &err), 2);
  EXPECT_NE(err.find("--scale: missing value"), std::string::npos) << err;
  EXPECT_EQ(RunSim({"--trace", dir.path(), "--variants", "r.txt", "--out", dir.path() + "/v",
                    "--scale", "2"},
                   &out, &err),
            2);
}

// Issue #26's bad input, also at scale: each names the file, the line and the field; the replay
// refuses to start (exit 4) or counts the pod as failed, never crashes.
TEST(SimCommand, BadTracesAreNamedByFileLineAndFieldAtScale) {
  testutil::TempDir dir;
  const std::string nodes = dir.path() + "/openb_node_list_gpu_node.csv";
  Write(dir.path() + "/openb_pod_list_tiny.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,100,1,500,\n");
  const std::string header = "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,2,T4\n";
  for (const auto& [row, says] :
       {std::pair{"n0,8000,16384,1,T4",
                  "openb_node_list_gpu_node.csv:3: sn: node \"n0\" repeats "
                  "line 2"},
        std::pair{"n1,8000,16384,1,H100X",
                  "openb_node_list_gpu_node.csv:3: unknown GPU model "
                  "\"H100X\""},
        std::pair{"n1,0,16384,0,",
                  "openb_node_list_gpu_node.csv:3: cpu_milli: 0: a node with "
                  "no capacity"},
        std::pair{"n1,8000,0,1,T4", "openb_node_list_gpu_node.csv:3: memory_mib: 0"}}) {
    for (const char* scale : {"1", "10"}) {
      Write(nodes, header + row + "\n");
      std::string out, err;
      EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--scale", scale}, &out, &err), 4)
          << row;
      EXPECT_NE(err.find(says), std::string::npos) << err;
    }
  }
  // A repeated pod name is refused where the list is read.
  Write(nodes, header);
  Write(dir.path() + "/openb_pod_list_dup.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,500\na,1,1,1,500\n");
  std::string out, err;
  EXPECT_EQ(RunSim({"--trace", dir.path(), "--pods", "dup", "--scale", "10"}, &out, &err), 4);
  EXPECT_NE(err.find("openb_pod_list_dup.csv:3: pod \"a\" repeats line 2"), std::string::npos)
      << err;
  // Pods no node can take: named once, then failed in every copy (capacity enough for every
  // pod of every copy to arrive: tuned up, not down).
  Write(nodes, header + "n1,8000,16384,2,T4\nn2,8000,16384,2,T4\nn3,8000,16384,2,T4\n");
  Write(dir.path() + "/openb_pod_list_big.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,100,1,500,\nwide,1000,100,8,1000,\nv100,1000,100,1,500,V100M32\n");
  err.clear();
  ASSERT_EQ(RunSim({"--trace", dir.path(), "--pods", "big", "--scale", "10", "--policy",
                    "fgd,tessera,random", "--seeds", "42", "--rng", "std", "--json"},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(err.find("openb_pod_list_big.csv:3: pod \"wide\": num_gpu: 8 is more than any node "
                     "has (2) (counted as failed)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("openb_pod_list_big.csv:4: pod \"v100\": gpu_spec: \"V100M32\" names no "
                     "GPU model"),
            std::string::npos)
      << err;
  for (const auto& run : nlohmann::json::parse(out)) EXPECT_GE(run["failed_pods"].get<int>(), 20);
}

TEST(SimCommand, SmallTraceRunsWithEitherGenerator) {
  testutil::TempDir dir;
  Write(dir.path() + "/openb_node_list_gpu_node.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,2,T4\nn1,8000,16384,1,P100\n");
  Write(dir.path() + "/openb_pod_list_tiny.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,100,1,500,\nb,1000,100,1,1000,P100\nc,1000,100,0,0,\nd,2000,100,2,1000,\n");
  std::string out, err;
  ASSERT_EQ(RunSim({"--trace", dir.path(), "--pods", "tiny", "--rng", "std", "--json"}, &out, &err),
            0)
      << err;
  const auto runs = nlohmann::json::parse(out);
  EXPECT_EQ(runs.size(), 60U);  // 6 policies x seeds 42..51
  for (const auto& run : runs) {
    EXPECT_LE(run["allocated_milli"].get<double>(), 3000);
    EXPECT_GE(run["pods"].get<int>(), 4);
  }
}

}  // namespace
}  // namespace tessera::sim
