// The small vocabularies every part shares: trust tiers, sharing modes, priority classes.
// One X-macro list each; parsing and naming are generated from it, so the policy file, the
// decision annotation and every CLI accept exactly the same words (docs/design/0002).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera {

// X(enumerator, "name", "meaning")
#define TESSERA_TRUST_TIERS(X)                                                      \
  X(kTeam, "team", "one team, shared goals, interference is tolerated")            \
  X(kDepartment, "department", "departments with competing priorities")           \
  X(kCustomer, "customer", "paying customers with SLAs; never share with others")  \
  X(kRegulated, "regulated", "regulated or adversarial; dedicated hardware only")

#define TESSERA_SHARING_MODES(X)                                                            \
  X(kShared, "shared", "time-sliced contexts with tessera's memory caps and compute shares")   \
  X(kMps, "mps", "one MPS server per GPU: spatial sharing, one fault domain")                  \
  X(kExclusive, "exclusive", "whole GPUs, never shared")                                       \
  X(kMig, "mig", "a MIG instance: hardware partition of memory, SMs and faults")               \
  X(kNative, "native", "no tessera enforcement; only a measurement baseline")

#define TESSERA_PRIORITY_CLASSES(X)                                                   \
  X(kLatencyCritical, "latency-critical", "realtime inference; others yield to it")    \
  X(kNormal, "normal", "the default")                                                  \
  X(kBestEffort, "best-effort", "batch; held back while latency-critical work runs")

// How a compute share (tessera.dev/gpu-cores) is held.
#define TESSERA_COMPUTE_MODES(X)                                                               \
  X(kHard, "hard", "never more than the share, even when the GPU is otherwise idle")           \
  X(kWorkConserving, "work-conserving",                                                         \
    "the share is guaranteed; idle capacity is lent and reclaimed when its owner gets busy")

#define TESSERA_MODEL_ENUM(name, text, meaning) name,
enum class TrustTier : std::uint8_t { TESSERA_TRUST_TIERS(TESSERA_MODEL_ENUM) };
enum class SharingMode : std::uint8_t { TESSERA_SHARING_MODES(TESSERA_MODEL_ENUM) };
enum class PriorityClass : std::uint8_t { TESSERA_PRIORITY_CLASSES(TESSERA_MODEL_ENUM) };
enum class ComputeMode : std::uint8_t { TESSERA_COMPUTE_MODES(TESSERA_MODEL_ENUM) };
#undef TESSERA_MODEL_ENUM

// Name and meaning of each value, in list order.
template <typename Enum>
struct EnumRow {
  Enum value;
  std::string_view name;
  std::string_view meaning;
};

#define TESSERA_MODEL_ROW(Type, name, text, meaning) EnumRow<Type>{Type::name, text, meaning},
#define TESSERA_TRUST_ROW(name, text, meaning) TESSERA_MODEL_ROW(TrustTier, name, text, meaning)
#define TESSERA_MODE_ROW(name, text, meaning) TESSERA_MODEL_ROW(SharingMode, name, text, meaning)
#define TESSERA_PRIO_ROW(name, text, meaning) TESSERA_MODEL_ROW(PriorityClass, name, text, meaning)
#define TESSERA_COMPUTE_ROW(name, text, meaning) TESSERA_MODEL_ROW(ComputeMode, name, text, meaning)
inline constexpr std::array kTrustTiers = {TESSERA_TRUST_TIERS(TESSERA_TRUST_ROW)};
inline constexpr std::array kSharingModes = {TESSERA_SHARING_MODES(TESSERA_MODE_ROW)};
inline constexpr std::array kPriorityClasses = {TESSERA_PRIORITY_CLASSES(TESSERA_PRIO_ROW)};
inline constexpr std::array kComputeModes = {TESSERA_COMPUTE_MODES(TESSERA_COMPUTE_ROW)};
#undef TESSERA_TRUST_ROW
#undef TESSERA_MODE_ROW
#undef TESSERA_PRIO_ROW
#undef TESSERA_COMPUTE_ROW
#undef TESSERA_MODEL_ROW

// Generic helpers over any EnumRow table (also used by the policy file's vocabularies).
template <typename Enum, std::size_t N>
constexpr std::string_view NameIn(const std::array<EnumRow<Enum>, N>& rows, Enum value) {
  for (const auto& row : rows) {
    if (row.value == value) return row.name;
  }
  return "unknown";
}
template <typename Enum, std::size_t N>
constexpr std::string_view MeaningIn(const std::array<EnumRow<Enum>, N>& rows, Enum value) {
  for (const auto& row : rows) {
    if (row.value == value) return row.meaning;
  }
  return "";
}
template <typename Enum, std::size_t N>
std::string AcceptedIn(const std::array<EnumRow<Enum>, N>& rows) {
  std::string out;
  for (const auto& row : rows) {
    if (!out.empty()) out += ", ";
    out += row.name;
  }
  return out;
}
// The value named `text` exactly, or an InvalidArgument error naming `what` and the accepted
// names.
template <typename Enum, std::size_t N>
StatusOr<Enum> ParseIn(const std::array<EnumRow<Enum>, N>& rows, std::string_view text,
                       std::string_view what);

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
std::string AcceptedPriorityClasses();
std::string AcceptedComputeModes();

// "\"x\" is not a <what>; accepted: a, b, c" (defined in model.cc for the quoting).
Status UnknownNameError(std::string_view text, std::string_view what, const std::string& accepted);

template <typename Enum, std::size_t N>
StatusOr<Enum> ParseIn(const std::array<EnumRow<Enum>, N>& rows, std::string_view text,
                       std::string_view what) {
  for (const auto& row : rows) {
    if (row.name == text) return row.value;
  }
  return UnknownNameError(text, what, AcceptedIn(rows));
}

}  // namespace tessera
