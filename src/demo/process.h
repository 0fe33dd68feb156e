// The demo's child processes and its one temporary folder (`tessera demo`).
//
// The e2e tests have the same kind of helpers (test/e2e/testcluster.h), but they are test code
// (GoogleTest decides whether a folder is kept) and are not built in the release preset, where
// `tessera demo` must run. These are the few pieces the demo needs, with its shutdown rules:
//   - every child runs in its own process group, so a Ctrl-C in the terminal reaches only the
//     demo, which then stops its children in order (SIGTERM, then SIGKILL to the group);
//   - every child gets SIGTERM if the demo dies (PR_SET_PDEATHSIG);
//   - SIGINT/SIGTERM/SIGHUP only raise a flag (Interrupted()) that every wait polls.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera::demo {

// Installs the demo's SIGINT/SIGTERM/SIGHUP handlers for its lifetime and restores the previous
// ones afterwards. One at a time per process.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// Whether a handled signal arrived since the current InterruptScope began.
bool Interrupted();
// The signal that arrived (0 if none).
int InterruptSignal();

// A fresh folder under $TMPDIR (else /tmp), removed with everything in it on destruction unless
// Keep() was called.
class WorkFolder {
 public:
  static StatusOr<std::unique_ptr<WorkFolder>> Create(const std::string& prefix);
  ~WorkFolder();
  WorkFolder(const WorkFolder&) = delete;
  WorkFolder& operator=(const WorkFolder&) = delete;
  const std::string& path() const { return path_; }
  void Keep() { keep_ = true; }
  bool kept() const { return keep_; }

 private:
  explicit WorkFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
  bool keep_ = false;
};

struct SpawnOptions {
  std::string name;                                      // for messages ("tessera-scheduler")
  std::vector<std::string> argv;                         // argv[0] is the program's path
  std::string log_path;                                  // stdout and stderr go here (appended)
  std::vector<std::pair<std::string, std::string>> env;  // added to, or replacing, ours
};

class Process {
 public:
  static StatusOr<std::unique_ptr<Process>> Spawn(SpawnOptions options);
  ~Process();  // Stop()
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return options_.name; }
  const std::string& log_path() const { return options_.log_path; }
  // Whether it still runs (reaps it once it has exited).
  bool Running();
  // SIGTERM, up to `grace` to exit, then SIGKILL; then SIGKILL to whatever is left of its
  // process group. Returns the wait status (-1 if it could not be reaped).
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(15));
  // "exit code 1", "signal 9"; "running" while it runs.
  std::string Describe();
  // The last `lines` lines of its log.
  std::string LogTail(std::size_t lines = 20) const;

 private:
  Process(SpawnOptions options, pid_t pid) : options_(std::move(options)), pid_(pid) {}
  SpawnOptions options_;
  pid_t pid_;
  std::optional<int> status_;
  bool group_killed_ = false;
};

// Waits until `file` exists. Errors: the process exited first (with its log's tail), `limit`
// passed, or the demo was interrupted (kAborted).
Status WaitForFile(Process& process, const std::string& file, std::chrono::milliseconds limit);

// Sleeps `d` in short steps; false if interrupted meanwhile.
bool SleepUnlessInterrupted(std::chrono::milliseconds d);

// Whether `path` is a regular file this process may execute.
bool IsExecutableFile(const std::string& path);

}  // namespace tessera::demo
