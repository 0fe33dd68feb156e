// Test helper: turns a region file into what the previous library (layout version 1) created —
// the same bytes without compute[] — to test that node-side readers still read it (upgrades).
#pragma once

#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include "tessera/shm_layout.h"

namespace tessera::testutil {

inline bool DowngradeRegionToLayout1(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const std::uint64_t bytes = shm::RegionBytesOfLayout(1);
  bool ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  void* addr = ok ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (addr == MAP_FAILED) return false;
  auto* header = static_cast<shm::Header*>(addr);
  header->layout_version = 1;
  header->region_bytes = bytes;
  munmap(addr, bytes);
  return ok;
}

}  // namespace tessera::testutil
