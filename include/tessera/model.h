// The small vocabularies every part shares: trust tiers, sharing modes, priority classes.
// One X-macro list each; parsing and naming are generated from it, so the policy file, the
// decision annotation and every CLI accept exactly the same words (docs/design/0002).
#pragma once

#include <string>
#include <string_view>

#include "tessera/enum.h"
#include "tessera/status.h"

namespace tessera {

// X(enumerator, "name", "meaning")
#define TESSERA_TRUST_TIERS(X)                                                    \
  X(kTeam, "team", "one team, shared goals, interference is tolerated")           \
  X(kDepartment, "department", "departments with competing priorities")           \
  X(kCustomer, "customer", "paying customers with SLAs; never share with others") \
  X(kRegulated, "regulated", "regulated or adversarial; dedicated hardware only")

#define TESSERA_SHARING_MODES(X)                                                             \
  X(kShared, "shared", "time-sliced contexts with tessera's memory caps and compute shares") \
  X(kMps, "mps", "one MPS server per GPU: spatial sharing, one fault domain")                \
  X(kExclusive, "exclusive", "whole GPUs, never shared")                                     \
  X(kMig, "mig", "a MIG instance: hardware partition of memory, SMs and faults")             \
  X(kNative, "native", "no tessera enforcement; only a measurement baseline")

#define TESSERA_PRIORITY_CLASSES(X)                                                 \
  X(kLatencyCritical, "latency-critical", "realtime inference; others yield to it") \
  X(kNormal, "normal", "the default")                                               \
  X(kBestEffort, "best-effort", "batch; held back while latency-critical work runs")

// How a compute share (tessera.dev/gpu-cores) is held.
#define TESSERA_COMPUTE_MODES(X)                                                     \
  X(kHard, "hard", "never more than the share, even when the GPU is otherwise idle") \
  X(kWorkConserving, "work-conserving",                                              \
    "the share is guaranteed; idle capacity is lent and reclaimed when its owner gets busy")

TESSERA_ENUM_TABLE(TrustTier, kTrustTiers, TESSERA_TRUST_TIERS)
TESSERA_ENUM_TABLE(SharingMode, kSharingModes, TESSERA_SHARING_MODES)
TESSERA_ENUM_TABLE(PriorityClass, kPriorityClasses, TESSERA_PRIORITY_CLASSES)
TESSERA_ENUM_TABLE(ComputeMode, kComputeModes, TESSERA_COMPUTE_MODES)

std::string_view Name(TrustTier tier);
std::string_view Name(SharingMode mode);
std::string_view Name(PriorityClass priority);
std::string_view Name(ComputeMode mode);

// Parsers: exact, case-sensitive names. The error lists the accepted names.
StatusOr<TrustTier> ParseTrustTier(std::string_view text);
StatusOr<SharingMode> ParseSharingMode(std::string_view text);
StatusOr<PriorityClass> ParsePriorityClass(std::string_view text);
StatusOr<ComputeMode> ParseComputeMode(std::string_view text);

// "team, department, customer, regulated"
std::string AcceptedTrustTiers();
std::string AcceptedSharingModes();

// Under mode mps a compute share is also the client's SM limit (its context's active thread
// percentage); no client is limited below this many percent of the SMs (ADR 0017).
inline constexpr std::uint32_t kMpsMinSmPercent = 10;
std::string AcceptedPriorityClasses();
std::string AcceptedComputeModes();

}  // namespace tessera
