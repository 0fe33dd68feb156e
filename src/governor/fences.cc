#include "governor/fences.h"

#include <algorithm>

namespace tessera::governor {
namespace {
constexpr std::size_t kMaxStreams = 64;
constexpr std::size_t kMaxKinds = 4096;  // past this many kinds, the estimates start again
constexpr std::size_t kKindSlots = 2 * kMaxKinds;  // a power of two: at most half full
constexpr std::size_t kMaxPolledPerStream = 256;   // segments one Poll looks at per stream
constexpr std::uint32_t kFirstProbes = 2;
// A probe is held only while fewer launches than this may be in flight on the device (see
// StartAtNewEvent): on the H200 a stream's queue held 1,021 launches before a launch blocked for
// room (720 with 4 KiB of kernel parameters; test/gpu/launch_queue.py). At 64 (sessions 16-18)
// two launch-bound processes left most probes unheld, and 1-3 % of those held the other
// context's turn (~300 us). Counted: launches still open and launches fenced and not yet polled
// (a count that lags the GPU by a watcher poll; past the bound the fences of the newest segments
// are asked, at most kMaxHoldQueries a probe). Not counted: copies, a graph's kernels beyond one,
// kernel parameters' bytes (720 launches fit at 4 KiB): the watchdog covers what slips past.
constexpr std::uint64_t kMaxLaunchesBehindHold = 512;
constexpr int kMaxHoldQueries = 4;
constexpr std::uint64_t kCalibrationSpinNs = 10'000'000;
// A dense segment's fence was recorded right behind its last launch (at most this later), so no
// idle time can trail its work.
constexpr std::uint64_t kDenseFenceSlackNs = 20'000;
// A segment open this long on the host clock is closed at its next launch (its launches' offsets
// from its first are 32-bit nanoseconds, and its charge is laid by them).
constexpr std::uint64_t kMaxSegmentHostNs = 1'000'000'000;
// ... and the GPU reached its start this much later than its last launch at least (beyond the
// epoch's own uncertainty): a single launch on an idle GPU starts about when it is submitted,
// and an epoch error of microseconds must not make it look dense (its span then holds the
// launch's submission latency).
constexpr std::uint64_t kDenseMarginNs = 10'000;

std::uint64_t Mix(std::uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
}  // namespace

std::uint64_t LaunchKey(const void* function, std::uint64_t grid, std::uint64_t block) {
  const std::uint64_t k =
      Mix(reinterpret_cast<std::uintptr_t>(function) ^ Mix(grid ^ Mix(block + 0x51)));
  return k != 0 ? k : 1;
}

std::uint64_t GraphKey(const void* exec) {
  const std::uint64_t k = Mix(reinterpret_cast<std::uintptr_t>(exec) ^ 0x67726170684bULL);
  return k != 0 ? k : 1;
}

FenceTracker::~FenceTracker() {
  for (const Event& e : events_) {
    if (e.handle != nullptr) api_->Destroy(e.handle);
  }
}

FenceTracker::Stream& FenceTracker::StreamFor(void* handle) {
  if (Stream* s = FindStream(handle)) return *s;
  streams_.push_back(Stream{});
  streams_.back().handle = handle;
  streams_.back().ordered = options_.shared_key == nullptr || handle != options_.shared_key;
  last_stream_ = streams_.size() - 1;
  return streams_.back();
}

FenceTracker::Stream* FenceTracker::FindStream(void* handle) {
  // The stream of the previous call first: a launch asks twice (Before and AfterLaunch).
  if (last_stream_ < streams_.size() && streams_[last_stream_].handle == handle)
    return &streams_[last_stream_];
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].handle == handle) {
      last_stream_ = i;
      return &streams_[i];
    }
  }
  return nullptr;
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

std::size_t FenceTracker::SlotOf(std::uint64_t key) const {
  const std::size_t mask = kinds_.size() - 1;
  std::size_t i = key & mask;
  while (kinds_[i].used && kinds_[i].key != key) i = (i + 1) & mask;
  return i;
}

double FenceTracker::KindEstimateNs(std::uint64_t key) const {
  if (kinds_.empty()) return 0;
  const KindSlot& slot = kinds_[SlotOf(key)];
  return slot.used ? slot.kind.estimate_ns : 0;
}

std::uint64_t FenceTracker::OffsetOf(const Kind& k) const {
  if (k.controls < kMinKindControls) return probe_offset_ns_;
  const double ns = k.control_ns - static_cast<double>(control_kernel_ns_);
  return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;
}

std::uint64_t FenceTracker::KindOffsetNs(std::uint64_t key) const {
  if (kinds_.empty()) return probe_offset_ns_;
  const KindSlot& slot = kinds_[SlotOf(key)];
  return slot.used ? OffsetOf(slot.kind) : probe_offset_ns_;
}

