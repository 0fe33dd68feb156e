// The experiment's workload (spec §2, §5.1): arrival order (sorted by name, shuffled, tuned to
// 130 % of GPU capacity), node ranks for tie-breaking, and the typical-pod profile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/status.h"

#include "placement/fragmentation.h"
#include "placement/random.h"
#include "sim/trace.h"

namespace tessera::sim {

enum class RngKind : std::uint8_t { kGo, kStd };

// A fresh generator for `seed`. kGo needs GoSourceAvailable().
StatusOr<std::unique_ptr<placement::Rand>> MakeRand(RngKind kind, std::int64_t seed);

struct Workload {
  std::vector<TracePod> pods;          // the original pods sorted by name
  std::vector<std::uint32_t> arrival;  // indices into pods, in arrival order (clones repeat)
  std::size_t originals = 0;           // arrival[0..originals) are the shuffled originals
  std::int64_t requested_milli = 0;    // sum of GPU milli over the arrival list
  std::vector<std::uint32_t> ranks;    // per node (file order): tie-break rank
};

struct WorkloadOptions {
  double tune = 1.3;           // arrivals sum to this multiple of the cluster's GPU milli
  int skip_after_tuning = 10;  // draws discarded before the node ranks (spec §2.2 step 5)
  // false: the originals arrive in name order (`--order name`, lists whose names follow time);
  // the draws the shuffle would have made are not made.
  bool shuffle = true;
};

// Builds the workload, consuming `rand` exactly as the authors' simulator consumes Go's global
// stream (spec §2.2); `rand` continues to serve the Random policy afterwards.
Workload GenerateWorkload(std::vector<TracePod> pods, std::size_t node_count,
                          std::int64_t capacity_milli, placement::Rand& rand,
                          const WorkloadOptions& options = {});

// The typical pods of the original trace (spec §5.1): FGD's target workload, and the profile the
// fragmentation metric uses for every policy.
placement::WorkloadProfile TypicalPods(const std::vector<TracePod>& pods,
                                       int popularity_percent = 95);

}  // namespace tessera::sim
