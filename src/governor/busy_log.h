// The union of a container's busy time on one GPU (ADR 0017, "What a share means"): every process
// of the container adds the spans its FenceTracker measured to the region's BusyLog for that
// device, and adds to busy_ns only the part no stream or process of the container had covered
// yet. So two streams, or two processes, whose kernels ran at the same moment are charged that
// moment once.
//
// The log keeps the newest kBusySpans disjoint spans within `kBusyHorizonNs` of the newest end;
// a span older than everything kept is counted whole (its overlap can no longer be known). The
// log is the tenant's memory like the rest of its region: a log that does not hold its invariants
// (count out of range, spans unsorted or inverted) is emptied, never trusted.
#pragma once

#include <cstdint>

#include "tessera/shm_layout.h"

#include "governor/fences.h"

namespace tessera::governor {

inline constexpr std::uint64_t kBusyHorizonNs = 200'000'000;

// Adds `span` to the log (the caller holds log.lock, or owns the log); returns the nanoseconds of
// it that the log did not cover yet.
std::uint64_t AddToUnion(shm::BusyLog& log, Span span);

// Locks log.lock (bounded: about `patience_ns`; a holder that died is recovered from), adds each
// span and returns what was new; if the lock cannot be had, returns the spans' whole length and
// sets *contended.
std::uint64_t AddSpans(shm::BusyLog& log, const std::vector<Span>& spans, bool* contended,
                       std::uint64_t patience_ns = 2'000'000);

}  // namespace tessera::governor
