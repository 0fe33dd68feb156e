#include "demo/process.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "tessera/exec_args.h"
#include "tessera/subprocess.h"

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
  for (std::size_t i = 0; i < std::size(kHandled); ++i)
    sigaction(kHandled[i], &g_previous[i], nullptr);
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
  tessera::SpawnOptions spawn;
  spawn.argv = options.argv;
  for (const auto& [key, value] : options.env) spawn.env.push_back(key + "=" + value);
  spawn.stdin_to = Redirect::Null();
  spawn.stdout_to =
      options.log_path.empty() ? Redirect::Null() : Redirect::AppendTo(options.log_path);
  spawn.stderr_to = spawn.stdout_to;
  spawn.new_process_group = true;  // its own group: the terminal's Ctrl-C goes to the demo only
  spawn.parent_death_signal = SIGTERM;
  spawn.default_signals = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  spawn.clear_signal_mask = true;
  TESSERA_ASSIGN_OR_RETURN(const pid_t pid, tessera::Spawn(spawn));
  return std::unique_ptr<Process>(new Process(std::move(options), pid));
}

Process::~Process() { Stop(); }

bool Process::Running() {
  if (status_) return false;
  status_ = TryWait(pid_);  // -1 once not our child any more (only if someone else reaped it)
  return !status_;
}

int Process::Stop(milliseconds grace) {
  if (Running()) status_ = Terminate(pid_, grace, /*group=*/true).status;
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

std::string Process::LogTail(std::size_t lines) const {
  return TailOfFile(options_.log_path, lines);
}

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
