// Sparse event fences: how a process measures the GPU busy time of its own work, per stream,
// without trusting launch counts or NVML samples (HAMi's counter-example, ADR 0017).
//
// The launches of a stream are grouped into segments. A segment begins either where the previous
// one on the stream ended (its work expected to be still running, by the estimates below: no
// driver call asks) or at a start event recorded just before its first launch; it ends at a
// fence event recorded after the launch that made its estimated work reach `quantum_ns`, or
// before anything waits on the stream. So a stream records about one event per `quantum_ns` of
// work.
//
// A segment's span (the elapsed time between its two events, GPU timestamps) counts the idle
// gaps between its kernels when the host launches more slowly than the GPU runs them (a
// launch-bound loop). Busy time therefore comes from two measurements together:
//   - probes: a launch, chosen by its kind (`key`: the function and its grid, or the graph) — the
//     first two of each kind, then one in `probe_period` at random — is fenced on both sides, so
//     its span is that launch's GPU time; each kind keeps a running estimate of it. A probe
//     starts at an event of its own, behind a Hold where the driver allows one (a kind is held
//     only once a launch of it has completed: its first launch may load its module, which can
//     synchronize the context, and with the stream held that would never end; nor behind a deep
//     queue: the polled count, and where it says too much the newest fences). It is exact
//     when it was held or its start event is still pending once the launch has been submitted
//     (the launch is queued right behind it). Otherwise the GPU ran the start before the launch
//     reached it, and the host time from the start's record to the launch's return is taken off
//     the span (on the H200 that latency, ~4 us from PyTorch, is several times a small kernel).
//     With other contexts on the GPU, an exact probe taken in the middle of its context's turn
//     (not held) may hold another context's turn: two launch-bound processes of one container
//     are overcharged (ADR 0017, "Probes"; no selection by standing is safe: see there).
//     Every probe also loses the probe offset: what a bracket holds beyond its kernel even
//     behind the gate. Where the driver lets us launch an empty kernel of our own, one held probe
//     in `control_period` (after a kind's first kFirstProbes) is a *control* instead: the same
//     bracket at a moment the same kind was launched, with that kernel in place of the tenant's,
//     so that the offset is measured in the conditions that kind's probes meet (on the H200
//     another context on the GPU adds ~0.5 us to every launch's bracket, kernel or not: a fixed
//     offset charged two launch-bound processes 1.3-1.7x their kernels). Each kind's offset is
//     the running mean of its own controls less the empty kernel's own time
//     (SetControlKernelNs), once it has kMinKindControls; until then SetProbeOffsetNs's. A kind's
//     probes and controls are drawn from the same launches and averaged alike, so whatever
//     stretches both (the tenant's other streams, other contexts) cancels out of their
//     difference; pooled across kinds it would not (a tenant could time one kind's launches
//     beside its own SM-filling kernels to stretch the shared offset, and another kind's on a
//     quiet GPU). Exact probes replace inexact estimates;
//   - a segment is dense when the GPU reached its start only after its last launch had been
//     submitted (the host was ahead: no gap between its kernels) and its fence followed that
//     launch at once (no idle time after them); a dense segment is charged its span, any other
//     min(span, the sum of its launches' estimates). Without an epoch the rule is the min.
// With an epoch (Calibrate: an event whose host-clock time is known within a few microseconds),
// each charge is placed on the host clock: a dense segment's as its span, any other's where its
// launches were submitted (LayCharge), so that overlapping work of several streams and processes
// is counted once (busy_log.h takes their union).
//
// The estimate of work in flight, which the launch path keeps under the arbiter's depth, is
// the sum of the pending launches' estimates, bounded below by the age of the oldest pending
// segment; until a stream's first probe completes, the estimate is unknown and one fenced
// segment is in flight at a time.
//
// Not thread-safe: the preload library serializes its launch path and its watcher thread.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/shm_layout.h"

