#include "governor/busy_log.h"

#include <algorithm>
#include <cerrno>
#include <ctime>

namespace tessera::governor {
namespace {

bool Valid(const shm::BusyLog& log) {
  if (log.count > shm::kBusySpans) return false;
  for (std::uint32_t i = 0; i < log.count; ++i) {
    if (log.spans[i].begin_ns > log.spans[i].end_ns) return false;
    if (i > 0 && log.spans[i - 1].end_ns > log.spans[i].begin_ns) return false;
  }
  return true;
}

void EraseAt(shm::BusyLog& log, std::uint32_t i) {
  std::copy(log.spans + i + 1, log.spans + log.count, log.spans + i);
  --log.count;
}

}  // namespace

std::uint64_t AddToUnion(shm::BusyLog& log, Span span) {
  if (span.end_ns <= span.begin_ns) return 0;
  if (!Valid(log)) log.count = 0;
  const std::uint64_t length = span.end_ns - span.begin_ns;
  // Older than everything kept: its overlap is unknown; count it whole and keep nothing of it.
  if (log.count == shm::kBusySpans && span.end_ns <= log.spans[0].begin_ns) return length;
  // The part already covered, and the merged span: every kept span touching it joins it.
  std::uint64_t covered = 0;
  shm::BusySpan merged{span.begin_ns, span.end_ns};
  std::uint32_t first = log.count;  // the first kept span at or after the new one
  std::uint32_t i = 0;
  while (i < log.count) {
    const shm::BusySpan& s = log.spans[i];
    if (s.end_ns < span.begin_ns) {
      ++i;
      continue;
    }
    if (s.begin_ns > span.end_ns) break;
    const std::uint64_t lo = std::max(s.begin_ns, span.begin_ns);
    const std::uint64_t hi = std::min(s.end_ns, span.end_ns);
    if (hi > lo) covered += hi - lo;
    merged.begin_ns = std::min(merged.begin_ns, s.begin_ns);
    merged.end_ns = std::max(merged.end_ns, s.end_ns);
    if (first == log.count) first = i;
    EraseAt(log, i);  // i now names the next span
  }
  if (first == log.count) first = i;
  // Insert at `first` (spans before it end before the merged one begins).
  if (log.count == shm::kBusySpans) {  // full: the oldest goes
    EraseAt(log, 0);
    if (first > 0) --first;
  }
  std::copy_backward(log.spans + first, log.spans + log.count, log.spans + log.count + 1);
  log.spans[first] = merged;
  ++log.count;
  // Spans far behind the newest are forgotten.
  const std::uint64_t newest = log.spans[log.count - 1].end_ns;
  std::uint32_t old = 0;
  while (old + 1 < log.count && log.spans[old].end_ns + kBusyHorizonNs < newest) ++old;
  if (old > 0) {
    std::copy(log.spans + old, log.spans + log.count, log.spans);
    log.count -= old;
  }
  return length - std::min(length, covered);
}

std::uint64_t AddSpans(shm::BusyLog& log, const std::vector<Span>& spans, bool* contended,
                       std::uint64_t patience_ns) {
  std::uint64_t total = 0;
  for (const Span& s : spans) total += s.end_ns > s.begin_ns ? s.end_ns - s.begin_ns : 0;
  if (spans.empty()) return 0;
  // Bounded: the lock is the tenant's memory, and a watcher must never hang on it.
  constexpr std::uint64_t kStepNs = 20'000;
  int rc = pthread_mutex_trylock(&log.lock);
  for (std::uint64_t waited = 0; rc == EBUSY && waited < patience_ns; waited += kStepNs) {
    const timespec ts{0, static_cast<long>(kStepNs)};
    nanosleep(&ts, nullptr);
    rc = pthread_mutex_trylock(&log.lock);
  }
  if (rc == EOWNERDEAD) {  // its holder died mid-update: start the log again
    log.count = 0;
    pthread_mutex_consistent(&log.lock);
    rc = 0;
  }
  if (rc != 0) {
    *contended = true;
    return total;
  }
  std::uint64_t added = 0;
  for (const Span& s : spans) added += AddToUnion(log, s);
  pthread_mutex_unlock(&log.lock);
  return added;
}

}  // namespace tessera::governor