FenceTracker::Kind& FenceTracker::KindFor(std::uint64_t key) {
  if (kinds_.empty()) kinds_.resize(kKindSlots);
  std::size_t i = SlotOf(key);
  if (!kinds_[i].used) {
    if (kind_count_ >= kMaxKinds) {  // the estimates start again
      DisarmAll();                   // (every kind's first probes come again)
      std::fill(kinds_.begin(), kinds_.end(), KindSlot{});
      kind_count_ = 0;
      i = SlotOf(key);
    }
    kinds_[i].used = true;
    kinds_[i].key = key;
    ++kind_count_;
  }
  return kinds_[i].kind;
}

std::uint64_t FenceTracker::PeekRandom() const {
  std::uint64_t next = rng_;
  next ^= next << 13;
  next ^= next >> 7;
  next ^= next << 17;
  return next;
}

std::uint64_t FenceTracker::NextRandom() {
  rng_ = PeekRandom();
  return rng_;
}

bool FenceTracker::ShouldProbe(Kind& k, Stream& s, std::uint64_t now_ns) {
  bool probe = k.probes < kFirstProbes;
  if (!probe && options_.probe_period > 0) {
    probe = NextRandom() % options_.probe_period == 0 &&
            (s.last_probe_ns == 0 || now_ns >= s.last_probe_ns + options_.min_probe_gap_ns);
  }
  if (probe) {
    ++k.probes;
    s.last_probe_ns = now_ns;
  }
  return probe;
}

std::uint64_t EmptyBracketNs(std::span<const std::uint64_t> timings, std::uint64_t fallback) {
  std::uint64_t least = 0;
  for (const std::uint64_t t : timings) {
    if (t != 0 && t <= kMaxEmptyBracketNs && (least == 0 || t < least)) least = t;
  }
  return least != 0 ? least : fallback;
}

bool FenceTracker::FewLaunchesInFlight(bool* asked) {
  *asked = false;
  std::uint64_t open = 0, fenced = 0;  // launched and not yet fenced; fenced, as last polled
  for (const Stream& s : streams_) {
    open += s.open_launches;
    fenced += s.fenced_launches;
  }
  if (fenced + open < kMaxLaunchesBehindHold) return true;
  // Each stream's segments run in order: walked from the newest back, the first whose fence has
  // run ends the walk (it and those before it have completed). Past the queries allowed, at an
  // error, or on a key of several streams, what is left counts as in flight.
  *asked = true;
  std::uint64_t in_flight = open;
  int queries = 0;
  for (const Stream& s : streams_) {
    std::uint64_t left = s.fenced_launches;
    for (auto seg = s.fenced.rbegin(); s.ordered && seg != s.fenced.rend() && left > 0; ++seg) {
      if (queries++ >= kMaxHoldQueries) break;
      const EventApi::State state = api_->Query(events_[static_cast<std::size_t>(seg->end)].handle);
      if (state == EventApi::State::kDone) left = 0;
      if (state != EventApi::State::kPending) break;
      left -= std::min<std::uint64_t>(left, seg->launches);
      in_flight += seg->launches;
    }
    in_flight += left;
    if (in_flight >= kMaxLaunchesBehindHold) return false;
  }
  return true;
}

bool FenceTracker::BeforeLaunch(void* stream, std::uint64_t now_ns, std::uint64_t key) {
  Stream& s = StreamFor(stream);
  Disarm(s);                  // (and the bound: what is in flight grows by this launch)
  Kind& kind = KindFor(key);  // one lookup a launch
  s.next_key = key;
  const bool probe = ShouldProbe(kind, s, now_ns);
  s.next_is_probe = probe;
  s.next_kind_drawn = kind.probes >= kFirstProbes;  // its next launch's probe is a draw
  s.next_estimate_ns = kind.estimate_ns;
  // A probe is fenced on both sides: what is open ends here, and the probe starts at an event of
  // its own, behind a Hold where it can. Whether its span is the launch's GPU time alone is
  // known only once the launch has been submitted (AfterLaunch): a fence that was just recorded
  // is still pending on an idle GPU too (the GPU has not reached it yet), so its state says
  // nothing about the stream being busy.
  if (probe) {
    if (s.open_begin >= 0) Close(s, now_ns);
    s.open_begin_ns = now_ns;
    if (!StartAtNewEvent(s, true)) return false;
    // A control is taken only where a probe of the kind would be held (after its first probes),
    // and chosen at random among those: so it meets what the kind's probes meet, and the tenant
    // cannot tell which a launch will be.
    if (s.holding && options_.control_period > 0 && kind.probes > kFirstProbes &&
        NextRandom() % options_.control_period == 0 && TakeControl(s, now_ns)) {
      s.next_is_probe = false;
    }
    return true;
  }
  if (s.open_launches > 0 || s.open_begin >= 0) return true;
  // At the stream's newest fence while its work is expected to be still running; otherwise at
  // an event of its own, so that its span starts where its work does and bounds its charge
  // (estimates can be long: a probe that waited behind another context's work). No driver call
  // asks which: where the GPU really was decides at Poll whether the segment is dense, either way.
  if (s.tail >= 0 && ExpectedBusy(s, now_ns)) {
    Ref(s.tail);
    s.open_begin = s.tail;
    return true;
  }
  return StartAtNewEvent(s, false);
}

