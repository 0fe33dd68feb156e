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
#include <unistd.h>

namespace tessera::fake {

inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxProcesses = 64;

// What one process holds on each device (NVML's per-process usedGpuMemory).
struct ProcessUsage {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> bytes[kMaxDevices];
};

struct Shared {
  std::atomic<std::uint64_t> physical[kMaxDevices];
  ProcessUsage processes[kMaxProcesses];
};

inline bool Alive(std::int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

// This process's row: found, or claimed (a free row, or the row of a process that has ended).
// Null when every row is held by a live process: the usage is then not attributed.
inline ProcessUsage* RowOf(Shared* s) {
  const std::int32_t me = static_cast<std::int32_t>(getpid());
  for (auto& row : s->processes) {
    if (row.pid.load() == me) return &row;
  }
  for (auto& row : s->processes) {
    std::int32_t holder = row.pid.load();
    if ((holder == 0 || (holder > 0 && !Alive(holder))) &&
        row.pid.compare_exchange_strong(holder, me)) {
      for (int dev = 0; dev < kMaxDevices; ++dev)
        s->physical[dev].fetch_sub(row.bytes[dev].exchange(0));
      return &row;
    }
  }
  return nullptr;
}

// Attributes `bytes` of device `dev` to (or, negative, takes them from) this process.
inline void AttributeToMe(Shared* s, int dev, std::int64_t bytes) {
  if (ProcessUsage* row = RowOf(s)) row->bytes[dev].fetch_add(static_cast<std::uint64_t>(bytes));
}

// Gives back what processes that have ended still held (a real driver frees a process's memory
// when it exits; the fake does it when memory runs short or usage is read).
inline void ReclaimEnded(Shared* s) {
  for (auto& row : s->processes) {
    std::int32_t holder = row.pid.load();
    if (holder == 0 || Alive(holder) || !row.pid.compare_exchange_strong(holder, -1)) continue;
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
    if (fd >= 0 && ftruncate(fd, sizeof(Shared)) == 0) {
      mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (fd >= 0) close(fd);
  }
  if (mem == MAP_FAILED) {
    mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  return static_cast<Shared*>(mem);
}

}  // namespace tessera::fake
