#include "agent/compute_drift.h"

#include <algorithm>
#include <cstdio>

namespace tessera::agent {
namespace {

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
             " of the time (NVML) without tessera's library (no live slot in the container's "
             "region, or "
             "the library no longer mapped)";
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

void ComputeDrift::Take(
    const std::string& uuid, const std::vector<UtilizationSample>& list,
    const std::map<std::pair<std::string, unsigned int>, const ComputeTenant*>& owner) {
  std::vector<UtilizationSample> sorted = list;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  std::uint64_t& seen = last_seen_[uuid];
  const std::uint64_t before = seen;
  // Where each process's span begins: the stamp the read asked after, or its previous sample in
  // this read.
  std::map<unsigned int, std::uint64_t> from;
  // What each tenant was credited per stamp: its processes add up to at most the span (under MPS
  // the largest counts).
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> stamped;
  for (const UtilizationSample& s : sorted) {
    if (s.timestamp_us <= before) continue;  // read before
    seen = std::max(seen, s.timestamp_us);
    std::uint64_t& begin = from.try_emplace(s.pid, std::max(before, start_us_)).first->second;
    const std::uint64_t span_from = begin;
    begin = std::max(begin, s.timestamp_us);
    // No stamp asked after: the driver averaged over its whole buffer, an unknown span.
    if (before == 0 || s.timestamp_us <= span_from) continue;
    const auto it = owner.find({uuid, s.pid});
    if (it == owner.end()) continue;
    const ComputeTenant& t = *it->second;
    const std::uint64_t span = s.timestamp_us - span_from;
    const std::uint64_t busy = std::min(s.sm_percent, 100U) * span / 100;
    std::uint64_t& so_far = stamped[{t.key, s.timestamp_us}];
    const std::uint64_t added =
        t.spatial ? busy - std::min(busy, so_far) : std::min(busy, span - std::min(span, so_far));
    so_far = t.spatial ? std::max(so_far, busy) : so_far + added;
    if (added > 0)
      tenants_[t.key].busy.push_back(
          {span_from, s.timestamp_us, added, t.ungoverned.count(s.pid) != 0, s.pid});
  }
}

std::vector<ComputeFinding> ComputeDrift::Evaluate(
    std::uint64_t now_us, const std::vector<ComputeTenant>& tenants,
    const std::map<std::string, std::vector<UtilizationSample>>& samples,
    const std::map<std::string, std::string>& errors) {
  // The first evaluation, or a wall clock stepped back: samples count from now.
  if (start_us_ == 0 || now_us < last_eval_us_) {
    last_seen_.clear();
    tenants_.clear();
    start_us_ = std::max<std::uint64_t>(now_us, 1);
  }
  last_eval_us_ = now_us;
  // Who owns each process of each GPU.
  std::map<std::pair<std::string, unsigned int>, const ComputeTenant*> owner;
  for (const ComputeTenant& t : tenants) {
    for (unsigned int pid : t.pids) owner[{t.uuid, pid}] = &t;
  }
  for (const auto& [uuid, list] : samples) Take(uuid, list, owner);

  // Each tenant's use over the window. A tenant missing from this evaluation (its GPU did not
  // answer) keeps its state until its window is empty.
  std::set<std::string> present;
  for (const ComputeTenant& t : tenants) {
    present.insert(t.key);
    tenants_[t.key].waited.emplace_back(now_us, t.waited_ns);
  }
  const std::uint64_t window_start = now_us > options_.window_us ? now_us - options_.window_us : 0;
  for (auto& [key, state] : tenants_) {
    Trim(state, now_us);
    double busy = 0, ungoverned = 0;
    for (const Busy& b : state.busy) {
      // The part of the sample's span within the window (a span that reaches back past it).
      double part = static_cast<double>(b.busy_us);
      if (b.at_us <= window_start) continue;  // Trim keeps none, but never underflow
      if (b.from_us < window_start && b.at_us > b.from_us) {
        part *=
            static_cast<double>(b.at_us - window_start) / static_cast<double>(b.at_us - b.from_us);
      }
      busy += part;
      if (b.ungoverned) ungoverned += part;
    }
    state.used = busy / static_cast<double>(options_.window_us);
    state.used_ungoverned = ungoverned / static_cast<double>(options_.window_us);
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
