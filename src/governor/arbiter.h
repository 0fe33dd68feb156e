// The arbiter of one GPU: decides, every tick, which containers may launch work on it.
// Pure logic over numbers (no clock, no shared memory, no threads): ArbiterHost feeds it the
// containers' counters from their shared regions and writes the verdicts back; the tests feed
// it a simulated GPU. docs/design/0017-compute-governor.md explains the policy:
//
//   1. Priority: while a latency-critical container is active (work in flight or launched in
//      the last `idle_after_ns`), every lower class is held. While a normal container is active,
//      best-effort containers get their share and no more (they never borrow from normal work);
//      a best-effort container without a share waits.
//   2. Hard shares: a token bucket per container, filled at its share of wall time and drained
//      by the GPU time its work measured; empty bucket -> held.
//   3. Turns: when two or more eligible containers want the GPU, exactly one holds it at a time
//      (concurrent contexts would each measure the time they were sliced out as busy). The turn
//      goes to the lowest virtual time (busy / weight), and passes once the holder leads the
//      next one by `quantum_ns` of virtual time, or after `max_turn_ns` of wall time (a holder
//      whose measured time stops growing — a fault, a kernel that never ends — cannot keep it);
//      a container returning from idle starts at the
//      others' virtual time, so idle time is never banked (work-conserving lending). The next
//      holder's gate opens only once the previous holder's work in flight has drained (its
//      activity stamp is `handoff_drain_ns` old): overlapping work would be charged to both.
//      MPS clients (spatial) share the SMs instead and take no part in turns.
//   4. Depth: how much work each container may keep in flight; one launch for classes below a
//      latency-critical container on the GPU, so that its arrival waits for little (MPS clients
//      that leave it its SMs excepted: they are not held for priority either).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/model.h"
#include "tessera/shm_layout.h"

namespace tessera::governor {

struct ArbiterOptions {
  std::uint64_t idle_after_ns = 1'000'000;  // no launch and nothing in flight for this long
  std::uint64_t quantum_ns = 10'000'000;    // virtual time a turn may lead by
  std::uint64_t burst_ns = 50'000'000;      // a hard share's bucket: share x this window
  std::uint32_t depth_us = 2000;            // in-flight work of a governed container
  // ... below a latency-critical one on the GPU: kOneLaunchDepthUs keeps one launch in flight,
  // so that an LC arrival waits for at most one of their launches.
  std::uint32_t shallow_depth_us = shm::kDepthOneLaunchUs;
  // ... of an MPS client that leaves latency-critical clients their SMs: deep, so that a hog of
  // kernels longer than depth_us still keeps one queued behind the one running (no gap).
  std::uint32_t spatial_depth_us = 20000;
  std::uint32_t default_weight_percent = 10;  // turn weight of a container without a share
  std::uint64_t handoff_drain_ns = 250'000;   // a turn passes once the last holder's work drained
  std::uint64_t max_turn_ns = 50'000'000;     // wall time a turn lasts at most while others wait
  std::uint64_t max_drain_ns = 5'000'000;     // the hand-off waits at most this long for a drain
};

// What the node knows of a container on this GPU (from its read-only limits file).
struct Tenant {
  std::uint32_t cores_percent = 0;  // 0: no share (weight default_weight_percent, no cap)
  ComputeMode compute = ComputeMode::kHard;
  PriorityClass priority = PriorityClass::kNormal;
  bool spatial = false;  // an MPS client: runs beside the others, takes no part in turns
  // An MPS client whose SM limit leaves latency-critical clients their reserve (mps.h,
  // YieldsSms): not held for priority, and keeps its full depth; the SMs protect them.
  bool yields_sms = false;
  // A hard share's period in ms (0: a bucket of cores% x ArbiterOptions::burst_ns refilled
  // continuously): cores% x this of GPU time per period, then held until the next one, as a CFS
  // quota. Periods of about a second let the GPU's clock follow the share (a power-bound kernel
  // then gets its share of work, not more).
  std::uint32_t window_ms = 0;
};

// What the container's processes reported (its region's Compute counters).
struct Observation {
  std::uint64_t busy_ns = 0;     // cumulative
  std::uint64_t active_ns = 0;   // latest launch or in-flight moment
  std::uint64_t waiting_ns = 0;  // latest moment a launch waited
};

struct Verdict {
  shm::Gate gate = shm::Gate::kFree;
  std::uint32_t depth_us = 0;
};

class Arbiter {
 public:
  explicit Arbiter(ArbiterOptions options = {}) : options_(options) {}

  // A container arrives on the GPU / leaves it. Ids are the caller's (stable while joined).
  void Join(int id, const Tenant& tenant);
  void Leave(int id);
  bool Has(int id) const;
  std::size_t size() const { return entries_.size(); }

  // One decision at `now_ns` from each joined container's latest observation (containers not
  // observed since the last decision keep their previous numbers).
  void Observe(int id, const Observation& observation);
  void Decide(std::uint64_t now_ns);
  Verdict VerdictFor(int id) const;

  // Whether any container needs governing: false when one container without a hard share is
  // alone on the GPU (its launches then run free, with no fences at all).
  bool Governing() const { return governing_; }

 private:
  struct Entry {
    int id = 0;
    Tenant tenant;
    Observation seen;
    std::uint64_t counted_busy_ns = 0;  // busy already charged
    double tokens_ns = 0;               // hard share's bucket
    double vtime = 0;                   // busy / weight
    bool wanting = false;               // wanted the GPU at the previous decision
    std::uint64_t period_start_ns = 0;  // a windowed hard share's current period
    Verdict verdict;
  };
  Entry* Find(int id);
  const Entry* Find(int id) const;
  double Weight(const Entry& e) const;
  // The bucket of a share: cores% x its window (or burst_ns).
  double BurstNs(const Entry& e) const;

  ArbiterOptions options_;
  std::vector<Entry> entries_;
  std::uint64_t last_now_ns_ = 0;
  int turn_ = -1;                    // id holding the turn, -1 none
  std::uint64_t turn_since_ns_ = 0;  // when the current turn began (and the drain with it)
  int draining_ = -1;                // the previous holder, while its work in flight drains
  bool governing_ = false;
};

}  // namespace tessera::governor
