#include "agent/compute_drift.h"

#include <algorithm>
#include <cstdio>

namespace tessera::agent {
namespace {

// Two samples of one process closer than this are not the driver's sampling period.
constexpr std::uint64_t kMinSamplePeriodUs = 10'000;
constexpr std::size_t kGapsKept = 64;  // the recent gaps the period is the median of

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f %%", 100 * fraction);
  return text;
}

std::string Pids(const std::vector<unsigned int>& pids) {
  std::string out;
  for (unsigned int pid : pids) out += (out.empty() ? "" : ", ") + std::to_string(pid);
  return out;
}

}  // namespace

std::string_view Name(ComputeFinding::Kind kind) {
  switch (kind) {
    case ComputeFinding::Kind::kOverHardShare:
      return "over-hard-share";
    case ComputeFinding::Kind::kTookFromWaiting:
      return "took-from-waiting";
    case ComputeFinding::Kind::kUngoverned:
      return "ungoverned-process";
    case ComputeFinding::Kind::kNoSamples:
      return "no-samples";
  }
  return "unknown";
}

std::string ComputeFinding::Describe() const {
  switch (kind) {
    case Kind::kOverHardShare:
      return "its processes ran on the SMs of " + uuid + " " + Percent(used) +
             " of the time (NVML) under a hard share of " + Percent(allowed) +
             ": a rewritten gate or a process outside tessera's library";
    case Kind::kTookFromWaiting:
      return "its processes ran on the SMs of " + uuid + " " + Percent(used) +
             " of the time (NVML), above its work-conserving share of " + Percent(allowed) +
             ", while " + waiting + " waited for the GPU below its own share";
    case Kind::kUngoverned:
      return "process(es) " + Pids(pids) + " ran on the SMs of " + uuid + " " + Percent(used) +
             " of the time (NVML) without tessera's library (no slot in the container's region)";
    case Kind::kNoSamples:
      return "NVML's per-process utilization of " + uuid + " could not be read (" + detail +
             "): compute drift on this GPU is not checked";
  }
  return {};
}

void ComputeDrift::Trim(TenantState& t, std::uint64_t now_us) const {
  const std::uint64_t start = now_us > options_.window_us ? now_us - options_.window_us : 0;
  while (!t.busy.empty() && t.busy.front().at_us <= start) t.busy.pop_front();
  // The throttled time is a running total: keep the newest reading at or before the window's
  // start as its baseline.
  while (t.waited.size() > 1 && t.waited[1].first <= start) t.waited.pop_front();
}

double ComputeDrift::WaitedFraction(const TenantState& t) const {
  if (t.waited.size() < 2 || t.waited.back().first <= t.waited.front().first) return 0;
  const std::uint64_t rose =
      t.waited.back().second - std::min(t.waited.back().second, t.waited.front().second);
  return static_cast<double>(rose) / 1e3 /
         static_cast<double>(t.waited.back().first - t.waited.front().first);
}

std::uint64_t ComputeDrift::PeriodOf(const std::string& uuid) const {
  const auto it = gaps_us_.find(uuid);
  if (it == gaps_us_.end() || it->second.empty()) return options_.max_sample_period_us;
  std::vector<std::uint64_t> gaps(it->second.begin(), it->second.end());
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  return gaps[gaps.size() / 2];
}

void ComputeDrift::Take(
    const std::string& uuid, const std::vector<UtilizationSample>& list,
    const std::map<std::pair<std::string, unsigned int>, const ComputeTenant*>& owner) {
  std::vector<UtilizationSample> sorted = list;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  std::uint64_t& seen = last_seen_[uuid];
  const std::uint64_t before = seen;
  // The driver's sampling period: the median of the recent gaps between two samples of one
  // process (a process that idled between two samples has a longer gap, an odd pair a shorter).
  std::deque<std::uint64_t>& gaps = gaps_us_[uuid];
  std::map<unsigned int, std::uint64_t> previous_in_batch;
  for (const UtilizationSample& s : sorted) {
    if (s.timestamp_us <= before) continue;
    const auto last = last_sample_.find({uuid, s.pid});
    std::uint64_t& previous =
        previous_in_batch.try_emplace(s.pid, last == last_sample_.end() ? 0 : last->second)
            .first->second;
    const std::uint64_t gap =
        previous == 0 ? 0 : s.timestamp_us - std::min(s.timestamp_us, previous);
    if (gap >= kMinSamplePeriodUs && gap <= options_.max_sample_period_us) {
      gaps.push_back(gap);
      if (gaps.size() > kGapsKept) gaps.pop_front();
    }
    previous = s.timestamp_us;
  }
  const std::uint64_t period = PeriodOf(uuid);
  // What each tenant was credited per stamp: its processes add up to at most the period (under
  // MPS the largest counts).
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> stamped;
  for (const UtilizationSample& s : sorted) {
    if (s.timestamp_us <= before) continue;  // read before
    seen = std::max(seen, s.timestamp_us);
    std::uint64_t& previous = last_sample_[{uuid, s.pid}];
    // A sample's percentage is of the period that ends at its stamp: at most one period back,
    // and not before the process's previous sample.
    const std::uint64_t credited =
        previous == 0 ? period
                      : std::min(s.timestamp_us - std::min(s.timestamp_us, previous), period);
    previous = s.timestamp_us;
    const auto it = owner.find({uuid, s.pid});
    if (it == owner.end() || s.timestamp_us < start_us_) continue;
    const ComputeTenant& t = *it->second;
    const std::uint64_t busy = std::min(s.sm_percent, 100U) * credited / 100;
    std::uint64_t& so_far = stamped[{t.key, s.timestamp_us}];
    const std::uint64_t added = t.spatial ? busy - std::min(busy, so_far)
                                          : std::min(busy, period - std::min(period, so_far));
    so_far = t.spatial ? std::max(so_far, busy) : so_far + added;
    if (added > 0)
      tenants_[t.key].busy.push_back(
          {s.timestamp_us, added, t.ungoverned.count(s.pid) != 0, s.pid});
  }
}

