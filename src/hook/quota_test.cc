// Quota resolution (quota.h), without a driver: what a CUDA device's quota is for each mode and
// state of tessera's machinery, how the ordinal -> region device answer is cached, and where a
// device's cap comes from.
#include "hook/quota.h"

#include <atomic>
#include <cstdint>

#include <gtest/gtest.h>

#include "tessera/limits.h"
#include "tessera/quantity.h"

namespace tessera::hook {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

class ResolveQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& m : map_) m.store(kUnknownDevice);
  }

  // The quota of `dev` when the driver's answer for it would be `answer`.
  DeviceQuota Quota(const QuotaInputs& in, CUdevice dev, int answer) {
    return ResolveQuota(
        in, map_, dev,
        [&](CUdevice d) {
          ++resolves_;
          resolved_dev_ = d;
          return answer;
        },
        [&](int index) {
          ++caps_;
          return kGiB * static_cast<std::uint64_t>(index + 1);
        });
  }

  static QuotaInputs Usable(Mode mode = Mode::kLimitsFile) {
    QuotaInputs in;
    in.mode = mode;
    in.usable = true;
    return in;
  }

  std::atomic<int> map_[kMaxOrdinals];
  int resolves_ = 0;
  int caps_ = 0;
  CUdevice resolved_dev_ = -100;
};

TEST_F(ResolveQuotaTest, InactivePassesThroughWithoutAskingTheDriver) {
  QuotaInputs in;
  in.mode = Mode::kInactive;
  in.usable = true;
  in.fail_closed = true;  // irrelevant without limits
  const DeviceQuota q = Quota(in, 0, 1);
  EXPECT_FALSE(q.limited);
  EXPECT_FALSE(q.refuse);
  EXPECT_EQ(q.region_device, -1);
  EXPECT_EQ(resolves_, 0);
}

TEST_F(ResolveQuotaTest, BrokenMachineryFailsOpenOrClosedAsConfigured) {
  for (Mode mode : {Mode::kLimitsFile, Mode::kHamiEnv}) {
    QuotaInputs in;
    in.mode = mode;
    in.usable = false;
    in.fail_closed = false;
    DeviceQuota q = Quota(in, 0, 1);
    EXPECT_FALSE(q.limited);
    EXPECT_FALSE(q.refuse);
    in.fail_closed = true;
    q = Quota(in, 0, 1);
    EXPECT_TRUE(q.limited);
    EXPECT_TRUE(q.refuse);
    EXPECT_EQ(q.region_device, -1);
  }
  EXPECT_EQ(resolves_, 0);
  EXPECT_EQ(caps_, 0);
}

TEST_F(ResolveQuotaTest, ResolvedDeviceIsLimitedAtItsCap) {
  const DeviceQuota q = Quota(Usable(), 3, 2);
  EXPECT_TRUE(q.limited);
  EXPECT_FALSE(q.refuse);
  EXPECT_EQ(q.region_device, 2);
  EXPECT_EQ(q.limit_bytes, 3 * kGiB);  // cap(2)
  EXPECT_EQ(resolved_dev_, 3);
  EXPECT_EQ(map_[3].load(), 2);
}

TEST_F(ResolveQuotaTest, TheDriverIsAskedOncePerOrdinal) {
  EXPECT_EQ(Quota(Usable(), 1, 0).region_device, 0);
  EXPECT_EQ(Quota(Usable(), 1, 5).region_device, 0);  // cached: the new answer is not asked for
  EXPECT_EQ(resolves_, 1);
  EXPECT_EQ(Quota(Usable(), 2, 5).region_device, 5);  // another ordinal is asked
  EXPECT_EQ(resolves_, 2);
}

TEST_F(ResolveQuotaTest, NotEntitledIsRefusedAndRemembered) {
  DeviceQuota q = Quota(Usable(), 0, kNotEntitled);
  EXPECT_TRUE(q.limited);
  EXPECT_TRUE(q.refuse);
  EXPECT_EQ(q.region_device, -1);
  q = Quota(Usable(), 0, 1);
  EXPECT_TRUE(q.refuse);
  EXPECT_EQ(resolves_, 1);
  EXPECT_EQ(caps_, 0);
}

