#include "governor/arbiter.h"

#include <algorithm>
#include <limits>

namespace tessera::governor {
namespace {

// Priority classes are listed highest first (model.h), so a smaller value outranks.
bool Outranks(PriorityClass a, PriorityClass b) {
  return static_cast<int>(a) < static_cast<int>(b);
}

bool Recent(std::uint64_t stamp_ns, std::uint64_t now_ns, std::uint64_t window_ns) {
  return stamp_ns != 0 && stamp_ns + window_ns >= now_ns;
}

bool HasShare(const Tenant& t) { return t.cores_percent > 0 && t.cores_percent < 100; }

}  // namespace

Arbiter::Entry* Arbiter::Find(int id) {
  for (Entry& e : entries_) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

const Arbiter::Entry* Arbiter::Find(int id) const { return const_cast<Arbiter*>(this)->Find(id); }

bool Arbiter::Has(int id) const { return Find(id) != nullptr; }

double Arbiter::BurstNs(const Entry& e) const {
  const double window = e.tenant.window_ms != 0 ? static_cast<double>(e.tenant.window_ms) * 1e6
                                                : static_cast<double>(options_.burst_ns);
  return e.tenant.cores_percent / 100.0 * window;
}

double Arbiter::Weight(const Entry& e) const {
  const std::uint32_t percent =
      e.tenant.cores_percent > 0 ? e.tenant.cores_percent : options_.default_weight_percent;
  return std::max<std::uint32_t>(percent, 1) / 100.0;
}

void Arbiter::Join(int id, const Tenant& tenant) {
  if (Entry* e = Find(id)) {
    e->tenant = tenant;
    return;
  }
  Entry e;
  e.id = id;
  e.tenant = tenant;
  e.tokens_ns = BurstNs(e);
  // A newcomer starts at the lowest virtual time of those present: it gets no credit for the
  // past, and owes nothing either.
  double v = std::numeric_limits<double>::max();
  for (const Entry& other : entries_) v = std::min(v, other.vtime);
  e.vtime = entries_.empty() ? 0 : v;
  entries_.push_back(e);
}

void Arbiter::Leave(int id) {
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
  if (turn_ == id) turn_ = -1;
}

void Arbiter::Observe(int id, const Observation& observation) {
  if (Entry* e = Find(id)) e->seen = observation;
}

Verdict Arbiter::VerdictFor(int id) const {
  const Entry* e = Find(id);
  return e == nullptr ? Verdict{} : e->verdict;
}

void Arbiter::Decide(std::uint64_t now_ns) {
  const double dt =
      last_now_ns_ == 0 || now_ns < last_now_ns_ ? 0.0 : static_cast<double>(now_ns - last_now_ns_);
  last_now_ns_ = now_ns;

  // 1. Charge the GPU time measured since the last decision; refill the buckets.
  for (Entry& e : entries_) {
    const std::uint64_t busy = e.seen.busy_ns;
    const double charged =
        busy >= e.counted_busy_ns ? static_cast<double>(busy - e.counted_busy_ns) : 0.0;
    e.counted_busy_ns = busy;  // a counter that went backwards (a new region) re-syncs
    if (HasShare(e.tenant) && e.tenant.compute == ComputeMode::kHard && e.tenant.window_ms != 0) {
      // A windowed share: a budget of share x window per period of `window`, as a CFS quota.
      // Debt (a kernel that ran past the budget) carries into the next period, credit does not.
      const double period = static_cast<double>(e.tenant.window_ms) * 1e6;
      e.tokens_ns -= charged;
      if (e.period_start_ns == 0 || static_cast<double>(now_ns - e.period_start_ns) >= period) {
        const bool late =
            e.period_start_ns == 0 || static_cast<double>(now_ns - e.period_start_ns) >= 2 * period;
        e.period_start_ns = late ? now_ns : e.period_start_ns + e.tenant.window_ms * 1'000'000ULL;
        e.tokens_ns = std::min(e.tokens_ns, 0.0) + BurstNs(e);
      }
    } else if (HasShare(e.tenant)) {
      // Idle credit is capped (a burst at most); while the container wants the GPU nothing is
      // clipped, since a long kernel's time is charged only when it completes.
      const double share = e.tenant.cores_percent / 100.0;
      const double burst = BurstNs(e);
      e.tokens_ns += share * dt - charged;
      if (!e.wanting) e.tokens_ns = std::min(e.tokens_ns, burst);
      // A work-conserving share borrows without debt: what it used beyond its share while
      // capacity was idle is not paid back later (its bucket bites only while it is capped).
      if (e.tenant.compute == ComputeMode::kWorkConserving)
        e.tokens_ns = std::max(e.tokens_ns, -burst);
    }
    e.vtime += charged / Weight(e);
  }

  // 2. Who wants the GPU: launched, has work in flight or waits at the gate, recently. A
  // container waiting only for its own spent hard share does not hold back lower classes.
  bool any_share_cap = false, lc_present = false, lc_wanting = false, normal_wanting = false;
  for (Entry& e : entries_) {
    const bool wanting =
        Recent(std::max(e.seen.active_ns, e.seen.waiting_ns), now_ns, options_.idle_after_ns);
    if (wanting && !e.wanting) {  // back from idle: no banked credit
      double others = std::numeric_limits<double>::max();
      for (const Entry& o : entries_) {
        if (&o != &e && o.wanting) others = std::min(others, o.vtime);
      }
      if (others != std::numeric_limits<double>::max()) e.vtime = std::max(e.vtime, others);
    }
    e.wanting = wanting;
    const bool spent =
        HasShare(e.tenant) && e.tenant.compute == ComputeMode::kHard && e.tokens_ns <= 0;
    const PriorityClass p = e.tenant.priority;
    lc_present |= p == PriorityClass::kLatencyCritical;
    lc_wanting |= wanting && !spent && p == PriorityClass::kLatencyCritical;
    normal_wanting |= wanting && !spent && p == PriorityClass::kNormal;
    any_share_cap |= HasShare(e.tenant) && e.tenant.compute == ComputeMode::kHard;
  }
  governing_ = entries_.size() > 1 || any_share_cap;
  if (!governing_) {
    for (Entry& e : entries_) e.verdict = Verdict{shm::Gate::kFree, 0};
    turn_ = -1;
    return;
  }

  // 3. Eligibility: priority first, then the hard shares (a best-effort share is hard while
  // normal work wants the GPU: best-effort never borrows from it).
  std::vector<Entry*> candidates;
  for (Entry& e : entries_) {
    const PriorityClass p = e.tenant.priority;
    const bool capped = HasShare(e.tenant) && (e.tenant.compute == ComputeMode::kHard ||
                                               (p == PriorityClass::kBestEffort && normal_wanting));
    shm::Gate gate = shm::Gate::kOpen;
    if (lc_wanting && Outranks(PriorityClass::kLatencyCritical, p) && !e.tenant.yields_sms) {
      gate = shm::Gate::kHeldPriority;
    } else if (p == PriorityClass::kBestEffort && normal_wanting && !HasShare(e.tenant)) {
      gate = shm::Gate::kHeldPriority;
    } else if (capped && e.tokens_ns <= 0) {
      gate = shm::Gate::kHeldShare;
    } else if (e.wanting && !e.tenant.spatial) {
      candidates.push_back(&e);
    }
    const bool shallow = lc_present && p != PriorityClass::kLatencyCritical && !e.tenant.yields_sms;
    e.verdict = Verdict{gate, shallow               ? options_.shallow_depth_us
                              : e.tenant.yields_sms ? options_.spatial_depth_us
                                                    : options_.depth_us};
  }

  // 4. Turns: one eligible container at a time when several want the GPU.
  if (candidates.empty()) {
    turn_ = -1;
    draining_ = -1;
    return;  // every eligible container stays open
  }
  Entry* next = candidates.front();
  if (candidates.size() > 1) {
    Entry* holder = nullptr;
    for (Entry* e : candidates) {
      if (e->id == turn_) holder = e;
      if (e->vtime < next->vtime) next = e;
    }
    if (holder != nullptr) {
      double others_min = std::numeric_limits<double>::max();
      for (Entry* e : candidates) {
        if (e != holder) others_min = std::min(others_min, e->vtime);
      }
      if (holder->vtime - others_min < static_cast<double>(options_.quantum_ns) &&
          now_ns - turn_since_ns_ < options_.max_turn_ns) {
        next = holder;
      } else if (next == holder) {  // its wall time is up: the lowest of the others
        next = nullptr;
        for (Entry* e : candidates) {
          if (e != holder && (next == nullptr || e->vtime < next->vtime)) next = e;
        }
      }
    }
  }
  if (next->id != turn_) {
    if (turn_ >= 0) draining_ = turn_;
    turn_ = next->id;
    turn_since_ns_ = now_ns;
  }
  if (draining_ == next->id) draining_ = -1;
  // Latency-critical work does not wait for the drain: its latency matters more than an exact
  // charge for the overlap.
  if (next->tenant.priority == PriorityClass::kLatencyCritical) draining_ = -1;
  // The new holder waits while the previous one's work in flight drains.
  const Entry* previous = draining_ >= 0 ? Find(draining_) : nullptr;
  if (previous != nullptr && Recent(previous->seen.active_ns, now_ns, options_.handoff_drain_ns) &&
      now_ns - turn_since_ns_ < options_.max_drain_ns) {
    next->verdict.gate = shm::Gate::kHeldShare;
    if (candidates.size() == 1) return;
    next = nullptr;
  } else {
    draining_ = -1;
    if (candidates.size() == 1)
      return;  // the one candidate, and every idle eligible one, stay open
  }
  // Everyone else waits for the turn, except an idle latency-critical container: its next
  // launch must not wait for a decision (the following one holds the others instead).
  for (Entry& e : entries_) {
    const bool idle_lc = e.tenant.priority == PriorityClass::kLatencyCritical && !e.wanting;
    if (&e != next && e.verdict.gate == shm::Gate::kOpen && !idle_lc && !e.tenant.spatial) {
      e.verdict.gate = shm::Gate::kHeldShare;
    }
  }
}

}  // namespace tessera::governor