namespace tessera::governor {

// The driver operations the tracker needs: CUDA events (real in the preload library, a
// simulated GPU in the tests).
class EventApi {
 public:
  enum class State { kPending, kDone, kError };
  virtual ~EventApi() = default;
  virtual void* Create() = 0;  // nullptr on failure
  virtual void Destroy(void* event) = 0;
  virtual bool Record(void* event, void* stream) = 0;
  virtual State Query(void* event) = 0;
  virtual bool ElapsedNs(void* from, void* to, std::uint64_t* ns) = 0;
  // Optional: holds `stream` at a gate (a wait on a host-written value) until Release, so that
  // what is queued behind it meanwhile runs back to back. A probe of an idle stream uses it:
  // without it the probe's start event completes before its launch reaches the GPU, and the
  // probe counts the launch's submission latency (several microseconds: more than a small
  // kernel). false: not available (the probe is then taken without it).
  virtual bool Hold(void* stream) {
    (void)stream;
    return false;
  }
  // Whether a Hold may be placed now (cheap: no driver call), so that nothing is asked of the
  // GPU for a hold that would be refused.
  virtual bool CanHold() { return false; }
  // false: the gate had been opened before (a watchdog, after a launch blocked behind it), so
  // what the held probe timed may hold that stall.
  virtual bool Release() { return true; }
  // Optional: launches an empty kernel of our own on `stream` (a probe's control, see above).
  // false: not available here (the probe stays a probe).
  virtual bool LaunchControl(void* stream) {
    (void)stream;
    return false;
  }
};

// Every event record, stream wait and query is a driver call that costs about as much as a
// launch (on the H200 host ~4.4 us: issue #21's stats), so the defaults keep them to about one
// per cent of a launch-bound loop's launches: a segment of up to 512 launches takes one or two
// records, a probe four calls. A segment also ends once its estimated work reaches the depth the
// arbiter allows in flight, when that is less than the quantum (AfterLaunch), so a small depth
// is kept whatever the quantum.
struct FenceOptions {
  std::uint64_t quantum_ns = 400'000;  // estimated work per segment
  std::uint32_t max_segment_launches = 512;
  std::uint32_t probe_period = 32;  // after its first two, one launch of a kind in this many ...
  std::uint64_t seed = 0x9e3779b97f4a7c15ULL;
  // ... and, on one stream, no sooner than this after its previous probe (host clock): at one a
  // millisecond, probes alone cost a loop of microsecond kernels ~1.3 % of its throughput on
  // the H200 host; at one per 10 ms, ~0.1 %.
  std::uint64_t min_probe_gap_ns = 10'000'000;
  // A key that names several of the GPU's streams (CU_STREAM_PER_THREAD: each thread's own), whose
  // segments may complete out of order: a completed one says nothing of the others.
  void* shared_key = nullptr;
  // One held probe in this many is a control (0: none), where the EventApi can launch one.
  std::uint32_t control_period = 4;
};

// A stretch of busy time on the host's clock (CLOCK_MONOTONIC ns): [begin_ns, end_ns).
struct Span {
  std::uint64_t begin_ns = 0;
  std::uint64_t end_ns = 0;
};

// A launch of a segment: host clock from the segment's first launch, and its kind's estimate
// then (0: none yet).
struct Submission {
  std::uint32_t after_first_ns = 0;
  std::uint32_t estimate_ns = 0;
};

// What an empty bracket (two events behind a Hold, nothing between them) costs the GPU, from its
// latest timings (0: none yet): the least of those up to kMaxEmptyBracketNs, else `fallback`. A
// bracket can only come out longer than its cost, when its stream waited behind other work: on the
// H200 one stream flooded with 1 us kernels stretched every bracket to ~79 us, and their median,
// taken off every probe, left the flood charged nothing.
inline constexpr std::uint64_t kMaxEmptyBracketNs = 10'000;  // 8x the H200's 1.25 us
std::uint64_t EmptyBracketNs(std::span<const std::uint64_t> timings, std::uint64_t fallback);

// A control timed longer than this is left out of the offset (a turn of another context, a
// stall): leaving one out can only raise what probes are charged, never lower it. On the H200 a
// control took 2.7 us alone and 3.2-3.5 us beside other launch-bound contexts.
inline constexpr std::uint64_t kMaxControlNs = 50'000;
// A kind's offset comes from its controls once it has this many (one could be an outlier).
inline constexpr std::uint32_t kMinKindControls = 2;

// Lays a segment's charge on the host clock within [begin_ns, end_ns) where its launches were
// submitted: each launch's part of the charge (in proportion to its estimate; unknown ones at
// `fallback_estimate_ns`) right after its submission or after its predecessor, then fitted into
// the window. For a segment whose span holds idle time: the kernels of a launch-bound stream run
// as they are submitted, and another stream's may run in its gaps, so the container's union needs
// them where they ran, not packed at the segment's end. Appends sorted, disjoint spans within the
// window; with charge_ns <= end_ns - begin_ns they sum to charge_ns, less a nanosecond a launch
// of rounding. `scratch` is reused between calls (no allocation once it has grown).
void LayCharge(std::uint64_t first_launch_ns, const std::vector<Submission>& submissions,
               std::uint64_t begin_ns, std::uint64_t end_ns, std::uint64_t charge_ns,
               double fallback_estimate_ns, std::vector<double>* scratch, std::vector<Span>* out);

// What one Poll took from completed segments.
struct Measured {
  std::vector<Span> spans;        // placed on the host clock (an epoch was known)
  std::uint64_t unplaced_ns = 0;  // busy time that could not be placed (no epoch)
  std::uint64_t total_ns() const {
    std::uint64_t t = unplaced_ns;
    for (const Span& s : spans) t += s.end_ns - s.begin_ns;
    return t;
  }
};

class FenceTracker {
 public:
  explicit FenceTracker(EventApi* api, FenceOptions options = {})
      : api_(api), options_(options), rng_(options.seed | 1) {}
  ~FenceTracker();
  FenceTracker(const FenceTracker&) = delete;
  FenceTracker& operator=(const FenceTracker&) = delete;

