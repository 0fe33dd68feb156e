#include "governor/arbiter_host.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <setjmp.h>
#include <signal.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tessera/file.h"
#include "tessera/log.h"

namespace tessera::governor {
namespace {

std::uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// A member's or limits file's text is small; "" when it cannot be read (the member is skipped).
constexpr std::size_t kSmallFileBytes = 64u << 10;

constexpr std::string_view kMemberPrefix = "member-";
constexpr std::uint64_t kScanEveryNs = 100'000'000;

// A region is the tenant's file (mode 0666): the tenant can truncate it while the arbiter has it
// mapped, and the next access past the new end raises SIGBUS. The arbiter's accesses run under a
// guard: SIGBUS on this thread while guarded jumps back, and the member is let go. SIGBUS
// anywhere else goes to the previous disposition, as before.
thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_sigbus {};
std::once_flag g_sigbus_installed;

extern "C" void OnRegionSigbus(int signal, siginfo_t* info, void* context) {
  if (t_guard != nullptr) siglongjmp(*t_guard, 1);
  // Not a guarded region access: what would have happened without us.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction != nullptr)
      return g_previous_sigbus.sa_sigaction(signal, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN &&
             g_previous_sigbus.sa_handler != nullptr) {
    return g_previous_sigbus.sa_handler(signal);
  }
  sigaction(SIGBUS, &g_previous_sigbus,
            nullptr);  // the faulting access runs again and dies as it would have
}

void InstallSigbusGuard() {
  std::call_once(g_sigbus_installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnRegionSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

// Runs `access` — loads and stores of one region, nothing that allocates, locks or owns — and
// returns false if the region's file was truncated under it.
template <typename F>
bool Guarded(F&& access) {
  sigjmp_buf env;
  if (sigsetjmp(env, 1) != 0) {
    t_guard = nullptr;
    return false;
  }
  t_guard = &env;
  access();
  t_guard = nullptr;
  return true;
}

}  // namespace

std::vector<Member> MembersOf(const Limits& limits, const std::string& region_path,
                              const SpatialPolicy& spatial) {
  std::vector<Member> out;
  for (const DeviceLimits& d : limits.devices) {
    const bool mps = limits.mode == SharingMode::kMps;
    Tenant t{d.cores_percent, limits.compute,          limits.priority, mps,
             false,           limits.compute_window_ms};
    t.yields_sms = mps && YieldsSms(limits.priority, spatial);
    out.push_back(Member{region_path + "#" + d.uuid, region_path, d.uuid, t});
  }
  return out;
}

ArbiterHost::~ArbiterHost() {
  Stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, j] : joined_) Release(*j);
}

void ArbiterHost::Release(Joined& j) {
  if (j.mapping && j.device >= 0 && !j.broken) {
    shm::Compute& c = j.mapping.region()->compute[j.device];
    Guarded([&c] {
      c.gate.store(static_cast<std::uint32_t>(shm::Gate::kFree), std::memory_order_release);
      c.arbiter_beat_ns.store(0, std::memory_order_relaxed);
    });
  }
  if (auto it = arbiters_.find(j.member.uuid); it != arbiters_.end()) it->second.Leave(j.id);
}

Status ArbiterHost::SetMembers(const std::vector<Member>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, const Member*> wanted;
  for (const Member& m : members) wanted[m.key] = &m;
  // A region file re-created under the same path (a slot reused, a container restarted) is a new
  // region: the old mapping is let go and the new file attached.
  for (auto it = joined_.begin(); it != joined_.end();) {
    if (wanted.count(it->first) == 0 ||
        InodeOf(it->second->member.region_path) != it->second->inode) {
      Release(*it->second);
      it = joined_.erase(it);
    } else {
      ++it;
    }
  }
  std::string failures;
  for (const auto& [key, m] : wanted) {
    if (auto it = joined_.find(key); it != joined_.end()) {
      it->second->member.tenant = m->tenant;
      arbiters_.try_emplace(m->uuid, options_.arbiter)
          .first->second.Join(it->second->id, m->tenant);
      continue;
    }
    const std::uint64_t inode = InodeOf(m->region_path);
    auto mapping = shm::Mapping::Attach(m->region_path);
    int device = mapping.ok() ? shm::FindDevice(*mapping->region(), m->uuid) : -1;
    if (!mapping.ok() || device < 0) {
      failures += (failures.empty() ? "" : "; ") + m->region_path + ": " +
                  (mapping.ok() ? "no device " + m->uuid : mapping.status().message());
      continue;
    }
    auto j = std::make_unique<Joined>();
    j->member = *m;
    j->mapping = std::move(mapping).value();
    j->inode = inode;
    j->device = device;
    j->id = next_id_++;
    arbiters_.try_emplace(m->uuid, options_.arbiter).first->second.Join(j->id, m->tenant);
    joined_[key] = std::move(j);
  }
  std::erase_if(arbiters_, [](const auto& entry) { return entry.second.size() == 0; });
  if (!failures.empty()) return UnavailableError("compute arbiter: cannot govern " + failures);
  return Status::Ok();
}

bool ArbiterHost::Tick(std::uint64_t now_ns) {
  InstallSigbusGuard();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, j] : joined_) {
    const shm::Compute& c = j->mapping.region()->compute[j->device];
    Observation o;
    j->broken = j->broken || !Guarded([&c, &o] {
                  o = Observation{c.busy_ns.load(std::memory_order_relaxed),
                                  c.active_ns.load(std::memory_order_relaxed),
                                  c.waiting_ns.load(std::memory_order_relaxed)};
                });
    if (!j->broken) arbiters_.at(j->member.uuid).Observe(j->id, o);
  }
  // A truncated region's container leaves its GPU's arbiter (its file is attached again only
  // once it is whole: SetMembers).
  for (auto it = joined_.begin(); it != joined_.end();) {
    if (!it->second->broken) {
      ++it;
      continue;
    }
    TESSERA_LOG(kWarn, kGovernor,
                "region %s was truncated under the arbiter; its container is no longer governed",
                it->second->member.region_path.c_str());
    Release(*it->second);
    it = joined_.erase(it);
  }
  bool governing = false;
  for (auto& [uuid, arbiter] : arbiters_) {
    arbiter.Decide(now_ns);
    governing |= arbiter.Governing();
  }
  for (auto& [key, j] : joined_) {
    const Verdict v = arbiters_.at(j->member.uuid).VerdictFor(j->id);
    shm::Compute& c = j->mapping.region()->compute[j->device];
    j->broken = !Guarded([&c, &v, now_ns] {
      c.depth_us.store(v.depth_us, std::memory_order_relaxed);
      c.arbiter_beat_ns.store(now_ns, std::memory_order_relaxed);
      c.gate.store(static_cast<std::uint32_t>(v.gate), std::memory_order_release);
    });
  }
  return governing;
}

