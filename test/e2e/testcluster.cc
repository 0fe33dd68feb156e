#include "e2e/testcluster.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <signal.h>
#include <stdlib.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tessera/exec_args.h"
#include "tessera/subprocess.h"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool AnyTestFailed() {
  const ::testing::UnitTest* unit = ::testing::UnitTest::GetInstance();
  if (unit == nullptr) return false;
  const ::testing::TestInfo* current = unit->current_test_info();
  if (current != nullptr && current->result() != nullptr && current->result()->Failed()) {
    return true;
  }
  return unit->failed_test_count() > 0 || unit->ad_hoc_test_result().Failed();
}

}  // namespace

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(ChildOptions options) {
  if (options.argv.empty()) return InvalidArgumentError("ChildProcess: empty argv");
  SpawnOptions spawn;
  spawn.argv = options.argv;
  for (const auto& [key, value] : options.env) spawn.env.push_back(key + "=" + value);
  spawn.stdin_to = Redirect::Null();
  if (!options.log_path.empty()) {
    spawn.stdout_to = Redirect::AppendTo(options.log_path);
    spawn.stderr_to = spawn.stdout_to;
  }
  if (options.kill_with_parent) spawn.parent_death_signal = SIGTERM;
  TESSERA_ASSIGN_OR_RETURN(const pid_t pid, tessera::Spawn(spawn));
  return std::unique_ptr<ChildProcess>(new ChildProcess(std::move(options), pid));
}

ChildProcess::~ChildProcess() {
  if (!exit_status_) Stop();
}

bool ChildProcess::Running() {
  if (exit_status_) return false;
  exit_status_ = TryWait(pid_);  // -1 if it is not our child
  return !exit_status_;
}

Status ChildProcess::Signal(int signal) {
  if (!Running()) return FailedPreconditionError("process " + std::to_string(pid_) + " has exited");
  if (kill(pid_, signal) != 0) return UnavailableError(Errno("kill"));
  return Status::Ok();
}

std::optional<int> ChildProcess::Wait(milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (Running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return exit_status_;
}

int ChildProcess::Stop(milliseconds grace) {
  if (Running()) {
    const Termination t = Terminate(pid_, grace);
    exit_status_ = t.status;
    if (t.killed) {
      std::cerr << "ChildProcess: " << options_.argv[0] << " (pid " << pid_
                << ") did not stop within " << grace.count() << " ms of SIGTERM; SIGKILL\n";
    }
  }
  return exit_status_.value_or(-1);
}

std::string ChildProcess::LogTail(std::size_t lines) const {
  return TailOfFile(options_.log_path, lines);
}

StatusOr<std::unique_ptr<TempFolder>> TempFolder::Create(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) return UnavailableError(Errno("mkdtemp " + pattern));
  return std::unique_ptr<TempFolder>(new TempFolder(pattern));
}

