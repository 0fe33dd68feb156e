// The real control plane for end-to-end tests, and child processes in general.
//
//   TestCluster: `tessera-testcluster up` (etcd + kube-apiserver + kube-scheduler, ADR 0009)
//     as a child process; ready once it has written its admin kubeconfig.
//   SimNodes: `tessera-testcluster simnodes` (simulated GPU nodes); ready once its ready file
//     (the node names, one per line) exists.
//   ChildProcess: spawn with output to a log file, signal, wait with a limit; also for
//     tessera's own daemons.
//
// The harness binary is $TESSERA_TESTCLUSTER (built by test/e2e/harness/build.sh). Everything
// lives in a fresh temporary folder, removed afterwards unless a test failed (then it is kept
// and its path printed, logs included).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "tessera/exec_args.h"
#include "tessera/status.h"

namespace tessera::e2e {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  std::string log_path;           // stdout and stderr (appended); empty: inherit ours
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  // SIGTERM the child if the thread that spawned it dies (prctl PR_SET_PDEATHSIG): a crashed
  // test leaves no control plane behind. Spawn from a long-lived thread when this is on.
  bool kill_with_parent = true;
};

class ChildProcess {
 public:
  static StatusOr<std::unique_ptr<ChildProcess>> Spawn(ChildOptions options);
  ~ChildProcess();  // Stop() if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return options_.log_path; }
  // Whether it is still running (reaps it if it has exited).
  bool Running();
  Status Signal(int signal);
  // The exit status as waitpid reports it once the child has exited, nullopt if it is still
  // running after `limit`.
  std::optional<int> Wait(std::chrono::milliseconds limit);
  // SIGTERM, wait up to `grace`, then SIGKILL; returns the wait status.
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(30));
  // The last `lines` lines of the log ("" without a log).
  std::string LogTail(std::size_t lines = 30) const;

 private:
  ChildProcess(ChildOptions options, pid_t pid) : options_(std::move(options)), pid_(pid) {}
  ChildOptions options_;
  pid_t pid_;
  std::optional<int> exit_status_;
};

using tessera::DescribeWaitStatus;  // "exit code 0", "signal 9" (tessera/exec_args.h)

// A temporary folder that is removed on destruction unless Keep() was called or a GoogleTest
// test has failed in this process (then its path is printed to stderr).
class TempFolder {
 public:
  static StatusOr<std::unique_ptr<TempFolder>> Create(const std::string& prefix);
  ~TempFolder();
  const std::string& path() const { return path_; }
  void Keep() { keep_ = true; }

 private:
  explicit TempFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
  bool keep_ = false;
};

struct TestClusterOptions {
  std::string binary;                   // default: $TESSERA_TESTCLUSTER (an error if unset)
  std::string scheduler_config;         // --scheduler-config (KubeSchedulerConfiguration YAML)
  std::vector<std::string> extra_args;  // e.g. "--apiserver-arg=--feature-gates=..."
  std::chrono::seconds start_limit{180};
};

class TestCluster {
 public:
  static StatusOr<std::unique_ptr<TestCluster>> Start(TestClusterOptions options = {});
  ~TestCluster();  // SIGTERM, wait (SIGKILL after 30 s); the folder goes unless kept

  const std::string& kubeconfig() const { return kubeconfig_; }  // admin, embedded certs
  const std::string& dir() const { return folder_->path(); }     // the temporary folder
  const std::string& binary() const { return binary_; }
  std::string log_path() const { return process_->log_path(); }
  ChildProcess& process() { return *process_; }
  void KeepFiles() { folder_->Keep(); }

 private:
  TestCluster() = default;
  std::unique_ptr<TempFolder> folder_;
  std::unique_ptr<ChildProcess> process_;
  std::string kubeconfig_;
  std::string binary_;
};

struct SimNodesOptions {
  std::string binary;  // default: $TESSERA_TESTCLUSTER
  std::string kubeconfig;
  int nodes = 1;
  int gpus_per_node = 8;
  std::string gpu_memory = "16Gi";
  std::string prefix;  // default: the harness's ("gpu-node-")
  std::vector<std::string> extra_args;
  std::string dir;  // where the log and ready file go (default: a new temporary folder)
  std::chrono::seconds start_limit{120};
};

class SimNodes {
 public:
  static StatusOr<std::unique_ptr<SimNodes>> Start(SimNodesOptions options);
  ~SimNodes();
  const std::vector<std::string>& node_names() const { return node_names_; }
  ChildProcess& process() { return *process_; }

 private:
  SimNodes() = default;
  std::unique_ptr<TempFolder> folder_;  // when no dir was given
  std::unique_ptr<ChildProcess> process_;
  std::vector<std::string> node_names_;
};

// Starts `options.argv` and waits until `file` exists (it should be written atomically).
// If the child exits first, or `limit` passes, the error carries the log's tail.
StatusOr<std::unique_ptr<ChildProcess>> SpawnAndWaitForFile(ChildOptions options,
                                                            const std::string& file,
                                                            std::chrono::milliseconds limit);

// $TESSERA_TESTCLUSTER, checked to be executable; the error says how to build and set it.
StatusOr<std::string> TestClusterBinary();

}  // namespace tessera::e2e
