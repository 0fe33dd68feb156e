// Fuzzes attaching to a region file whose bytes a tenant controls (the region is writable by
// every process of the container): the header check must refuse anything malformed, and
// operations on a region that passes it must stay within bounds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include "tessera/region.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tessera::shm;
  if (size >= sizeof(Header)) {
    Header header;
    std::memcpy(static_cast<void*>(&header), data, sizeof(Header));
    (void)ValidateHeader(header, size);
  }
  // Write the bytes to a region-sized file and attach: mismatches are refused, a valid header
  // with garbage devices/slots must still be safe to use.
  char path[] = "/tmp/tessera-region-fuzz-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 8 && data[0] == 'R') {  // "R..." inputs: a valid header followed by fuzz bytes
    bytes.assign(sizeof(Region), '\0');
    Header h{};
    h.magic = kMagic;
    h.layout_version = kLayoutVersion;
    h.header_bytes = sizeof(Header);
    h.region_bytes = sizeof(Region);
    h.max_devices = kMaxDevices;
    h.max_slots = kMaxSlots;
    h.ready.store(1);
    h.device_count = data[1];
    std::memcpy(bytes.data(), static_cast<const void*>(&h), sizeof(h));
    std::memcpy(bytes.data() + sizeof(Header) + 64, data + 2,
                std::min(size - 2, sizeof(Region) - sizeof(Header) - 64));
  }
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    unlink(path);
    return 0;
  }
  close(fd);
  auto mapping = Mapping::Attach(path);
  unlink(path);
  if (mapping.ok()) {
    Region& region = *mapping->region();
    (void)FindDevice(region, "GPU-x");
    (void)UsedBytes(region, 0);
  }
  return 0;
}
