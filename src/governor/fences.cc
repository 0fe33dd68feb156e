#include "governor/fences.h"

#include <algorithm>

namespace tessera::governor {
namespace {
constexpr std::size_t kMaxStreams = 64;
}  // namespace

FenceTracker::~FenceTracker() {
  for (const Event& e : events_) {
    if (e.handle != nullptr) api_->Destroy(e.handle);
  }
}

FenceTracker::Stream& FenceTracker::StreamFor(void* handle) {
  for (Stream& s : streams_) {
    if (s.handle == handle) return s;
  }
  streams_.push_back(Stream{});
  streams_.back().handle = handle;
  return streams_.back();
}

int FenceTracker::NewEvent() {
  if (!free_events_.empty()) {  // (discarded events never return to this list)
    const int e = free_events_.back();
    free_events_.pop_back();
    events_[static_cast<std::size_t>(e)].refs = 1;
    return e;
  }
  void* handle = api_->Create();
  if (handle == nullptr) return -1;
  events_.push_back(Event{handle, 1});
  return static_cast<int>(events_.size()) - 1;
}

void FenceTracker::Unref(int e) {
  if (e < 0) return;
  Event& ev = events_[static_cast<std::size_t>(e)];
  if (--ev.refs == 0 && ev.handle != nullptr) free_events_.push_back(e);
}

void FenceTracker::Discard(int e) {
  if (e < 0) return;
  Event& ev = events_[static_cast<std::size_t>(e)];
  if (ev.handle != nullptr) api_->Destroy(ev.handle);
  ev.handle = nullptr;
  ev.refs = 0;
}

double FenceTracker::Estimate(const Stream& s) const {
  return s.per_launch_ns > 0 ? s.per_launch_ns : static_cast<double>(options_.quantum_ns);
}

bool FenceTracker::BeforeLaunch(void* stream, std::uint64_t now_ns) {
  (void)now_ns;
  Stream& s = StreamFor(stream);
  if (s.open_launches > 0 || s.open_begin >= 0) return true;
  // Contiguous with the newest fenced segment if that one is still running; otherwise the
  // stream is idle and the segment starts at an event of its own.
  if (!s.fenced.empty()) {
    const int tail = s.fenced.back().end;
    if (api_->Query(events_[static_cast<std::size_t>(tail)].handle) == EventApi::State::kPending) {
      Ref(tail);
      s.open_begin = tail;
      return true;
    }
  }
  const int start = NewEvent();
  if (start < 0 || !api_->Record(events_[static_cast<std::size_t>(start)].handle, stream)) {
    Discard(start);
    ++errors_;
    return false;
  }
  s.open_begin = start;
  return true;
}

void FenceTracker::AfterLaunch(void* stream, std::uint64_t now_ns) {
  Stream& s = StreamFor(stream);
  if (s.open_begin < 0) return;  // BeforeLaunch failed: unmeasured
  ++s.open_launches;
  s.last_launch_ns = now_ns;
  if (s.open_launches * Estimate(s) >= static_cast<double>(options_.quantum_ns) ||
      s.open_launches >= options_.max_segment_launches) {
    Close(s, now_ns);
  }
}

void FenceTracker::Close(Stream& s, std::uint64_t now_ns, bool late) {
  if (s.open_begin < 0) return;
  if (s.open_launches == 0) {  // a start with nothing after it
    Unref(s.open_begin);
    s.open_begin = -1;
    return;
  }
  const int end = NewEvent();
  if (end < 0 || !api_->Record(events_[static_cast<std::size_t>(end)].handle, s.handle)) {
    Discard(end);
    Unref(s.open_begin);
    ++errors_;
  } else {
    s.fenced.push_back(Segment{s.open_begin, end, s.open_launches, now_ns, late});
  }
  s.open_begin = -1;
  s.open_launches = 0;
}

void FenceTracker::Drop(Stream& s) {
  Unref(s.open_begin);
  s.open_begin = -1;
  s.open_launches = 0;
}

void FenceTracker::Fence(void* stream, std::uint64_t now_ns, MayRecord may_record) {
  for (Stream& s : streams_) {
    if (s.handle != stream || s.open_begin < 0) continue;
    if (may_record(s.handle)) {
      Close(s, now_ns);
    } else {
      Drop(s);
    }
  }
}

void FenceTracker::FenceAll(std::uint64_t now_ns, MayRecord may_record) {
  for (Stream& s : streams_) {
    if (s.open_begin < 0) continue;
    if (may_record(s.handle)) {
      Close(s, now_ns);
    } else {
      Drop(s);
    }
  }
}

void FenceTracker::FenceIdle(std::uint64_t now_ns, std::uint64_t idle_ns, MayRecord may_record) {
  for (Stream& s : streams_) {
    if (s.open_launches > 0 && s.last_launch_ns + idle_ns < now_ns && may_record(s.handle))
      Close(s, now_ns, true);
  }
}

std::uint64_t FenceTracker::Poll() {
  std::uint64_t busy = 0;
  for (Stream& s : streams_) {
    while (!s.fenced.empty()) {
      const Segment seg = s.fenced.front();
      const auto state = api_->Query(events_[static_cast<std::size_t>(seg.end)].handle);
      if (state == EventApi::State::kPending) break;
      std::uint64_t ns = 0;
      if (state == EventApi::State::kDone &&
          api_->ElapsedNs(events_[static_cast<std::size_t>(seg.begin)].handle,
                          events_[static_cast<std::size_t>(seg.end)].handle, &ns)) {
        if (seg.late) {
          if (s.per_launch_ns > 0)
            ns = std::min<std::uint64_t>(
                ns, static_cast<std::uint64_t>(seg.launches * s.per_launch_ns));
        } else {
          const double per_launch = static_cast<double>(ns) / seg.launches;
          s.per_launch_ns =
              s.per_launch_ns > 0 ? 0.75 * s.per_launch_ns + 0.25 * per_launch : per_launch;
          s.per_launch_ns = std::max(s.per_launch_ns, 1.0);
        }
        busy += ns;
      } else {
        ++errors_;  // a destroyed context, a sticky fault: the segment goes unmeasured
      }
      s.fenced.pop_front();
      Unref(seg.begin);
      // The end event stays referenced while a contiguous successor begins at it.
      Unref(seg.end);
    }
  }
  // Idle streams keep their estimate; past kMaxStreams streams the idle ones are forgotten (a
  // program that creates streams without end).
  if (streams_.size() > kMaxStreams) {
    std::erase_if(streams_, [](const Stream& s) { return s.fenced.empty() && s.open_begin < 0; });
  }
  return busy;
}

std::uint64_t FenceTracker::InFlightEstimateNs(std::uint64_t now_ns) const {
  double total = 0;
  for (const Stream& s : streams_) {
    std::uint64_t launches = s.open_launches;
    for (const Segment& seg : s.fenced) launches += seg.launches;
    double stream_ns = static_cast<double>(launches) * Estimate(s);
    if (!s.fenced.empty() && now_ns > s.fenced.front().fenced_at_ns) {
      stream_ns = std::max(stream_ns, static_cast<double>(now_ns - s.fenced.front().fenced_at_ns));
    }
    total += stream_ns;
  }
  return static_cast<std::uint64_t>(total);
}

std::uint64_t FenceTracker::LongestPendingEstimateNs() const {
  double longest = 0;
  for (const Stream& s : streams_) {
    if (s.per_launch_ns <= 0) continue;
    for (const Segment& seg : s.fenced) longest = std::max(longest, seg.launches * s.per_launch_ns);
  }
  return static_cast<std::uint64_t>(longest);
}

bool FenceTracker::Learning() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return s.per_launch_ns <= 0 && !s.fenced.empty(); });
}

bool FenceTracker::HasFenced() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return !s.fenced.empty(); });
}

bool FenceTracker::HasWork() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return !s.fenced.empty() || s.open_begin >= 0; });
}

}  // namespace tessera::governor
