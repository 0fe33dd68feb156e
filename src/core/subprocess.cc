#include "tessera/subprocess.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tessera/quantity.h"

extern char** environ;

namespace tessera {
namespace {

// What the child reports through the pipe when it cannot go on to the program.
enum class Stage : int { kSession, kRedirect, kChdir, kUser, kExec };
struct Report {
  Stage stage;
  int error;
};

std::string Errno(const std::string& what, int error) { return what + ": " + std::strerror(error); }

std::string_view EntryName(std::string_view entry) { return entry.substr(0, entry.find('=')); }

// The child's environment in full, "NAME=value" each.
std::vector<std::string> ChildEnvironment(const SpawnOptions& o) {
  std::vector<std::string> out;
  if (o.env_mode == SpawnOptions::Env::kInherit) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view name = EntryName(*e);
      bool replaced = false;
      for (const std::string& entry : o.env) replaced = replaced || EntryName(entry) == name;
      if (!replaced) out.emplace_back(*e);
    }
  }
  out.insert(out.end(), o.env.begin(), o.env.end());
  return out;
}

// The paths execve is tried with, in order: argv[0] itself, or with `search_path` and no '/' in
// it, each directory of $PATH (glibc's default when unset; an empty entry is the working
// directory), as execvp does.
std::vector<std::string> Candidates(const SpawnOptions& o) {
  const std::string& file = o.argv[0];
  if (!o.search_path || file.empty() || file.find('/') != std::string::npos) return {file};
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path != nullptr ? env_path : "/bin:/usr/bin";
  std::vector<std::string> out;
  for (std::size_t start = 0;;) {
    const std::size_t end = path.find(':', start);
    const std::string dir = path.substr(start, end == std::string::npos ? end : end - start);
    out.push_back(dir.empty() ? file : dir + "/" + file);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Descriptors opened here for the child, closed again when Spawn returns.
class OwnedFds {
 public:
  OwnedFds() = default;
  OwnedFds(const OwnedFds&) = delete;
  OwnedFds& operator=(const OwnedFds&) = delete;
  ~OwnedFds() {
    for (int fd : fds_) close(fd);
  }
  int Add(int fd) {
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

 private:
  std::vector<int> fds_;
};

// In the child, after fork(): only async-signal-safe calls from here on.
[[noreturn]] void Fail(int report_fd, Stage stage, int error) {
  const Report report{stage, error};
  (void)!write(report_fd, &report, sizeof(report));
  _exit(127);
}

struct ChildPlan {
  const SpawnOptions* options;
  pid_t parent;
  int report_fd;
  int stdio[3];  // -1: inherit
  const char* working_directory;
  char* const* argv;
  char* const* envp;
  const std::vector<char*>* candidates;
  const sigset_t* mask;  // what the child runs the program with
  int max_fd;
};

[[noreturn]] void RunChild(const ChildPlan& p) {
  const SpawnOptions& o = *p.options;
  // Signals arrive blocked (see Spawn). Handlers of this process must not run in the child.
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction current {};
    if (sigaction(s, nullptr, &current) != 0) continue;
    if (current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(s, &dfl, nullptr);
  }
  for (int s : o.default_signals) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(s, &dfl, nullptr);
  }
  if (o.new_session && setsid() < 0) Fail(p.report_fd, Stage::kSession, errno);
  if (o.new_process_group) setpgid(0, 0);  // the parent does it too; either may come first
  if (o.parent_death_signal != 0) {
    prctl(PR_SET_PDEATHSIG, o.parent_death_signal);
    if (getppid() != p.parent) _exit(127);  // the parent is already gone
  }
  // A source that is itself 0, 1 or 2 first moves above them, so no dup2 clobbers another's.
  int stdio[3] = {p.stdio[0], p.stdio[1], p.stdio[2]};
  for (int& fd : stdio) {
    if (fd >= 0 && fd <= STDERR_FILENO) {
      fd = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
      if (fd < 0) Fail(p.report_fd, Stage::kRedirect, errno);
    }
  }
  for (int target = 0; target < 3; ++target) {
    if (stdio[target] >= 0 && dup2(stdio[target], target) < 0) {
      Fail(p.report_fd, Stage::kRedirect, errno);
    }
  }
  if (p.working_directory != nullptr && chdir(p.working_directory) != 0) {
    Fail(p.report_fd, Stage::kChdir, errno);
  }
  if (o.user) {
    if (setgroups(0, nullptr) != 0 || setgid(*o.user) != 0 || setuid(*o.user) != 0) {
      Fail(p.report_fd, Stage::kUser, errno);
    }
  }
  if (o.close_other_fds) {
#ifdef SYS_close_range
    constexpr unsigned int kCloexec = 1U << 2;  // CLOSE_RANGE_CLOEXEC (linux/close_range.h)
    const bool done = syscall(SYS_close_range, 3U, ~0U, kCloexec) == 0;
#else
    const bool done = false;
#endif
    for (int fd = STDERR_FILENO + 1; !done && fd < p.max_fd; ++fd) {
      const int flags = fcntl(fd, F_GETFD);
      if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }
  sigprocmask(SIG_SETMASK, p.mask, nullptr);
  // As execvp: on to the next candidate while this one is not there; an EACCES on the way is
  // what is reported if none runs.
  int error = ENOENT;
  bool denied = false, stopped = false;
  for (char* path : *p.candidates) {
    if (path == nullptr || stopped) break;
    execve(path, p.argv, p.envp);
    error = errno;
    denied = denied || error == EACCES;
    stopped = error != EACCES && error != ENOENT && error != ENOTDIR && error != ESTALE &&
              error != ENODEV && error != ETIMEDOUT;
  }
  Fail(p.report_fd, Stage::kExec, denied && !stopped ? EACCES : error);
}

Status ReportedError(const SpawnOptions& o, const Report& r) {
  const std::string what = "cannot run \"" + QuoteForMessage(o.argv[0]) + "\": ";
  switch (r.stage) {
    case Stage::kExec: {
      const std::string message = what + std::strerror(r.error);
      if (r.error == ENOENT || r.error == ENOTDIR) return NotFoundError(message);
      if (r.error == EACCES || r.error == EPERM) return PermissionDeniedError(message);
      return UnavailableError(message);
    }
    case Stage::kSession:
      return UnavailableError(what + Errno("setsid", r.error));
    case Stage::kRedirect:
      return UnavailableError(what + Errno("redirecting its standard streams", r.error));
    case Stage::kChdir:
      return UnavailableError(what + Errno("chdir " + o.working_directory, r.error));
    case Stage::kUser:
      return PermissionDeniedError(what +
                                   Errno("switch to user " + std::to_string(*o.user), r.error));
  }
  return InternalError(what + "unknown failure");
}

}  // namespace

StatusOr<pid_t> Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return InvalidArgumentError("Spawn: empty argv");
  // Everything the child needs is prepared before fork(): afterwards only async-signal-safe
  // calls until execve.
  std::vector<std::string> argv_storage = o.argv;
  std::vector<std::string> env_storage = ChildEnvironment(o);
  std::vector<std::string> candidate_storage = Candidates(o);
  const std::vector<char*> argv = Pointers(argv_storage);
  const std::vector<char*> envp = Pointers(env_storage);
  const std::vector<char*> candidates = Pointers(candidate_storage);

  OwnedFds owned;
  const Redirect* redirects[3] = {&o.stdin_to, &o.stdout_to, &o.stderr_to};
  int stdio[3] = {-1, -1, -1};
  for (int i = 0; i < 3; ++i) {
    const Redirect& r = *redirects[i];
    switch (r.kind) {
      case Redirect::Kind::kInherit:
        break;
      case Redirect::Kind::kNull:
        stdio[i] = owned.Add(open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC));
        if (stdio[i] < 0) return UnavailableError(Errno("open /dev/null", errno));
        break;
      case Redirect::Kind::kAppend:
        if (i == 2 && o.stdout_to.kind == Redirect::Kind::kAppend && o.stdout_to.path == r.path) {
          stdio[i] = stdio[1];  // one open file: the two streams' lines interleave in order
          break;
        }
        stdio[i] = owned.Add(open(r.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
        if (stdio[i] < 0) return UnavailableError(Errno("open " + r.path, errno));
        break;
      case Redirect::Kind::kFd:
        if (r.fd < 0) return InvalidArgumentError("Spawn: a negative descriptor to redirect to");
        stdio[i] = r.fd;
        break;
    }
  }
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return UnavailableError(Errno("pipe", errno));
  owned.Add(report[0]);

  sigset_t all, previous, child_mask;
  sigfillset(&all);
  sigemptyset(&child_mask);
  struct rlimit files {};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
                             files.rlim_cur < 1048576
                         ? static_cast<int>(files.rlim_cur)
                         : 1048576;
  ChildPlan plan{&o,
                 getpid(),
                 report[1],
                 {stdio[0], stdio[1], stdio[2]},
                 o.working_directory.empty() ? nullptr : o.working_directory.c_str(),
                 argv.data(),
                 envp.data(),
                 &candidates,
                 &child_mask,
                 max_fd};
  // No handler of ours may run in the child before it has reset them all.
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  if (!o.clear_signal_mask) child_mask = previous;
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  const int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  close(report[1]);
  if (pid < 0) return UnavailableError(Errno("fork", fork_error));
  if (o.new_process_group) setpgid(pid, pid);  // also from here, so that it holds on return

  Report r{};
  ssize_t n = 0;
  do {
    n = read(report[0], &r, sizeof(r));
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(r))) return pid;  // closed by a successful execve
  (void)Wait(pid);
  return ReportedError(o, r);
}

StatusOr<int> Wait(pid_t pid) {
  int status = 0;
  pid_t r = 0;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid) return UnavailableError(Errno("waitpid " + std::to_string(pid), errno));
  return status;
}

std::optional<int> TryWait(pid_t pid) {
  int status = 0;
  pid_t r = 0;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  return r == pid ? status : -1;
}

Termination Terminate(pid_t pid, std::chrono::milliseconds grace, bool group) {
  std::optional<int> status = TryWait(pid);
  if (status) return {*status, false};
  kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!(status = TryWait(pid)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (status) return {*status, false};
  if (group) kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  const StatusOr<int> waited = Wait(pid);
  return {waited.ok() ? *waited : -1, true};
}

std::vector<std::string> InheritedEnvironment(std::initializer_list<std::string_view> drop) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool dropped = false;
    for (std::string_view prefix : drop) dropped = dropped || entry.rfind(prefix, 0) == 0;
    if (!dropped) out.emplace_back(entry);
  }
  return out;
}

}  // namespace tessera
