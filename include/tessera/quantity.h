// Kubernetes quantities ("4Gi", "1.5Gi", "500M", "1e9", "4096"), percentages ("30", "30%") and
// the KAI-Scheduler annotations ("gpu-memory": MiB, "gpu-fraction": share of one GPU).
//
// Every parser returns InvalidArgument with a message that quotes the input (non-ASCII bytes
// escaped), says what was wrong, and says what is accepted. Callers add the field name with
// Status::WithContext("tessera.dev/gpu-memory").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera {

// Kubernetes quantities are signed 64-bit on the wire; tessera accepts 0 .. kMaxQuantity.
inline constexpr std::uint64_t kMaxQuantity = 0x7fffffffffffffffULL;

inline constexpr std::uint64_t kKiB = 1ULL << 10;
inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;

// One GPU expressed in parts per million (gpu-fraction "0.5" == 500000).
inline constexpr std::uint32_t kFractionOne = 1'000'000;

// Parses a Kubernetes quantity as a whole number of units (bytes for memory). Grammar as
// k8s.io/apimachinery resource.Quantity: [+]digits[.digits][suffix], suffix one of
// Ki Mi Gi Ti Pi Ei (powers of 1024), k M G T P E (powers of 1000), m (1/1000), or an
// exponent e<int> / E<int>. A fractional result is rounded up to a whole unit, as
// Quantity.Value() does ("0.5" -> 1, "1.5Gi" -> 1610612736).
StatusOr<std::uint64_t> ParseQuantity(std::string_view text);

// Canonical text for a byte count: the largest binary suffix that is exact ("4Gi", "1536Mi"),
// else the plain integer. ParseQuantity(FormatQuantity(n)) == n for every n.
std::string FormatQuantity(std::uint64_t value);

// For people: "4.00 GiB", "512 MiB", "17 B".
std::string FormatBytesHuman(std::uint64_t bytes);

// Plain decimal digits, at most `max` ("not a number" / "too large" otherwise; no sign, no
// spaces). Allocation-free on success: the preload library parses its settings with it.
StatusOr<std::uint64_t> ParseUnsigned(std::string_view text, std::uint64_t max);

// A whole percentage: "30" or "30%". Bounds are the caller's (a cores request is 1..100, a
// namespace quota may be 250%).
StatusOr<std::uint32_t> ParsePercent(std::string_view text);

// KAI-Scheduler's `gpu-memory` annotation: a plain integer is MiB ("2000" -> 2000 MiB). A
// quantity with an explicit suffix ("4Gi") is accepted too and means what it says.
StatusOr<std::uint64_t> ParseKaiGpuMemory(std::string_view text);

// KAI-Scheduler's `gpu-fraction` annotation: a decimal in (0, 1] ("0.5"), at most six decimals,
// returned in parts per million of one GPU.
StatusOr<std::uint32_t> ParseKaiGpuFraction(std::string_view text);

// `text` with non-printable and non-ASCII bytes escaped as \xNN, cut to 64 bytes: safe to put
// in an error message or a log line.
std::string QuoteForMessage(std::string_view text);

}  // namespace tessera
