// gate_tamper: a hostile tenant for the compute drift check (issue #22). Run inside a container
// (under `tessera run`, which sets TESSERA_REGION_FILE), it rewrites its own region's gate to
// "open" on every device every 20 us for SECONDS, so that its launches ignore the arbiter's
// holds: the share no longer holds, and only a check the tenant cannot write (NVML) sees it.
// Build: g++ -std=c++20 -O2 -Iinclude test/gpu/gate_tamper.cc -o gate_tamper
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

#include "tessera/shm_layout.h"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 60;
  const char* path = std::getenv("TESSERA_REGION_FILE");
  const int fd = path != nullptr ? open(path, O_RDWR) : -1;
  if (fd < 0) {
    std::fprintf(stderr, "gate_tamper: no region (TESSERA_REGION_FILE)\n");
    return 1;
  }
  void* mem =
      mmap(nullptr, sizeof(tessera::shm::Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "gate_tamper: cannot map %s\n", path);
    return 1;
  }
  auto* region = static_cast<tessera::shm::Region*>(mem);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  unsigned long long writes = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (auto& c : region->compute) {
      if (c.gate.load(std::memory_order_relaxed) !=
          static_cast<std::uint32_t>(tessera::shm::Gate::kFree))
        c.gate.store(static_cast<std::uint32_t>(tessera::shm::Gate::kOpen));
    }
    ++writes;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  std::printf("{\"gate_writes\": %llu}\n", writes);
  return 0;
}