Verdict ArbiterHost::VerdictFor(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = joined_.find(key);
  if (it == joined_.end()) return Verdict{};
  return arbiters_.at(it->second->member.uuid).VerdictFor(it->second->id);
}

void ArbiterHost::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      const std::uint64_t ns = Tick(MonotonicNs()) ? options_.tick_ns : options_.idle_tick_ns;
      const timespec nap{static_cast<time_t>(ns / 1'000'000'000ULL),
                         static_cast<long>(ns % 1'000'000'000ULL)};
      nanosleep(&nap, nullptr);
    }
  });
}

void ArbiterHost::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::pair<std::string, std::string> ReadRegistration(const std::string& member_file) {
  std::istringstream text(ReadFile(member_file, kSmallFileBytes).value_or(""));
  std::string word, limits_path, region_path;
  while (text >> word) {
    if (word == "limits") text >> limits_path;
    if (word == "region") text >> region_path;
  }
  return {limits_path, region_path};
}

std::vector<std::pair<std::string, std::string>> LocalRegistrations(const std::string& dir) {
  std::set<std::pair<std::string, std::string>> found;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code inner;
    for (const auto& entry : std::filesystem::directory_iterator(gpu.path(), inner)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(kMemberPrefix, 0) != 0) continue;
      const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + kMemberPrefix.size()));
      if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) continue;
      auto registration = ReadRegistration(entry.path().string());
      if (!registration.first.empty() && !registration.second.empty())
        found.insert(std::move(registration));
    }
  }
  return {found.begin(), found.end()};
}

