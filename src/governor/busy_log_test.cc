#include "governor/busy_log.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

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

// AddSpans takes runs of spans newer than everything kept in one pass: what it adds, and the log
// it leaves, are AddToUnion's one span at a time. Batches as a watcher publishes them (sorted by
// begin: a launch-bound stream's many short spans, another stream's overlapping or touching
// ones, a late one older than the log, an empty one), some far apart (the horizon), some long
// enough to fill the log.
TEST_F(BusyLogTest, ABatchAddsWhatOneSpanAtATimeWould) {
  shm::BusyLog one_by_one;
  std::memcpy(static_cast<void*>(&one_by_one), static_cast<const void*>(&log_), sizeof(log_));
  std::mt19937_64 rng(17);
  std::uint64_t now = 1'000'000;
  for (int batch = 0; batch < 3000; ++batch) {
    std::vector<Span> spans;
    const int n = static_cast<int>(rng() % 150);
    for (int i = 0; i < n; ++i) {
      const std::uint64_t kind = rng() % 20;
      if (kind < 14) {  // the next short span after a gap (0: touching)
        now += rng() % 3'000;
        spans.push_back({now, now + 1 + rng() % 4'000});
        now = spans.back().end_ns;
      } else if (kind < 17 && now > 10'000) {  // overlapping what came before
        const std::uint64_t begin = now - rng() % 10'000;
        spans.push_back({begin, begin + rng() % 20'000});
      } else if (kind < 18) {  // late: older than the log may keep
        const std::uint64_t begin = now > 50'000'000 ? now - 50'000'000 : 0;
        spans.push_back({begin, begin + 1'000});
      } else if (kind < 19) {
        spans.push_back({now, now});  // empty
      } else {
        now += rng() % 2 == 0 ? 300'000'000u : 1'000'000u;  // past the horizon, or a pause
      }
    }
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin_ns < b.begin_ns; });
    std::uint64_t expected = 0;
    for (const Span& sp : spans) expected += AddToUnion(one_by_one, sp);
    bool contended = false;
    ASSERT_EQ(AddSpans(log_, spans, &contended), expected) << "batch " << batch;
    ASSERT_FALSE(contended);
    ASSERT_EQ(log_.count, one_by_one.count) << "batch " << batch;
    for (std::uint32_t i = 0; i < log_.count; ++i) {
      ASSERT_EQ(log_.spans[i].begin_ns, one_by_one.spans[i].begin_ns) << batch << " " << i;
      ASSERT_EQ(log_.spans[i].end_ns, one_by_one.spans[i].end_ns) << batch << " " << i;
    }
  }
}

// The same from arbitrary valid logs (empty and touching spans, gaps at the horizon, times near
// the clock's end, full logs) and batches in any order.
TEST_F(BusyLogTest, AnyLogAndAnyBatchAddWhatOneSpanAtATimeWould) {
  std::mt19937_64 rng(99);
  for (int round = 0; round < 20000; ++round) {
    // An arbitrary valid log: zero-length spans, touching spans, gaps near the horizon.
    log_.count = static_cast<std::uint32_t>(rng() % (shm::kBusySpans + 1));
    std::uint64_t t = rng() % 3 == 0 ? (~0ULL - 1'000'000'000ULL) : rng() % 1'000'000;
    for (std::uint32_t i = 0; i < log_.count; ++i) {
      const std::uint64_t g = rng() % 4;
      t += g == 0 ? 0 : g == 1 ? rng() % 100 : g == 2 ? kBusyHorizonNs - 50 + rng() % 100 : 1000;
      const std::uint64_t len = rng() % 3 == 0 ? 0 : rng() % 500;
      log_.spans[i] = {t, t + len};
      t += len;
    }
    shm::BusyLog one;
    std::memcpy(static_cast<void*>(&one), static_cast<const void*>(&log_), sizeof(log_));
    std::vector<Span> spans;
    const int n = static_cast<int>(rng() % 130);
    std::uint64_t now = log_.count > 0 && rng() % 2 ? log_.spans[log_.count - 1].end_ns : t;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t k = rng() % 10;
      if (k < 6) {
        now += rng() % 3 == 0 ? rng() % 2 : rng() % (k < 2 ? kBusyHorizonNs + 100 : 300);
        spans.push_back({now, now + rng() % 300});
        now = spans.back().end_ns;
      } else if (k < 8) {
        const std::uint64_t b = now - std::min<std::uint64_t>(now, rng() % 2'000);
        spans.push_back({b, b + rng() % 3'000});
      } else {
        const std::uint64_t b = rng() % (now + 1);
        spans.push_back({b, b + rng() % 3'000});
      }
    }
    if (rng() % 2) {
      std::sort(spans.begin(), spans.end(),
                [](const Span& a, const Span& b) { return a.begin_ns < b.begin_ns; });
    }
    std::uint64_t expected = 0;
    for (const Span& sp : spans) expected += AddToUnion(one, sp);
    bool contended = false;
    ASSERT_EQ(AddSpans(log_, spans, &contended), expected) << round;
    ASSERT_EQ(log_.count, one.count) << round;
    for (std::uint32_t i = 0; i < log_.count; ++i) {
      ASSERT_EQ(log_.spans[i].begin_ns, one.spans[i].begin_ns) << round << " " << i;
      ASSERT_EQ(log_.spans[i].end_ns, one.spans[i].end_ns) << round << " " << i;
    }
  }
}

}  // namespace
}  // namespace tessera::governor