bool FenceTracker::ExpectedBusy(const Stream& s, std::uint64_t now_ns) const {
  if (s.fenced.size() <= s.done) return false;  // all polled, or known completed by a wait
  return static_cast<double>(s.fenced.back().fenced_at_ns) + FencedPendingNs(s) >
         static_cast<double>(now_ns);
}

void FenceTracker::SetTail(Stream& s, int event) {
  if (event >= 0) Ref(event);
  Unref(s.tail);
  s.tail = event;
}

bool FenceTracker::StartAtNewEvent(Stream& s, bool probe) {
  const int start = NewEvent();
  if (start < 0) {
    ++errors_;
    return false;
  }
  // Hold only a kind with a completed launch, and with its fence event made beforehand: nothing
  // that could wait for the GPU may run while the stream is held. Nor with many launches in
  // flight on the device's streams (streams may share one of the GPU's queues): the launch would
  // wait for room in a queue the held stream never drains (the watchdog opens it after 5 ms);
  // behind that much work the start event is still pending when the launch is submitted, so the
  // probe is exact without a Hold anyway. (Copies and memsets are not counted: a bound, not a
  // guarantee.) Every other probe is held: an unheld one on a stream that has just gone idle is
  // exact too, but with other contexts on the GPU its bracket may hold their turn (on the H200 1-3
  // % of such probes timed ~300 us in two-process containers, and no held one did).
  bool asked = false;
  if (probe && s.next_estimate_ns > 0 && api_->CanHold() && FewLaunchesInFlight(&asked)) {
    s.reserved_end = NewEvent();
    s.holding = s.reserved_end >= 0 && api_->Hold(s.handle);
    if (s.holding && asked) ++stats_.idle_by_query;
    if (!s.holding && s.reserved_end >= 0) {
      Unref(s.reserved_end);
      s.reserved_end = -1;
    }
  }
  if (!api_->Record(events_[static_cast<std::size_t>(start)].handle, s.handle)) {
    Discard(start);
    ReleaseHold(s);
    ++errors_;
    return false;
  }
  s.open_begin = start;
  return true;
}

bool FenceTracker::TakeControl(Stream& s, std::uint64_t now_ns) {
  if (!api_->LaunchControl(s.handle)) return false;
  const int end = s.reserved_end;
  s.reserved_end = -1;  // ours now: ReleaseHold must not drop it
  if (end < 0 || !api_->Record(events_[static_cast<std::size_t>(end)].handle, s.handle)) {
    // The start stays open as the launch's plain segment (our empty kernel inside it: ~1 us).
    Discard(end);
    ++errors_;
    ReleaseHold(s);
    return true;
  }
  Segment control;
  control.begin = s.open_begin;
  control.end = end;
  control.held = true;
  control.control = true;
  control.probe_key = s.next_key;  // the kind whose launch it stands in for
  control.fenced_at_ns = now_ns;
  control.last_launch_ns = now_ns;
  control.seq = next_seq_++;
  s.fenced.push_back(std::move(control));
  SetTail(s, end);
  if (!ReleaseHold(s)) s.fenced.back().held = false;  // the watchdog opened it: may hold a stall
  Ref(end);  // the launch's segment begins where the control ended
  s.open_begin = end;
  return true;
}

void FenceTracker::AddControlTiming(Kind& k, std::uint64_t span_ns) {
  if (span_ns > kMaxControlNs) {
    ++stats_.controls_left_out;
    return;
  }
  // A running mean over about as long as the kind's probes' (a control comes once in
  // control_period held probes: its weight is that many times a probe's 1/8).
  const double weight = std::min(1.0, 0.125 * std::max<std::uint32_t>(options_.control_period, 1));
  const double ns = static_cast<double>(span_ns);
  k.control_ns = k.controls > 0 ? (1 - weight) * k.control_ns + weight * ns : ns;
  ++k.controls;
  ++stats_.controls;
  if (k.raw_ns > 0) k.estimate_ns = std::max(1.0, k.raw_ns - static_cast<double>(OffsetOf(k)));
}

bool FenceTracker::ReleaseHold(Stream& s) {
  bool intact = true;
  if (s.holding) {
    s.holding = false;
    intact = api_->Release();
  }
  if (s.reserved_end >= 0) {
    Unref(s.reserved_end);
    s.reserved_end = -1;
  }
  return intact;
}

