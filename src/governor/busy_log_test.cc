#include "governor/busy_log.h"

#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

namespace tessera::governor {
namespace {

class BusyLogTest : public ::testing::Test {
 protected:
  BusyLogTest() {
    std::memset(static_cast<void*>(&log_), 0, sizeof(log_));
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&log_.lock, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  shm::BusyLog log_;
};

TEST_F(BusyLogTest, OverlapIsCountedOnce) {
  EXPECT_EQ(AddToUnion(log_, {100, 200}), 100u);
  EXPECT_EQ(AddToUnion(log_, {150, 250}), 50u);  // half of it was covered
  EXPECT_EQ(AddToUnion(log_, {100, 250}), 0u);   // all of it
  EXPECT_EQ(AddToUnion(log_, {300, 400}), 100u);
  EXPECT_EQ(AddToUnion(log_, {50, 450}), 400u - 250u);  // joins both and fills the gaps
  EXPECT_EQ(log_.count, 1u);
  EXPECT_EQ(log_.spans[0].begin_ns, 50u);
  EXPECT_EQ(log_.spans[0].end_ns, 450u);
  EXPECT_EQ(AddToUnion(log_, {10, 10}), 0u);  // empty
}

// Spans arriving in any order (processes publish late and out of order) add up to the length of
// their union, checked against a count of covered nanoseconds.
TEST_F(BusyLogTest, AnyOrderAddsUpToTheUnion) {
  std::mt19937_64 rng(7);
  std::set<std::uint64_t> covered;
  std::uint64_t added = 0;
  for (int i = 0; i < 400; ++i) {
    const std::uint64_t begin = rng() % 5000;
    const std::uint64_t end = begin + 1 + rng() % 40;
    for (std::uint64_t t = begin; t < end; ++t) covered.insert(t);
    added += AddToUnion(log_, {begin, end});
    ASSERT_LE(log_.count, shm::kBusySpans);
  }
  // The log keeps at most kBusySpans spans, so a span older than all it keeps counts whole:
  // the sum is never below the union.
  EXPECT_GE(added, covered.size());
  EXPECT_LE(added, covered.size() * 3 / 2);
}

TEST_F(BusyLogTest, InOrderWithinTheWindowIsExact) {
  std::set<std::uint64_t> covered;
  std::uint64_t added = 0;
  // Two "processes" publishing interleaved, each span overlapping the other's previous one.
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const std::uint64_t a = i * 100, b = i * 100 + 30;
    for (const auto& [begin, end] : {std::pair{a, a + 60}, std::pair{b, b + 90}}) {
      for (std::uint64_t t = begin; t < end; ++t) covered.insert(t);
      added += AddToUnion(log_, {begin, end});
    }
  }
  EXPECT_EQ(added, covered.size());
}

TEST_F(BusyLogTest, ABrokenLogIsEmptiedNotTrusted) {
  log_.count = 1'000'000;  // the tenant wrote its region
  EXPECT_EQ(AddToUnion(log_, {0, 10}), 10u);
  EXPECT_EQ(log_.count, 1u);
  log_.count = 2;
  log_.spans[0] = {500, 100};  // inverted
  log_.spans[1] = {0, 5};
  EXPECT_EQ(AddToUnion(log_, {0, 10}), 10u);
}

TEST_F(BusyLogTest, SpansFarBehindTheNewestAreForgotten) {
  AddToUnion(log_, {0, 10});
  AddToUnion(log_, {kBusyHorizonNs + 100, kBusyHorizonNs + 200});
  EXPECT_EQ(log_.count, 1u);
}

TEST_F(BusyLogTest, AHeldLockFallsBackToTheWholeLengthAndSaysSo) {
  ASSERT_EQ(pthread_mutex_lock(&log_.lock), 0);
  bool contended = false;
  std::uint64_t added = 0;
  std::thread other([&] { added = AddSpans(log_, {{0, 10}, {5, 15}}, &contended, 100'000); });
  other.join();
  EXPECT_TRUE(contended);
  EXPECT_EQ(added, 20u);
  pthread_mutex_unlock(&log_.lock);
  contended = false;
  EXPECT_EQ(AddSpans(log_, {{0, 10}, {5, 15}}, &contended), 15u);
  EXPECT_FALSE(contended);
}

TEST_F(BusyLogTest, AHolderThatDiedIsRecoveredFrom) {
  std::thread dies([&] { pthread_mutex_lock(&log_.lock); });  // exits holding it
  dies.join();
  log_.count = 3;  // half-updated
  bool contended = false;
  EXPECT_EQ(AddSpans(log_, {{0, 10}}, &contended), 10u);
  EXPECT_FALSE(contended);
  EXPECT_EQ(log_.count, 1u);
}

}  // namespace
}  // namespace tessera::governor
