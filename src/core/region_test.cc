#include "tessera/region.h"

#include <atomic>
#include <cstdio>
#include <sched.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/quantity.h"

#include "testutil/old_region.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::shm {
namespace {

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/region";
    auto m = Mapping::Create(path_, {{"GPU-0", 4 * kGiB, 0}, {"GPU-1", 1 * kGiB, 30}});
    ASSERT_OK(m);
    mapping_ = std::move(m).value();
  }
  Region& region() { return *mapping_.region(); }
  testutil::TempDir dir_;
  std::string path_;
  Mapping mapping_;
};

TEST_F(RegionTest, ReservesUpToTheLimitAndNoFurther) {
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  const int gpu0 = FindDevice(region(), "GPU-0");
  ASSERT_EQ(gpu0, 0);
  EXPECT_EQ(FindDevice(region(), "GPU-9"), -1);
  ASSERT_OK(Reserve(region(), *slot, gpu0, 3 * kGiB, 4 * kGiB));
  auto over = Reserve(region(), *slot, gpu0, kGiB + 1, 4 * kGiB);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("limit 4294967296 bytes, used 3221225472, requested 1073741825"),
            std::string::npos)
      << over.message();
  ASSERT_OK(Reserve(region(), *slot, gpu0, kGiB, 4 * kGiB));  // exactly the limit
  EXPECT_EQ(UsedBytes(region(), gpu0), 4 * kGiB);
  Release(region(), *slot, gpu0, 2 * kGiB);
  EXPECT_EQ(UsedBytes(region(), gpu0), 2 * kGiB);
  EXPECT_EQ(region().devices[gpu0].peak_bytes.load(), 4 * kGiB);
  EXPECT_EQ(region().devices[gpu0].oom_rejections.load(), 1u);
  // The limit is the caller's: a tenant writing a bigger one into the region gains nothing.
  region().devices[gpu0].limit_bytes = 64 * kGiB;
  EXPECT_FALSE(Reserve(region(), *slot, gpu0, 3 * kGiB, 4 * kGiB).ok());
  // A huge request cannot wrap around.
  EXPECT_FALSE(Reserve(region(), *slot, gpu0, ~0ULL, 4 * kGiB).ok());
  ReleaseSlot(region(), *slot);
  EXPECT_EQ(UsedBytes(region(), gpu0), 0u);
}

TEST_F(RegionTest, ReleaseNeverUnderflows) {
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  ASSERT_OK(Reserve(region(), *slot, 1, 100, kGiB));
  Release(region(), *slot, 1, 1000);
  EXPECT_EQ(UsedBytes(region(), 1), 0u);
  ReleaseSlot(region(), *slot);
}

TEST_F(RegionTest, AttachRefusesForeignFiles) {
  auto ok = Mapping::Attach(path_);
  ASSERT_OK(ok);
  EXPECT_EQ(ok->region()->header.device_count, 2u);

  const std::string small = dir_.path() + "/small";
  FILE* f = std::fopen(small.c_str(), "w");
  std::fputs("not a region", f);
  std::fclose(f);
  auto bad = Mapping::Attach(small);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);

  ok->region()->header.layout_version = 99;
  auto wrong = Mapping::Attach(path_);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("layout version 99"), std::string::npos);

  auto missing = Mapping::Attach(dir_.path() + "/none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Upgrades: the node side reads the region of a container still running the previous library
// (layout 1: no compute[]); the library itself only attaches its own layout.
TEST_F(RegionTest, NodeSideReadsThePreviousLayout) {
  auto slot = ClaimSlot(region(), 7, 1);
  ASSERT_OK(slot);
  ASSERT_OK(Reserve(region(), *slot, 0, 3 * kGiB, 4 * kGiB));
  EXPECT_EQ(Mapping::AttachForReading(path_)->layout_version(), kLayoutVersion);
  EXPECT_TRUE(Mapping::AttachForReading(path_)->has_compute());
  mapping_ = Mapping();
  ASSERT_TRUE(testutil::DowngradeRegionToLayout1(path_));

  auto old = Mapping::AttachForReading(path_);
  ASSERT_OK(old);
  EXPECT_EQ(old->layout_version(), 1u);
  EXPECT_FALSE(old->has_compute());
  EXPECT_EQ(UsedBytes(*old->region(), 0), 3 * kGiB);
  EXPECT_EQ(old->region()->devices[1].limit_bytes, 1 * kGiB);
  auto strict = Mapping::Attach(path_);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kDataLoss);
  // A header that disagrees with the size is refused by both.
  old->region()->header.layout_version = 2;
  auto lying = Mapping::AttachForReading(path_);
  ASSERT_FALSE(lying.ok());
  EXPECT_EQ(lying.status().code(), StatusCode::kDataLoss) << lying.status().ToString();
}