bool FenceTracker::TryContinue(void* stream, std::uint64_t key, std::uint64_t now_ns,
                               std::uint64_t depth_ns) {
  Stream* s = FindStream(stream);
  if (s == nullptr || s->lane_generation != lane_generation_ || s->lane_key != key ||
      s->lane_depth_ns != depth_ns) {
    return false;
  }
  // OverDepth by a bound taken once for all lanes (at the first launch that needs it, so that a
  // launch that goes elsewhere pays nothing for it): HasPending and Learning can only fall until
  // a fence, a poll or a usual launch invalidates it; InFlightEstimateNs grows by the launches
  // since (ContinuedLaunch adds them) and, on each aging stream (fenced work not known
  // completed), by at most the time since.
  if (!bound_.valid) {
    bound_.pending = HasPending();
    if (bound_.pending) {
      if (Learning()) return false;
      // (+2: InFlightEstimateNs truncates its sum, and ours adds in another order.)
      bound_.in_flight_ns = static_cast<double>(InFlightEstimateNs(now_ns)) + 2.0;
      bound_.aging =
          static_cast<double>(std::count_if(streams_.begin(), streams_.end(), [](const Stream& t) {
            return t.done < t.fenced.size();
          }));
      bound_.at_ns = now_ns;
    }
    bound_.valid = true;
  }
  if (bound_.pending &&
      bound_.in_flight_ns + bound_.aging * static_cast<double>(
                                               now_ns > bound_.at_ns ? now_ns - bound_.at_ns : 0) >=
          static_cast<double>(depth_ns)) {
    return false;
  }
  // ShouldProbe of a kind past its first probes (Arm): the same draw, taken only where it is no
  // probe. A probe's is left for whoever draws next (this launch's usual path, or another
  // thread's launch that takes the mutex first), as the usual path alone would have drawn.
  if (options_.probe_period > 0) {
    const std::uint64_t draw = PeekRandom();
    if (draw % options_.probe_period == 0 &&
        (s->last_probe_ns == 0 || now_ns >= s->last_probe_ns + options_.min_probe_gap_ns)) {
      return false;
    }
    rng_ = draw;
  }
  lane_stream_ = static_cast<std::size_t>(s - streams_.data());
  return true;  // s->next_* hold this launch's already: the previous launch was the same kind
}

void FenceTracker::ContinuedLaunch(std::uint64_t now_ns, std::uint64_t depth_ns) {
  Stream& s = streams_[lane_stream_];
  bound_.in_flight_ns += s.next_estimate_ns;  // (before Append, whose fence may invalidate it)
  Append(s, now_ns, depth_ns);
}

void FenceTracker::Arm(Stream& s, std::uint64_t depth_ns) {
  // Only a plain segment left open by a kind with an estimate, past its first probes (whose
  // draw alone TryContinue repeats), under a depth of more than one launch.
  if (s.open_begin < 0 || s.open_launches == 0 || s.open_probe || s.next_estimate_ns <= 0 ||
      !s.next_kind_drawn || OneLaunch(depth_ns)) {
    return;
  }
  s.lane_generation = lane_generation_;
  s.lane_key = s.next_key;
  s.lane_depth_ns = depth_ns;
}

void FenceTracker::AfterLaunch(void* stream, std::uint64_t now_ns, std::uint64_t depth_ns) {
  Stream& s = StreamFor(stream);
  if (s.open_begin < 0) return;  // BeforeLaunch failed: unmeasured
  if (s.next_is_probe && s.open_launches == 0) {
    s.open_probe = true;
    s.open_probe_key = s.next_key;
    // Exact: held at the gate, or its start event still pending now that the launch has been
    // submitted (the launch is queued right behind it). Otherwise the GPU reached the start
    // before the launch, and the host time between the two is taken off the span.
    s.open_exact =
        s.holding || api_->Query(events_[static_cast<std::size_t>(s.open_begin)].handle) ==
                         EventApi::State::kPending;
    s.open_probe_gap_ns = s.open_exact || now_ns < s.open_begin_ns ? 0 : now_ns - s.open_begin_ns;
  }
  Append(s, now_ns, depth_ns);
  Arm(s, depth_ns);
}

void FenceTracker::Append(Stream& s, std::uint64_t now_ns, std::uint64_t depth_ns) {
  if (!s.open_probe) {
    if (s.open_launches == 0) {
      s.open_first_ns = now_ns;
      if (s.open_submissions.capacity() == 0 && !spare_submissions_.empty()) {
        s.open_submissions.swap(spare_submissions_.back());
        spare_submissions_.pop_back();
      }
      s.open_submissions.reserve(options_.max_segment_launches);  // no growth on the launch path
    }
    const std::uint64_t after = now_ns > s.open_first_ns ? now_ns - s.open_first_ns : 0;
    s.open_submissions.push_back(
        Submission{static_cast<std::uint32_t>(std::min<std::uint64_t>(after, UINT32_MAX)),
                   static_cast<std::uint32_t>(std::min(s.next_estimate_ns, 4.0e9))});
  }
  ++s.open_launches;
  s.last_launch_ns = now_ns;
  if (s.next_estimate_ns > 0) {
    s.open_estimate_ns += s.next_estimate_ns;
  } else {
    ++s.open_unknown;
  }
  const double open_work = s.open_estimate_ns + s.open_unknown * Estimate(s);
  if (s.open_probe || OneLaunch(depth_ns) ||
      open_work >= static_cast<double>(std::min(options_.quantum_ns, depth_ns)) ||
      now_ns >= s.open_first_ns + kMaxSegmentHostNs ||
      s.open_launches >= options_.max_segment_launches) {
    Close(s, now_ns);
  }
}

