#include "governor/mps.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tessera/file.h"
#include "tessera/limits.h"
#include "tessera/subprocess.h"

namespace tessera::governor {
namespace {

// Holds an exclusive flock on a file for its scope.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666)) {
    if (fd_ >= 0) {
      fchmod(fd_, 0666);
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

constexpr std::string_view kClientPrefix = "client-";

// Live clients (pid, uid) registered in `dir`; files of ended processes are removed.
std::vector<std::pair<pid_t, uid_t>> LiveClients(const std::string& dir) {
  std::vector<std::pair<pid_t, uid_t>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kClientPrefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + kClientPrefix.size()));
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    std::istringstream in(ReadFile(entry.path().string(), 64).value_or(""));
    long uid = -1;
    in >> uid;
    if (uid >= 0) out.emplace_back(pid, static_cast<uid_t>(uid));
  }
  return out;
}

// Runs `control` with exactly `env`, feeding `input` on stdin; its exit status, or -1.
int RunControl(const std::string& control, const std::vector<std::string>& env,
               const std::string& input, const std::vector<std::string>& args) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  SpawnOptions spawn;
  spawn.argv = {control};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.env_mode = SpawnOptions::Env::kReplace;
  spawn.env = env;
  spawn.stdin_to = Redirect::Fd(pipefd[0]);
  spawn.stdout_to = Redirect::Null();
  spawn.stderr_to = Redirect::Null();  // its log folder has the rest
  const StatusOr<pid_t> pid = Spawn(spawn);
  close(pipefd[0]);
  if (!pid.ok()) {
    close(pipefd[1]);
    return -1;
  }
  if (!input.empty() && write(pipefd[1], input.data(), input.size()) < 0) {
    // the daemon reads nothing: its exit status says the rest
  }
  close(pipefd[1]);
  const StatusOr<int> status = Wait(*pid);
  return status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

std::vector<std::string> DaemonEnvironment(const std::string& uuid, const std::string& pipe_dir,
                                           const std::string& log_dir) {
  std::vector<std::string> env = InheritedEnvironment({"CUDA_", "LD_PRELOAD="});
  env.push_back("CUDA_VISIBLE_DEVICES=" + uuid);
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir);
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_dir);
  return env;
}

}  // namespace

// Whether a control daemon answers on `pipe_dir`: its `control` socket accepts a connection (the
// file alone may be left over from a daemon that died). Should `control` not be a socket, its
// existence is all there is to go by. The daemon listens on a SOCK_SEQPACKET socket (measured on
// the H200, driver 580.159.04, MPS 13000: a SOCK_STREAM connect fails with EPROTOTYPE); a connect
// of the wrong type fails with EPROTOTYPE, so each connection-oriented type is tried, and a
// leftover file that no socket is bound to refuses them all (ECONNREFUSED).
bool DaemonAnswers(const std::string& pipe_dir) {
  const std::string path = pipe_dir + "/control";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return false;
  if (!S_ISSOCK(st.st_mode)) return true;
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  for (const int type : {SOCK_SEQPACKET, SOCK_STREAM}) {
    const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
    const int error = errno;
    close(fd);
    if (rc == 0) return true;
    if (error != EPROTOTYPE) return false;
  }
  // A socket of another type (datagram) is bound there: a live daemon.
  return true;
}

