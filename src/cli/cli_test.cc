#include "cli/cli.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace tessera::cli
