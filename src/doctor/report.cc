#include "doctor/report.h"

#include <algorithm>
#include <sstream>

#include "tessera/json_writer.h"
#include "tessera/quantity.h"

namespace tessera::doctor {

std::string_view Key(Property property) {
  return kProperties[static_cast<std::size_t>(property)].key;
}
std::string_view Meaning(Property property) {
  return kProperties[static_cast<std::size_t>(property)].meaning;
}

std::string_view Name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kHolds:
      return "yes";
    case Outcome::kFails:
      return "NO";
    case Outcome::kNotApplicable:
      return "n/a";
    case Outcome::kNotMeasured:
      return "?";
  }
  return "?";
}

const Finding* Report::Find(Property property, SharingMode mode) const {
  for (const Finding& f : findings) {
    if (f.property == property && f.mode == mode) return &f;
  }
  return nullptr;
}

const std::vector<TierNeeds>& TierRequirements() {
  using enum Property;
  static const std::vector<TierNeeds> kNeeds = {
      // One team: interference tolerated, but a hog must not crash a colleague's job.
      {TrustTier::kTeam, {kMemoryHog}},
      // Competing priorities: no crash, no fault spill-over, bounded interference.
      {TrustTier::kDepartment, {kMemoryHog, kFaultIsolation, kInterference}},
      // Paying customers: all of that, no data left for the next tenant, an honest quota.
      {TrustTier::kCustomer,
       {kMemoryHog, kFaultIsolation, kInterference, kResidualExit, kResidualKill, kQuotaHonesty}},
      {TrustTier::kRegulated, {}, /*never_shares=*/true},
  };
  return kNeeds;
}

std::vector<Verdict> Judge(const Report& report, const policy::Policy& policy) {
  std::vector<Verdict> verdicts;
  for (const TierNeeds& tier : TierRequirements()) {
    for (SharingMode mode : report.modes) {
      if (mode == SharingMode::kNative) continue;
      Verdict v;
      v.tier = tier.tier;
      v.mode = mode;
      v.allowed_by_policy = policy.Rule(tier.tier).Allows(mode);
      if (tier.never_shares) {
        v.safety = Verdict::Safety::kNotSafe;
        v.reason = "this tier never shares a GPU (dedicated GPUs only)";
        verdicts.push_back(std::move(v));
        continue;
      }
      v.safety = Verdict::Safety::kSafe;
      std::vector<std::string> unknown;
      for (Property need : tier.needs) {
        const Finding* f = report.Find(need, mode);
        if (f == nullptr || f->outcome == Outcome::kNotMeasured) {
          unknown.emplace_back(Key(need));
        } else if (f->outcome == Outcome::kFails) {
          v.safety = Verdict::Safety::kNotSafe;
          v.reason = std::string(Key(need)) + ": " + f->measured;
          break;
        }
      }
      if (v.safety == Verdict::Safety::kSafe && !unknown.empty()) {
        v.safety = Verdict::Safety::kUnknown;
        v.reason = "not measured: ";
        for (std::size_t i = 0; i < unknown.size(); ++i) v.reason += (i ? ", " : "") + unknown[i];
      }
      if (v.safety == Verdict::Safety::kSafe) {
        v.reason = "every property this tier needs held";
      }
      verdicts.push_back(std::move(v));
    }
  }
  return verdicts;
}