namespace {

// Starts the control daemon (`-d` daemonizes) and waits up to 5 s for it to answer.
Status StartDaemon(const std::string& control, const std::vector<std::string>& env,
                   const std::string& pipe_dir, const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::remove(pipe_dir + "/control", ec);
  if (RunControl(control, env, "", {"-d"}) != 0) {
    return UnavailableError("mode mps: " + control + " -d failed (see " + log_dir +
                            "/control.log)");
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!DaemonAnswers(pipe_dir)) {
    if (std::chrono::steady_clock::now() > end) {
      return UnavailableError("mode mps: the MPS control daemon did not start (see " + log_dir +
                              "/control.log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Ok();
}

}  // namespace

std::string FindInPath(const std::string& program) {
  if (program.find('/') != std::string::npos)
    return access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::uint32_t ActiveThreadPercent(std::uint32_t cores_percent, PriorityClass priority,
                                  const SpatialPolicy& policy, std::uint32_t lc_asks_percent) {
  const std::uint32_t share = cores_percent == 0 || cores_percent > 100 ? 100 : cores_percent;
  if (priority == PriorityClass::kLatencyCritical) return 100;
  if (!YieldsSms(priority, policy)) return share;
  const std::uint32_t reserve =
      std::min(std::max(policy.lc_reserve_percent, lc_asks_percent), 100u);
  return std::max(std::min(share, 100 - reserve), policy.min_sm_percent);
}

std::uint32_t LatencyCriticalMpsShare(std::string_view limits_text, std::string_view uuid) {
  auto limits = ParseLimitsFile(limits_text);
  if (!limits.ok() || limits->mode != SharingMode::kMps ||
      limits->priority != PriorityClass::kLatencyCritical) {
    return 0;
  }
  std::uint32_t share = 0;
  for (const DeviceLimits& d : limits->devices) {
    if (d.uuid == uuid) share += d.cores_percent;
  }
  return share;
}

bool YieldsSms(PriorityClass priority, const SpatialPolicy& policy) {
  return priority == PriorityClass::kBestEffort ||
         (priority == PriorityClass::kNormal && policy.normal_yields);
}

Status CheckSmFloor(std::uint32_t cores_percent, const std::string& field) {
  if (cores_percent == 0 || cores_percent >= kMinSmPercent) return Status::Ok();
  return InvalidArgumentError(
      field + ": " + std::to_string(cores_percent) +
      " under mode mps is an SM limit below the floor of " + std::to_string(kMinSmPercent) +
      " %; accepted: " + std::to_string(kMinSmPercent) + "-100, or mode shared");
}

std::vector<std::string> MpsClientEnvironment(const std::string& pipe_dir,
                                              const std::string& log_dir,
                                              std::uint64_t memory_bytes,
                                              std::uint32_t cores_percent, PriorityClass priority) {
  std::vector<std::string> env{"CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir};
  if (!log_dir.empty()) env.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_dir);
  // The client sees one device (CUDA_VISIBLE_DEVICES is the daemon's): index 0, in whole MiB.
  if (memory_bytes != 0) {
    env.push_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + std::to_string(memory_bytes >> 20) + "M");
  }
  if (cores_percent != 0 && cores_percent < 100) {
    env.push_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + std::to_string(cores_percent));
  }
  // MPS has two client priorities: 0 normal, 1 below normal.
  env.push_back(std::string("CUDA_MPS_CLIENT_PRIORITY=") +
                (priority == PriorityClass::kBestEffort ? "1" : "0"));
  return env;
}

Status CheckMpsUser(uid_t uid, const std::vector<uid_t>& live_uids) {
  for (uid_t other : live_uids) {
    if (other != uid) {
      return FailedPreconditionError(
          "mode mps: this GPU's MPS clients run as user " + std::to_string(other) +
          ", this one as user " + std::to_string(uid) +
          "; co-tenants of one MPS GPU must share a user ID (tessera.dev/mps-user)");
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<LocalMps>> LocalMps::Join(const std::string& dir, const std::string& uuid,
                                                   const std::string& control_name) {
  const std::string control = FindInPath(control_name);
  if (control.empty()) return NotFoundError("mode mps: " + control_name + " not found in PATH");
  std::unique_ptr<LocalMps> m(new LocalMps());
  m->dir_ = dir;
  m->uuid_ = uuid;
  m->control_ = control;
  const uid_t uid = getuid();
  // A daemon per user: its pipes belong to that user.
  m->pipe_dir_ = dir + "/uid-" + std::to_string(uid) + "/pipe";
  m->log_dir_ = dir + "/uid-" + std::to_string(uid) + "/log";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  chmod(dir.c_str(), 01777);
  FileLock lock(dir + "/mps.lock");
  if (!lock.ok()) return UnavailableError("mode mps: cannot lock " + dir + "/mps.lock");
  std::vector<uid_t> uids;
  for (const auto& [pid, other] : LiveClients(dir)) uids.push_back(other);
  TESSERA_RETURN_IF_ERROR(CheckMpsUser(uid, uids));
  std::filesystem::create_directories(m->pipe_dir_, ec);
  std::filesystem::create_directories(m->log_dir_, ec);
  const auto env = DaemonEnvironment(uuid, m->pipe_dir_, m->log_dir_);
  if (uids.empty() || !DaemonAnswers(m->pipe_dir_)) {
    // No client of ours is live: (re)start the daemon; a leftover daemon of ours (a `tessera run`
    // that was killed) is asked to quit first.
    RunControl(control, env, "quit\n", {});
    TESSERA_RETURN_IF_ERROR(StartDaemon(control, env, m->pipe_dir_, m->log_dir_));
    m->started_ = true;
  }
  m->client_file_ = dir + "/" + std::string(kClientPrefix) + std::to_string(getpid());
  std::ofstream(m->client_file_) << uid << "\n";
  return m;
}

StatusOr<NodeMps::Endpoint> NodeMps::Ensure(const std::string& uuid, uid_t uid) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string control = FindInPath(control_);
  if (control.empty()) return NotFoundError("mode mps: " + control_ + " not found on this node");
  const std::string gpu_dir = dir_ + "/" + uuid;
  Endpoint e{gpu_dir + "/pipe", gpu_dir + "/log"};
  // The user of the GPU's MPS containers is kept beside the daemon, so that a restarted agent
  // still knows it (the daemon and its containers outlive the agent).
  const bool running = DaemonAnswers(e.pipe_dir);
  if (running) {
    std::istringstream in(ReadFile(gpu_dir + "/user", 64).value_or(""));
    long user = -1;
    if (in >> user && user >= 0)
      TESSERA_RETURN_IF_ERROR(CheckMpsUser(uid, {static_cast<uid_t>(user)}));
  }
  std::error_code ec;
  std::filesystem::create_directories(e.pipe_dir, ec);
  std::filesystem::create_directories(e.log_dir, ec);
  chmod(e.pipe_dir.c_str(), 0755);  // clients of the container's user reach the pipes
  if (!running) {
    TESSERA_RETURN_IF_ERROR(StartDaemon(control, DaemonEnvironment(uuid, e.pipe_dir, e.log_dir),
                                        e.pipe_dir, e.log_dir));
  }
  std::ofstream(gpu_dir + "/user") << uid << "\n";
  ensured_[uuid] = std::chrono::steady_clock::now();
  return e;
}

void NodeMps::Retain(const std::vector<std::string>& in_use) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string control = FindInPath(control_);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string uuid = entry.path().filename().string();
    if (std::find(in_use.begin(), in_use.end(), uuid) != in_use.end()) continue;
    if (auto it = ensured_.find(uuid);
        it != ensured_.end() &&
        std::chrono::steady_clock::now() - it->second < std::chrono::minutes(1)) {
      continue;
    }
    const std::string pipe = entry.path().string() + "/pipe";
    if (!control.empty() && DaemonAnswers(pipe)) {
      RunControl(control, DaemonEnvironment(uuid, pipe, entry.path().string() + "/log"), "quit\n",
                 {});
    }
    std::filesystem::remove(entry.path().string() + "/user", ec);
  }
}

LocalMps::~LocalMps() {
  FileLock lock(dir_ + "/mps.lock");
  std::error_code ec;
  std::filesystem::remove(client_file_, ec);
  if (LiveClients(dir_).empty())
    RunControl(control_, DaemonEnvironment(uuid_, pipe_dir_, log_dir_), "quit\n", {});
}

}  // namespace tessera::governor
