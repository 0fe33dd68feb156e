#include "governor/arbiter_host.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::governor {
namespace {

constexpr char kGpu[] = "GPU-00000000-0000-0000-0000-000000000001";

std::uint32_t GateIn(const shm::Mapping& m) { return m.region()->compute[0].gate.load(); }

TEST(ArbiterHost, WritesVerdictsIntoTheRegionsAndFollowsARecreatedRegion) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/region";
  auto first = shm::Mapping::Create(path, {{kGpu, 1 << 30, 30}});
  ASSERT_OK(first);
  ArbiterHost host;
  const Member member{path + "#" + kGpu, path, kGpu,
                      Tenant{30, ComputeMode::kHard, PriorityClass::kNormal}};
  ASSERT_OK(host.SetMembers({member}));
  host.Tick(1'000'000);
  EXPECT_EQ(GateIn(*first),
            static_cast<std::uint32_t>(shm::Gate::kOpen));  // a hard share is governed
  EXPECT_EQ(first->region()->compute[0].arbiter_beat_ns.load(), 1'000'000u);
  // The slot is reused: a new region file under the same path. The host must govern the new one.
  auto second = shm::Mapping::Create(path, {{kGpu, 1 << 30, 30}});
  ASSERT_OK(second);
  ASSERT_OK(host.SetMembers({member}));
  host.Tick(2'000'000);
  EXPECT_EQ(GateIn(*second), static_cast<std::uint32_t>(shm::Gate::kOpen));
  EXPECT_EQ(second->region()->compute[0].arbiter_beat_ns.load(), 2'000'000u);
  // It leaves: its gate goes back to free (ungoverned), never left held.
  ASSERT_OK(host.SetMembers({}));
  EXPECT_EQ(GateIn(*second), static_cast<std::uint32_t>(shm::Gate::kFree));
}

// The tenant truncates its region while the arbiter has it mapped: the access that would SIGBUS
// is caught, that container is let go, the others on the GPU are still governed.
TEST(ArbiterHost, ARegionTruncatedUnderTheArbiterIsLetGoNotACrash) {
  testutil::TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  auto ra = shm::Mapping::Create(a, {{kGpu, 1 << 30, 30}});
  auto rb = shm::Mapping::Create(b, {{kGpu, 1 << 30, 30}});
  ASSERT_OK(ra);
  ASSERT_OK(rb);
  ArbiterHost host;
  const Tenant share{30, ComputeMode::kHard, PriorityClass::kNormal};
  ASSERT_OK(host.SetMembers({{"a", a, kGpu, share}, {"b", b, kGpu, share}}));
  host.Tick(1'000'000);
  ra = shm::Mapping();
  ASSERT_EQ(truncate(a.c_str(), 4096), 0);
  host.Tick(2'000'000);  // would have died of SIGBUS
  host.Tick(3'000'000);
  EXPECT_EQ(host.VerdictFor("a").gate, shm::Gate::kFree);                  // let go
  EXPECT_EQ(rb->region()->compute[0].arbiter_beat_ns.load(), 3'000'000u);  // b still governed
  EXPECT_EQ(GateIn(*rb), static_cast<std::uint32_t>(shm::Gate::kOpen));
  EXPECT_FALSE(
      host.SetMembers({{"a", a, kGpu, share}, {"b", b, kGpu, share}}).ok());  // named, not attached
}

TEST(ArbiterHost, ARegionThatCannotBeAttachedIsNamedAndTheOthersStillApply) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/region";
  auto region = shm::Mapping::Create(path, {{kGpu, 1 << 30, 0}});
  ASSERT_OK(region);
  ArbiterHost host;
  const Tenant normal{0, ComputeMode::kHard, PriorityClass::kNormal};
  const Status s =
      host.SetMembers({{"a", path, kGpu, normal}, {"b", dir.path() + "/missing", kGpu, normal}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/missing"), std::string::npos) << s.message();
  host.Tick(1'000'000);
  EXPECT_EQ(host.VerdictFor("a").gate, shm::Gate::kFree);  // alone, no hard share: ungoverned
  EXPECT_NE(region->region()->compute[0].arbiter_beat_ns.load(), 0u);
}

}  // namespace
}  // namespace tessera::governor