TEST_F(RegionTest, CreateOrAttachKeepsTheFirstCreatorsLimits) {
  const std::string p = dir_.path() + "/hami";
  auto first = Mapping::CreateOrAttach(p, {{"GPU-0", 100, 0}});
  ASSERT_OK(first);
  auto second = Mapping::CreateOrAttach(p, {{"GPU-0", 999, 0}});
  ASSERT_OK(second);
  EXPECT_EQ(second->region()->devices[0].limit_bytes, 100u);
}

// 16 processes race to allocate 64 MiB chunks under a 4 GiB cap while all are alive: the sum of
// what they got never exceeds the cap, and the cap is filled exactly. When they die, their usage
// is reclaimed.
TEST_F(RegionTest, SixteenProcessesNeverExceedTheCapInSum) {
  constexpr int kProcesses = 16;
  auto* granted = static_cast<std::atomic<std::uint64_t>*>(
      mmap(nullptr, sizeof(std::atomic<std::uint64_t>), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(granted, MAP_FAILED);
  new (granted) std::atomic<std::uint64_t>(0);
  int done[2], release[2];
  ASSERT_EQ(pipe(done), 0);
  ASSERT_EQ(pipe(release), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(release[1]);
      auto m = Mapping::Attach(path_);
      if (!m.ok()) _exit(2);
      auto slot = ClaimSlot(*m->region(), getpid(), 1);
      if (!slot.ok()) _exit(3);
      while (Reserve(*m->region(), *slot, 0, 64 * kMiB, 4 * kGiB).ok())
        granted->fetch_add(64 * kMiB);
      const char byte = 1;
      if (write(done[1], &byte, 1) != 1) _exit(4);
      char ignored = 0;
      while (read(release[0], &ignored, 1) > 0) {
      }
      _exit(0);  // dies holding its usage: reclaimed through EOWNERDEAD
    }
    children.push_back(pid);
  }
  close(release[0]);
  for (int i = 0; i < kProcesses; ++i) {
    char byte = 0;
    ASSERT_EQ(read(done[0], &byte, 1), 1);
  }
  EXPECT_EQ(granted->load(), 4 * kGiB);
  EXPECT_EQ(UsedBytes(region(), 0), 4 * kGiB);
  close(release[1]);  // let them exit
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(ReclaimDeadSlots(region()), kProcesses);
  EXPECT_EQ(UsedBytes(region(), 0), 0u);
  close(done[0]);
  close(done[1]);
  munmap(granted, sizeof(*granted));
}

// A process killed with SIGKILL while holding memory is detected (EOWNERDEAD) and its usage
// released when the next allocation would not fit.
TEST_F(RegionTest, SigkilledProcessUsageIsReleasedOnDemand) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto m = Mapping::Attach(path_);
    auto slot = ClaimSlot(*m->region(), getpid(), 1);
    if (!slot.ok() || !Reserve(*m->region(), *slot, 0, 3 * kGiB, 4 * kGiB).ok()) _exit(1);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  EXPECT_EQ(UsedBytes(region(), 0), 3 * kGiB);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  // 2 GiB fits only once the dead process's 3 GiB are returned.
  ASSERT_OK(Reserve(region(), *slot, 0, 2 * kGiB, 4 * kGiB));
  EXPECT_EQ(UsedBytes(region(), 0), 2 * kGiB);
  ReleaseSlot(region(), *slot);
  close(ready[0]);
  close(ready[1]);
}