void FenceTracker::Close(Stream& s, std::uint64_t now_ns) {
  if (s.open_begin < 0) return;
  Disarm(s);
  if (s.open_launches == 0) {  // a start with nothing after it
    Drop(s);
    return;
  }
  bool pushed = false;
  int end = s.reserved_end;
  if (end >= 0) {
    s.reserved_end = -1;  // ours now: ReleaseHold must not drop it
  } else {
    end = NewEvent();
  }
  if (end < 0 || !api_->Record(events_[static_cast<std::size_t>(end)].handle, s.handle)) {
    Discard(end);
    Unref(s.open_begin);
    ++errors_;
  } else {
    if (epoch_ >= 0) Ref(epoch_);
    s.fenced_estimate_ns += s.open_estimate_ns;
    s.fenced_unknown += s.open_unknown;
    s.fenced_launches += s.open_launches;
    s.fenced.push_back(Segment{s.open_begin, end, epoch_, s.open_launches, s.open_unknown,
                               s.open_estimate_ns, s.open_probe, s.open_probe && s.open_exact,
                               s.open_probe_key, s.open_probe ? s.open_probe_gap_ns : 0, now_ns,
                               s.last_launch_ns, s.open_first_ns, std::move(s.open_submissions),
                               s.open_probe && s.holding, s.open_begin_ns});
    s.fenced.back().seq = next_seq_++;
    SetTail(s, end);
    pushed = true;
  }
  s.open_submissions.clear();
  if (!ReleaseHold(s) && pushed && s.fenced.back().probe) {
    // The watchdog opened its gate (a launch blocked behind it): its span may hold the stall,
    // so it is charged as any segment, by its span and its launch's estimate, and times nothing.
    s.fenced.back().probe = false;
    s.fenced.back().exact = false;
    s.fenced.back().held = false;
    ++stats_.holds_broken;
  }
  s.open_begin = -1;
  s.open_launches = 0;
  s.open_unknown = 0;
  s.open_estimate_ns = 0;
  s.open_probe = false;
  s.open_exact = false;
  s.open_probe_gap_ns = 0;
}