  // Around each launch on `stream`. BeforeLaunch returns false when no start event could be
  // recorded (the launch then goes unmeasured; the caller counts a machinery error).
  // `key` names the launch's kind (LaunchKey, GraphKey).
  bool BeforeLaunch(void* stream, std::uint64_t now_ns, std::uint64_t key = 0);
  // `depth_ns`: the depth the launch went under; at one launch (OverDepth) its segment is fenced
  // at once, so that the next launch waits for exactly this one.
  void AfterLaunch(void* stream, std::uint64_t now_ns, std::uint64_t depth_ns = ~0ULL);
  // The common launch at a fraction of that path's cost (on the H200 it cost a launch-bound loop
  // of 3 us kernels ~12 % of its rate where the share did not bind): a launch of the kind the
  // stream's previous launch was, continuing the plain segment that one left open, with nothing
  // else done to the tracker since. It decides what BeforeLaunch and OverDepth would have, the
  // probe's draw included, the depth by a bound on InFlightEstimateNs (where the bound reaches
  // `depth_ns`, OverDepth is asked): true, the launch continues the open segment (the caller
  // launches, then calls ContinuedLaunch, or Fence if the launch failed); false, the usual path
  // (OverDepth, BeforeLaunch, AfterLaunch), which draws where this would have drawn a probe.
  bool TryContinue(void* stream, std::uint64_t key, std::uint64_t now_ns, std::uint64_t depth_ns);
  void ContinuedLaunch(std::uint64_t now_ns, std::uint64_t depth_ns);
  // Whether the launch BeforeLaunch just prepared on `stream` is a probe: only a probe's
  // AfterLaunch needs the time after the launch was submitted (an inexact probe's gap); any
  // other may be given the time before it, which saves a clock reading a launch.
  bool LaunchIsProbe(void* stream) { return StreamFor(stream).next_is_probe; }
  // Closes the open segment of one stream / of every stream (before something waits on them),
  // where `may_record` allows a fence (not into a stream being captured); elsewhere the open
  // segment is dropped unmeasured.
  using MayRecord = bool (*)(void* stream);
  static bool AlwaysRecord(void*) { return true; }
  void Fence(void* stream, std::uint64_t now_ns, MayRecord may_record = AlwaysRecord);
  void FenceAll(std::uint64_t now_ns, MayRecord may_record = AlwaysRecord);
  // A wait that has returned (a synchronize of one stream, or of the context): what was fenced
  // on `stream` (on every stream) before Ticket() was read has completed, though it is timed
  // and charged only when a poll reaches it. The launch path's depth (OverDepth) stops counting
  // it at once: the poll is up to a watcher interval away, and a program that synchronizes and
  // launches again would otherwise wait for that poll (on the H200 four streams of 20 us
  // kernels ran at 0.87-0.97 of native at a share that did not bind). A key several of the GPU's
  // streams share (FenceOptions::shared_key) is never marked: its wait covers one of them.
  std::uint64_t Ticket() const { return next_seq_; }
  void Completed(void* stream, std::uint64_t ticket);
  void CompletedAll(std::uint64_t ticket);
  // Fences the open segments whose latest launch is older than `idle_ns` (work launched and then
  // left without a synchronize), on the streams `may_record` allows. Such a late fence may sit
  // after idle time; its segment, like any, counts no more than its launches' estimates.
  void FenceIdle(std::uint64_t now_ns, std::uint64_t idle_ns, MayRecord may_record);

