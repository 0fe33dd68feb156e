// One experiment (spec §0): a trace, a policy, a seed. Pods arrive once, in the generated order,
// and never leave; each goes to the policy's best feasible node or fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

#include "placement/cluster.h"
#include "placement/fragmentation.h"
#include "placement/policies.h"
#include "sim/metrics.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace tessera::sim {

// Everything the runs of one trace share, read-only.
struct SimInput {
  std::string workload;                // e.g. "openb_pod_list_default"
  placement::Cluster cluster;          // empty ledger
  std::vector<TracePod> pods;          // file order
  placement::WorkloadProfile typical;  // from the original pods (spec §5.1)
};

StatusOr<SimInput> MakeSimInput(std::vector<placement::Node> nodes, std::vector<TracePod> pods,
                                std::string workload);

struct RunOptions {
  RngKind rng = RngKind::kGo;
  WorkloadOptions workload;
  bool keep_events = false;
};

struct RunResult {
  placement::PolicyKind policy = placement::PolicyKind::kFgd;
  std::int64_t seed = 0;
  std::size_t pods = 0;  // arrivals
  std::size_t failed_pods = 0;
  std::int64_t arrived_milli = 0;
  std::int64_t used_milli = 0;
  std::int64_t capacity_milli = 0;
  double unallocated_gpus = 0;  // (capacity - used) / 1000 after the last arrival
  double seconds = 0;
  Curve curve;
  std::vector<EventRecord> events;  // when RunOptions::keep_events
};

StatusOr<RunResult> RunExperiment(const SimInput& input, placement::PolicyKind policy,
                                  std::int64_t seed, const RunOptions& options = {});

}  // namespace tessera::sim
