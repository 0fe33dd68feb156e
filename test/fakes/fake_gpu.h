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
// as it sees itself: its PID in its own namespace and its scope, a hash of its /proc/self/cgroup
// (processes of different containers may share a PID, never a cgroup; a process outside a
// container sees the host's cgroup path as well). The fake NVML reports host PIDs, as the real
// driver does (fake_nvml.cc).
struct ProcessUsage {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> scope;
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
inline std::uint64_t MyScope() {
  static const std::uint64_t scope = HashOfFile("/proc/self/cgroup");
  return scope;
}

// The state file, kept open (-1: private memory): each process holds an OFD lock on a byte of it
// per row it claimed (past the end of Shared), released by the kernel when the process ends, so
// that any process sharing the file can tell, across PID namespaces, that a row's holder ended.
inline int& StateFd() {
  static int fd = -1;
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

inline void LockRow(const Shared* s, const ProcessUsage& row) {
  if (StateFd() < 0) return;
  struct flock lock = RowLock(s, row, F_WRLCK);
  fcntl(StateFd(), F_OFD_SETLK, &lock);
}

// Whether the holder of `row` is known to have ended: by its PID in the caller's scope (a fork
// child shares its parent's locks), by its row's lock otherwise.
inline bool Ended(const Shared* s, const ProcessUsage& row, std::int32_t holder) {
  if (holder <= 0) return false;
  if (row.scope.load() == MyScope()) return !Alive(holder);
  if (StateFd() < 0) return false;
  struct flock lock = RowLock(s, row, F_WRLCK);
  return fcntl(StateFd(), F_OFD_GETLK, &lock) == 0 && lock.l_type == F_UNLCK;
}

// This process's row: found, or claimed (a free row, or the row of a process of its scope that
// has ended). Null when every row is held: the usage is then not attributed.
inline ProcessUsage* RowOf(Shared* s) {
  const std::int32_t me = static_cast<std::int32_t>(getpid());
  for (auto& row : s->processes) {
    if (row.pid.load() != me || row.scope.load() != MyScope()) continue;
    LockRow(s, row);  // again: an exec'd image lost its predecessor's descriptor and lock
    return &row;
  }
  for (auto& row : s->processes) {
    std::int32_t holder = row.pid.load();
    if ((holder == 0 || Ended(s, row, holder)) && row.pid.compare_exchange_strong(holder, -1)) {
      for (int dev = 0; dev < kMaxDevices; ++dev)
        s->physical[dev].fetch_sub(row.bytes[dev].exchange(0));
      row.scope.store(MyScope());
      LockRow(s, row);
      row.pid.store(me);
      return &row;
    }
  }
  return nullptr;
}

// Attributes `bytes` of device `dev` to (or, negative, takes them from) this process.
inline void AttributeToMe(Shared* s, int dev, std::int64_t bytes) {
  if (ProcessUsage* row = RowOf(s)) row->bytes[dev].fetch_add(static_cast<std::uint64_t>(bytes));
}

// Gives back what processes of the caller's scope that have ended still held (a real driver frees
// a process's memory when it exits; the fake does it when memory runs short or usage is read).
inline void ReclaimEnded(Shared* s) {
  for (auto& row : s->processes) {
    std::int32_t holder = row.pid.load();
    if (!Ended(s, row, holder) || !row.pid.compare_exchange_strong(holder, -1)) continue;
    for (int dev = 0; dev < kMaxDevices; ++dev)
      s->physical[dev].fetch_sub(row.bytes[dev].exchange(0));
    row.pid.store(0);
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
    struct stat st {};
    // Grown to the size of Shared, never shrunk (another process may have it mapped).
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        (st.st_size >= static_cast<off_t>(sizeof(Shared)) || ftruncate(fd, sizeof(Shared)) == 0)) {
      mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (mem != MAP_FAILED) {
      StateFd() = fd;  // kept: the rows' locks live on it
    } else if (fd >= 0) {
      close(fd);
    }
  }
  if (mem == MAP_FAILED) {
    mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  return static_cast<Shared*>(mem);
}

}  // namespace tessera::fake