  // Takes completed segments: adds their busy time to `out`.
  void Poll(Measured* out);
  // Poll in three steps, so that a caller that shares the tracker with a launch path under a
  // mutex makes the driver calls (event queries and elapsed times) without holding it:
  // BeginPoll and EndPoll under the mutex, QueryBatch outside it. Only Poll takes segments, so
  // what BeginPoll saw is still there for EndPoll; events stay alive while a segment holds them.
  struct PollBatch {
    struct Item {
      void* stream = nullptr;
      int begin = -1, end = -1;
      void* begin_event = nullptr;
      void* end_event = nullptr;
      void* epoch_event = nullptr;  // null: not placed
      EventApi::State state = EventApi::State::kPending;
      bool timed = false, placed = false, begin_placed = false;
      std::uint64_t span_ns = 0, epoch_to_end_ns = 0, epoch_to_begin_ns = 0;
    };
    std::vector<Item> items;
  };
  void BeginPoll(PollBatch* batch) const;
  static void QueryBatch(EventApi* api, PollBatch* batch);
  void EndPoll(const PollBatch& batch, Measured* out);
  // The same, as one number (a single process whose streams do not overlap: the tests).
  std::uint64_t Poll() {
    Measured m;
    Poll(&m);
    return m.total_ns();
  }