// The same in another PID namespace (as a container's processes are): the robust mutex is
// released by the kernel whatever the namespace. Needs CAP_SYS_ADMIN for unshare; skipped
// without it.
TEST_F(RegionTest, SigkilledProcessInAnotherPidNamespaceIsReclaimed) {
  int pid_pipe[2], ready[2];  // separate pipes: the two writers must not interleave
  ASSERT_EQ(pipe(pid_pipe), 0);
  ASSERT_EQ(pipe(ready), 0);
  const pid_t outer = fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    if (unshare(CLONE_NEWPID) != 0) _exit(77);  // no privilege: tell the parent to skip
    const pid_t inner = fork();                 // pid 1 of the new namespace
    if (inner < 0) _exit(1);
    if (inner > 0) {
      const bool sent = write(pid_pipe[1], &inner, sizeof(inner)) == sizeof(inner);
      int status = 0;
      waitpid(inner, &status, 0);
      _exit(sent ? 0 : 1);
    }
    auto m = Mapping::Attach(path_);
    auto slot = ClaimSlot(*m->region(), getpid(), 1);
    if (!slot.ok() || getpid() != 1 || !Reserve(*m->region(), *slot, 0, 3 * kGiB, 4 * kGiB).ok())
      _exit(1);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(pid_pipe[1]);
  close(ready[1]);
  pid_t inner = 0;  // as seen from our namespace
  char byte = 0;
  const bool got_pid = read(pid_pipe[0], &inner, sizeof(inner)) == sizeof(inner);
  if (!got_pid || read(ready[0], &byte, 1) != 1) {
    if (got_pid) kill(inner, SIGKILL);
    int status = 0;
    waitpid(outer, &status, 0);
    close(pid_pipe[0]);
    close(ready[0]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
      GTEST_SKIP() << "unshare(CLONE_NEWPID) not permitted";
    FAIL() << "the process in the new PID namespace failed";
  }
  EXPECT_EQ(UsedBytes(region(), 0), 3 * kGiB);
  kill(inner, SIGKILL);  // the namespace's init (pid 1 there) dies holding 3 GiB
  waitpid(outer, nullptr, 0);
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  ASSERT_OK(Reserve(region(), *slot, 0, 2 * kGiB, 4 * kGiB));  // only fits once reclaimed
  ReleaseSlot(region(), *slot);
  close(pid_pipe[0]);
  close(ready[0]);
}

// A process killed while holding the region lock itself: the next locker repairs the totals.
TEST_F(RegionTest, DeathInsideTheCriticalSectionIsRepaired) {
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  ASSERT_OK(Reserve(region(), *slot, 0, kGiB, 4 * kGiB));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    pthread_mutex_lock(&region().lock);
    region().devices[0].used_bytes.store(123);  // a half-done update
    _exit(0);                                   // dies holding the lock
  }
  waitpid(pid, nullptr, 0);
  ASSERT_OK(Reserve(region(), *slot, 0, kGiB, 4 * kGiB));
  EXPECT_EQ(UsedBytes(region(), 0), 2 * kGiB);
  ReleaseSlot(region(), *slot);
}

TEST_F(RegionTest, ThreadsShareOneSlotSafely) {
  auto slot = ClaimSlot(region(), getpid(), 1);
  ASSERT_OK(slot);
  std::atomic<std::uint64_t> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (Reserve(region(), *slot, 1, kMiB, kGiB).ok()) {
          granted += kMiB;
          if (i % 2 == 0) {
            Release(region(), *slot, 1, kMiB);
            granted -= kMiB;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(UsedBytes(region(), 1), granted.load());
  EXPECT_LE(granted.load(), kGiB);
  ReleaseSlot(region(), *slot);
}

TEST(RegionAbi, VersionString) { EXPECT_EQ(AbiVersion(), "3.69760"); }

}  // namespace
}  // namespace tessera::shm
