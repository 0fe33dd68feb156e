// Larger clusters from the trace (issue #26): the node list replicated k times and the pod list
// scaled in proportion, for `tessera sim --scale K` and the placement benchmarks.
//
// Every node and every pod is copied k times; copy 0 keeps its name, copy j > 0 gets the suffix
// "-cJ" (J zero-padded to the width of k - 1, so name order is copy order), its GPUs' UUIDs too.
// Replication, not resampling: the scaled list has exactly the original's mix (the same typical
// pods, the same demand per node of each type), so the paper's experiment is the same
// experiment at k times the size, with no extra seed. The arrival order is the workload's: pods
// sorted by name and shuffled with the run's seed (so the copies are interleaved at random), or,
// with `--order name`, the k copies of each pod arrive together, keeping a time-ordered list's
// drift; the tuning to 130 % of the (k times larger) capacity is unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "placement/cluster.h"
#include "sim/trace.h"

namespace tessera::sim {

inline constexpr int kMaxScale = 100;

// "--scale K": an integer 1..kMaxScale; kInvalidArgument naming the flag and the accepted form.
StatusOr<int> ParseScale(std::string_view text);

// The suffix of copy `copy` of k (empty for copy 0).
std::string CopySuffix(int copy, int k);

// k copies of the node list, copy by copy (all of copy 0, then all of copy 1, ...). Refuses
// k outside 1..kMaxScale and a copy's name that another node already has.
StatusOr<std::vector<placement::Node>> ScaleNodes(const std::vector<placement::Node>& nodes, int k);

// k copies of every pod, in file order per copy; each keeps its original's line.
StatusOr<std::vector<TracePod>> ScalePods(const std::vector<TracePod>& pods, int k);

}  // namespace tessera::sim