TempFolder::~TempFolder() {
  if (keep_ || AnyTestFailed()) {
    std::cerr << "e2e: kept " << path_ << " (logs inside)\n";
    return;
  }
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

StatusOr<std::string> TestClusterBinary() {
  const char* value = std::getenv("TESSERA_TESTCLUSTER");
  if (value == nullptr || *value == '\0') {
    return FailedPreconditionError(
        "TESSERA_TESTCLUSTER is not set: build the e2e harness (test/e2e/harness/build.sh "
        "build/e2e) and run with TESSERA_TESTCLUSTER=$PWD/build/e2e/tessera-testcluster");
  }
  if (access(value, X_OK) != 0) {
    return FailedPreconditionError(std::string("TESSERA_TESTCLUSTER=") + value +
                                   " is not an executable file (test/e2e/harness/build.sh "
                                   "builds it)");
  }
  return std::string(value);
}

StatusOr<std::unique_ptr<ChildProcess>> SpawnAndWaitForFile(ChildOptions options,
                                                            const std::string& file,
                                                            milliseconds limit) {
  const std::string what = options.argv.empty() ? std::string() : options.argv[0];
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child,
                           ChildProcess::Spawn(std::move(options)));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::error_code ignored;
    if (fs::exists(file, ignored)) return child;
    if (!child->Running()) {
      const std::optional<int> status = child->Wait(milliseconds(0));
      return UnavailableError(what + " exited (" + DescribeWaitStatus(status.value_or(-1)) +
                              ") before writing " + file + "; log " + child->log_path() +
                              ", last lines:\n" + child->LogTail());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      child->Stop();
      return UnavailableError(what + " did not write " + file + " within " +
                              std::to_string(limit.count()) + " ms; log " + child->log_path() +
                              ", last lines:\n" + child->LogTail());
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(TestClusterOptions options) {
  std::unique_ptr<TestCluster> cluster(new TestCluster());
  if (options.binary.empty()) {
    TESSERA_ASSIGN_OR_RETURN(options.binary, TestClusterBinary());
  }
  cluster->binary_ = options.binary;
  TESSERA_ASSIGN_OR_RETURN(cluster->folder_, TempFolder::Create("tessera-e2e"));
  const std::string dir = cluster->folder_->path();
  cluster->kubeconfig_ = dir + "/kubeconfig";
  ChildOptions child;
  child.argv = {options.binary,       "up",    "--kubeconfig",
                cluster->kubeconfig_, "--dir", dir + "/state"};
  if (!options.scheduler_config.empty()) {
    child.argv.push_back("--scheduler-config");
    child.argv.push_back(options.scheduler_config);
  }
  for (const std::string& arg : options.extra_args) child.argv.push_back(arg);
  child.log_path = dir + "/testcluster.log";
  StatusOr<std::unique_ptr<ChildProcess>> process =
      SpawnAndWaitForFile(std::move(child), cluster->kubeconfig_, options.start_limit);
  if (!process.ok()) {
    cluster->folder_->Keep();
    return process.status().WithContext("tessera-testcluster up");
  }
  cluster->process_ = std::move(process).value();
  return cluster;
}

TestCluster::~TestCluster() {
  if (process_) {
    const int status = process_->Stop();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::cerr << "e2e: tessera-testcluster up ended with " << DescribeWaitStatus(status)
                << "; log " << process_->log_path() << "\n";
      if (folder_) folder_->Keep();
    }
  }
}

StatusOr<std::unique_ptr<SimNodes>> SimNodes::Start(SimNodesOptions options) {
  std::unique_ptr<SimNodes> sim(new SimNodes());
  if (options.binary.empty()) {
    TESSERA_ASSIGN_OR_RETURN(options.binary, TestClusterBinary());
  }
  if (options.kubeconfig.empty()) return InvalidArgumentError("SimNodes: kubeconfig is required");
  std::string dir = options.dir;
  if (dir.empty()) {
    TESSERA_ASSIGN_OR_RETURN(sim->folder_, TempFolder::Create("tessera-simnodes"));
    dir = sim->folder_->path();
  }
  static int counter = 0;
  const std::string tag = "simnodes-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  const std::string ready_file = dir + "/" + tag + ".ready";
  ChildOptions child;
  child.argv = {options.binary,    "simnodes",
                "--kubeconfig",    options.kubeconfig,
                "--nodes",         std::to_string(options.nodes),
                "--gpus-per-node", std::to_string(options.gpus_per_node),
                "--gpu-memory",    options.gpu_memory,
                "--ready-file",    ready_file};
  if (!options.prefix.empty()) {
    child.argv.push_back("--prefix");
    child.argv.push_back(options.prefix);
  }
  for (const std::string& arg : options.extra_args) child.argv.push_back(arg);
  child.log_path = dir + "/" + tag + ".log";
  StatusOr<std::unique_ptr<ChildProcess>> process =
      SpawnAndWaitForFile(std::move(child), ready_file, options.start_limit);
  if (!process.ok()) {
    if (sim->folder_) sim->folder_->Keep();
    return process.status().WithContext("tessera-testcluster simnodes");
  }
  sim->process_ = std::move(process).value();
  std::ifstream in(ready_file);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) sim->node_names_.push_back(line);
  }
  return sim;
}

SimNodes::~SimNodes() {
  if (process_) process_->Stop();
}

}  // namespace tessera::e2e
