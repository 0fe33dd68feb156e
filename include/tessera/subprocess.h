// The one way tessera starts a child process: Spawn() (fork, then only async-signal-safe calls
// until execve), and the waits and stops that go with it.
//
// Everything the child needs (argv, environment, open files, the PATH candidates) is prepared
// before fork(), so a multi-threaded parent is safe. A failure between fork() and a successful
// execve (the program cannot be run, chdir, the user switch) comes back to the parent through a
// close-on-exec pipe: Spawn returns an error naming argv[0] instead of a child that exits 127.
//
// What the child gets by default: this process's environment, standard streams and signal mask,
// its process group and session; every signal caught here is reset to SIG_DFL before execve
// (execve would do that anyway; the reset also covers the window before it). Ignored signals
// stay ignored unless listed in `default_signals`.
#pragma once

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera {

// Where one of the child's standard streams (stdin, stdout, stderr) goes.
struct Redirect {
  enum class Kind { kInherit, kNull, kAppend, kFd };
  Kind kind = Kind::kInherit;
  std::string path;  // kAppend: opened O_APPEND, created 0644 if missing
  int fd = -1;       // kFd: a descriptor of this process; it stays open here

  static Redirect Inherit() { return {}; }
  static Redirect Null() { return {Kind::kNull, {}, -1}; }  // /dev/null
  static Redirect AppendTo(std::string path) { return {Kind::kAppend, std::move(path), -1}; }
  static Redirect Fd(int fd) { return {Kind::kFd, {}, fd}; }
};

struct SpawnOptions {
  // argv[0] is the program: a path, or (with `search_path`) a name without '/' looked up in this
  // process's $PATH, as execvp and posix_spawnp do.
  std::vector<std::string> argv;
  bool search_path = false;

  // The child's environment. kInherit: this process's, less the variables `env` names, then
  // `env` ("NAME=value" each). kReplace: exactly `env`, in its order.
  enum class Env { kInherit, kReplace };
  Env env_mode = Env::kInherit;
  std::vector<std::string> env;

  // Stdout and stderr naming the same kAppend path share one open file.
  Redirect stdin_to, stdout_to, stderr_to;

  // Its own process group (setpgid in the child and here, so that it holds before either side
  // runs on; the child's pid is the group's id), or its own session (setsid).
  bool new_process_group = false;
  bool new_session = false;
  std::string working_directory;  // "" keeps ours
  std::optional<uid_t> user;      // setgroups({}), setgid and setuid to it (needs root)
  // Sent to the child when the thread that spawned it ends (PR_SET_PDEATHSIG); 0: none. The child
  // exits (127) without running the program if this process is already gone.
  int parent_death_signal = 0;
  std::vector<int> default_signals;  // set to SIG_DFL in the child (ignored ones included)
  bool clear_signal_mask = false;    // the child starts with no signal blocked
  // Close every descriptor but 0, 1 and 2 at execve, whether or not it was opened O_CLOEXEC.
  bool close_other_fds = false;
};

// Starts the child. Errors: empty argv (kInvalidArgument); a stream's file cannot be opened
// ("open PATH: reason", kUnavailable); the program cannot be executed ("cannot run \"argv0\":
// reason": kNotFound for ENOENT/ENOTDIR, kPermissionDenied for EACCES/EPERM, else
// kUnavailable); a step before it failed ("cannot run \"argv0\": chdir DIR: reason", "...: switch
// to user N: reason", ...). The child has been reaped when an error is returned.
StatusOr<pid_t> Spawn(const SpawnOptions& options);

// Waits for child `pid` to end (retrying on EINTR): its wait status. Error if it is not our
// child (ECHILD).
StatusOr<int> Wait(pid_t pid);

// Reaps child `pid` if it has ended: its wait status; nullopt while it runs. -1 if it is not (or
// no longer) our child.
std::optional<int> TryWait(pid_t pid);

// Stops child `pid`: SIGTERM, up to `grace` for it to end, then SIGKILL (to its process group
// as well with `group`: the child must lead one) and reaps it. `killed`: SIGKILL was needed.
// `status`: its wait status, -1 if it could not be reaped (not our child).
struct Termination {
  int status = -1;
  bool killed = false;
};
Termination Terminate(pid_t pid, std::chrono::milliseconds grace, bool group = false);

// This process's environment ("NAME=value"), less every entry that starts with one of `drop`
// (a "NAME=" drops that variable, "CUDA_" every variable named so).
std::vector<std::string> InheritedEnvironment(std::initializer_list<std::string_view> drop = {});

}  // namespace tessera