void FenceTracker::Drop(Stream& s) {
  Disarm(s);
  s.open_submissions.clear();
  ReleaseHold(s);
  Unref(s.open_begin);
  s.open_begin = -1;
  s.open_launches = 0;
  s.open_unknown = 0;
  s.open_estimate_ns = 0;
  s.open_probe = false;
  s.open_exact = false;
  s.open_probe_gap_ns = 0;
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

void FenceTracker::MarkCompleted(Stream& s, std::uint64_t ticket) {
  if (!s.ordered) return;
  std::size_t done = 0;
  double estimate_ns = 0;
  std::uint64_t unknown = 0;
  for (const Segment& seg : s.fenced) {
    if (seg.seq >= ticket) break;
    ++done;
    estimate_ns += seg.estimate_ns;
    unknown += seg.unknown;
  }
  if (done > s.done) {  // (the short path's bound on what is in flight only falls)
    s.done = done;
    s.done_estimate_ns = estimate_ns;
    s.done_unknown = unknown;
  }
}

void FenceTracker::Completed(void* stream, std::uint64_t ticket) {
  for (Stream& s : streams_) {
    if (s.handle == stream) MarkCompleted(s, ticket);
  }
}

void FenceTracker::CompletedAll(std::uint64_t ticket) {
  for (Stream& s : streams_) MarkCompleted(s, ticket);
}

void FenceTracker::FenceIdle(std::uint64_t now_ns, std::uint64_t idle_ns, MayRecord may_record) {
  for (Stream& s : streams_) {
    if (s.open_launches > 0 && s.last_launch_ns + idle_ns < now_ns && may_record(s.handle))
      Close(s, now_ns);
  }
}

bool FenceTracker::Calibrate(void* stream, const std::function<std::uint64_t()>& now,
                             std::uint64_t max_window_ns) {
  EpochTiming timing;
  if (!PrepareEpoch(&timing)) return false;
  TimeEpoch(api_, stream, now, max_window_ns, &timing);
  return InstallEpoch(timing);
}

bool FenceTracker::PrepareEpoch(EpochTiming* timing) {
  timing->event = NewEvent();
  timing->handle =
      timing->event >= 0 ? events_[static_cast<std::size_t>(timing->event)].handle : nullptr;
  timing->recorded = timing->timed = false;
  return timing->event >= 0;
}

void FenceTracker::TimeEpoch(EventApi* api, void* stream, const std::function<std::uint64_t()>& now,
                             std::uint64_t max_window_ns, EpochTiming* timing) {
  const std::uint64_t before = now();
  timing->recorded = api->Record(timing->handle, stream);
  if (!timing->recorded) return;
  EventApi::State state = api->Query(timing->handle);
  std::uint64_t after = now();
  while (state == EventApi::State::kPending && after - before < kCalibrationSpinNs) {
    state = api->Query(timing->handle);
    after = now();
  }
  // A stream kept busy, or a slow reading: not an epoch (tried again later).
  timing->timed = state == EventApi::State::kDone && after - before <= max_window_ns;
  timing->host_ns = before + (after - before) / 2;
  timing->uncertainty_ns = (after - before) / 2 + kDenseMarginNs;
}

bool FenceTracker::InstallEpoch(const EpochTiming& timing) {
  if (timing.event < 0) return false;
  if (!timing.recorded) {
    Discard(timing.event);
    return false;
  }
  if (!timing.timed) {
    Unref(timing.event);
    return false;
  }
  if (epoch_ >= 0) {
    Unref(epoch_);
    if (events_[static_cast<std::size_t>(epoch_)].refs == 0) epoch_hosts_.erase(epoch_);
  }
  epoch_ = timing.event;
  epoch_hosts_[epoch_] = Epoch{timing.host_ns, timing.uncertainty_ns};
  return true;
}

double FenceTracker::PendingNs(const Stream& s, const Segment& seg) const {
  return seg.estimate_ns + seg.unknown * Estimate(s);
}

double FenceTracker::FencedPendingNs(const Stream& s) const {
  return s.fenced_estimate_ns + static_cast<double>(s.fenced_unknown) * Estimate(s);
}

std::uint64_t FenceTracker::ProbeNs(const Segment& seg, std::uint64_t span_ns) const {
  const std::uint64_t taken = seg.probe_gap_ns + KindOffsetNs(seg.probe_key);
  return std::max<std::uint64_t>(span_ns > taken ? span_ns - taken : 0, 1);
}

std::uint64_t FenceTracker::Charge(const Stream& s, const Segment& seg, std::uint64_t span_ns,
                                   bool dense) const {
  if (seg.probe) return ProbeNs(seg, span_ns);
  if (dense) return span_ns;
  if (seg.unknown > 0 && s.per_launch_ns <= 0) return span_ns;  // nothing to bound it with
  return std::min(span_ns, static_cast<std::uint64_t>(PendingNs(s, seg)));
}

void LayCharge(std::uint64_t first_launch_ns, const std::vector<Submission>& submissions,
               std::uint64_t begin_ns, std::uint64_t end_ns, std::uint64_t charge_ns,
               double fallback_estimate_ns, std::vector<double>* scratch, std::vector<Span>* out) {
  const std::size_t n = submissions.size();
  if (n == 0 || end_ns <= begin_ns || charge_ns == 0) return;
  const double fallback = std::max(fallback_estimate_ns, 1.0);
  double weights = 0;
  for (const Submission& sub : submissions) {
    weights += sub.estimate_ns > 0 ? sub.estimate_ns : fallback;
  }
  scratch->assign(2 * n, 0.0);
  double* starts = scratch->data();
  double* lengths = starts + n;
  // Forward: each launch at its submission, or after its predecessor; then backward so that the
  // last ends by end_ns, and forward again so that the first starts at begin_ns or later (the
  // charge fits when it is at most the window).
  double cursor = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Submission& sub = submissions[i];
    const double weight = sub.estimate_ns > 0 ? sub.estimate_ns : fallback;
    lengths[i] = static_cast<double>(charge_ns) * weight / weights;
    starts[i] = std::max(static_cast<double>(first_launch_ns + sub.after_first_ns), cursor);
    cursor = starts[i] + lengths[i];
  }
  double limit = static_cast<double>(end_ns);
  for (std::size_t i = n; i-- > 0;) {
    starts[i] = std::min(starts[i] + lengths[i], limit) - lengths[i];
    limit = starts[i];
  }
  cursor = static_cast<double>(begin_ns);
  const std::size_t first_out = out->size();
  for (std::size_t i = 0; i < n; ++i) {
    starts[i] = std::max(starts[i], cursor);
    cursor = starts[i] + lengths[i];
    const auto b = static_cast<std::uint64_t>(starts[i]);
    const auto e = std::min(static_cast<std::uint64_t>(cursor), end_ns);
    if (e <= b) continue;
    if (out->size() > first_out && out->back().end_ns >= b) {  // touching: one span
      out->back().end_ns = std::max(out->back().end_ns, e);
    } else {
      out->push_back(Span{b, e});
    }
  }
}

void FenceTracker::BeginPoll(PollBatch* batch) const {
  batch->items.clear();
  for (const Stream& s : streams_) {
    std::size_t taken = 0;
    for (const Segment& seg : s.fenced) {
      if (++taken > kMaxPolledPerStream) break;
      PollBatch::Item item;
      item.stream = s.handle;
      item.begin = seg.begin;
      item.end = seg.end;
      item.begin_event = events_[static_cast<std::size_t>(seg.begin)].handle;
      item.end_event = events_[static_cast<std::size_t>(seg.end)].handle;
      if (seg.epoch >= 0 && epoch_hosts_.contains(seg.epoch))
        item.epoch_event = events_[static_cast<std::size_t>(seg.epoch)].handle;
      batch->items.push_back(item);
    }
  }
}

