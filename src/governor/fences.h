// Sparse event fences: how a process measures the GPU time its own work took, per stream,
// without trusting launch counts or NVML samples (HAMi's counter-example, ADR 0017).
//
// The launches of a stream are grouped into segments. A segment begins either where the previous
// one on the stream ended (the stream was still busy: contiguous) or at a start event recorded
// just before its first launch (the stream was idle); it ends at a fence event recorded after
// the launch that made its estimated work reach `quantum_ns`, or before anything waits on the
// stream. When a segment's fence completes, its GPU time is the elapsed time between the two
// events (GPU timestamps, not host polling), and the stream's estimate of the time per launch
// is updated from it. So a stream records about one event per `quantum_ns` of work.
//
// The estimate of work in flight, which the launch path keeps under the arbiter's depth, is
// the launches not yet completed times the per-launch estimate, bounded below by the age of
// the oldest pending segment; until a stream's first segment completes, the estimate is
// unknown and one fenced segment is in flight at a time.
//
// Not thread-safe: the preload library serializes its launch path and its watcher thread.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

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
};

struct FenceOptions {
  std::uint64_t quantum_ns = 200'000;  // estimated work per segment
  std::uint32_t max_segment_launches = 64;
};

class FenceTracker {
 public:
  explicit FenceTracker(EventApi* api, FenceOptions options = {}) : api_(api), options_(options) {}
  ~FenceTracker();
  FenceTracker(const FenceTracker&) = delete;
  FenceTracker& operator=(const FenceTracker&) = delete;

  // Around each launch on `stream`. BeforeLaunch returns false when no start event could be
  // recorded (the launch then goes unmeasured; the caller counts a machinery error).
  bool BeforeLaunch(void* stream, std::uint64_t now_ns);
  void AfterLaunch(void* stream, std::uint64_t now_ns);
  // Closes the open segment of one stream / of every stream (before something waits on them),
  // where `may_record` allows a fence (not into a stream being captured); elsewhere the open
  // segment is dropped unmeasured.
  using MayRecord = bool (*)(void* stream);
  static bool AlwaysRecord(void*) { return true; }
  void Fence(void* stream, std::uint64_t now_ns, MayRecord may_record = AlwaysRecord);
  void FenceAll(std::uint64_t now_ns, MayRecord may_record = AlwaysRecord);
  // Fences the open segments whose latest launch is older than `idle_ns` (work launched and then
  // left without a synchronize), on the streams `may_record` allows. Such a late fence may sit
  // after idle time, so its segment counts no more than its launches at the stream's estimate.
  void FenceIdle(std::uint64_t now_ns, std::uint64_t idle_ns, MayRecord may_record);

  // Takes completed segments: returns the GPU time they measured.
  std::uint64_t Poll();

  std::uint64_t InFlightEstimateNs(std::uint64_t now_ns) const;
  // The launch path's rule: a launch waits while fenced work is in flight and either a stream
  // is still learning its estimate or the estimate reaches `depth_ns` (one segment may always
  // be in flight, so a kernel longer than the depth still runs).
  bool OverDepth(std::uint64_t depth_ns, std::uint64_t now_ns) const {
    return HasFenced() && (Learning() || InFlightEstimateNs(now_ns) >= depth_ns);
  }
  // The longest a fenced segment now pending is expected to take (its launches at its stream's
  // estimate; 0 while no estimate is known): how long a wait for it is still normal.
  std::uint64_t LongestPendingEstimateNs() const;
  // Whether a stream still waits for its first completion and already has a fenced segment.
  bool Learning() const;
  bool HasFenced() const;
  bool HasWork() const;  // fenced or open segments
  std::uint64_t errors() const { return errors_; }

 private:
  struct Segment {
    int begin = -1;  // event indices
    int end = -1;
    std::uint32_t launches = 0;
    std::uint64_t fenced_at_ns = 0;
    bool late = false;
  };
  struct Stream {
    void* handle = nullptr;
    std::deque<Segment> fenced;
    int open_begin = -1;
    std::uint32_t open_launches = 0;
    std::uint64_t last_launch_ns = 0;
    double per_launch_ns = 0;  // 0: unknown until the first completion
  };
  struct Event {
    void* handle = nullptr;
    int refs = 0;
  };
  Stream& StreamFor(void* handle);
  int NewEvent();
  void Ref(int e) { ++events_[static_cast<std::size_t>(e)].refs; }
  void Unref(int e);
  // An event whose record failed (a destroyed stream or context): destroyed, never reused.
  void Discard(int e);
  void Close(Stream& s, std::uint64_t now_ns, bool late = false);
  void Drop(Stream& s);
  double Estimate(const Stream& s) const;

  EventApi* api_;
  FenceOptions options_;
  std::vector<Stream> streams_;
  std::vector<Event> events_;
  std::vector<int> free_events_;
  std::uint64_t errors_ = 0;
};

}  // namespace tessera::governor
