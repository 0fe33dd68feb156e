#include "demo/process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/exec_args.h"

extern char** environ;

namespace tessera::demo {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

volatile sig_atomic_t g_signal = 0;

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof(kHandled) / sizeof(kHandled[0])];

extern "C" void OnInterrupt(int signal) { g_signal = signal; }

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

InterruptScope::InterruptScope() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR and the wait loops look
  for (std::size_t i = 0; i < std::size(kHandled); ++i) {
    sigaction(kHandled[i], &action, &g_previous[i]);
  }
}

InterruptScope::~InterruptScope() {
  for (std::size_t i = 0; i < std::size(kHandled); ++i) sigaction(kHandled[i], &g_previous[i], nullptr);
}

bool Interrupted() { return g_signal != 0; }
int InterruptSignal() { return static_cast<int>(g_signal); }

StatusOr<std::unique_ptr<WorkFolder>> WorkFolder::Create(const std::string& prefix) {
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) return UnavailableError(Errno("mkdtemp " + pattern));
  return std::unique_ptr<WorkFolder>(new WorkFolder(pattern));
}

WorkFolder::~WorkFolder() {
  if (keep_) return;
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

StatusOr<std::unique_ptr<Process>> Process::Spawn(SpawnOptions options) {
  if (options.argv.empty()) return InvalidArgumentError("Process: empty argv");
  if (options.name.empty()) options.name = fs::path(options.argv[0]).filename().string();
  // Everything the child needs is prepared before fork(): afterwards only async-signal-safe
  // calls until execve.
  ExecArgs exec(options.argv, options.env);
  const int log_fd = open(options.log_path.empty() ? "/dev/null" : options.log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return UnavailableError(Errno("open " + options.log_path));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return UnavailableError(Errno("fork"));
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group: the terminal's Ctrl-C goes to the demo only
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the demo is already gone
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execve(exec.argv()[0], exec.argv(), exec.envp());
    const char message[] = "tessera demo: execve failed\n";
    (void)!write(STDERR_FILENO, message, sizeof(message) - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also from here, so that it holds before either side runs on
  close(log_fd);
  return std::unique_ptr<Process>(new Process(std::move(options), pid));
}

Process::~Process() { Stop(); }

bool Process::Running() {
  if (status_) return false;
  int status = 0;
  pid_t r = 0;
  do {
    r = waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    status_ = status;
    return false;
  }
  if (r < 0) {  // not our child any more (cannot happen unless someone else reaped it)
    status_ = -1;
    return false;
  }
  return true;
}

int Process::Stop(milliseconds grace) {
  if (Running()) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (Running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    if (Running()) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      int status = 0;
      pid_t r = 0;
      do {
        r = waitpid(pid_, &status, 0);
      } while (r < 0 && errno == EINTR);
      status_ = r == pid_ ? status : -1;
    }
  }
  // Anything the child left in its group (it is the group's leader; nobody else joins it),
  // once: afterwards the number may name somebody else's group.
  if (!group_killed_) kill(-pid_, SIGKILL);
  group_killed_ = true;
  return status_.value_or(-1);
}

std::string Process::Describe() {
  if (Running()) return "running";
  const int s = status_.value_or(-1);
  if (s == -1) return "gone";
  return DescribeWaitStatus(s);
}

std::string Process::LogTail(std::size_t lines) const { return TailOfFile(options_.log_path, lines); }

Status WaitForFile(Process& process, const std::string& file, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::error_code ignored;
    if (fs::exists(file, ignored)) return Status::Ok();
    if (Interrupted()) return AbortedError("interrupted");
    if (!process.Running()) {
      return UnavailableError(process.name() + " exited (" + process.Describe() +
                              ") before it was ready; the last lines of its log:\n" +
                              process.LogTail());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return UnavailableError(process.name() + " was not ready within " +
                              std::to_string(limit.count() / 1000) +
                              " s; the last lines of its log:\n" + process.LogTail());
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

bool SleepUnlessInterrupted(milliseconds d) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Interrupted()) return false;
    std::this_thread::sleep_for(std::min(milliseconds(50), d));
  }
  return !Interrupted();
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

}  // namespace tessera::demo