namespace {

std::string_view SafetyName(Verdict::Safety s) {
  switch (s) {
    case Verdict::Safety::kSafe:
      return "safe";
    case Verdict::Safety::kNotSafe:
      return "NOT safe";
    case Verdict::Safety::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string ModeTitle(SharingMode mode) {
  switch (mode) {
    case SharingMode::kNative:
      return "native (no tessera; the baseline)";
    case SharingMode::kShared:
      return "shared (time-sliced, tessera's caps)";
    case SharingMode::kMps:
      return "mps (one MPS server, tessera's caps)";
    default:
      return std::string(tessera::Name(mode));
  }
}

}  // namespace

std::string FormatText(const Report& report, const std::vector<Verdict>& verdicts,
                       std::string_view policy_source) {
  std::ostringstream out;
  out << "tessera doctor: " << report.gpu_name << " " << report.gpu_uuid << " ("
      << FormatBytesHuman(report.gpu_memory_bytes) << "), driver " << report.driver << ", "
      << report.date << "\n";
  for (const std::string& u : report.unavailable) out << "  not measured: " << u << "\n";
  std::size_t width = 0;
  for (const auto& row : kProperties) width = std::max(width, row.meaning.size());
  for (SharingMode mode : report.modes) {
    out << "\nmode " << ModeTitle(mode) << "\n";
    out << "  " << std::string("property") << std::string(width - 8 + 2, ' ')
        << "holds  measured\n";
    for (const auto& row : kProperties) {
      const Finding* f = report.Find(row.property, mode);
      if (f == nullptr) continue;
      const std::string_view holds = Name(f->outcome);
      out << "  " << row.meaning << std::string(width - row.meaning.size() + 2, ' ') << holds
          << std::string(7 - holds.size(), ' ') << f->measured << "\n";
    }
  }
  if (report.scrub_ms_per_gib) {
    char cost[64];
    std::snprintf(cost, sizeof(cost), "%.3f ms per GiB", *report.scrub_ms_per_gib);
    out << "\nzeroing memory on this GPU costs " << cost << " (what scrubbing on release adds)\n";
  }
  out << "\nverdicts against the policy (" << policy_source << ")\n";
  for (const Verdict& v : verdicts) {
    out << "  " << tessera::Name(v.tier) << " tier on " << tessera::Name(v.mode) << ": "
        << SafetyName(v.safety) << " — " << v.reason
        << (v.allowed_by_policy ? "" : " (the policy does not allow this mode for this tier)")
        << "\n";
  }
  return out.str();
}

std::string FormatJson(const Report& report, const std::vector<Verdict>& verdicts,
                       std::string_view policy_source) {
  std::string out;
  {
    ObjectWriter root(out);
    {
      ObjectWriter gpu(root.Field("gpu"));
      gpu.Str("name", report.gpu_name);
      gpu.Str("uuid", report.gpu_uuid);
      gpu.Num("memoryBytes", report.gpu_memory_bytes);
      gpu.Str("driver", report.driver);
    }
    root.Str("date", report.date);
    root.Str("policy", policy_source);
    AppendJsonArray(root.Field("modes"), report.modes,
                    [](SharingMode m, std::string& o) { AppendJsonString(o, tessera::Name(m)); });
    AppendJsonArray(root.Field("unavailable"), report.unavailable,
                    [](const std::string& u, std::string& o) { AppendJsonString(o, u); });
    if (report.scrub_ms_per_gib) root.Real("scrubMsPerGiB", *report.scrub_ms_per_gib);
    AppendJsonArray(root.Field("findings"), report.findings, [](const Finding& f, std::string& o) {
      ObjectWriter w(o);
      w.Str("property", Key(f.property));
      w.Str("mode", tessera::Name(f.mode));
      w.Str("holds", f.outcome == Outcome::kHolds           ? "yes"
                     : f.outcome == Outcome::kFails         ? "no"
                     : f.outcome == Outcome::kNotApplicable ? "not-applicable"
                                                            : "not-measured");
      w.Str("measured", f.measured);
      ObjectWriter values(w.Field("values"));
      for (const auto& [k, v] : f.values) values.Real(k, v);
    });
    AppendJsonArray(root.Field("verdicts"), verdicts, [](const Verdict& v, std::string& o) {
      ObjectWriter w(o);
      w.Str("tier", tessera::Name(v.tier));
      w.Str("mode", tessera::Name(v.mode));
      w.Bool("allowedByPolicy", v.allowed_by_policy);
      w.Str("safety", v.safety == Verdict::Safety::kSafe      ? "safe"
                      : v.safety == Verdict::Safety::kNotSafe ? "not-safe"
                                                              : "unknown");
      w.Str("reason", v.reason);
    });
  }
  out += '\n';
  return out;
}

}  // namespace tessera::doctor
