// Pins the shared-region ABI (libfaketime's shm_layout_test idea). If this fails, the layout
// changed: bump kLayoutVersion and update docs/protocol.md, never just the numbers here.
#include "tessera/shm_layout.h"

#include <cstddef>

#include <gtest/gtest.h>

namespace tessera::shm {
namespace {

TEST(ShmLayout, IsPinned) {
  EXPECT_EQ(kLayoutVersion, 3u);
  EXPECT_EQ(kMagic, 0x5245534553534554ULL);
  EXPECT_EQ(offsetof(Header, magic), 0u);
  EXPECT_EQ(offsetof(Header, layout_version), 8u);
  EXPECT_EQ(offsetof(Header, header_bytes), 12u);
  EXPECT_EQ(offsetof(Header, region_bytes), 16u);
  EXPECT_EQ(offsetof(Header, max_devices), 24u);
  EXPECT_EQ(offsetof(Header, max_slots), 28u);
  EXPECT_EQ(offsetof(Header, ready), 32u);
  EXPECT_EQ(offsetof(Header, device_count), 36u);
  EXPECT_EQ(offsetof(Header, machinery_errors), 40u);
  EXPECT_EQ(offsetof(Device, uuid), 0u);
  EXPECT_EQ(offsetof(Device, limit_bytes), 64u);
  EXPECT_EQ(offsetof(Device, used_bytes), 72u);
  EXPECT_EQ(offsetof(Device, peak_bytes), 80u);
  EXPECT_EQ(offsetof(Device, oom_rejections), 88u);
  EXPECT_EQ(offsetof(Device, cores_percent), 96u);
  EXPECT_EQ(offsetof(Slot, owner), 0u);
  EXPECT_EQ(offsetof(Slot, state), 40u);
  EXPECT_EQ(offsetof(Slot, pid), 44u);
  EXPECT_EQ(offsetof(Slot, start_time), 48u);
  EXPECT_EQ(offsetof(Slot, used_bytes), 56u);
  EXPECT_EQ(offsetof(Region, header), 0u);
  EXPECT_EQ(offsetof(Region, lock), 64u);
  EXPECT_EQ(offsetof(Region, devices), 128u);
  EXPECT_EQ(offsetof(Region, slots), 128u + 16u * 128u);
  EXPECT_EQ(offsetof(Compute, busy_ns), 0u);
  EXPECT_EQ(offsetof(Compute, throttled_ns), 8u);
  EXPECT_EQ(offsetof(Compute, priority_held_ns), 16u);
  EXPECT_EQ(offsetof(Compute, launches), 24u);
  EXPECT_EQ(offsetof(Compute, launches_held), 32u);
  EXPECT_EQ(offsetof(Compute, priority_holds), 40u);
  EXPECT_EQ(offsetof(Compute, active_ns), 48u);
  EXPECT_EQ(offsetof(Compute, waiting_ns), 56u);
  EXPECT_EQ(offsetof(Compute, arbiter_beat_ns), 64u);
  EXPECT_EQ(offsetof(Compute, gate), 72u);
  EXPECT_EQ(offsetof(Compute, depth_us), 76u);
  EXPECT_EQ(offsetof(Compute, launch_failures), 80u);
  EXPECT_EQ(static_cast<std::uint32_t>(Gate::kFree), 0u);
  EXPECT_EQ(static_cast<std::uint32_t>(Gate::kOpen), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(Gate::kHeldShare), 2u);
  EXPECT_EQ(static_cast<std::uint32_t>(Gate::kHeldPriority), 3u);
  EXPECT_EQ(offsetof(Region, compute), 128u + 16u * 128u + 256u * 192u);
  EXPECT_EQ(offsetof(BusyLog, lock), 0u);
  EXPECT_EQ(offsetof(BusyLog, count), 40u);
  EXPECT_EQ(offsetof(BusyLog, spans), 64u);
  EXPECT_EQ(kBusySpans, 60u);
  EXPECT_EQ(offsetof(Region, busy), 128u + 16u * 128u + 256u * 192u + 16u * 128u);
  EXPECT_EQ(sizeof(Region), 128u + 16u * 128u + 256u * 192u + 16u * 128u + 16u * 1024u);
}

}  // namespace
}  // namespace tessera::shm