void FenceTracker::QueryBatch(EventApi* api, PollBatch* batch) {
  void* blocked = nullptr;  // a stream whose oldest pending segment was found: the rest waits
  bool any_blocked = false;
  for (PollBatch::Item& item : batch->items) {
    if (any_blocked && item.stream == blocked) continue;
    item.state = api->Query(item.end_event);
    if (item.state == EventApi::State::kPending) {
      blocked = item.stream;
      any_blocked = true;
      continue;
    }
    if (item.state != EventApi::State::kDone) continue;
    item.timed = api->ElapsedNs(item.begin_event, item.end_event, &item.span_ns);
    if (item.timed && item.epoch_event != nullptr) {
      item.placed = api->ElapsedNs(item.epoch_event, item.end_event, &item.epoch_to_end_ns);
      item.begin_placed = item.placed && api->ElapsedNs(item.epoch_event, item.begin_event,
                                                        &item.epoch_to_begin_ns);
    }
  }
}

void FenceTracker::EndPoll(const PollBatch& batch, Measured* out) {
  Stream* sp = nullptr;
  for (const PollBatch::Item& item : batch.items) {
    if (item.state == EventApi::State::kPending) continue;  // (and the rest of its stream waits)
    DisarmAll();  // what is in flight, and the estimates, change
    if (sp == nullptr || sp->handle != item.stream) {  // a stream's items are consecutive
      sp = nullptr;
      for (Stream& s : streams_) {
        if (s.handle == item.stream) sp = &s;
      }
    }
    // Only Poll takes segments, in order: the item is its stream's oldest, unless the stream's
    // earlier item was still pending (then this one is skipped too).
    if (sp == nullptr || sp->fenced.empty() || sp->fenced.front().begin != item.begin ||
        sp->fenced.front().end != item.end) {
      continue;
    }
    Stream& s = *sp;
    Segment seg = std::move(s.fenced.front());
    if (seg.control) {
      if (item.state != EventApi::State::kDone || !item.timed) {
        ++errors_;
        if (s.per_launch_ns <= 0) s.per_launch_ns = static_cast<double>(options_.quantum_ns);
      } else if (seg.held) {
        AddControlTiming(KindFor(seg.probe_key), item.span_ns);
      } else {
        ++stats_.controls_left_out;
      }
    } else if (item.state == EventApi::State::kDone && item.timed) {
      const std::uint64_t span = item.span_ns;
      if (seg.probe) {
        // Its launch's time before and after the kind's offset (what ProbeNs gives), the kind
        // looked up once.
        const double raw = static_cast<double>(
            std::max<std::uint64_t>(span > seg.probe_gap_ns ? span - seg.probe_gap_ns : 0, 1));
        Kind& k = KindFor(seg.probe_key);
        const double ns = std::max(1.0, raw - static_cast<double>(OffsetOf(k)));
        if (seg.exact && !k.exact) {  // the first exact probe replaces the inexact ones
          k.raw_ns = 0;
          k.exact = true;
        }
        if (seg.exact || !k.exact) {
          k.raw_ns = k.raw_ns > 0 ? 0.875 * k.raw_ns + 0.125 * raw : raw;
          k.estimate_ns = std::max(1.0, k.raw_ns - static_cast<double>(OffsetOf(k)));
        }
        s.per_launch_ns = s.per_launch_ns > 0 ? 0.75 * s.per_launch_ns + 0.25 * ns : ns;
        if (seg.exact) {  // buckets below 0.5, 1, 2, ... 8,192 us, then the rest
          std::size_t bucket = 0;
          while (bucket + 1 < stats_.exact_timings.size() &&
                 ns >= static_cast<double>(500ULL << bucket))
            ++bucket;
          ++stats_.exact_timings[bucket];
          if (ns >= 32'000.0 && stats_.long_count < stats_.long_probes.size()) {
            const auto at = epoch_hosts_.find(seg.epoch);
            const bool placed = item.begin_placed && at != epoch_hosts_.end();
            stats_.long_probes[stats_.long_count++] = {
                seg.fenced_at_ns,
                static_cast<std::uint64_t>(ns),
                seg.held,
                placed,
                seg.fenced_at_ns - std::min(seg.fenced_at_ns, seg.begun_at_ns),
                placed ? static_cast<std::int64_t>(at->second.host_ns + item.epoch_to_begin_ns) -
                             static_cast<std::int64_t>(seg.fenced_at_ns)
                       : 0,
                placed ? at->second.uncertainty_ns : 0};
          }
        }
      } else if (s.per_launch_ns <= 0) {
        // No probe has completed on this stream yet: its first segment's mean ends the learning
        // (one segment in flight at a time) all the same.
        s.per_launch_ns = std::max(static_cast<double>(span) / seg.launches, 1.0);
      }
      // On the host clock: where the segment's work began and ended (its epoch, if any).
      const auto host = epoch_hosts_.find(seg.epoch);
      const bool placed = item.placed && host != epoch_hosts_.end();
      const bool dense = placed && item.begin_placed &&
                         host->second.host_ns + item.epoch_to_begin_ns >
                             seg.last_launch_ns + host->second.uncertainty_ns &&
                         seg.fenced_at_ns <= seg.last_launch_ns + kDenseFenceSlackNs;
      const std::uint64_t charge = Charge(s, seg, span, dense);
      ++stats_.segments;
      stats_.span_ns += span;
      if (seg.probe) {
        ++(seg.exact ? stats_.probes_exact : stats_.probes_inexact);
        if (seg.held) ++stats_.probes_held;
        stats_.probe_ns += charge;
      } else if (dense) {
        ++stats_.dense;
        stats_.dense_ns += charge;
        stats_.dense_launches += seg.launches;
      } else {
        stats_.estimate_ns += charge;
        stats_.estimate_launches += seg.launches;
        if (charge == span) ++stats_.span_bound;
      }
      if (placed) {
        const std::uint64_t end = host->second.host_ns + item.epoch_to_end_ns;
        if (!seg.probe && !dense && !seg.submissions.empty() && charge < span) {
          // The window holds the charge whatever the epoch's rounding made of its begin.
          const std::uint64_t begin =
              std::min(item.begin_placed ? host->second.host_ns + item.epoch_to_begin_ns
                                         : end - std::min(end, span),
                       end - std::min(end, charge));
          LayCharge(seg.first_launch_ns, seg.submissions, begin, end, charge, Estimate(s),
                    &lay_scratch_, &out->spans);
        } else {
          out->spans.push_back(Span{end - std::min(end, charge), end});
        }
      } else {
        out->unplaced_ns += charge;
      }
    } else {
      ++errors_;  // a destroyed context, a sticky fault: the segment goes unmeasured
      // ... and it must not keep the stream learning for ever (every launch would wait).
      if (s.per_launch_ns <= 0) s.per_launch_ns = static_cast<double>(options_.quantum_ns);
    }
    if (seg.submissions.capacity() != 0 && spare_submissions_.size() < kMaxStreams) {
      seg.submissions.clear();
      spare_submissions_.push_back(std::move(seg.submissions));
    }
    s.fenced.pop_front();
    if (s.done > 0) --s.done;
    s.done_estimate_ns = s.done == 0 ? 0 : s.done_estimate_ns - seg.estimate_ns;
    s.done_unknown = s.done == 0 ? 0 : s.done_unknown - seg.unknown;
    s.fenced_estimate_ns = s.fenced.empty() ? 0 : s.fenced_estimate_ns - seg.estimate_ns;
    s.fenced_unknown = s.fenced.empty() ? 0 : s.fenced_unknown - seg.unknown;
    s.fenced_launches = s.fenced.empty() ? 0 : s.fenced_launches - seg.launches;
    Unref(seg.begin);
    // The end event stays referenced while a contiguous successor begins at it.
    Unref(seg.end);
    if (seg.epoch >= 0) {
      Unref(seg.epoch);
      if (seg.epoch != epoch_ && events_[static_cast<std::size_t>(seg.epoch)].refs == 0)
        epoch_hosts_.erase(seg.epoch);
    }
  }
  // Idle streams keep their estimate; past kMaxStreams streams the idle ones are forgotten (a
  // program that creates streams without end).
  if (streams_.size() > kMaxStreams) {
    std::erase_if(streams_, [this](Stream& s) {
      if (!s.fenced.empty() || s.open_begin >= 0) return false;
      SetTail(s, -1);
      return true;
    });
  }
}

