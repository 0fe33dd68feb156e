#include "agent/compute_drift.h"

#include <algorithm>
#include <cstdio>

namespace tessera::agent {
namespace {

// Two samples of one process closer than this are not the driver's sampling period.
constexpr std::uint64_t kMinSamplePeriodUs = 10'000;

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
  // The held time is a running total: keep the newest reading at or before the window's start
  // as its baseline.
  while (t.waited.size() > 1 && t.waited[1].first <= start) t.waited.pop_front();
}

double ComputeDrift::WaitedFraction(const TenantState& t) const {
  if (t.waited.size() < 2) return 0;
  const std::uint64_t rose =
      t.waited.back().second - std::min(t.waited.back().second, t.waited.front().second);
  return static_cast<double>(rose) / 1e3 / static_cast<double>(options_.window_us);
}

std::vector<ComputeFinding> ComputeDrift::Evaluate(
    std::uint64_t now_us, const std::vector<ComputeTenant>& tenants,
    const std::map<std::string, std::vector<UtilizationSample>>& samples,
    const std::map<std::string, std::string>& errors) {
  // Who owns each process of each GPU.
  std::map<std::pair<std::string, unsigned int>, const ComputeTenant*> owner;
  for (const ComputeTenant& t : tenants) {
    for (unsigned int pid : t.pids) owner[{t.uuid, pid}] = &t;
  }
  // New samples become busy time of their process's tenant; the others (unattributed processes)
  // only keep their sample clock.
  for (const auto& [uuid, list] : samples) {
    std::vector<UtilizationSample> sorted = list;
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
    std::uint64_t& seen = last_seen_[uuid];
    std::uint64_t newest = seen;
    // The driver's sampling period on this GPU: the shortest gap between two samples of one
    // process seen so far (a process that idled between two samples has a longer one).
    std::uint64_t& period =
        period_us_.try_emplace(uuid, options_.max_sample_period_us).first->second;
    std::map<unsigned int, std::uint64_t> previous_in_batch;
    for (const UtilizationSample& s : sorted) {
      if (s.timestamp_us <= seen) continue;
      const auto last = last_sample_.find({uuid, s.pid});
      std::uint64_t& previous =
          previous_in_batch.try_emplace(s.pid, last == last_sample_.end() ? 0 : last->second)
              .first->second;
      const std::uint64_t gap =
          previous == 0 ? 0 : s.timestamp_us - std::min(s.timestamp_us, previous);
      if (gap >= kMinSamplePeriodUs && gap < period) period = gap;
      previous = s.timestamp_us;
    }
    for (const UtilizationSample& s : sorted) {
      if (s.timestamp_us <= seen) continue;  // read before
      newest = std::max(newest, s.timestamp_us);
      std::uint64_t& previous = last_sample_[{uuid, s.pid}];
      // A sample's percentage is of the period that ends at its stamp: at most one period back,
      // and not before the process's previous sample.
      const std::uint64_t credited =
          previous == 0 ? period
                        : std::min(s.timestamp_us - std::min(s.timestamp_us, previous), period);
      previous = s.timestamp_us;
      const auto it = owner.find({uuid, s.pid});
      if (it == owner.end()) continue;
      const ComputeTenant& t = *it->second;
      tenants_[t.key].busy.push_back({s.timestamp_us, std::min(s.sm_percent, 100U) * credited / 100,
                                      t.ungoverned.count(s.pid) != 0, s.pid});
    }
    seen = newest;
  }
  // Processes not sampled for two windows are forgotten (their next sample counts as a first).
  const std::uint64_t forget =
      now_us > 2 * options_.window_us ? now_us - 2 * options_.window_us : 0;
  std::erase_if(last_sample_, [forget](const auto& entry) { return entry.second < forget; });

  // Each tenant's use over the window.
  std::set<std::string> present;
  for (const ComputeTenant& t : tenants) {
    present.insert(t.key);
    TenantState& state = tenants_[t.key];
    state.waited.emplace_back(now_us, t.waited_ns);
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
  std::erase_if(tenants_, [&present](const auto& entry) { return !present.contains(entry.first); });

  // The conditions, then the episodes that begin now.
  std::vector<ComputeFinding> now;
  for (const ComputeTenant& t : tenants) {
    const TenantState& state = tenants_[t.key];
    const double share = t.share_percent / 100.0;
    if (t.share_percent != 0 && state.used > share + options_.margin) {
      if (t.mode == ComputeMode::kHard) {
        now.push_back({ComputeFinding::Kind::kOverHardShare,
                       t.key,
                       t.uuid,
                       state.used,
                       share,
                       {},
                       {t.pids.begin(), t.pids.end()},
                       {}});
      } else {
        for (const ComputeTenant& other : tenants) {
          if (&other == &t || other.uuid != t.uuid || other.share_percent == 0) continue;
          const TenantState& o = tenants_[other.key];
          if (o.used < other.share_percent / 100.0 - options_.margin &&
              WaitedFraction(o) >= options_.min_waited) {
            now.push_back({ComputeFinding::Kind::kTookFromWaiting,
                           t.key,
                           t.uuid,
                           state.used,
                           share,
                           other.key,
                           {t.pids.begin(), t.pids.end()},
                           {}});
            break;
          }
        }
      }
    }
    if (state.used_ungoverned >= options_.min_ungoverned) {
      std::set<unsigned int> pids;
      for (const Busy& b : state.busy) {
        if (b.ungoverned && b.busy_us > 0) pids.insert(b.pid);
      }
      now.push_back({ComputeFinding::Kind::kUngoverned,
                     t.key,
                     t.uuid,
                     state.used_ungoverned,
                     0,
                     {},
                     {pids.begin(), pids.end()},
                     {}});
    }
  }
  for (const auto& [uuid, why] : errors)
    now.push_back({ComputeFinding::Kind::kNoSamples, {}, uuid, 0, 0, {}, {}, why});

  std::set<std::pair<std::string, ComputeFinding::Kind>> flagged;
  std::vector<ComputeFinding> begun;
  for (ComputeFinding& f : now) {
    const std::pair<std::string, ComputeFinding::Kind> id{f.key.empty() ? f.uuid : f.key, f.kind};
    flagged.insert(id);
    if (!flagged_.contains(id)) begun.push_back(std::move(f));
  }
  flagged_ = std::move(flagged);
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