std::vector<ComputeFinding> ComputeDrift::Evaluate(
    std::uint64_t now_us, const std::vector<ComputeTenant>& tenants,
    const std::map<std::string, std::vector<UtilizationSample>>& samples,
    const std::map<std::string, std::string>& errors) {
  // The first evaluation, or a wall clock stepped back: samples count from one period before now.
  if (start_us_ == 0 || now_us < last_eval_us_) {
    last_seen_.clear();
    last_sample_.clear();
    tenants_.clear();
    start_us_ = now_us > options_.max_sample_period_us ? now_us - options_.max_sample_period_us : 1;
  }
  last_eval_us_ = now_us;
  // Who owns each process of each GPU.
  std::map<std::pair<std::string, unsigned int>, const ComputeTenant*> owner;
  for (const ComputeTenant& t : tenants) {
    for (unsigned int pid : t.pids) owner[{t.uuid, pid}] = &t;
  }
  for (const auto& [uuid, list] : samples) Take(uuid, list, owner);
  // Processes not sampled for two windows are forgotten (their next sample counts as a first).
  const std::uint64_t forget =
      now_us > 2 * options_.window_us ? now_us - 2 * options_.window_us : 0;
  std::erase_if(last_sample_, [forget](const auto& entry) { return entry.second < forget; });

  // Each tenant's use over the window. A tenant missing from this evaluation (its GPU did not
  // answer) keeps its state until its window is empty.
  std::set<std::string> present;
  for (const ComputeTenant& t : tenants) {
    present.insert(t.key);
    tenants_[t.key].waited.emplace_back(now_us, t.waited_ns);
  }
  for (auto& [key, state] : tenants_) {
    Trim(state, now_us);
    std::uint64_t busy = 0, ungoverned = 0;
    for (const Busy& b : state.busy) {
      busy += b.busy_us;
      if (b.ungoverned) ungoverned += b.busy_us;
    }
    state.used = static_cast<double>(busy) / static_cast<double>(options_.window_us);
    state.used_ungoverned =
        static_cast<double>(ungoverned) / static_cast<double>(options_.window_us);
  }
  std::erase_if(tenants_, [&present](const auto& entry) {
    return !present.contains(entry.first) && entry.second.busy.empty();
  });

  // The conditions now.
  std::vector<ComputeFinding> now;
  const auto finding = [&now](ComputeFinding::Kind kind, const ComputeTenant& t, double used) {
    ComputeFinding& f = now.emplace_back();
    f.kind = kind;
    f.key = t.key;
    f.uuid = t.uuid;
    f.used = used;
    f.pids.assign(t.pids.begin(), t.pids.end());
    return &f;
  };
  for (const ComputeTenant& t : tenants) {
    const TenantState& state = tenants_[t.key];
    const double share = t.share_percent / 100.0;
    if (t.share_percent != 0 && state.used > share + options_.margin) {
      if (t.mode == ComputeMode::kHard) {
        finding(ComputeFinding::Kind::kOverHardShare, t, state.used)->allowed = share;
      } else {
        for (const ComputeTenant& other : tenants) {
          if (&other == &t || other.uuid != t.uuid || other.share_percent == 0) continue;
          const TenantState& o = tenants_[other.key];
          if (o.used < other.share_percent / 100.0 - options_.margin &&
              WaitedFraction(o) >= options_.min_waited) {
            ComputeFinding* f = finding(ComputeFinding::Kind::kTookFromWaiting, t, state.used);
            f->allowed = share;
            f->waiting = other.key;
            f->enforceable = false;
            break;
          }
        }
      }
    }
    if (state.used_ungoverned >= options_.min_ungoverned) {
      std::set<unsigned int> ran;  // the ones that ran, and are its ungoverned processes now
      for (const Busy& b : state.busy) {
        if (b.ungoverned && t.ungoverned.count(b.pid) != 0) ran.insert(b.pid);
      }
      if (!ran.empty())
        finding(ComputeFinding::Kind::kUngoverned, t, state.used_ungoverned)
            ->pids.assign(ran.begin(), ran.end());
    }
  }
  for (const auto& [uuid, why] : errors) {
    ComputeFinding& f = now.emplace_back();
    f.kind = ComputeFinding::Kind::kNoSamples;
    f.uuid = uuid;
    f.detail = why;
    f.enforceable = false;
  }

  // Episodes: one begins when its condition holds and none is in progress; it ends once the
  // condition has not held for a whole window.
  std::erase_if(flagged_,
                [&](const auto& entry) { return now_us >= entry.second + options_.window_us; });
  std::vector<ComputeFinding> begun;
  for (ComputeFinding& f : now) {
    const std::pair<std::string, ComputeFinding::Kind> id{f.key.empty() ? f.uuid : f.key, f.kind};
    const bool in_progress = flagged_.contains(id);
    flagged_[id] = now_us;
    if (!in_progress) begun.push_back(std::move(f));
  }
  return begun;
}

std::uint64_t ComputeDrift::LastSeen(const std::string& uuid) const {
  const auto it = last_seen_.find(uuid);
  return it == last_seen_.end() ? 0 : it->second;
}

double ComputeDrift::Used(const std::string& key) const {
  const auto it = tenants_.find(key);
  return it == tenants_.end() ? 0 : it->second.used;
}

bool ComputeDrift::Flagged(const std::string& key, ComputeFinding::Kind kind) const {
  return flagged_.contains({key, kind});
}

}  // namespace tessera::agent