void FenceTracker::Poll(Measured* out) {
  PollBatch batch;
  BeginPoll(&batch);
  QueryBatch(api_, &batch);
  EndPoll(batch, out);
}

std::uint64_t FenceTracker::InFlightEstimateNs(std::uint64_t now_ns) const {
  double total = 0;
  for (const Stream& s : streams_) {
    // What a returned wait showed complete is not in flight, however long its poll takes.
    const double done_ns = s.done_estimate_ns + static_cast<double>(s.done_unknown) * Estimate(s);
    double stream_ns = s.open_estimate_ns + s.open_unknown * Estimate(s) +
                       std::max(0.0, FencedPendingNs(s) - done_ns);
    if (s.done < s.fenced.size() && now_ns > s.fenced[s.done].fenced_at_ns) {
      stream_ns = std::max(stream_ns, static_cast<double>(now_ns - s.fenced[s.done].fenced_at_ns));
    }
    total += stream_ns;
  }
  return static_cast<std::uint64_t>(total);
}

std::uint64_t FenceTracker::LongestPendingEstimateNs() const {
  double longest = 0;
  for (const Stream& s : streams_) {
    if (s.per_launch_ns <= 0) continue;
    for (const Segment& seg : s.fenced) longest = std::max(longest, PendingNs(s, seg));
  }
  return static_cast<std::uint64_t>(longest);
}

bool FenceTracker::Learning() const {
  return std::any_of(streams_.begin(), streams_.end(), [](const Stream& s) {
    return s.per_launch_ns <= 0 && s.fenced.size() > s.done;
  });
}

bool FenceTracker::HasFenced() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return !s.fenced.empty(); });
}

bool FenceTracker::HasPending() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return s.fenced.size() > s.done; });
}

bool FenceTracker::HasWork() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return !s.fenced.empty() || s.open_begin >= 0; });
}

}  // namespace tessera::governor
