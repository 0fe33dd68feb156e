// tessera-scheduler as a process: every file it reads, in each class of bad input, refused with
// the convention's exit code (3 missing, 4 invalid) and a message naming the flag and the path,
// before the API server is asked or anything is served (issue #23).
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "contract/decision.h"
#include "testutil/bad_inputs.h"
#include "testutil/shell.h"

namespace tessera::scheduler {
namespace {

using Result = testutil::ShellResult;

Result RunScheduler(const std::string& args) {
  return testutil::RunShell(
      "env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST -u "
      "KUBERNETES_SERVICE_PORT " TESSERA_SCHEDULER_BINARY " " +
      args + " >/dev/null");
}

TEST(SchedulerIntegration, EveryFileInputRefusesWhatItCannotTake) {
  const std::string dir = ::testing::TempDir() + "/scheduler-inputs-" + std::to_string(getpid());
  const std::vector<testutil::BadInput> bad = testutil::BadInputFiles(dir);
  const std::string big = testutil::OversizedFile(dir, (std::size_t{16} << 20) + 1);
  const std::string key = dir + "/key.pem";
  std::ofstream(key) << *contract::GenerateSigningKeyPem();
  const std::string junk = dir + "/junk.pem";
  std::ofstream(junk) << "not a key\n";
  struct Case {
    std::string flag, path;
    int code;
  };
  std::vector<Case> cases;
  for (const std::string flag : {"--policy", "--kubeconfig", "--signing-key", "--tls-cert-file"}) {
    for (const testutil::BadInput& b : bad) cases.push_back({flag, b.path, b.exit_code});
    cases.push_back({flag, big, 4});
  }
  for (const std::string flag : {"--signing-key", "--tls-cert-file"})
    cases.push_back({flag, junk, 4});
  for (const Case& c : cases) {
    std::string args = "--listen 127.0.0.1:0 --webhook-listen 127.0.0.1:0";
    if (c.flag != "--signing-key") args += " --signing-key " + key;
    if (c.flag == "--tls-cert-file") args += " --tls-key-file " + key;
    const Result run = RunScheduler(args + " " + c.flag + " " + c.path);
    EXPECT_EQ(run.exit_code, c.code) << c.flag << " " << c.path << ": " << run.err;
    EXPECT_NE(run.err.find(c.flag), std::string::npos)
        << c.flag << " " << c.path << ": " << run.err;
    EXPECT_NE(run.err.find(c.path), std::string::npos)
        << c.flag << " " << c.path << ": " << run.err;
  }
}

// Bad flags: exit 2 naming the flag (and its accepted range or values), before anything is read.
TEST(SchedulerIntegration, BadFlagsExitTwoNamingTheFlag) {
  const std::string dir = ::testing::TempDir() + "/scheduler-flags-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string key = dir + "/key.pem";
  std::ofstream(key) << *contract::GenerateSigningKeyPem();
  struct Case {
    std::string args, names;
  };
  for (const Case& c : std::vector<Case>{
           {"--qps -1", "--qps"},
           {"--qps=0", "--qps"},
           {"--burst 100001", "--burst"},
           {"--threads 0", "--threads"},
           {"--bogus", "--bogus"},
           {"--listen nowhere", "--listen"},
           {"--placement fgd", "--placement"},
           {"--placement no-such-policy", "--placement"},
           {"--tls-cert-file " + key, "--tls-key-file"},
           {"--reservation-ttl-ms 5", "--reservation-ttl-ms"},
       }) {
    const Result run = RunScheduler("--signing-key " + key + " " + c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << ": " << run.err;
    EXPECT_NE(run.err.find(c.names), std::string::npos) << c.args << ": " << run.err;
  }
  const Result missing = RunScheduler("--listen 127.0.0.1:0");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--signing-key"), std::string::npos) << missing.err;
}

// --help and --version: to stdout, exit 0, as every tessera binary.
TEST(SchedulerIntegration, HelpAndVersionExitZeroOnStdout) {
  const testutil::ShellResult version = testutil::RunShell(TESSERA_SCHEDULER_BINARY " --version");
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out.rfind("tessera-scheduler ", 0), 0u) << version.out;
  EXPECT_NE(version.out.find("(commit "), std::string::npos) << version.out;
  const testutil::ShellResult help = testutil::RunShell(TESSERA_SCHEDULER_BINARY " --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--signing-key"), std::string::npos) << help.out;
  EXPECT_EQ(help.err, "");
}

}  // namespace
}  // namespace tessera::scheduler
