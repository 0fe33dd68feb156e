// What `tessera doctor` found, and what it means for the policy: the properties it measures (one
// list), a finding per property and mode, the properties each trust tier needs before it may share
// a GPU, and the verdict per tier and mode. Pure: the experiments (doctor.h) fill a Report; this
// file judges and prints it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/model.h"

#include "policy/policy.h"

namespace tessera::doctor {

// X(enumerator, "key", "what holds when the property holds")
#define TESSERA_DOCTOR_PROPERTIES(X)                                                           \
  X(kMemoryHog, "memory-hog", "a neighbour survives a memory hog")                             \
  X(kResidualExit, "residual-exit", "no data left behind by a tenant that exited")             \
  X(kResidualKill, "residual-kill", "no data left behind by a tenant that was killed")         \
  X(kInterference, "interference",                                                             \
    "a small kernel's p99 beside a long-kernel hog stays within 2x")                           \
  X(kFaultIsolation, "fault-isolation", "neighbours survive a tenant's illegal-address fault") \
  X(kQuotaHonesty, "quota-honesty", "cuMemGetInfo and nvidia-smi report the tenant's cap")     \
  X(kComputeShare, "compute-share", "a 30 % compute share is delivered within 5 points")       \
  X(kMpsUsers, "mps-users", "clients of two user IDs run at the same time")

#define TESSERA_DOCTOR_ENUM(name, key, meaning) name,
enum class Property : std::uint8_t { TESSERA_DOCTOR_PROPERTIES(TESSERA_DOCTOR_ENUM) };
#undef TESSERA_DOCTOR_ENUM

struct PropertyRow {
  Property property;
  std::string_view key;
  std::string_view meaning;
};
#define TESSERA_DOCTOR_ROW(name, key, meaning) PropertyRow{Property::name, key, meaning},
inline constexpr std::array kProperties = {TESSERA_DOCTOR_PROPERTIES(TESSERA_DOCTOR_ROW)};
#undef TESSERA_DOCTOR_ROW

std::string_view Key(Property property);
std::string_view Meaning(Property property);

enum class Outcome : std::uint8_t {
  kHolds,          // measured, and it holds
  kFails,          // measured, and it does not hold
  kNotApplicable,  // the mode has no such mechanism to check (e.g. no cap natively)
  kNotMeasured,    // could not be measured here (the reason says why)
};
std::string_view Name(Outcome outcome);

struct Finding {
  Property property = Property::kMemoryHog;
  SharingMode mode = SharingMode::kNative;
  Outcome outcome = Outcome::kNotMeasured;
  std::string measured;                                // for people: what was seen
  std::vector<std::pair<std::string, double>> values;  // for --json: the numbers
};

struct Report {
  std::string gpu_name, gpu_uuid, driver, date;
  std::uint64_t gpu_memory_bytes = 0;
  std::vector<SharingMode> modes;
  std::vector<std::string> unavailable;  // "mps: nvidia-cuda-mps-control not found", ...
  std::vector<Finding> findings;
  std::optional<double> scrub_ms_per_gib;  // cost of zeroing memory on this GPU

  const Finding* Find(Property property, SharingMode mode) const;
};

// The properties a tier needs on a GPU it shares (the seeds' framework: the weaker the trust,
// the stronger the isolation). Regulated never shares, whatever was measured.
struct TierNeeds {
  TrustTier tier;
  std::vector<Property> needs;
  bool never_shares = false;
};
const std::vector<TierNeeds>& TierRequirements();

struct Verdict {
  TrustTier tier = TrustTier::kTeam;
  SharingMode mode = SharingMode::kShared;
  bool allowed_by_policy = false;
  enum class Safety : std::uint8_t { kSafe, kNotSafe, kUnknown } safety = Safety::kUnknown;
  std::string reason;
};

// A verdict per tier and measured sharing mode (native is the baseline, not a mode a tier gets).
std::vector<Verdict> Judge(const Report& report, const policy::Policy& policy);

// The report as people read it: a table per mode, then the verdicts.
std::string FormatText(const Report& report, const std::vector<Verdict>& verdicts,
                       std::string_view policy_source);
// The same as JSON (hand-written: this builds on the GPU host without a JSON library).
std::string FormatJson(const Report& report, const std::vector<Verdict>& verdicts,
                       std::string_view policy_source);

}  // namespace tessera::doctor