  // Records an epoch event on `stream` (a stream of the tracker's own, idle) and waits for it,
  // reading `now` before and after; its host time is taken as the middle when the two readings
  // are at most `max_window_ns` apart. The previous epoch stays alive for the segments timed
  // against it. False (and the old epoch kept) when it could not be recorded or timed.
  bool Calibrate(void* stream, const std::function<std::uint64_t()>& now,
                 std::uint64_t max_window_ns = 50'000);
  bool HasEpoch() const { return epoch_ >= 0; }
  // Calibrate in three steps, as Poll (PrepareEpoch and InstallEpoch under the caller's mutex,
  // TimeEpoch, which waits for the GPU, outside it).
  struct EpochTiming {
    int event = -1;
    void* handle = nullptr;
    bool recorded = false, timed = false;
    std::uint64_t host_ns = 0, uncertainty_ns = 0;
  };
  bool PrepareEpoch(EpochTiming* timing);
  static void TimeEpoch(EventApi* api, void* stream, const std::function<std::uint64_t()>& now,
                        std::uint64_t max_window_ns, EpochTiming* timing);
  bool InstallEpoch(const EpochTiming& timing);

  std::uint64_t InFlightEstimateNs(std::uint64_t now_ns) const;
  // The launch path's rule: a launch waits while fenced work is in flight and either a stream
  // is still learning its estimate or the estimate reaches `depth_ns` (one segment may always
  // be in flight, so a kernel longer than the depth still runs). A depth of one launch
  // (shm::kDepthOneLaunchUs) waits while anything fenced is in flight.
  static bool OneLaunch(std::uint64_t depth_ns) {
    return depth_ns <= shm::kDepthOneLaunchUs * 1000ULL;
  }
  bool OverDepth(std::uint64_t depth_ns, std::uint64_t now_ns) const {
    if (OneLaunch(depth_ns)) return HasPending();
    return HasPending() && (Learning() || InFlightEstimateNs(now_ns) >= depth_ns);
  }
  // The longest a fenced segment now pending is expected to take (its launches at its stream's
  // estimate; 0 while no estimate is known): how long a wait for it is still normal.
  std::uint64_t LongestPendingEstimateNs() const;
  // Whether a stream still waits for its first completion and already has a fenced segment
  // (not known completed).
  bool Learning() const;
  bool HasFenced() const;
  bool HasPending() const;  // fenced segments not known to have completed (Completed)
  bool HasWork() const;     // fenced or open segments
  std::uint64_t errors() const { return errors_; }
  // What a probe's span holds beyond its kernel, taken off each probe: the two events' own
  // processing and the launch's setup on the GPU. On the H200 a gated bracket exceeds the
  // kernel's CUPTI record by 2.3 us for kernels from 1 us to 120 us (docs/benchmarks.md), several
  // times a small kernel. Set by the caller from its measurements (0: nothing taken off).
  // For kinds with fewer than kMinKindControls controls timed.
  void SetProbeOffsetNs(std::uint64_t ns) { probe_offset_ns_ = ns; }
  std::uint64_t probe_offset_ns() const { return probe_offset_ns_; }
  // The GPU time of the control's empty kernel as a kernel trace reports it (a per-model
  // constant, like the launch's setup: events cannot see a kernel's start).
  void SetControlKernelNs(std::uint64_t ns) { control_kernel_ns_ = ns; }
  // What is taken off a probe of one kind now (its controls', or SetProbeOffsetNs's).
  std::uint64_t KindOffsetNs(std::uint64_t key) const;
  EventApi* api() const { return api_; }
  // What the charges came from, for TESSERA_HOOK_STATS (where a workload's busy time goes).
  struct Stats {
    std::uint64_t segments = 0, probes_exact = 0, probes_inexact = 0, dense = 0;
    std::uint64_t probes_held = 0;  // of the exact ones
    // Probes held only because the newest fences were asked (the polled count said too many).
    std::uint64_t idle_by_query = 0;
    // Held probes whose gate had been opened by the watchdog (a launch blocked behind it): their
    // timings may hold the stall, so they were charged as plain segments, not as probes.
    std::uint64_t holds_broken = 0;
    // Controls timed, and those left out: timed over kMaxControlNs, or their gate opened by the
    // watchdog.
    std::uint64_t controls = 0, controls_left_out = 0;
    std::uint64_t span_ns = 0;      // the completed segments' spans, summed
    std::uint64_t probe_ns = 0;     // charged by probes
    std::uint64_t dense_ns = 0;     // charged by dense segments (their spans)
    std::uint64_t estimate_ns = 0;  // charged by the others (min(span, estimates))
    std::uint64_t dense_launches = 0, estimate_launches = 0;
    std::uint64_t span_bound = 0;  // segments whose span was below their launches' estimates
    // Exact probes by their timing: below 0.5, 1, 2, 4, ... 8,192 us (doubling), and more.
    std::array<std::uint64_t, 16> exact_timings{};
    // The first exact probes timed 32 us or more: when they were fenced (host clock) and their
    // timing, to set beside what else ran then.
    struct Long {
      std::uint64_t fenced_at_ns = 0, timing_ns = 0;
      bool held = false, placed = false;
      // Host clock, from the launch path's first step for it to its fence.
      std::uint64_t host_ns = 0;
      // Where its start event ran against its fence's record (host clock, through the epoch),
      // and how far that placement may be off.
      std::int64_t start_after_fence_ns = 0;
      std::uint64_t uncertainty_ns = 0;
    };
    std::array<Long, 8> long_probes{};  // (one log line: at most 1 KiB)
    std::size_t long_count = 0;
  };
  const Stats& stats() const { return stats_; }
  // The running estimate of one kind's GPU time (0: not measured yet); for tests and doctor.
  double KindEstimateNs(std::uint64_t key) const;

 private:
  struct Segment {
    int begin = -1;  // event indices
    int end = -1;
    int epoch = -1;  // the epoch event its end is timed against (-1: none)
    std::uint32_t launches = 0;
    std::uint32_t unknown = 0;  // launches of kinds with no estimate yet
    double estimate_ns = 0;     // the sum of its launches' estimates (unknown ones excluded)
    bool probe = false;         // one launch fenced on both sides: its span is its GPU time
    // A probe that began where its launch ran: behind a Hold, or at the fence of work still
    // running. Other probes of an idle stream also hold the launch's submission latency.
    bool exact = false;
    std::uint64_t probe_key = 0;
    // An inexact probe: the host time from its start event's record to its launch's return,
    // taken off its span (the GPU ran the start event before the launch reached it).
    std::uint64_t probe_gap_ns = 0;
    std::uint64_t fenced_at_ns = 0;
    std::uint64_t last_launch_ns = 0;  // host clock, when its last launch had been submitted
    // When each launch was submitted and its estimate (LaySubmissions); empty for probes.
    std::uint64_t first_launch_ns = 0;
    std::vector<Submission> submissions;
    bool held = false;              // a probe that was held at the gate
    std::uint64_t begun_at_ns = 0;  // a probe: host clock, when BeforeLaunch took it
    bool control = false;           // our empty kernel alone: times the offset, charges nothing
    std::uint64_t seq = 0;          // the tracker's count of fenced segments when it was fenced
  };
  struct Stream {
    void* handle = nullptr;
    std::deque<Segment> fenced;
    int open_begin = -1;
    std::uint32_t open_launches = 0;
    std::uint32_t open_unknown = 0;
    double open_estimate_ns = 0;
    bool open_probe = false;
    bool open_exact = false;          // the open probe starts right where its launch runs (below)
    std::uint64_t open_begin_ns = 0;  // host clock, before the open probe's start was recorded
    std::uint64_t open_probe_gap_ns = 0;  // Segment::probe_gap_ns of the open probe
    bool holding = false;   // the stream waits at Hold until this probe's fence is recorded
    int reserved_end = -1;  // the held probe's fence event, created before the Hold
    std::uint64_t open_probe_key = 0;
    bool next_is_probe = false;  // BeforeLaunch's findings for AfterLaunch
    std::uint64_t next_key = 0;
    double next_estimate_ns = 0;
    bool next_kind_drawn = false;  // that kind is past its first probes: its probes are drawn
    // The short path's lane (TryContinue): armed by AfterLaunch for the kind `lane_key` under
    // `lane_depth_ns` while lane_generation is the tracker's (0: not armed).
    std::uint64_t lane_generation = 0;
    std::uint64_t lane_key = 0;
    std::uint64_t lane_depth_ns = 0;
    std::uint64_t last_launch_ns = 0;
    std::uint64_t open_first_ns = 0;           // host clock, the open segment's first launch
    std::vector<Submission> open_submissions;  // the open segment's launches (not a probe's)
    std::uint64_t last_probe_ns = 0;           // host clock, when its latest probe began
    // Its newest fence (referenced): the next segment begins there, with no driver call. If
    // the GPU reached it only after that segment's last launch, the host was ahead (dense);
    // otherwise the segment's span holds idle time and its launches' estimates bound it.
    int tail = -1;
    double per_launch_ns = 0;  // mean of its probes; 0: unknown until the first one completes
    // Its fenced segments' estimates and unknown launches, summed (kept as they are pushed and
    // polled), so that what a stream has in flight costs the launch path no walk of them.
    double fenced_estimate_ns = 0;
    std::uint64_t fenced_unknown = 0;
    std::uint64_t fenced_launches = 0;  // ... and their launches (a Hold needs few of them)
    // Its oldest fenced segments known to have completed (a wait returned; Completed), not yet
    // polled: how many, and their estimates and unknown launches, summed.
    std::size_t done = 0;
    double done_estimate_ns = 0;
    std::uint64_t done_unknown = 0;
    // Its segments complete in order (one stream). Not so for a key several of the GPU's streams
    // share (the per-thread default stream of every thread: FenceOptions::shared_key).
    bool ordered = true;
  };
  struct Kind {
    double estimate_ns = 0;  // 0: not measured yet (raw_ns less the kind's offset)
    double raw_ns = 0;       // its probes' running mean, before the offset
    double control_ns = 0;   // its controls' running mean
    std::uint32_t controls = 0;
    std::uint32_t probes = 0;  // probes taken (completed or pending)
    bool exact = false;        // the estimate comes from exact probes
  };
  struct Event {
    void* handle = nullptr;
    int refs = 0;
  };
  // TryContinue's bound on InFlightEstimateNs, shared by the streams' lanes: taken at the first
  // launch that needs it, then grown by the launches the lanes carry and by the time since on
  // each aging stream; invalid after anything else changes what is in flight.
  struct Bound {
    bool valid = false;
    bool pending = false;  // HasPending when taken (else OverDepth cannot hold)
    double in_flight_ns = 0;
    double aging = 0;
    std::uint64_t at_ns = 0;
  };
  // A stream's lane ends with its segment (Close, Drop), or with the usual path's launch on it;
  // every lane ends when the estimates change (a poll's results, the kinds starting again).
  void Disarm(Stream& s) {
    s.lane_generation = 0;
    bound_.valid = false;
  }
  void DisarmAll() {
    ++lane_generation_;
    bound_.valid = false;
  }
  Stream* FindStream(void* handle);  // (never adds one)
  void Arm(Stream& s, std::uint64_t depth_ns);
  // AfterLaunch's part once the launch is known to belong to the open segment: it joins it, and
  // the segment is fenced where it is long enough.
  void Append(Stream& s, std::uint64_t now_ns, std::uint64_t depth_ns);
  Stream& StreamFor(void* handle);
  int NewEvent();
  void Ref(int e) { ++events_[static_cast<std::size_t>(e)].refs; }
  void Unref(int e);
  // An event whose record failed (a destroyed stream or context): destroyed, never reused.
  void Discard(int e);
  void Close(Stream& s, std::uint64_t now_ns);
  void Drop(Stream& s);
  bool ReleaseHold(Stream& s);  // false: the gate had been opened before (Release)
  void MarkCompleted(Stream& s, std::uint64_t ticket);  // Completed, one stream
  // Starts the open segment of an idle stream at a new event (behind a Hold for a probe).
  bool StartAtNewEvent(Stream& s, bool probe);
  double Estimate(const Stream& s) const;
  double PendingNs(const Stream& s, const Segment& seg) const;
  double FencedPendingNs(const Stream& s) const;  // PendingNs of all its fenced segments
  Kind& KindFor(std::uint64_t key);  // (past kMaxKinds kinds, the estimates start again)
  bool ShouldProbe(Kind& kind, Stream& s, std::uint64_t now_ns);
  std::uint64_t NextRandom();        // xorshift64
  std::uint64_t PeekRandom() const;  // what NextRandom would return
  // Makes the held probe just started on `s` a control: the empty kernel and the reserved fence
  // behind its start, the gate released, and the launch to come begun at that fence as a plain
  // segment. false: no control could be launched (it stays a probe).
  bool TakeControl(Stream& s, std::uint64_t now_ns);
  void AddControlTiming(Kind& kind, std::uint64_t span_ns);
  std::uint64_t OffsetOf(const Kind& kind) const;
  // Whether few enough launches are in flight on the device for a probe to be held (asks the
  // newest fences when the polled count says otherwise; a probe's, so rare). `asked`: the fences
  // were asked.
  bool FewLaunchesInFlight(bool* asked);
  std::uint64_t Charge(const Stream& s, const Segment& seg, std::uint64_t span_ns,
                       bool dense) const;
  std::uint64_t ProbeNs(const Segment& seg, std::uint64_t span_ns) const;  // its launch's time
  void SetTail(Stream& s, int event);
  // Whether the stream's fenced work is expected to run still (its launches' estimates).
  bool ExpectedBusy(const Stream& s, std::uint64_t now_ns) const;

  EventApi* api_;
  FenceOptions options_;
  std::vector<Stream> streams_;
  std::vector<std::vector<Submission>> spare_submissions_;  // polled segments', to reuse
  std::vector<double> lay_scratch_;                         // LayCharge's, reused
  std::size_t last_stream_ = 0;  // StreamFor's latest answer (an index: checked before use)
  std::vector<Event> events_;
  std::vector<int> free_events_;
  // The kinds' estimates: open addressing on the key (already a mixed hash), linear probing, in
  // one array (a launch looks its kind up: no node to chase, as a map's would be).
  struct KindSlot {
    std::uint64_t key = 0;
    bool used = false;
    Kind kind;
  };
  std::vector<KindSlot> kinds_;
  std::size_t kind_count_ = 0;
  // The slot holding `key`, or the empty one where it would go (kinds_ not empty).
  std::size_t SlotOf(std::uint64_t key) const;
  std::uint64_t rng_;
  int epoch_ = -1;
  std::uint64_t probe_offset_ns_ = 0;
  std::uint64_t control_kernel_ns_ = 0;
  struct Epoch {
    std::uint64_t host_ns = 0;         // the host time the epoch event ran at
    std::uint64_t uncertainty_ns = 0;  // how far that may be off (half the window, a margin)
  };
  std::unordered_map<int, Epoch> epoch_hosts_;  // live epoch events -> their host time
  std::uint64_t errors_ = 0;
  std::uint64_t next_seq_ = 0;         // segments fenced so far (Segment::seq, Ticket)
  std::uint64_t lane_generation_ = 1;  // a stream's lane is armed while it holds this
  std::size_t lane_stream_ = 0;        // TryContinue's stream, for ContinuedLaunch
  Bound bound_;
  Stats stats_;
};

// The kind of a kernel launch: its function and its grid and block (one function launched on
// different sizes takes different times). Never 0.
std::uint64_t LaunchKey(const void* function, std::uint64_t grid, std::uint64_t block);
// The kind of a graph launch: the executable graph.
std::uint64_t GraphKey(const void* exec);

}  // namespace tessera::governor