TEST_F(ResolveQuotaTest, UnlimitedDevicePassesThroughAndIsRemembered) {
  DeviceQuota q = Quota(Usable(Mode::kHamiEnv), 4, -1);
  EXPECT_FALSE(q.limited);
  EXPECT_FALSE(q.refuse);
  q = Quota(Usable(Mode::kHamiEnv), 4, 1);
  EXPECT_FALSE(q.limited);
  EXPECT_EQ(resolves_, 1);
  EXPECT_EQ(caps_, 0);
}

TEST_F(ResolveQuotaTest, AnUnknownAnswerIsAskedAgain) {
  DeviceQuota q = Quota(Usable(), 0, kUnknownDevice);
  EXPECT_FALSE(q.limited);  // the driver could not say: pass through this time
  EXPECT_FALSE(q.refuse);
  EXPECT_EQ(map_[0].load(), kUnknownDevice);
  q = Quota(Usable(), 0, 1);
  EXPECT_TRUE(q.limited);
  EXPECT_EQ(q.region_device, 1);
  EXPECT_EQ(resolves_, 2);
}

TEST_F(ResolveQuotaTest, OrdinalsOutsideTheCacheAreResolvedEveryTime) {
  for (CUdevice dev : {-1, kMaxOrdinals, kMaxOrdinals + 100}) {
    const int before = resolves_;
    EXPECT_EQ(Quota(Usable(), dev, 1).region_device, 1);
    EXPECT_EQ(Quota(Usable(), dev, 2).region_device, 2);
    EXPECT_EQ(resolves_, before + 2);
    EXPECT_EQ(resolved_dev_, dev);
  }
  for (const auto& m : map_) EXPECT_EQ(m.load(), kUnknownDevice);
  EXPECT_EQ(Quota(Usable(), kMaxOrdinals - 1, 3).region_device, 3);  // the last cached one
  EXPECT_EQ(map_[kMaxOrdinals - 1].load(), 3);
}

Limits TwoDeviceLimits() {
  Limits limits;
  DeviceLimits gpu;
  gpu.uuid = "GPU-11111111-2222-3333-4444-555555555555";
  gpu.memory_bytes = 4 * kGiB;
  DeviceLimits mig;
  mig.uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
  mig.memory_bytes = 1 * kGiB;
  limits.devices = {gpu, mig};
  return limits;
}

TEST(ConfiguredCapTest, LimitsFileCapsByUuid) {
  const Limits limits = TwoDeviceLimits();
  HamiLimits hami;
  hami.all_devices_bytes = 9 * kGiB;  // not consulted outside HAMi mode
  EXPECT_EQ(
      ConfiguredCap(Mode::kLimitsFile, limits, hami, "GPU-11111111-2222-3333-4444-555555555555", 7),
      4 * kGiB);
  EXPECT_EQ(
      ConfiguredCap(Mode::kLimitsFile, limits, hami, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0),
      1 * kGiB);
  // A device the limits file does not name has no memory.
  EXPECT_EQ(
      ConfiguredCap(Mode::kLimitsFile, limits, hami, "GPU-99999999-2222-3333-4444-555555555555", 0),
      0u);
  EXPECT_EQ(ConfiguredCap(Mode::kLimitsFile, limits, hami, "GPU-11111111", 0), 0u);
}

TEST(ConfiguredCapTest, HamiCapsByCudaIndex) {
  const Limits limits = TwoDeviceLimits();  // not consulted in HAMi mode
  HamiLimits hami;
  hami.per_index = {{1, 2 * kGiB}};
  // Without CUDA_DEVICE_MEMORY_LIMIT only the named index is capped.
  EXPECT_EQ(ConfiguredCap(Mode::kHamiEnv, limits, hami, "", 1), 2 * kGiB);
  EXPECT_EQ(ConfiguredCap(Mode::kHamiEnv, limits, hami, "", 0), kMaxQuantity);
  EXPECT_EQ(
      ConfiguredCap(Mode::kHamiEnv, limits, hami, "GPU-11111111-2222-3333-4444-555555555555", 0),
      kMaxQuantity);
  // With it, the other indices get the all-devices cap; an index's own variable wins.
  hami.all_devices_bytes = 8 * kGiB;
  EXPECT_EQ(ConfiguredCap(Mode::kHamiEnv, limits, hami, "", 0), 8 * kGiB);
  EXPECT_EQ(ConfiguredCap(Mode::kHamiEnv, limits, hami, "", 1), 2 * kGiB);
}

}  // namespace
}  // namespace tessera::hook