std::string DefaultLocalArbiterDir() {
  return (std::filesystem::temp_directory_path() / "tessera-gpu").string();
}

StatusOr<std::unique_ptr<LocalArbiter>> LocalArbiter::Register(
    const std::string& dir, const std::string& limits_path, const std::string& region_path,
    const std::vector<std::string>& uuids) {
  std::unique_ptr<LocalArbiter> a(new LocalArbiter());
  a->dir_ = dir;
  a->uuids_ = uuids;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  chmod(dir.c_str(), 01777);  // best effort: the first user's umask must not lock others out
  for (const std::string& uuid : uuids) {
    const std::string gpu_dir = dir + "/" + uuid;
    std::filesystem::create_directories(gpu_dir, ec);
    chmod(gpu_dir.c_str(), 01777);
    const std::string file = gpu_dir + "/" + std::string(kMemberPrefix) + std::to_string(getpid());
    std::ofstream out(file);
    out << "limits " << limits_path << "\nregion " << region_path << "\n";
    if (!out) return UnavailableError("compute arbiter: cannot register in " + gpu_dir);
    a->files_.push_back(file);
    a->lock_fds_.push_back(-1);
  }
  a->thread_ = std::thread([p = a.get()] { p->Run(); });
  return a;
}

LocalArbiter::~LocalArbiter() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  for (const std::string& f : files_) std::filesystem::remove(f, ec);
  host_.Stop();
  for (int fd : lock_fds_) {
    if (fd >= 0) close(fd);  // releases the flock: another `tessera run` takes over
  }
}

std::vector<Member> LocalArbiter::ScanMembers() {
  std::vector<Member> members;
  for (std::size_t g = 0; g < uuids_.size(); ++g) {
    if (lock_fds_[g] < 0) continue;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/" + uuids_[g], ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(kMemberPrefix, 0) != 0) continue;
      const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + kMemberPrefix.size()));
      if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {  // its `tessera run` is gone
        std::filesystem::remove(entry.path(), ec);
        continue;
      }
      const auto [limits_path, region_path] = ReadRegistration(entry.path().string());
      auto limits = ParseLimitsFile(ReadFile(limits_path, kMaxLimitsFileBytes).value_or(""));
      if (!limits.ok()) continue;  // being written, or gone: the next scan sees it
      for (Member& m : MembersOf(*limits, region_path)) {
        if (m.uuid == uuids_[g]) members.push_back(std::move(m));
      }
    }
  }
  return members;
}

std::uint32_t LatencyCriticalMpsAsks(const std::string& dir, const std::string& uuid) {
  std::uint32_t sum = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/" + uuid, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kMemberPrefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + kMemberPrefix.size()));
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) continue;
    sum += LatencyCriticalMpsShare(
        ReadFile(ReadRegistration(entry.path().string()).first, kMaxLimitsFileBytes).value_or(""),
        uuid);
  }
  return std::min(sum, 100u);
}

void LocalArbiter::Run() {
  std::uint64_t last_scan = 0;
  while (!stop_.load()) {
    const std::uint64_t now = MonotonicNs();
    if (now - last_scan >= kScanEveryNs) {
      last_scan = now;
      bool hosting = false;
      for (std::size_t g = 0; g < uuids_.size(); ++g) {
        if (lock_fds_[g] < 0) {
          const std::string lock_path = dir_ + "/" + uuids_[g] + "/arbiter.lock";
          const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
          if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
            fchmod(fd, 0666);
            lock_fds_[g] = fd;
            TESSERA_LOG(kInfo, kGovernor, "hosting the compute arbiter of %s", uuids_[g].c_str());
          } else if (fd >= 0) {
            close(fd);
          }
        }
        hosting |= lock_fds_[g] >= 0;
      }
      if (hosting) {
        if (Status s = host_.SetMembers(ScanMembers()); !s.ok()) {
          TESSERA_LOG(kDebug, kGovernor, "%s", s.message().c_str());
        }
        host_.Start();
      }
    }
    const timespec nap{0, 20'000'000};
    nanosleep(&nap, nullptr);
  }
}

}  // namespace tessera::governor
