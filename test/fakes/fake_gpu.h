// What the fake CUDA driver and the fake NVML share: the fake devices' configuration and their
// physical usage, per device and per process, kept in a file (TESSERA_FAKE_STATE) so every
// process — and both libraries — see the same device, as they would a real GPU.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera::fake {

inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxProcesses = 64;

// What one process holds on each device (NVML's per-process usedGpuMemory). A process is named
// as it sees itself: its PID in its own namespace and that namespace (the inode of
// /proc/self/ns/pid: processes of different containers may share a PID, never a namespace), with
// a hash of its /proc/self/cgroup by which the fake NVML finds the PID its caller sees
// (fake_nvml.cc; the host's PID, as the real driver reports, where containers see their cgroup's
// host path: cgroup v1, or v2 without cgroup namespaces).
struct ProcessUsage {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> ns;
  std::atomic<std::uint64_t> cgroup;
  std::atomic<std::uint64_t> bytes[kMaxDevices];
};

struct Shared {
  std::atomic<std::uint64_t> physical[kMaxDevices];
  ProcessUsage processes[kMaxProcesses];
};

inline bool Alive(std::int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

// FNV-1a of a file's first 4 KiB (0 if unreadable).
inline std::uint64_t HashOfFile(const char* path) {
  char buf[4096];
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  std::uint64_t h = 1469598103934665603ULL;
  for (ssize_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ULL;
  return h;
}
inline std::uint64_t MyNs() {  // (a fork child shares its parent's)
  static const std::uint64_t ns = [] {
    struct stat st {};
    return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
  }();
  return ns;
}
inline std::uint64_t MyCgroup() {
  static const std::uint64_t cgroup = HashOfFile("/proc/self/cgroup");
  return cgroup;
}

// The state file (TESSERA_FAKE_STATE; "" for private memory) and this process's own descriptor of
// it: each process holds an OFD lock on a byte of the file per row it claimed (past the end of
// Shared), released by the kernel when the process ends, so that any process sharing the file can
// tell, across PID namespaces, that a row's holder ended. Opened per process (a fork child's
// inherited descriptor would share its parent's locks); -1 where there is no file.
inline std::string& StatePath() {
  static std::string path;
  return path;
}
inline int StateFd() {
  static int fd = -1;
  static pid_t owner = 0;
  if (StatePath().empty()) return -1;
  if (owner != getpid()) {  // this process's first use, or a fork child's
    fd = open(StatePath().c_str(), O_RDWR | O_CLOEXEC);
    owner = getpid();
  }
  return fd;
}
inline struct flock RowLock(const Shared* s, const ProcessUsage& row, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(sizeof(Shared)) + (&row - s->processes);
  lock.l_len = 1;
  return lock;
}
// Takes `row`'s lock for this process: false if another process holds it.
inline bool LockRow(const Shared* s, const ProcessUsage& row) {
  if (StateFd() < 0) return true;
  struct flock lock = RowLock(s, row, F_WRLCK);
  return fcntl(StateFd(), F_OFD_SETLK, &lock) == 0;
}
inline void UnlockRow(const Shared* s, const ProcessUsage& row) {
  if (StateFd() < 0) return;
  struct flock lock = RowLock(s, row, F_UNLCK);
  fcntl(StateFd(), F_OFD_SETLK, &lock);
}

// Whether the holder of `row` is known to have ended: by its PID in the caller's namespace, by
// its row's lock otherwise.
inline bool Ended(const Shared* s, const ProcessUsage& row, std::int32_t holder) {
  if (holder <= 0) return false;
  if (row.ns.load() == MyNs()) return !Alive(holder);
  if (StateFd() < 0) return false;
  struct flock lock = RowLock(s, row, F_WRLCK);
  return fcntl(StateFd(), F_OFD_GETLK, &lock) == 0 && lock.l_type == F_UNLCK;
}

// Takes `row` (its pid set to -1) if it is free or its holder ended. Another namespace's row is
// taken only with its lock (two claimants cannot both take it, nor one whose holder just took it
// again); one of the caller's namespace on its PID alone (a dead process's lock may live on in a
// fork child that inherited its descriptor).
inline bool Claim(Shared* s, ProcessUsage& row, std::int32_t holder) {
  if (holder < 0 || (holder != 0 && !Ended(s, row, holder))) return false;
  const bool locked = LockRow(s, row);
  if (!locked && holder != 0 && row.ns.load() != MyNs()) return false;
  if (row.pid.compare_exchange_strong(holder, -1)) return true;
  if (locked) UnlockRow(s, row);
  return false;
}

// This process's row: found, or claimed (a free row, or the row of a process that has ended,
// taken only with its lock, so that two claimants cannot both take it). Null when every row is
// held: the usage is then not attributed.
inline ProcessUsage* RowOf(Shared* s) {
  const std::int32_t me = static_cast<std::int32_t>(getpid());
  const std::uint64_t ns = MyNs();
  for (auto& row : s->processes) {
    if (row.pid.load() != me || row.ns.load() != ns) continue;
    LockRow(s, row);  // again: an exec'd image lost its predecessor's descriptor and lock
    return &row;
  }
  for (auto& row : s->processes) {
    if (!Claim(s, row, row.pid.load())) continue;
    for (int dev = 0; dev < kMaxDevices; ++dev)
      s->physical[dev].fetch_sub(row.bytes[dev].exchange(0));
    row.ns.store(ns);
    row.cgroup.store(MyCgroup());
    row.pid.store(me);
    return &row;
  }
  return nullptr;
}

// Attributes `bytes` of device `dev` to (or, negative, takes them from) this process.
inline void AttributeToMe(Shared* s, int dev, std::int64_t bytes) {
  if (ProcessUsage* row = RowOf(s)) row->bytes[dev].fetch_add(static_cast<std::uint64_t>(bytes));
}

// Gives back what processes that have ended still held (a real driver frees
// a process's memory when it exits; the fake does it when memory runs short or usage is read).
inline void ReclaimEnded(Shared* s) {
  for (auto& row : s->processes) {
    const std::int32_t holder = row.pid.load();
    if (holder == 0 || !Claim(s, row, holder)) continue;
    for (int dev = 0; dev < kMaxDevices; ++dev)
      s->physical[dev].fetch_sub(row.bytes[dev].exchange(0));
    row.pid.store(0);
    UnlockRow(s, row);
  }
}

// Returns physical memory of `dev` (freed by this process).
inline void ReleasePhysical(Shared* s, int dev, std::uint64_t bytes) {
  s->physical[dev].fetch_sub(bytes);
  AttributeToMe(s, dev, -static_cast<std::int64_t>(bytes));
}

inline std::uint64_t EnvU64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

inline int DeviceCount() {
  const auto n = static_cast<int>(EnvU64("TESSERA_FAKE_GPUS", 2));
  return n > kMaxDevices ? kMaxDevices : n;
}
inline std::uint64_t DeviceMemory() { return EnvU64("TESSERA_FAKE_GPU_MEMORY", 16ULL << 30); }

// TESSERA_FAKE_DEV_DIR=DIR (e.g. /dev in a container): physical device N exists for this process
// only if it may open DIR/nvidiaN, as the real driver shows only the GPUs whose device nodes a
// container was given. A node of the NVIDIA major with no kernel driver behind it (a test's own)
// opens with ENXIO: present and allowed by the device cgroup. Unset: every device exists. The
// other knobs (TESSERA_FAKE_MIG, the XID and utilization files) name physical devices.
inline bool NodeGranted(int physical) {
  const char* dir = std::getenv("TESSERA_FAKE_DEV_DIR");
  if (dir == nullptr || dir[0] == '\0') return true;
  const std::string node = std::string(dir) + "/nvidia" + std::to_string(physical);
  const int fd = open(node.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) close(fd);
  return fd >= 0 || errno == ENXIO;
}

// "GPU-face0000-0000-0000-0000-0000000000NN" for physical device NN.
inline std::string UuidText(int physical) {
  char out[48];
  std::snprintf(out, sizeof(out), "GPU-face0000-0000-0000-0000-0000000000%02x", physical);
  return out;
}

// The shared usage: the state file when TESSERA_FAKE_STATE names one, else private memory.
inline Shared* MapShared() {
  void* mem = MAP_FAILED;
  if (const char* path = std::getenv("TESSERA_FAKE_STATE")) {
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    StatePath() = path;
    struct stat st {};
    // Grown to the size of Shared, never shrunk (another process may have it mapped).
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        (st.st_size >= static_cast<off_t>(sizeof(Shared)) || ftruncate(fd, sizeof(Shared)) == 0)) {
      mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (fd >= 0) close(fd);  // (the rows' locks live on StateFd's own descriptor)
    if (mem == MAP_FAILED) StatePath().clear();
  }
  if (mem == MAP_FAILED) {
    mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  return static_cast<Shared*>(mem);
}

}  // namespace tessera::fake
