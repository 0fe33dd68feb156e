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

// AddToUnion of a log known valid.
std::uint64_t Add(shm::BusyLog& log, Span span) {
  if (span.end_ns <= span.begin_ns) return 0;
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

// Spans each beginning after the previous one's end and after everything kept, as AddToUnion
// would add them one by one (each new whole, the log kept to its newest kBusySpans within the
// horizon of the newest end) in one pass: a launch-bound loop lays a span a launch, and adding
// them one by one (a shift of the log each) took ~30 % of a core on its own (perf, fake driver).
std::uint64_t Append(shm::BusyLog& log, const Span* run, std::size_t n) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += run[i].end_ns - run[i].begin_ns;
  // Both rules keep a suffix of the old spans followed by the run: the longer one drops.
  const std::size_t all = log.count + n;
  std::size_t from = all > shm::kBusySpans ? all - shm::kBusySpans : 0;
  const std::uint64_t newest = run[n - 1].end_ns;
  const auto end_at = [&](std::size_t i) {
    return i < log.count ? log.spans[i].end_ns : run[i - log.count].end_ns;
  };
  while (from + 1 < all && end_at(from) + kBusyHorizonNs < newest) ++from;
  std::uint32_t count = 0;
  for (std::size_t i = from; i < log.count; ++i) log.spans[count++] = log.spans[i];
  for (std::size_t i = std::max(from, static_cast<std::size_t>(log.count)); i < all; ++i) {
    const Span& s = run[i - log.count];
    log.spans[count++] = shm::BusySpan{s.begin_ns, s.end_ns};
  }
  log.count = count;
  return total;
}

}  // namespace

std::uint64_t AddToUnion(shm::BusyLog& log, Span span) {
  if (!Valid(log)) log.count = 0;
  return Add(log, span);
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
  if (!Valid(log)) log.count = 0;
  std::uint64_t added = 0;
  for (std::size_t i = 0; i < spans.size();) {
    // The longest run from i that Append takes: each span non-empty and after the newest.
    std::uint64_t newest = log.count > 0 ? log.spans[log.count - 1].end_ns : 0;
    bool first = log.count == 0;
    std::size_t j = i;
    while (j < spans.size() && spans[j].end_ns > spans[j].begin_ns &&
           (first || spans[j].begin_ns > newest)) {
      newest = spans[j].end_ns;
      first = false;
      ++j;
    }
    if (j > i) {
      added += Append(log, spans.data() + i, j - i);
      i = j;
    } else {
      added += Add(log, spans[i++]);
    }
  }
  pthread_mutex_unlock(&log.lock);
  return added;
}

}  // namespace tessera::governor
